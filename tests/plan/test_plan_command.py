"""`areal plan` from the command line, and cost profiles (plan/profile.py): a profile and a GPU count in, every
scenario simulated, a table, plan.json and plan.png out; a bad profile is an error naming the cost and the file."""
from __future__ import annotations

import dataclasses
import json
import statistics
from typing import Any

import pytest
import yaml
from safetensors.torch import load_file

from areal_core.errors import ConfigError
from areal_core.plan.measure import fit_training, run_sample, split_generation_slowdown
from areal_core.plan.planner import scenarios
from areal_core.plan.profile import load_profile
from areal_core.rl.config import TrainConfig
from areal_core.rl.model_cache import resolve_model

PROFILE = {
    "name": "test-cluster",
    "generation": {"gpus_per_server": 1, "step_s": 0.02, "sequence_s": 0.001, "prefill_token_s": 1.0e-4,
                   "weight_load_s": 0.5},
    "training": {"reference_gpus": 2, "proximal_token_s": 2.0e-4, "update_token_s": 6.0e-4, "publish_s": 0.2},
    "rewards": {"mean_s": 0.05, "p99_s": 0.5, "workers": 16},
    "sources": {"generation.step_s": "chosen for this test"},
}
RUN = ["task=arithmetic", "steps=4", "rollout.batch_size=8", "rollout.group_size=4"]


