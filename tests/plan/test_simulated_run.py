"""A training run on a simulated cluster (plan/simulate.py): the production step loop, rollout controller, staleness
gate and weight-update sequence decide; simulated engines, trainer and reward workers take the time their cost
models give. These tests hold the simulation to the controller's rules: change the controller and they see it."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest

from areal_core.engine.model import build_char_tokenizer
from areal_core.errors import ConfigError
from areal_core.plan.engine import GenerationCosts
from areal_core.plan.simulate import ClusterCosts, simulate
from areal_core.plan.trainer import RewardCosts, TrainingCosts, trained_like
from areal_core.plan.workload import Histogram, TrainedLengths
from areal_core.rl.config import SYNC_OVERRIDES
from areal_core.types import RewardResult, Trajectory

COSTS = ClusterCosts(GenerationCosts(step_s=0.02, sequence_s=0.001, prefill_token_s=1e-4, weight_load_s=0.5),
                     TrainingCosts(proximal_token_s=1e-4, update_token_s=3e-4, publish_s=0.2),
                     RewardCosts(mean_s=0.05, p99_s=0.5), servers=2)
RUN = ["task=arithmetic", "steps=8", "rollout.batch_size=8", "rollout.group_size=4", "warmup.enabled=false",
       "eval_task=null", "rollout.skip_uniform_groups=false"]


def run(tmp_path, name: str, *overrides: str, costs: ClusterCosts = COSTS):
    summary = simulate([*RUN, f"output_dir={tmp_path}", *overrides], costs, build_char_tokenizer(), tmp_path / name)
    metrics = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return summary, metrics


def test_a_simulated_run_takes_every_prompt_once_in_order_within_the_staleness_bound_in_virtual_seconds(tmp_path):
    started = time.perf_counter()
    summary, metrics = run(tmp_path, "async", "rollout.max_staleness=2")
    assert time.perf_counter() - started < 300
    assert [m["step"] for m in metrics] == list(range(1, 9)) and summary["trajectories"] == 8 * 8 * 4
    assert [m["prompts"] for m in metrics] == [list(range(8 * k, 8 * k + 8)) for k in range(8)]
    assert all(m["staleness_max"] <= 2 for m in metrics) and max(m["staleness_max"] for m in metrics) == 2
    assert [m["version"] for m in metrics] == list(range(1, 9))
    # the clock is the cost model's: the first step waits for 4 prompts' groups on 2 servers, at least 16 decode steps
    assert metrics[0]["wait_seconds"] >= 16 * 0.02 and summary["rl_seconds"] == pytest.approx(metrics[-1]["elapsed_seconds"])
    servers = summary["engine_servers"]
    assert len(servers) == 2 and all(s["tokens"] > 0 for s in servers)
    assert sum(s["tokens"] for s in servers) >= 8 * 8 * 4 * 16   # whatever was generated past the last batch too


def test_the_synchronous_baseline_waits_for_every_batch_and_asynchrony_beats_it(tmp_path):
    sync, sync_metrics = run(tmp_path, "sync", *SYNC_OVERRIDES)
    asynchronous, _ = run(tmp_path, "async", "rollout.max_staleness=2")
    assert all(m["staleness_max"] == 0 for m in sync_metrics)
    assert all(m["update_hold_seconds"] >= 0.5 for m in sync_metrics)   # each load of the new weights
    assert asynchronous["trajectories_per_second"] > 1.2 * sync["trajectories_per_second"]


def test_interrupting_for_a_weight_update_holds_generation_for_the_load_alone_and_waiting_for_what_is_in_flight(
        tmp_path):
    lengths = ["rollout.max_new_tokens=64", "rollout.max_staleness=1"]
    interrupted, interrupted_metrics = run(tmp_path, "interrupt", *lengths)
    waited, waited_metrics = run(tmp_path, "wait", *lengths, "rollout.weight_update=wait")
    assert sum(s["interruptions"] for s in interrupted["engine_servers"]) > 0
    assert sum(s["interruptions"] for s in waited["engine_servers"]) == 0
    assert sum(s["retractions"] for s in interrupted["engine_servers"]) == 0   # the KV cache was never full
    # interrupt: the step in progress ends (< 0.1 s here), then the 0.5 s load; wait: every request in flight ends
    assert all(0.5 <= m["update_hold_seconds"] < 0.6 for m in interrupted_metrics)
    assert max(m["update_hold_seconds"] for m in waited_metrics) > 1.0


def test_a_config_the_simulation_cannot_honour_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="engine.urls must be empty"):
        run(tmp_path, "urls", "engine.urls=[http://localhost:1]")
    with pytest.raises(ConfigError, match="engine.weight_sync=distributed: the profile has no cost of streaming"):
        run(tmp_path, "distributed", "engine.weight_sync=distributed")   # COSTS say nothing of a stream
    frozen = ClusterCosts(dataclasses.replace(COSTS.generation, stream_byte_s=1e-9),
                          dataclasses.replace(COSTS.training, weight_bytes=1 << 20, trainable_bytes=0))
    with pytest.raises(ConfigError, match="training.trainable_bytes is 0"):
        run(tmp_path, "delta", "engine.weight_sync=delta", costs=frozen)
    with pytest.raises(ConfigError, match="workflow 'tool_calls' calls tools: a simulated run needs a tool model"):
        run(tmp_path, "tools", "rollout.workflow=tool_calls")


def test_streamed_weights_go_through_the_runs_weight_streamer_in_buckets_and_a_delta_sends_the_trainable_bytes(
        tmp_path):
    """engine.weight_sync = distributed | delta: the production WeightStreamer stages the simulated trainer's bytes
    in buckets of engine.weight_bucket_mb and the simulated servers receive them while generation is held."""
    streamed = ClusterCosts(dataclasses.replace(COSTS.generation, stream_byte_s=1e-9),
                            dataclasses.replace(COSTS.training, weight_bytes=600 << 20, trainable_bytes=20 << 20),
                            COSTS.rewards, servers=2)
    disk, disk_metrics = run(tmp_path, "disk", "steps=4", costs=streamed)
    full, full_metrics = run(tmp_path, "distributed", "steps=4", "engine.weight_sync=distributed",
                             "engine.weight_bucket_mb=256", costs=streamed)
    delta, delta_metrics = run(tmp_path, "delta", "steps=4", "engine.weight_sync=delta", costs=streamed)
    assert all("weight_sync_bytes" not in m for m in disk_metrics)
    assert all(m["update_hold_seconds"] >= 0.5 for m in disk_metrics)   # weight_load_s, from a disk
    # every update: the whole weights in three buckets (256 + 256 + 88 MiB), 0.63 s at 1 ns a byte
    assert [(m["weight_sync_bytes"], m["weight_sync_buckets"]) for m in full_metrics] == [(600 << 20, 3)] * 4
    assert all(0.629 <= m["update_hold_seconds"] < 0.7 for m in full_metrics)
    # the servers moved to each version: the tokens' versions stay within the run's bound (max_staleness 1)
    assert all(m["staleness_max"] <= 1 for m in full_metrics + delta_metrics)
    # a delta: the whole weights once, then what the optimizer changes
    assert [m["weight_sync_bytes"] for m in delta_metrics] == [600 << 20] + [20 << 20] * 3
    assert all(m["update_hold_seconds"] < 0.1 for m in delta_metrics[1:])
    assert delta["trajectories_per_second"] > full["trajectories_per_second"]


class EightTokens:
    """Every response 8 tokens; a run's trained sequences of `trained_lengths`."""

    def __init__(self, trained_lengths: TrainedLengths | None) -> None:
        self.trained_lengths = trained_lengths

    def __call__(self, rid: str, prompt_tokens: int, max_new_tokens: int) -> int:
        return 8


