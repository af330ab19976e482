"""Generation and training on shared hardware (plan/colocation.py), the per-request and per-sequence costs, and
rewards with uniform groups: every time checked against the cost model by hand."""
from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from areal_core.engine.model import build_char_tokenizer
from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.errors import ConfigError
from areal_core.plan.clock import run_virtual
from areal_core.plan.colocation import SharedCosts, SharedHardware
from areal_core.plan.engine import GenerationCosts, SimulatedServer
from areal_core.plan.profile import load_profile
from areal_core.plan.simulate import ClusterCosts, simulate
from areal_core.plan.trainer import RewardCosts, SimulatedTrainer, TrainingCosts
from areal_core.rl.config import SYNC_OVERRIDES, TrainerConfig


def request(rid: str, prompt: int, tokens: int) -> GenerateRequest:
    return GenerateRequest([1] * prompt, SamplingParams(max_new_tokens=tokens, ignore_eos=True), rid=rid)


def test_a_trainer_phase_stretches_while_generation_runs_and_decode_steps_slow_while_the_trainer_works():
    shared = SharedCosts(generation_slowdown=2.0, training_slowdown=3.0)

    async def main():
        loop = asyncio.get_running_loop()
        hardware = SharedHardware(shared)
        server = SimulatedServer(GenerationCosts(step_s=1.0), hardware=hardware).start()
        trainer = SimulatedTrainer(TrainingCosts(proximal_token_s=1.0, update_token_s=0.0), None, TrainerConfig(),
                                   hardware=hardware)
        try:
            await loop.run_in_executor(None, trainer.recompute_proximal, (2, 1, 0))   # alone: 2 s
            alone = loop.time()
            generation = asyncio.ensure_future(server.generate(request("a", 1, 4)))
            await asyncio.sleep(0)
            await loop.run_in_executor(None, trainer.recompute_proximal, (2, 1, 0))
            trained = loop.time()
            output = await generation
            return alone, trained, loop.time(), output
        finally:
            await server.close()

    alone, trained, generated, output = run_virtual(main())
    assert alone == pytest.approx(2.0)
    # both from t=2: the trainer progresses 1/3 per second and the steps take 2 s each. At t=8 the trainer has done
    # its 2 s of work, the server 3 steps; its last step runs alone, at full speed: 1 s
    assert trained == pytest.approx(8.0)
    assert generated == pytest.approx(9.0) and len(output.output_ids) == 4


@pytest.mark.parametrize("request_slowdown, done", [(3.0, 3 * 10 + 2 * 1 + 2 * 2), (None, 2 * 10 + 2 * 1 + 2 * 2)])
def test_a_joining_requests_work_slows_by_the_request_slowdown_its_prefill_and_decode_steps_by_the_generation_slowdown(
        request_slowdown, done):
    # while the trainer works: the request's 10 s of work on the rollout path x3 (x2, as decode steps, in a profile
    # without request_slowdown), its prefill of 1 s and its 2 decode steps of 1 s x2
    shared = SharedCosts(generation_slowdown=2.0, training_slowdown=1.0, request_slowdown=request_slowdown)

    async def main():
        loop = asyncio.get_running_loop()
        hardware = SharedHardware(shared)
        server = SimulatedServer(GenerationCosts(step_s=1.0, request_s=10.0, prefill_token_s=1.0),
                                 hardware=hardware).start()
        training = asyncio.ensure_future(hardware.train(1000.0))
        try:
            await asyncio.sleep(0)
            assert hardware.training and hardware.request_factor() == (request_slowdown or 2.0)
            await server.generate(request("a", 1, 2))
            return loop.time()
        finally:
            training.cancel()
            await server.close()

    assert run_virtual(main()) == pytest.approx(done)
    assert SharedHardware(shared).request_factor() == 1.0   # the trainer idle: nothing slows


def test_when_the_trainer_stops_during_a_requests_first_step_that_step_ends_as_planned_and_the_next_are_faster():
    shared = SharedCosts(generation_slowdown=2.0, training_slowdown=1.0, request_slowdown=3.0)

    async def main():
        loop = asyncio.get_running_loop()
        hardware = SharedHardware(shared)
        server = SimulatedServer(GenerationCosts(step_s=1.0, request_s=10.0), hardware=hardware).start()
        training = asyncio.ensure_future(hardware.train(5.0))
        try:
            await asyncio.sleep(0)
            await server.generate(request("a", 1, 4))
            await training
            return loop.time(), server.stats
        finally:
            await server.close()

    done, stats = run_virtual(main())
    # the first step, begun while the trainer works: 3 x 10 + 2 x 1 = 32 s, though the trainer stops at 5; then 3
    # steps of 1 s, alone, the request's work not paid again
    assert done == pytest.approx(32.0 + 3.0) and stats.steps == 4