def write(tmp_path, profile, name="profile.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(profile))
    return path


def test_areal_plan_simulates_sync_and_async_and_reports_what_asynchrony_buys(areal, tmp_path):
    result = areal("plan", str(write(tmp_path, PROFILE)), "--gpus", "4", "--generation-gpus", "2", "--eta", "0,2",
                   "--output", str(tmp_path / "plan"), *RUN)
    assert result.returncode == 0, result.stderr
    assert "areal plan: test-cluster on 4 GPUs (simulated)" in result.stdout
    report = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert [s["mode"] for s in report["scenarios"]] == ["sync", "async eta=2 interrupt", "async eta=2 wait"]
    sync, interrupted, waited = report["scenarios"]
    assert set(sync["staleness"]) == {"0"} and max(map(int, interrupted["staleness"])) <= 2
    assert report["speedup"] == pytest.approx(interrupted["trajectories_per_second"] / sync["trajectories_per_second"])
    assert report["best_async"] == interrupted["name"] and report["speedup"] > 1
    assert f"{report['speedup']:.2f}x the synchronous" in result.stdout
    assert report["sources"] == {"generation.step_s": "chosen for this test"} and report["assumptions"]
    assert (tmp_path / "plan" / "plan.png").stat().st_size > 0


def test_a_trainer_on_more_gpus_costs_less_per_token_and_splits_are_whole_servers(tmp_path):
    profile = load_profile(write(tmp_path, {**PROFILE, "generation": {**PROFILE["generation"], "gpus_per_server": 2}}))
    profile = dataclasses.replace(profile, training=dataclasses.replace(profile.training, update_microbatch_s=0.01))
    cluster = profile.cluster(generation_gpus=4, training_gpus=4)
    assert cluster.servers == 2 and cluster.training.update_token_s == pytest.approx(6.0e-4 * 2 / 4)
    # a pass's own cost is not shared out: each of the 4 ranks runs its share of the passes (SimulatedTrainer.ranks)
    assert cluster.training.update_microbatch_s == 0.01 and cluster.trainer_ranks == 4
    with pytest.raises(ConfigError, match="3 generation GPUs do not make whole servers of 2"):
        profile.cluster(3, 4)
    grid = scenarios(profile, 32, [0, 1])
    splits = sorted({(s.generation_gpus, s.training_gpus) for s in grid})
    assert splits[0] == (2, 30) and splits[-1] == (30, 2) and len(splits) == 8
    assert all(g % 2 == 0 and g + t == 32 for g, t in splits)
    assert load_profile(profile.save(tmp_path / "again.yaml")) == profile


@pytest.mark.parametrize("change, message", [
    ({"training": None}, "training must be a mapping of costs"),
    ({"generation": {**PROFILE["generation"], "step_seconds": 1}}, "unknown generation cost 'step_seconds'"),
    ({"training": {**PROFILE["training"], "update_token_s": -1}}, "training cost update_token_s must be >= 0"),
    ({"generation": {**PROFILE["generation"], "gpus_per_server": 0}}, "gpus_per_server must be a whole number >= 1"),
    ({"cost": 1}, "unknown key 'cost'"),
    ({"rewards": {"mean_s": 0.01, "p99_s": 1.0}}, "a log-normal needs mean <= p99 <= 15.0 x mean"),
    ({"generation": {**PROFILE["generation"], "kv_tokens": 1.0e6}}, "kv_tokens and max_running must be whole numbers"),
])
def test_a_bad_profile_is_an_error_naming_the_file_and_the_cost(areal, tmp_path, change, message):
    path = write(tmp_path, {k: v for k, v in {**PROFILE, **change}.items() if v is not None})
    with pytest.raises(ConfigError, match=message):
        load_profile(path)
    result = areal("plan", str(path), "--gpus", "4", *RUN)
    assert result.returncode == 2 and f"error: profile {path}" in result.stderr and message in result.stderr


def test_the_decode_model_fitted_to_timings_it_made_recovers_its_costs_and_never_goes_negative():
    from areal_core.plan.measure import GENERATION_GRID, decode_terms, fit_generation

    truth = {"step_s": 2e-3, "sequence_s": 3e-4, "context_token_s": 1e-7, "prefill_token_s": 3e-5}
    samples = [(b, p, n, sum(c * v for c, v in zip(decode_terms(b, p, n), truth.values())))
               for b, p, n in GENERATION_GRID]
    fitted = fit_generation(samples)
    assert fitted == pytest.approx(truth, rel=1e-6)
    # more requests taking less time: the per-sequence cost is dropped from the fit (0), and the rest still fit
    odd = [(b, p, n, 0.01 * n + 1e-6 * b * p - 1e-4 * n * b) for b, p, n in GENERATION_GRID]
    refit = fit_generation(odd)
    assert refit["sequence_s"] == 0 and refit["step_s"] > 0


def test_the_training_fit_counts_a_small_batch_as_much_as_the_large_ones():
    """A run's batch can be far smaller than the synthetic ones and cost more a token (a step's fixed work). The
    timings below are a profile's of the GPU check's tiny preset on this CPU: its 4 synthetic batches, then the run's
    own (16 sequences, 252 tokens). Fitted to seconds on the synthetic ones (as before), the run's update is
    predicted at two thirds of what it took; fitted to each sample's share with the run's batch among them, within
    a tenth."""
    from areal_core.plan.measure import fit_nonnegative

    synthetic = [{"tokens": 512, "sequences": 8, "proximal_s": 0.503, "update_s": 1.283},
                 {"tokens": 2048, "sequences": 32, "proximal_s": 1.979, "update_s": 4.729},
                 {"tokens": 2016, "sequences": 84, "proximal_s": 1.494, "update_s": 3.616},
                 {"tokens": 960, "sequences": 40, "proximal_s": 0.671, "update_s": 1.651}]
    run = {"tokens": 252, "sequences": 16, "proximal_s": 0.27, "update_s": 0.80}
    minibatches = TrainConfig().trainer.ppo_minibatches

    def update_s(costs: dict[str, float]) -> float:
        return (costs["update_token_s"] * run["tokens"] + costs["update_sequence_s"] * run["sequences"]
                + costs["optimizer_step_s"] * minibatches)

    names = ["update_token_s", "update_sequence_s", "optimizer_step_s"]
    absolute = fit_nonnegative(names, [[s["tokens"], s["sequences"], minibatches] for s in synthetic],
                               [s["update_s"] for s in synthetic])
    fitted = fit_training([*synthetic, run], TrainConfig())
    assert update_s(absolute) < 0.7 * run["update_s"]
    assert update_s(fitted) == pytest.approx(run["update_s"], rel=0.1)
    assert all(value >= 0 for value in fitted.values())


# The local trainer on this project's CPU (2026-12-06, one torch thread, nothing else running): (batch, tokens,
# sequences, positions its step's micro-batches compute, micro-batches, pi_prox s, update s), the fastest of three.
# `run`: the CPU demo's trained share (short answers to short prompts); `run-all`, `run-first`: that batch whole and
# its first 26 groups; `synAxB`: synthetic batches of about A tokens, B-token answers behind 16-token prompts shared
# by groups of 8 (the profile's own: 512x48, 2048x48, 2048x8, 1024x8 and 12288x176, four micro-batches).
TRAINER_TIMINGS = [
    ("run", 2138, 208, 2170, 4, 0.0306, 0.0993), ("run-all", 6803, 512, 7413, 10, 0.0737, 0.3240),
    ("run-first", 2962, 208, 2866, 7, 0.0377, 0.1392), ("syn512x48", 512, 8, 512, 2, 0.0119, 0.0311),
    ("syn2048x48", 2048, 32, 2048, 2, 0.0283, 0.0871), ("syn2048x8", 1920, 80, 1344, 2, 0.0215, 0.0581),
    ("syn1024x8", 960, 40, 672, 2, 0.0137, 0.0355), ("syn4704x131", 4704, 32, 4704, 2, 0.0643, 0.2029),
    ("syn4704x48", 4608, 72, 4608, 2, 0.0559, 0.1649), ("syn2048x131", 1176, 8, 1176, 2, 0.0206, 0.0560),
    ("syn4096x8", 4032, 168, 2736, 2, 0.0403, 0.1074), ("syn8192x240", 8192, 32, 8192, 2, 0.1110, 0.3479),
    ("syn4096x2", 4032, 224, 1568, 2, 0.0278, 0.0643), ("syn2048x4", 1920, 96, 912, 2, 0.0174, 0.0442),
    ("syn12288x176", 12288, 64, 12288, 4, 0.1074, 0.4986)]


def test_the_trainer_costs_fit_positions_and_micro_batches_and_carry_to_batches_of_other_shapes():
    """Fitted to the profile's kinds of batch (long and short answers, a long-sequence batch, the run's own), the
    costs per position the step computes and per micro-batch predict the update of every other shape within 11%:
    answers 2 to 240 tokens long, packed behind their prompt or not, in 2 to 10 micro-batches. Per token and per
    sequence (the older model, which the same samples without positions still get) misses the short answers packed
    behind their prompts by more than half."""
    samples = [dict(zip(("name", "tokens", "sequences", "positions", "microbatches", "proximal_s", "update_s"), row))
               for row in TRAINER_TIMINGS]
    profiled = [s for s in samples if s["name"] in {"run", "syn512x48", "syn2048x48", "syn2048x8", "syn1024x8",
                                                    "syn12288x176"}]
    config = TrainConfig()
    fitted = fit_training(profiled, config, shared_prompts=True)
    assert fitted["per_position"] and fitted["shared_prompts"]
    assert fitted["proximal_sequence_s"] == fitted["update_sequence_s"] == 0
    by_tokens = fit_training([{k: v for k, v in s.items() if k != "positions"} for s in profiled], config)
    minibatches = config.trainer.ppo_minibatches

    def update_error(costs: dict[str, Any], s: dict[str, Any], per_position: bool) -> float:
        seconds = (costs["update_token_s"] * s["positions" if per_position else "tokens"]
                   + costs["update_sequence_s"] * s["sequences"] + costs.get("update_microbatch_s", 0.0)
                   * s["microbatches"] + costs["optimizer_step_s"] * minibatches)
        return seconds / s["update_s"] - 1

    def proximal_error(costs: dict[str, Any], s: dict[str, Any]) -> float:
        seconds = (costs["proximal_token_s"] * s["positions"] + costs["proximal_microbatch_s"] * s["microbatches"]
                   + costs["proximal_step_s"])
        return seconds / s["proximal_s"] - 1

    assert max(abs(update_error(fitted, s, True)) for s in samples) < 0.12
    packed = [s for s in samples if s["name"] in {"syn4096x2", "syn2048x4"}]   # 2- and 4-token answers, shared
    assert all(update_error(by_tokens, s, False) > 0.5 for s in packed)
    assert all(abs(update_error(fitted, s, True)) < 0.12 for s in packed)
    assert not by_tokens["per_position"] and by_tokens["update_microbatch_s"] == by_tokens["proximal_step_s"] == 0
    # pi_prox, a forward pass: within a third (long sequences read cheapest against the fit)
    assert max(abs(proximal_error(fitted, s)) for s in samples) < 0.33


def test_decode_steps_and_a_requests_work_slow_apart_beside_the_trainer():
    """The CPU demo's batch on this machine (2026-12-06): through the rollout path 0.382 s alone, 0.519 s beside
    training (one factor for both: 1.36x); its requests on the engine alone 1.21x slower beside training; the cost
    model's engine takes 0.2 s of it. Decode steps slow 1.21x, a request's work (Python that waits for the interpreter
    lock) the rest: a simulated batch, the model's decode steps slowed by the one and the rest by the other, slows as
    the measured one did."""
    def simulated(split: dict[str, float], batch: float, modelled: float) -> float:
        return modelled * split["generation_slowdown"] + (batch - modelled) * split["request_slowdown"]

    split = split_generation_slowdown(0.519 / 0.382, 0.282 / 0.233, 0.382, 0.2)
    assert split["generation_slowdown"] == pytest.approx(0.282 / 0.233)
    assert split["request_slowdown"] > 1.5 and simulated(split, 0.382, 0.2) == pytest.approx(0.519)
    # the engine alone read a speed-up: decode steps 1, the rest takes the batch's slowdown
    split = split_generation_slowdown(1.1, 0.95, 0.4, 0.2)
    assert split == pytest.approx({"generation_slowdown": 1.0, "request_slowdown": 1.2})
    assert simulated(split, 0.4, 0.2) == pytest.approx(0.44)
    # the engine slowed more than the whole batch did: a request's work 1, decode steps take the slowdown
    split = split_generation_slowdown(1.1, 1.5, 0.4, 0.2)
    assert split == pytest.approx({"generation_slowdown": 1.2, "request_slowdown": 1.0})
    assert simulated(split, 0.4, 0.2) == pytest.approx(0.44)
    # too little beyond the engine to tell apart (a sixth of the batch or less: 13% here): the batch's ratio for both
    assert split_generation_slowdown(1.2, 1.1, 0.300, 0.26) == pytest.approx(
        {"generation_slowdown": 1.2, "request_slowdown": 1.2})
    split = split_generation_slowdown(1.2, 1.1, 0.300, 0.24)   # 20%: apart
    assert split["generation_slowdown"] == pytest.approx(1.1) and simulated(split, 0.3, 0.24) == pytest.approx(0.36)
    # no decode steps in the model: the batch's slowdown is all a request's work
    assert split_generation_slowdown(1.2, 1.1, 0.3, 0.0)["request_slowdown"] == pytest.approx(1.2)
    # the batch read faster beside training (noise): nothing slows
    assert split_generation_slowdown(0.9, 1.1, 0.3, 0.2) == pytest.approx(
        {"generation_slowdown": 1.0, "request_slowdown": 1.0})


def test_a_tool_using_batchs_waits_on_its_tools_slow_neither_part():
    """A tool-using batch through the path: 0.85 s alone, of which 0.5 s the cost model's batch spends waiting on its
    tools (nothing slows a tool's seconds), 0.2 s decode steps and 0.15 s a request's work. Beside training the
    decode steps slow 1.2x (the engine alone) and the batch takes 0.5 + 0.2 * 1.2 + 0.15 * r: the split finds r, as for
    the same batch with instant tools; counted into the slowed part, the waits would read r at 1.13."""
    waits, decode, beyond, r = 0.5, 0.2, 0.15, 1.8
    shared = waits + decode * 1.2 + beyond * r
    split = split_generation_slowdown(shared / 0.85, 1.2, 0.85, waits + decode, waits)
    assert split == pytest.approx(split_generation_slowdown((shared - waits) / 0.35, 1.2, 0.35, decode))
    assert split == pytest.approx({"generation_slowdown": 1.2, "request_slowdown": r})
    counted = split_generation_slowdown(shared / 0.85, 1.2, 0.85, waits + decode)
    assert counted["request_slowdown"] == pytest.approx(1.1333, abs=1e-4)


def test_the_profile_trains_beside_generation_on_what_the_run_would_train_of_a_batch():
    from types import SimpleNamespace

    from areal_core.plan.measure import trained_share
    from areal_core.plan.workload import Histogram, TrainedLengths
    from areal_core.rl.rollout import Group
    from areal_core.types import RewardResult, Trajectory

    def group(number: int, scores: list[float]) -> Group:
        return Group(f"g{number}", str(number), [Trajectory(
            trajectory_id=f"g{number}.{i}", task="t", sample_id=str(number), group_id=f"g{number}",
            prompt_token_ids=[1, 2], output_token_ids=[3], output_logprobs=[-1.0], output_versions=[0], response="",
            finish_reason="stop", reward=RewardResult(score=score)) for i, score in enumerate(scores)])

    groups = [group(0, [1, 1]), group(1, [0, 1]), group(2, [0, 0]), group(3, [1, 0])]
    ids = lambda trajectories: [t.group_id for t in trajectories][::2]   # noqa: E731
    config = TrainConfig()
    # as the step loop: the groups that scored alike are skipped, and all of it is trained when none is mixed
    assert ids(trained_share(groups, config)) == ["g1", "g3"]
    assert ids(trained_share([groups[0], groups[2]], config)) == ["g0", "g2"]
    # a run's workload: the share of its responses that run trained on, the first groups, at least one
    assert ids(trained_share(groups * 3, config, SimpleNamespace(trained_share=1 / 3))) == ["g0", "g1", "g2", "g3"]
    assert ids(trained_share(groups, config, SimpleNamespace(trained_share=0.05))) == ["g0"]
    # all of it without the skip, or with a KL term (the loop trains on alike groups then)
    for changed in (TrainConfig(rollout=dataclasses.replace(config.rollout, skip_uniform_groups=False)),
                    TrainConfig(trainer=dataclasses.replace(config.trainer, kl_coef=0.1))):
        shortest = TrainedLengths(Histogram.of([(1, 2)]), Histogram.of([(1, 2)]))   # (would pick the shortest)
        assert ids(trained_share(groups, changed, SimpleNamespace(trained_share=0.5, trained_lengths=shortest))) \
            == ["g0", "g1", "g2", "g3"]


def test_a_training_sample_is_the_median_step_with_its_own_shape():
    from areal_core.plan.measure import median_step

    steps = [{"proximal_s": p, "update_s": u, "positions": n} for p, u, n in
             [(0.03, 0.09, 1758), (0.04, 0.12, 1828), (0.04, 0.13, 1800), (0.03, 0.10, 1870), (0.05, 0.10, 1700)]]
    # totals 0.12, 0.16, 0.17, 0.13, 0.15: the median, with its positions
    assert median_step(steps) == steps[4]
    assert median_step(steps[:2]) == steps[0]   # of two, the faster (the lower median)
    assert median_step(steps[2:3]) == steps[2]


def test_the_profile_trains_the_groups_nearest_the_length_of_what_the_run_trained():
    from types import SimpleNamespace

    from areal_core.plan.measure import nearest_groups, trained_share
    from areal_core.plan.workload import Histogram, TrainedLengths
    from areal_core.rl.rollout import Group
    from areal_core.types import RewardResult, Trajectory

    def group(number: int, prompt: int, response: int) -> Group:   # two answers, scored apart
        return Group(f"g{number}", str(number), [Trajectory(
            trajectory_id=f"g{number}.{i}", task="t", sample_id=str(number), group_id=f"g{number}",
            prompt_token_ids=[1] * prompt, output_token_ids=[3] * response, output_logprobs=[-1.0] * response,
            output_versions=[0] * response, response="", finish_reason="stop", reward=RewardResult(score=float(i)))
            for i in range(2)])

    # sequences of 20, 10, 30, 12, 8 tokens: the batch's mean is 16
    groups = [group(0, 12, 8), group(1, 6, 4), group(2, 20, 10), group(3, 6, 6), group(4, 4, 4)]
    names = lambda kept: [g.group_id for g in kept]   # noqa: E731
    # a run whose trained sequences ran 10 tokens: two groups nearest 10 a sequence
    assert names(nearest_groups(groups, 2, 10.0)) == ["g1", "g4"]            # 9, in the batch's order
    assert names(nearest_groups(groups, 3, 10.0)) == ["g1", "g3", "g4"]      # 10 exactly
    assert names(nearest_groups(groups, 2, 24.0)) == ["g0", "g2"]            # 25, the longest two
    assert names(nearest_groups(groups, 9, 16.0)) == ["g0", "g1", "g2", "g3", "g4"]   # no more than there are
    config = TrainConfig()
    six_four = TrainedLengths(Histogram.of([(6, 3)]), Histogram.of([(4, 3)]))   # 6 + 4 tokens a trained sequence
    share = SimpleNamespace(trained_share=0.4, trained_lengths=six_four)
    assert [t.group_id for t in trained_share(groups, config, share)][::2] == ["g1", "g4"]
    # a run that does not log its trained lengths: the first groups
    share = SimpleNamespace(trained_share=0.4, trained_lengths=None)
    assert [t.group_id for t in trained_share(groups, config, share)][::2] == ["g0", "g1"]


def test_areal_plan_profile_measures_this_machine_and_areal_plan_takes_the_profile(areal, tmp_path):
    # the batches through the rollout path on a planned run's lengths (a file of lengths, as areal plan takes it)
    (tmp_path / "lengths.json").write_text(json.dumps([3, 3, 3]))
    # for a run that streams its weights (engine.weight_sync=distributed), so the stream is measured too
    result = areal("plan", "profile", "--output", str(tmp_path / "cpu.yaml"), "--name", "this-cpu", "--repeats", "2",
                   "--lengths", str(tmp_path / "lengths.json"), "engine.weight_sync=distributed", timeout=600)
    assert result.returncode == 0, result.stderr
    assert "generation: a decode step" in result.stdout and f"profile: {tmp_path / 'cpu.yaml'}" in result.stdout
    profile = load_profile(tmp_path / "cpu.yaml")
    assert profile.name == "this-cpu"
    generation, training = profile.generation, profile.training
    assert generation.step_s + generation.sequence_s + generation.context_token_s > 0
    assert training.update_token_s > 0 and training.publish_s > 0 and profile.rewards.mean_s > 0
    assert set(profile.sources) >= {"generation.step_s", "training.update_token_s", "rewards.mean_s"}
    assert all(v.startswith("measured by areal plan profile on ") for v in profile.sources.values())
    timings = json.loads((tmp_path / "cpu.timings.json").read_text())
    # the grid reaches the run's concurrency (64 prompts x 8 samples: 256 running at once)
    assert max(s["requests"] for s in timings["samples"]) == 256 and all(s["seconds"] > 0 for s in timings["samples"])
    # per position the step computes and per micro-batch, fitted to batches of long and of short sequences and to
    # the run's own batch; the trainer packs a prompt's answers behind it (the embedded model attends with sdpa)
    assert len(timings["training_samples"]) == 5 and training.proximal_token_s > 0
    assert training.per_position and training.shared_prompts
    assert all(s["positions"] > 0 and s["microbatches"] >= TrainConfig().trainer.ppo_minibatches
               for s in timings["training_samples"])
    # the long-sequence batch runs more than one micro-batch a minibatch: a pass's cost apart from an optimizer step's
    assert max(s["microbatches"] for s in timings["training_samples"]) > TrainConfig().trainer.ppo_minibatches
    run_batch = run_sample(timings["shared"])
    phases = timings["shared"]["training_alone_phases_s"]
    assert len(phases) == 2   # one per --repeats, each timed alone, with its step's positions and passes
    middle = sorted(phases, key=lambda phase: phase[0] + phase[1])[0]   # the lower median of two: the faster
    assert (run_batch["tokens"], run_batch["sequences"]) == (timings["shared"]["training_tokens"],
                                                             timings["shared"]["training_sequences"])
    assert [run_batch[k] for k in ("proximal_s", "update_s", "positions", "microbatches")] == middle
    refit = fit_training([*timings["training_samples"], run_batch], TrainConfig(), shared_prompts=True)
    flags = ("per_position", "shared_prompts")
    assert {name: getattr(training, name) for name in flags} == {name: refit[name] for name in flags}
    costs = {name: value for name, value in refit.items() if name not in flags}
    assert {name: getattr(training, name) for name in costs} == pytest.approx(costs)
    # the rollout path (controller, workflow, rewards) timed against the engine alone with the same requests
    assert timings["requests"]["requests"] > 0 and generation.request_s >= 0
    assert all(c > 0 for c in timings["requests"]["controller_s"] + timings["requests"]["engine_alone_s"])
    # calibrated so that a simulated batch through the controller takes what the measured ones took (the median of
    # every batch timed alone through it, the sharing measurement's too)
    measured = statistics.median(timings["requests"]["controller_s"] + timings["shared"]["generation_alone_s"])
    modelled = timings["requests"]["engine_modelled_s"]
    assert modelled > 0 and (generation.request_s == 0 and modelled >= measured or generation.request_s
                             == pytest.approx((measured - modelled) / timings["requests"]["requests"]))
    # engine and trainer share this machine: each timed alone and beside the other
    shared = profile.shared
    assert shared is not None and shared.generation_slowdown >= 1 and shared.training_slowdown >= 1
    # decode steps and a request's work apart: the batch's requests on the engine alone, alone and beside training
    assert len(timings["shared"]["engine_alone_s"]) == len(timings["shared"]["engine_alongside_training_s"]) == 2
    assert shared.request_slowdown is not None and shared.request_slowdown >= 1
    # split so that a simulated batch beside training slows as the measured ones did (alone and beside in turn)
    slowed = max(1.0, statistics.median(timings["shared"]["generation_alongside_training_s"])
                 / statistics.median(timings["shared"]["generation_alone_s"]))
    if measured - modelled > measured / 6:   # the path's work beyond the engine is large enough to measure apart
        assert (modelled * shared.generation_slowdown + (measured - modelled) * shared.request_slowdown
                == pytest.approx(slowed * measured))
    else:
        assert shared.generation_slowdown == shared.request_slowdown == pytest.approx(slowed)
    assert {key for key in profile.sources if key.startswith("shared.")} == {
        "shared.generation_slowdown", "shared.request_slowdown", "shared.training_slowdown"}
    assert "a request's work on the rollout path" in result.stdout
    assert "shared hardware:" in result.stdout
    # every response of those batches as long as the lengths say (EOS ignored), trained on as the run trains
    assert timings["shared"]["response_tokens_mean"] == 3
    trained, group = timings["shared"]["training_sequences"], TrainConfig().rollout.group_size
    assert 0 < trained <= timings["requests"]["requests"] and trained % group == 0   # whole groups
    assert all("response lengths" in v for v in profile.sources.values())
    # each batch-level timing taken --repeats times
    assert len(timings["shared"]["generation_alongside_training_s"]) == len(timings["requests"]["controller_s"]) == 2
    # the stream through the run's own weight streamer: the whole model, every parameter trained (no LoRA)
    model_bytes = sum(tensor.nbytes for tensor in load_file(resolve_model(TrainConfig().model) / "model.safetensors")
                      .values())
    assert training.weight_bytes == training.trainable_bytes == model_bytes and generation.stream_byte_s > 0
    assert [u["weight_sync_bytes"] for u in timings["stream"]["updates"]] == [model_bytes] * 2
    assert generation.stream_byte_s == pytest.approx(min(u["weight_sync_seconds"] for u in timings["stream"]["updates"])
                                                     / model_bytes)
    predicted = areal("plan", "predict", str(tmp_path / "cpu.yaml"), "--gpus", "2", "--eta", "0,1",
                      "--output", str(tmp_path / "plan"), *RUN, "engine.weight_sync=distributed")
    assert predicted.returncode == 0, predicted.stderr
    assert len(json.loads((tmp_path / "plan" / "plan.json").read_text())["scenarios"]) == 3