def test_the_simulated_trainer_trains_sequences_of_a_runs_trained_lengths(tmp_path):
    def phases(name: str, trained: TrainedLengths | None, *overrides: str) -> list[tuple[float, int, int, int]]:
        summary = simulate([*RUN, f"output_dir={tmp_path}", "steps=3", "rollout.skip_uniform_groups=true",
                            *SYNC_OVERRIDES, *overrides], COSTS, build_char_tokenizer(), tmp_path / name,
                           lengths=EightTokens(trained))
        assert summary["steps"] == 3
        metrics = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [(m["proximal_seconds"], m["trained_tokens"], m["batch_tokens"], m["trained_sequences"])
                for m in metrics]

    three_two = TrainedLengths(Histogram.of([(3, 5)]), Histogram.of([(2, 5)]))   # 3-token prompts, 2-token answers
    plain, short = phases("plain", None), phases("short", three_two)
    # the step loop logs what it trained and the whole batch, prompts and responses; uniform groups were skipped
    assert all(0 < trained < batch and sequences < 8 * 4 for _, trained, batch, sequences in plain)
    assert [p[1:] for p in short] == [p[1:] for p in plain]   # the same groups, drawn by request id
    # pi_prox costs 1e-4 s a token (and nothing a sequence): charged on the tokens, then on 5 a sequence
    assert [p[0] for p in plain] == pytest.approx([1e-4 * trained for _, trained, _, _ in plain])
    assert [p[0] for p in short] == pytest.approx([1e-4 * 5 * sequences for _, _, _, sequences in plain])
    # a KL term trains the uniform groups too: all of the batch, as drawn, so the run's trained lengths do not apply
    with_kl = phases("kl", three_two, "trainer.kl_coef=0.1")
    assert all(trained == batch and seconds == pytest.approx(1e-4 * trained) for seconds, trained, batch, _ in with_kl)


