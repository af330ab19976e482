"""The SGLang client against a real SGLang server (sglang.launch_server, CPU, the tiny model), over real HTTP.

Needs .venv-sglang (`bash scripts/setup-sglang.sh`; CI runs it); skipped with that reason when it is absent.
The server runs SGLang's own CPU path (torch_native attention, pytorch sampling) with the test-only stand-in
for sgl-kernel in sglang_cpu_shim/.

Log-prob tolerance: SGLANG_LOGPROB_TOLERANCE against one full forward pass of the same weights with
`transformers` in float32. SGLang computes attention with its own kernels over a paged KV cache and takes
log(softmax(logits / T)) rather than log_softmax; the largest difference seen is 7e-7 (with top-p / top-k, the
renormalised log-probs of its sampling support, within the same tolerance).
"""
import asyncio

import httpx
import pytest
import torch

from areal_core.engine.model import load_model
from areal_core.engine.protocol import EngineError, GenerateRequest, SamplingParams
from areal_core.engine.sglang_client import SGLangEngine

pytest.register_assert_rewrite("conftest_sglang")
pytest_plugins = ["conftest_sglang"]
from conftest_sglang import health_on_one_connection_after_idling, pause_mid_generation, reference_logprobs  # noqa: E402,E501
from engine_checks import assert_continued_with_new_weights  # noqa: E402

SGLANG_LOGPROB_TOLERANCE = 1e-4


def running_requests(url: str) -> int:
    loads = httpx.get(f"{url}/v1/loads", timeout=30).json()["loads"]
    return sum(int(load["num_running_reqs"]) for load in loads)


async def current_model(engine: SGLangEngine) -> tuple[str, int]:
    info = await engine.model_info()
    return info["model_path"], info["weight_version"]


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, -1), (0.7, 0.9, 20), (0.0, 1.0, -1)])
def test_sglang_logprobs_equal_a_forward_pass_of_the_same_weights(sglang_server, temperature, top_p, top_k):
    """log softmax(logits / T) of each sampled token, renormalised over the tokens top-p / top-k keep (SGLang's
    sampling support, asked for with return_sampling_mask), as the trainer recomputes it; T = 1 for greedy."""
    prompts = [[6, 7, 8, 77, 9, 10, 11, 85], [30, 31], [12] * 5]

    async def run():
        async with SGLangEngine([sglang_server.url]) as engine:
            params = SamplingParams(max_new_tokens=24, temperature=temperature, top_p=top_p, top_k=top_k,
                                    ignore_eos=True, seed=3)
            outputs = await asyncio.gather(*(engine.generate(GenerateRequest(p, params)) for p in prompts))
            return outputs, await current_model(engine)

    outputs, (model_path, version) = asyncio.run(run())
    model = load_model(model_path)
    for prompt, out in zip(prompts, outputs):
        assert len(out.output_ids) == 24 and out.finish_reason == "length"
        assert out.output_versions == [version] * 24
        ref = reference_logprobs(model, prompt, out.output_ids, temperature, top_p, top_k)
        assert torch.allclose(ref, torch.tensor(out.output_logprobs), atol=SGLANG_LOGPROB_TOLERANCE), \
            (ref - torch.tensor(out.output_logprobs)).abs().max()
        if top_p < 1:  # not the untruncated log-probs SGLang returns by default
            untruncated = reference_logprobs(model, prompt, out.output_ids, temperature)
            assert (torch.tensor(out.output_logprobs) - untruncated).min() > 1e-3
        if temperature == 0:
            with torch.no_grad():
                logits = model(torch.tensor([prompt + out.output_ids])).logits[0, len(prompt) - 1:-1]
            assert out.output_ids == logits.argmax(-1).tolist()


def test_sglang_many_concurrent_requests_all_complete(sglang_server):
    lengths = [2 + (i * 11) % 40 for i in range(32)]

    async def run():
        async with SGLangEngine([sglang_server.url]) as engine:
            return await asyncio.gather(*(
                engine.generate(GenerateRequest([6 + i % 40, 85], SamplingParams(max_new_tokens=n, ignore_eos=True)))
                for i, n in enumerate(lengths)))

    outputs = asyncio.run(run())
    assert [len(o.output_ids) for o in outputs] == lengths
    assert all(len(o.output_logprobs) == len(o.output_versions) == len(o.output_ids) for o in outputs)


