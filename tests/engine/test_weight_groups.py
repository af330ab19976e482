"""Weights over a process group into real engines (issue 22, part 2): the local engine, `areal serve` servers
through the SGLang client, and the real SGLang server on this CPU (gloo), each receiving buckets broadcast by
a trainer-side `WeightSender`; the weights arrive bit-exact, the last bucket moves the version, requests paused
mid-generation continue with the new weights, and a bucket that does not fit the model is refused before its
broadcast (which could not be refused later)."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import pytest
import torch

from areal_core.engine.local import LocalEngine
from areal_core.engine.model import ModelError, load_model
from areal_core.engine.protocol import EngineError, GenerateRequest, SamplingParams
from areal_core.engine.sglang_client import SGLangEngine
from areal_core.engine.weight_sync import Bucket, WeightSender

pytest.register_assert_rewrite("conftest_sglang")
pytest_plugins = ["conftest_sglang"]
from conftest_sglang import _free_port, pause_mid_generation, reference_logprobs  # noqa: E402
from engine_checks import assert_continued_with_new_weights, stream_weights  # noqa: E402

pytestmark = pytest.mark.timeout(300)
CAP = 96 * 1024   # several buckets for the tiny model

SENDER = """
import sys
from areal_core.engine.model import load_model
from areal_core.engine.weight_sync import WeightSender
model, port, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sender = WeightSender(load_model(model))
sender.join(f"tcp://127.0.0.1:{port}", 2, "test-group", "gloo", 60)
for index in range(len(sender.stage(cap))):
    sender.send(index)
sender.leave()
"""


def test_the_local_engine_takes_weights_over_a_gloo_group_bit_exact_and_refuses_a_bucket_that_does_not_fit(
        tiny_model, tiny_model_v1):
    """The sender is another process (the trainer's rank 0); the engine here receives every bucket."""
    plan = WeightSender(load_model(tiny_model_v1)).stage(CAP)
    assert len(plan) > 2
    port = _free_port()

    async def run(engine: LocalEngine) -> None:
        with pytest.raises(EngineError, match="must run between begin_weight_update"):   # as SGLang refuses it
            await engine.update_weights_from_distributed(plan[0], None, "test-group")
        await engine.begin_weight_update()
        with pytest.raises(EngineError, match="no weight update group 'test-group'"):
            await engine.update_weights_from_distributed(plan[0], None, "test-group")
        sender = subprocess.Popen([sys.executable, "-c", SENDER, str(tiny_model_v1), str(port), str(CAP)],
                                  stderr=subprocess.PIPE, text=True)
        await engine.init_weight_group("127.0.0.1", port, 1, 2, "test-group", "gloo", 60.0)
        wrong = [Bucket(["model.layers.0.mlp.gate.weight"], ["float32"], [[4, 4]]),
                 Bucket([plan[0].names[0]], [plan[0].dtypes[0]], [[3, 3]])]
        for bucket, message in zip(wrong, ["not weights of the served model", "has shape"]):
            with pytest.raises(ModelError, match=message):   # refused before any broadcast: the group is intact
                await engine.update_weights_from_distributed(bucket, None, "test-group")
        for index, bucket in enumerate(plan):
            last = index == len(plan) - 1
            await engine.update_weights_from_distributed(bucket, 5 if last else None, "test-group", flush_cache=last)
            assert engine.version == (5 if last else 0)   # only the last bucket moves the version
        await engine.end_weight_update()
        await engine.destroy_weight_group("test-group")
        assert sender.wait(60) == 0, sender.stderr.read()

    engine = LocalEngine(tiny_model).start()
    try:
        asyncio.run(run(engine))
        expected = load_model(tiny_model_v1).state_dict()
        got = engine.model.state_dict()
        assert set(got) == set(expected)   # the tied output head too: it is the embedding, sent once
        assert all(torch.equal(got[name], expected[name]) for name in expected)
        assert engine.version == 5 and asyncio.run(engine.model_info())["weight_version"] == "5"
    finally:
        asyncio.run(engine.close())


def running(url: str) -> int:
    return int(httpx.get(f"{url}/model_info", timeout=30).json()["running"])


async def total_running(urls) -> int:
    return sum(await asyncio.gather(*(asyncio.to_thread(running, u) for u in urls)))


def test_areal_serve_servers_take_weights_over_one_group_and_paused_requests_continue_with_them(
        areal_pair, tiny_model, tiny_model_v1):
    """Two servers (ranks 1 and 2, from their /get_server_info) and the sender (rank 0) in one group; requests
    paused mid-generation on both continue after the update with the new weights' log-probs and version."""
    urls = [p.url for p in areal_pair]
    info = httpx.get(f"{urls[0]}/model_info", timeout=30).json()
    old_path, old_version = info["model_path"], int(info["weight_version"])
    new_version, n = old_version + 1, 200
    sender = WeightSender(load_model(tiny_model_v1 if old_path == str(tiny_model) else tiny_model))
    new_path = str(tiny_model_v1 if old_path == str(tiny_model) else tiny_model)
    prompts = [[6 + i, 85, 9] for i in range(4)]

    async def run():
        async with SGLangEngine(urls) as engine:
            assert await engine.weight_group_ranks() == 2
            params = SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True, seed=2)
            tasks = await pause_mid_generation(engine, prompts, params, lambda: total_running(urls))
            buckets = await stream_weights(engine, sender, new_version, CAP, "serve-group", _free_port())
            await engine.resume()
            return buckets, await asyncio.gather(*tasks)

    buckets, outputs = asyncio.run(run())
    assert len(buckets) > 2
    assert all(int(httpx.get(f"{u}/model_info", timeout=30).json()["weight_version"]) == new_version for u in urls)
    assert_continued_with_new_weights(prompts, outputs, old_path, new_path, old_version, new_version, n)
    # The servers left the group: a second update needs a new one.
    assert httpx.post(f"{urls[0]}/begin_weight_update", json={}, timeout=30).status_code == 200
    answer = httpx.post(f"{urls[0]}/update_weights_from_distributed", timeout=30,
                        json={**buckets[0].to_json(), "group_name": "serve-group"})
    assert answer.status_code == 400 and "no weight update group 'serve-group'" in answer.json()["message"]
    assert httpx.post(f"{urls[0]}/end_weight_update", json={}, timeout=30).status_code == 200
    assert httpx.post(f"{urls[0]}/end_weight_update", json={}, timeout=30).status_code == 400   # none open