def test_without_shared_hardware_nothing_slows():
    async def main():
        loop = asyncio.get_running_loop()
        server = SimulatedServer(GenerationCosts(step_s=1.0)).start()
        trainer = SimulatedTrainer(TrainingCosts(proximal_token_s=1.0, update_token_s=0.0), None, TrainerConfig())
        try:
            generation = asyncio.ensure_future(server.generate(request("a", 1, 4)))
            await loop.run_in_executor(None, trainer.recompute_proximal, (2, 1, 0))
            trained = loop.time()
            await generation
            return trained, loop.time()
        finally:
            await server.close()

    assert run_virtual(main()) == (pytest.approx(2.0), pytest.approx(4.0))


def test_a_request_pays_its_request_cost_once_even_when_an_interruption_sets_it_back():
    costs = GenerationCosts(step_s=1.0, request_s=10.0, prefill_token_s=0.5)

    async def main():
        loop = asyncio.get_running_loop()
        server = SimulatedServer(costs).start()
        try:
            generation = asyncio.ensure_future(server.generate(request("a", 2, 3)))
            await asyncio.sleep(11.5)          # in the first step: 1 + 10 (request) + 1 (prefill of 2 tokens) = 12 s
            await server.pause("retract")      # the step in progress ends at 12; the cache is dropped
            await server.resume()
            await generation
            return loop.time(), server.stats
        finally:
            await server.close()

    done, stats = run_virtual(main())
    # after the pause: prefill of the context again (3 tokens: 1.5 s) + 2 more steps, without the request cost
    assert done == pytest.approx(12.0 + 1.5 + 2.0) and stats.interruptions == 1


def test_a_trainer_step_costs_its_tokens_and_its_sequences():
    costs = TrainingCosts(proximal_token_s=0.01, update_token_s=0.02, optimizer_step_s=1.0, proximal_sequence_s=0.1,
                          update_sequence_s=0.2)

    async def main():
        loop = asyncio.get_running_loop()
        trainer = SimulatedTrainer(costs, None, TrainerConfig(ppo_minibatches=2))
        batch = trainer.prepare([], 1.0)
        assert batch == (0, 0, 0)
        await loop.run_in_executor(None, trainer.recompute_proximal, (100, 10, 0))
        proximal = loop.time()
        await loop.run_in_executor(None, trainer.ppo_update, (100, 10, 0), None)
        return proximal, loop.time() - proximal

    assert run_virtual(main()) == (pytest.approx(1.0 + 1.0), pytest.approx(2.0 + 2.0 + 2.0))


def test_a_measured_profile_charges_the_positions_and_micro_batches_of_the_real_steps_plan():
    from areal_core.types import RewardResult, Trajectory

    def answer(prompt: int, number: int, tokens: int) -> Trajectory:
        return Trajectory(trajectory_id=f"{prompt}.{number}", task="t", sample_id=str(prompt), group_id=str(prompt),
                          prompt_token_ids=[prompt] * 12, output_token_ids=[3] * tokens,
                          output_logprobs=[-1.0] * tokens, output_versions=[0] * tokens, response="",
                          finish_reason="stop", reward=RewardResult(score=float(number % 2)))

    # eight 4-token answers to one 12-token prompt, a 100- and a 60-token answer to another: 312 tokens
    batch = [answer(1, k, 4) for k in range(8)] + [answer(2, 0, 100), answer(2, 1, 60)]
    config = TrainerConfig(ppo_minibatches=1)

    def prepared(planned: TrainerConfig = config, ranks: int = 1, **costs) -> tuple[int, int, int]:
        trainer = SimulatedTrainer(TrainingCosts(proximal_token_s=1e-3, update_token_s=0.0, proximal_microbatch_s=0.5,
                                                 **costs), None, planned, ranks=ranks)
        return trainer.prepare(batch, 1.0)

    # the real step packs the two long answers apart from the short ones (2 x 112 positions, the 72 padded; 8 x 16)
    assert prepared() == (312, 10, 2)
    assert prepared(per_position=True) == (224 + 128, 10, 2)
    # behind their shared prompt, the eight short answers take one row of 12 + 8 x 4 positions; the long two stay apart
    assert prepared(per_position=True, shared_prompts=True) == (224 + 44, 10, 2)
    # ... unless the planned run turns the packing off
    assert prepared(TrainerConfig(ppo_minibatches=1, share_prompts=False), per_position=True,
                    shared_prompts=True) == (352, 10, 2)
    # on two data-parallel ranks each runs one of the two micro-batches; the positions are the step's
    assert prepared(ranks=2, per_position=True) == (352, 10, 1)
    with pytest.raises(ValueError, match="per_position must be true or false"):
        TrainingCosts(proximal_token_s=0.0, update_token_s=0.0, per_position=1)
    # pi_prox: a millisecond a position and half a second a micro-batch

    async def main():
        trainer = SimulatedTrainer(TrainingCosts(proximal_token_s=1e-3, update_token_s=2e-3, proximal_microbatch_s=0.5,
                                                 update_microbatch_s=0.25, optimizer_step_s=1.0, per_position=True,
                                                 shared_prompts=True), None, config)
        loop = asyncio.get_running_loop()
        shape = trainer.prepare(batch, 1.0)
        await loop.run_in_executor(None, trainer.recompute_proximal, shape)
        proximal = loop.time()
        await loop.run_in_executor(None, trainer.ppo_update, shape, None)
        return proximal, loop.time() - proximal

    assert run_virtual(main()) == (pytest.approx(0.268 + 1.0), pytest.approx(0.536 + 0.5 + 1.0))