@pytest.mark.parametrize("mode", ["retract", "abort"])
def test_sglang_pause_update_weights_from_disk_continue_gives_per_token_versions(
        sglang_server, tiny_model, tiny_model_v1, mode):
    """pause (retract: SGLang keeps the requests and recomputes their cache; abort: they come back and the
    client resubmits them) -> update_weights_from_disk with weight_version -> continue. Every request
    completes; SGLang's weight_versions spans give each token's version; log-probs after the update equal a
    forward pass of the new weights, before it of the old."""
    prompts = [[6 + i, 85] for i in range(4)]
    n = 150

    async def run():
        async with SGLangEngine([sglang_server.url]) as engine:
            old_path, old_version = await current_model(engine)
            new_path = str(tiny_model_v1) if old_path == str(tiny_model) else str(tiny_model)
            params = SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True, seed=7)
            tasks = await pause_mid_generation(engine, prompts, params,
                                               lambda: asyncio.to_thread(running_requests, sglang_server.url), mode)
            await engine.update_weights(new_path, old_version + 1)
            after = await current_model(engine)
            await engine.resume()
            return await asyncio.gather(*tasks), (old_path, old_version), (new_path, old_version + 1), after

    outputs, (old_path, old_version), (new_path, new_version), after = asyncio.run(run())
    assert after == (new_path, new_version)
    assert_continued_with_new_weights(prompts, outputs, old_path, new_path, old_version, new_version, n,
                                      tolerance=SGLANG_LOGPROB_TOLERANCE)


def test_sglang_rejections_become_engine_errors_and_the_server_stays_up(sglang_server, tmp_path):
    async def run():
        async with SGLangEngine([sglang_server.url]) as engine:
            with pytest.raises(EngineError, match="rejected the request: The input \\(300 tokens\\) is longer than "
                                                  "the model's context length \\(256 tokens\\)"):
                await engine.generate(GenerateRequest([6] * 300, SamplingParams(max_new_tokens=2)))
            with pytest.raises(EngineError, match="max_new_tokens must be > 0"):
                await engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=0)))
            with pytest.raises(EngineError, match="input_ids is empty"):
                await engine.generate(GenerateRequest([], SamplingParams(max_new_tokens=2)))
            with pytest.raises(EngineError, match="update_weights_from_disk answered HTTP 400"):
                await engine.update_weights(tmp_path / "nothing-here", 99)
            out = await engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=2, ignore_eos=True)))
            return out, engine.server_stats(), await current_model(engine)

    out, stats, (_, version) = asyncio.run(run())
    assert len(out.output_ids) == 2 and out.output_versions == [version] * 2
    assert stats[0]["state"] == "up" and stats[0]["failures"] == 0


def test_sglang_servers_with_original_logprobs_refuse_temperatures_other_than_one(sglang_server, monkeypatch):
    """SGLANG_RETURN_ORIGINAL_LOGPROB makes SGLang return log softmax(logits), before the temperature: at T != 1
    not the behaviour policy, so the sglang backend's client refuses such requests by name (T = 1 is served)."""
    from areal_core.engine import EngineTarget, start_engines
    from areal_core.engine.launch import EngineConfig

    monkeypatch.setenv("SGLANG_RETURN_ORIGINAL_LOGPROB", "1")

    async def run():
        config = EngineConfig(backend="sglang", urls=[sglang_server.url])
        async with start_engines(config, EngineTarget(model=None, urls=(sglang_server.url,))) as engine:
            served = await engine.generate(GenerateRequest([30, 31], SamplingParams(max_new_tokens=4, temperature=1.0)))
            with pytest.raises(EngineError, match="SGLANG_RETURN_ORIGINAL_LOGPROB set.*T=0.7"):
                await engine.generate(GenerateRequest([30, 31], SamplingParams(max_new_tokens=4, temperature=0.7)))
            return served

    assert len(asyncio.run(run()).output_ids) == 4


def test_a_launched_sglang_server_keeps_an_idle_connection_past_its_own_five_seconds(sglang_server):
    """ServerProcess.sglang sets SGLANG_TIMEOUT_KEEP_ALIVE: an idle connection outlives SGLang's default (5 s), so
    the client (which drops idle connections after 2 s) never sends on one the server is closing."""
    assert health_on_one_connection_after_idling(sglang_server.url, idle=6.0) == [200, 200]