def test_trained_sequences_take_the_runs_lengths_in_the_order_of_their_own():
    """Groups by prompt length take the run's prompt lengths at their quantiles, sequences by response length its
    response lengths; a group keeps one prompt of its own (packing behind a shared prompt sees one per group)."""
    def trajectory(group: str, index: int, prompt: int, response: int) -> Trajectory:
        return Trajectory(trajectory_id=f"{group}.{index}", task="t", sample_id=group, group_id=group,
                          prompt_token_ids=[7] * prompt, output_token_ids=[9] * response,
                          output_logprobs=[0.0] * response, output_versions=[0] * response, response="",
                          finish_reason="stop", reward=RewardResult(score=0.0))

    batch = [trajectory("a", 0, 10, 3), trajectory("a", 1, 10, 9), trajectory("b", 0, 5, 1), trajectory("b", 1, 5, 20)]
    run = TrainedLengths(Histogram.of([(4, 1), (8, 1)]), Histogram.of([(2, 1), (3, 1), (5, 1), (7, 1)]))
    shaped = trained_like(batch, run)
    # b's prompt is shorter: the run's prompt at quantile 1/4 (4), a's at 3/4 (8); responses 1, 3, 9, 20 by rank
    # take 2, 3, 5, 7
    assert [(len(s.prompt_token_ids), len(s.output_token_ids)) for s in shaped] == [(8, 3), (8, 5), (4, 2), (4, 7)]
    assert shaped[0].prompt_token_ids == shaped[1].prompt_token_ids and shaped[2].prompt_token_ids == shaped[3].prompt_token_ids
    assert shaped[0].prompt_token_ids[0] != shaped[2].prompt_token_ids[0]   # two groups, two prompts


def test_each_trainer_rank_runs_its_share_of_the_passes_in_a_simulated_run(tmp_path):
    """A pass (a micro-batch's forward and backward) costs 1 s here and nothing else does: one sequence a micro-batch,
    one minibatch, so a step's update takes as many seconds as the passes one rank runs."""
    training = TrainingCosts(proximal_token_s=0.0, update_token_s=0.0, update_microbatch_s=1.0)
    passes = {}
    for ranks in (1, 4):
        costs = dataclasses.replace(COSTS, training=training, trainer_ranks=ranks)
        _, metrics = run(tmp_path, f"ranks{ranks}", "steps=2", "trainer.microbatching=fixed",
                         "trainer.micro_batch_size=1", "trainer.ppo_minibatches=1", costs=costs)
        assert all(m["trained_sequences"] == 8 * 4 for m in metrics)
        passes[ranks] = [m["update_seconds"] for m in metrics]
    assert passes == {1: [pytest.approx(32.0)] * 2, 4: [pytest.approx(8.0)] * 2}