def test_a_malformed_group_request_is_refused_naming_the_problem(areal_pair):
    url = areal_pair[0].url
    missing = httpx.post(f"{url}/init_weights_update_group", json={"master_address": "127.0.0.1"}, timeout=30)
    assert missing.status_code == 400 and "missing field 'master_port'" in missing.json()["message"]
    bad = httpx.post(f"{url}/update_weights_from_distributed", timeout=30,
                     json={"names": ["a"], "dtypes": ["float33"], "shapes": [[1]]})
    assert bad.status_code == 400 and "unknown dtype 'float33'" in bad.json()["message"]


def test_the_real_sglang_server_takes_weights_over_a_gloo_group(sglang_server, tiny_model, tiny_model_v1):
    """SGLang 0.5.23's CPU server joins a gloo group (its /init_weights_update_group takes the backend) and loads
    flattened buckets; greedy decoding then follows the new weights and the version is the last bucket's."""
    new_model = load_model(tiny_model_v1)
    prompt = [6, 7, 8, 77, 9]

    async def run():
        async with SGLangEngine([sglang_server.url]) as engine:
            buckets = await stream_weights(engine, WeightSender(new_model), 9, CAP, "sglang-group", _free_port())
            params = SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
            return buckets, await engine.generate(GenerateRequest(prompt, params)), await engine.model_info()

    buckets, out, info = asyncio.run(run())
    assert len(buckets) > 2 and info["weight_version"] == 9
    assert out.output_versions == [9] * 16
    expected = reference_logprobs(new_model, prompt, out.output_ids, 0.0)
    assert torch.allclose(torch.tensor(out.output_logprobs), expected, atol=1e-4)
    with torch.no_grad():
        logits = new_model(torch.tensor([prompt + out.output_ids])).logits[0, len(prompt) - 1:-1]
    assert out.output_ids == logits.argmax(-1).tolist()


def test_areal_train_streams_its_weights_into_the_real_sglang_server(sglang_server, tiny_model, tmp_path):
    """`areal train engine.backend=sglang engine.urls=[...] engine.weight_sync=distributed`: the run's first
    update (a server it did not start holds some other weights) and every step's go over one gloo group; the
    server ends at the last version, and its tokens carried every version it was sent (staleness <= 1)."""
    import json

    from areal_core.config import load_config
    from areal_core.rl.config import TrainConfig
    from areal_core.rl.run import run_training

    run = load_config(TrainConfig, None, [
        f"output_dir={tmp_path}", f"model.path={tiny_model}", "warmup.enabled=false", "eval_task=null",
        "rollout.batch_size=4", "rollout.group_size=4", "rollout.max_new_tokens=12", "steps=2",
        "rollout.max_staleness=1", "tensorboard=false", "checkpoint_every=0", "engine.backend=sglang",
        f"engine.urls=[{sglang_server.url}]", "engine.weight_sync=distributed", "engine.weight_bucket_mb=0.25"])
    summary = asyncio.run(run_training(run, echo=lambda *a: None))
    lines = open(f"{summary['run_dir']}/metrics.jsonl").read().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["version"] for m in metrics] == [1, 2] and max(m["staleness_max"] for m in metrics) <= 1
    assert all(m["weight_sync_buckets"] > 1 for m in metrics)

    async def served_version() -> int:
        async with SGLangEngine([sglang_server.url]) as engine:
            return (await engine.model_info())["weight_version"]

    assert asyncio.run(served_version()) == 2