def test_a_share_of_groups_scores_alike_and_the_rest_response_by_response():
    costs = RewardCosts(correct_rate=0.5, uniform_groups=0.6)
    groups = [[costs.draw(f"p{g}.{i}")[1] for i in range(8)] for g in range(2000)]
    uniform = sum(len(set(group)) == 1 for group in groups) / len(groups)
    assert uniform == pytest.approx(0.6 + 0.4 * 2 / 256, abs=0.04)
    assert sum(map(sum, groups)) / (8 * len(groups)) == pytest.approx(0.5, abs=0.03)
    none = RewardCosts(correct_rate=0.5)
    assert sum(len({none.draw(f"p{g}.{i}")[1] for i in range(8)}) == 1 for g in range(2000)) < 40
    with pytest.raises(ValueError, match="uniform_groups must be in"):
        RewardCosts(uniform_groups=1.5)


def test_a_simulated_run_on_shared_hardware_is_slower_asynchronously_and_the_same_synchronously(tmp_path):
    base = ClusterCosts(GenerationCosts(step_s=0.02, sequence_s=0.001, prefill_token_s=1e-4),
                        TrainingCosts(proximal_token_s=1e-4, update_token_s=3e-4), RewardCosts(mean_s=0.01))
    shared = ClusterCosts(base.generation, base.training, base.rewards, shared=SharedCosts(2.0, 2.0))
    run = ["task=arithmetic", "steps=6", "rollout.batch_size=8", "rollout.group_size=4", "warmup.enabled=false",
           "eval_task=null", "rollout.skip_uniform_groups=false", f"output_dir={tmp_path}"]
    seconds = {}
    for name, costs in (("base", base), ("shared", shared)):
        for mode, overrides in (("sync", SYNC_OVERRIDES), ("async", ["rollout.max_staleness=2"])):
            summary = simulate([*run, *overrides], costs, build_char_tokenizer(), tmp_path / f"{name}-{mode}")
            seconds[name, mode] = summary["rl_seconds"]
    assert seconds["shared", "sync"] == pytest.approx(seconds["base", "sync"])   # the phases never overlap
    assert seconds["shared", "async"] > 1.1 * seconds["base", "async"]
    metrics = [json.loads(line) for line in (tmp_path / "shared-async" / "metrics.jsonl").read_text().splitlines()]
    assert max(m["staleness_max"] for m in metrics) >= 1   # it did overlap


def test_a_profile_keeps_its_shared_costs_and_refuses_a_speed_up(tmp_path):
    profile = {"name": "cpu", "generation": {"step_s": 0.01, "request_s": 0.001},
               "training": {"proximal_token_s": 1e-5, "update_token_s": 3e-5, "update_sequence_s": 1e-4},
               "shared": {"generation_slowdown": 1.5, "training_slowdown": 2.0, "request_slowdown": 2.5}}
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(profile))
    loaded = load_profile(path)
    assert loaded.shared == SharedCosts(1.5, 2.0, 2.5) and loaded.cluster(1, 1).shared == SharedCosts(1.5, 2.0, 2.5)
    assert loaded.generation.request_s == 0.001 and loaded.training.update_sequence_s == 1e-4
    assert load_profile(loaded.save(tmp_path / "again.yaml")) == loaded
    path.write_text(yaml.safe_dump({**profile, "shared": {"generation_slowdown": 0.5}}))
    with pytest.raises(ConfigError, match=f"profile {path}: shared: generation_slowdown must be >= 1"):
        load_profile(path)
    path.write_text(yaml.safe_dump({**profile, "shared": {"request_slowdown": 0.9}}))
    with pytest.raises(ConfigError, match=f"profile {path}: shared: request_slowdown must be >= 1"):
        load_profile(path)
    path.write_text(yaml.safe_dump({**profile, "shared": {"generation_slowdown": None}}))   # only request's may be null
    with pytest.raises(ConfigError, match=f"profile {path}: shared: generation_slowdown must be >= 1"):
        load_profile(path)
    # a profile measured before request_slowdown: a request's work slows as decode steps do
    path.write_text(yaml.safe_dump({**profile, "shared": {"generation_slowdown": 1.5, "training_slowdown": 2.0}}))
    older = load_profile(path)
    assert older.shared == SharedCosts(1.5, 2.0) and older.shared.request_slowdown is None
    assert older.shared.effective_request_slowdown == 1.5 and load_profile(older.save(tmp_path / "older.yaml")) == older
