"""The controller at scale (issue 23, item 5): what was made cheaper for thousands of simulated servers and responses
of thousands of tokens gives what it gave before, and a simulated run goes through the controller's code as a real
run does (bench/bench_plan_scale.py measures the cost)."""
from __future__ import annotations

import asyncio
import random
import sys
import threading

import pytest

from areal_core.config import load_config
from areal_core.engine.model import build_char_tokenizer
from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.plan.clock import run_virtual
from areal_core.plan.engine import GenerationCosts, SimulatedEngine
from areal_core.plan.simulate import ClusterCosts, simulate
from areal_core.plan.trainer import RewardCosts, TrainingCosts
from areal_core.rl.config import TrainConfig
from areal_core.rl.run import run_training
from areal_core.workflows.episode import decode_response


def test_routing_picks_the_server_with_fewest_in_flight_among_thousands_as_a_scan_of_them_all_does():
    lengths = random.Random(0)
    draws = {}

    def length(rid: str, prompt: int, limit: int) -> int:
        return draws.setdefault(rid, lengths.randint(1, 400))

    engine = SimulatedEngine(1000, GenerationCosts(step_s=0.01, sequence_s=1e-4), lengths=length)
    checks = []

    def check() -> None:
        scan = min(engine.servers, key=lambda s: s.in_flight)   # the first of the least loaded
        assert engine.route() is scan
        checks.append(scan.in_flight)

    async def load() -> None:
        engine.start()
        rng = random.Random(1)
        requests = []
        for wave in range(16):
            for i in range(rng.randint(300, 900)):
                check()
                requests.append(asyncio.ensure_future(engine.generate(GenerateRequest(
                    [1, 2, 3], SamplingParams(max_new_tokens=400), rid=f"w{wave}.{i}"))))
                await asyncio.sleep(0)   # the request reaches its server
            for task in rng.sample(requests, 20):   # callers giving up: their requests leave their servers
                task.cancel()
            await asyncio.sleep(rng.uniform(0.0, 1.0))   # some finish meanwhile
            check()
        await asyncio.gather(*requests, return_exceptions=True)
        check()
        await engine.close()

    run_virtual(load())
    assert len(checks) > 5000 and max(checks) >= 2 and checks[-1] == 0   # loaded, then every server empty again
    assert len(engine.routing.heap) <= 2 * len(engine.servers) + 64


def test_a_response_decodes_to_the_text_the_tokenizer_decode_of_its_list_gives():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    text = "Sum the digits: 12 + 34 = 46. ¿Por qué? Ответ: 46 ✓ 数字 " * 20
    core.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_end|>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", unk_token="<unk>")
    char = build_char_tokenizer()
    for tokenizer in (bpe, char):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        for response in (ids, ids[:7] + [end] + ids[7:40] + [end], ids[3:4], [end], []):
            expected = tokenizer.decode(response, skip_special_tokens=True)
            assert decode_response(tokenizer, response) == expected
        assert decode_response(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=True) != ""
        # a byte split mid-character decodes the same way too
        assert decode_response(tokenizer, ids[:5]) == tokenizer.decode(ids[:5], skip_special_tokens=True)
    # a tokenizer that is not transformers' (the Rust one under it) gets its list as before
    assert decode_response(bpe.backend_tokenizer, ids) == bpe.backend_tokenizer.decode(ids, skip_special_tokens=True)


CONTROLLER = ("areal_core/rl/rollout.py", "areal_core/rl/run.py", "areal_core/workflows/runtime.py",
              "areal_core/workflows/episode.py", "areal_core/workflows/builtin.py")


def controller_calls(run) -> set[str]:
    """The controller's functions (rollout controller, step loop, episode runner, workflows) a call of `run` enters,
    by qualified name (on any thread: a real run hands work to threads the virtual clock runs inline)."""
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.replace("\\", "/").endswith(CONTROLLER):
                seen.add(f"{code.co_filename.rsplit('areal_core', 1)[-1]}:{code.co_qualname}")

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return seen


@pytest.mark.timeout(600)
def test_a_simulated_run_goes_through_the_controller_code_a_real_run_goes_through(tmp_path, monkeypatch):
    monkeypatch.setenv("AREAL_CACHE_DIR", str(tmp_path / "cache"))
    run = ["task=arithmetic", "steps=3", "rollout.batch_size=2", "rollout.group_size=2", "rollout.max_staleness=1",
           "rollout.max_new_tokens=8", "rollout.workflow=sampled_lengths",
           "rollout.workflow_options={lengths: {mean: 4, p99: 7, max: 8}}", "rollout.skip_uniform_groups=false",
           "warmup.enabled=false", "eval_task=null", "checkpoint_every=0", "tensorboard=false", "eval.db=null"]
    real = controller_calls(lambda: asyncio.run(run_training(
        load_config(TrainConfig, None, [*run, f"output_dir={tmp_path / 'real'}"]), echo=lambda *a: None)))
    costs = ClusterCosts(GenerationCosts(step_s=0.01, weight_load_s=0.1),
                         TrainingCosts(proximal_token_s=1e-4, update_token_s=3e-4, publish_s=0.1),
                         RewardCosts(mean_s=0.01), servers=2)
    simulated = controller_calls(lambda: simulate([*run, f"output_dir={tmp_path / 'sim'}"], costs,
                                                  build_char_tokenizer(), tmp_path / "sim" / "run"))
    # what only a real run does: start itself (the run directory, workflows checked, engines), before the step loop
    setup = {name for name in real if name.split(":")[1] in {"run_training", "check_workflows", "open_run_dir",
                                                             "results_db"}}
    # entered once a process, by whichever run came first (cached)
    once = {"/workflows/builtin.py:register_workflows", "/workflows/episode.py:_transformers_tokenizer"}
    # the local engine tells its length limit (model_info max_seq_len): a real run's episodes are measured against it;
    # simulated servers tell none
    engine_limit = {"/workflows/episode.py:Episode.length"}
    assert "/rl/rollout.py:RolloutController._rollout_group" in simulated and "/rl/run.py:TrainingRun.publish" in real
    assert "/workflows/builtin.py:sampled_lengths" in simulated and "/workflows/episode.py:decode_response" in simulated
    assert simulated - once - real == set(), "the simulation entered controller code a real run does not"
    assert real - setup - once - engine_limit - simulated == set(), "a real run entered controller code the simulation does not"
