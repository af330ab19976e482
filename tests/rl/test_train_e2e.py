"""`areal train` end to end: real engine process, real reward service, reward must rise."""
import asyncio
import json

import pytest

from areal_core.config import load_config
from areal_core.rl.config import SYNC_OVERRIDES, TrainConfig
from areal_core.rl.run import run_training


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One warm-up for the module: the embedded model and its supervised warm-up are cached here."""
    return tmp_path_factory.mktemp("areal-cache")


def config(tmp_path, *overrides):
    return load_config(TrainConfig, None, [
        f"output_dir={tmp_path}", "eval.limit=500", "rollout.batch_size=32", "rollout.group_size=16",
        "trainer.ppo_minibatches=8",
        "rollout.max_staleness=1", "tensorboard=false", *overrides])


def test_async_training_with_an_engine_process_runs_every_step_within_its_staleness(tmp_path, cache_dir, monkeypatch):
    """A whole asynchronous run through an engine process: every step trained and logged, every version published,
    no data staler than the bound, held-out evals before and after, the run's outputs. Whether reward rises is a
    training outcome, shown by the demo and bench/ (the direction of each update is tested in
    test_trainer_offpolicy.py); the test used to wait 60 steps for it."""
    monkeypatch.setenv("AREAL_CACHE_DIR", str(cache_dir))
    summary = asyncio.run(run_training(config(tmp_path, "steps=12", "engine.backend=server", "eval.limit=100"),
                                       echo=lambda *a: None))
    run_dir = tmp_path / summary["run_dir"].split("/")[-1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 12
    assert sum(m["trained_sequences"] for m in metrics) > 0 and all(m["responses"] > 0 for m in metrics)
    assert 0 <= summary["before"]["greedy_accuracy"] <= 1 and 0 <= summary["after"]["greedy_accuracy"] <= 1
    # the run's outputs
    assert (run_dir / "config.yaml").exists() and (run_dir / "reward_curve.png").stat().st_size > 1000
    assert max(m["staleness_max"] for m in metrics) <= 1 and any(m["staleness_max"] == 1 for m in metrics)
    assert {m["version"] for m in metrics} == set(range(1, 13))


def test_sync_mode_is_max_staleness_zero_and_trains_on_fresh_data_only(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("AREAL_CACHE_DIR", str(cache_dir))
    sync = config(tmp_path, *SYNC_OVERRIDES, "steps=4", "engine.backend=local", "eval.limit=50")
    assert sync.rollout.max_staleness == 0 and sync.rollout.weight_update == "wait"
    summary = asyncio.run(run_training(sync, echo=lambda *a: None))
    run_dir = tmp_path / summary["run_dir"].split("/")[-1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["staleness_hist"] for m in metrics] == [{"0": 512}] * 4


def test_train_cli_rejects_an_unknown_key_and_prints_the_config(areal):
    bad = areal("train", "trainer.lrr=1")
    assert bad.returncode == 2 and "trainer.lrr: unknown key" in bad.stderr
    shown = areal("train", "--sync", "--print-config", "rollout.batch_size=8")
    assert shown.returncode == 0
    assert "max_staleness: 0" in shown.stdout and "weight_update: wait" in shown.stdout
    assert "batch_size: 8" in shown.stdout


def test_two_engine_servers_share_the_rollouts_and_both_follow_weight_updates(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("AREAL_CACHE_DIR", str(cache_dir))
    run = config(tmp_path, "steps=3", "engine.backend=server", "engine.servers=2", "eval_task=null",
                 "rollout.batch_size=8", "rollout.group_size=8")
    summary = asyncio.run(run_training(run, echo=lambda *a: None))
    servers = summary["engine_servers"]
    assert len(servers) == 2 and all(s["state"] == "up" and s["failures"] == 0 for s in servers)
    served = [s["segments"] for s in servers]
    assert min(served) >= 0.25 * sum(served), f"load is not balanced: {served}"
    run_dir = tmp_path / summary["run_dir"].split("/")[-1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(m["staleness_max"] for m in metrics) <= 1  # both servers moved to every new version


def test_training_with_an_async_latency_bound_reward_loses_nothing_and_counts_timeouts(tmp_path, cache_dir, monkeypatch):
    """The demo task graded by `arithmetic_latency` (an async reward: a wait, then exact match): every answer
    is scored and trained on; with waits past the reward timeout every answer is dropped as timed out and
    the run stops saying so, rather than training on nothing."""
    monkeypatch.setenv("AREAL_CACHE_DIR", str(cache_dir))
    fine = config(tmp_path / "fine", "task=arithmetic-latency", "eval_task=null", "steps=3", "engine.backend=local",
                  "reward_options.median_s=0.05")
    summary = asyncio.run(run_training(fine, echo=lambda *a: None))
    run_dir = tmp_path / "fine" / summary["run_dir"].split("/")[-1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3] and all(m["dropped_responses"] == 0 for m in metrics)
    slow = config(tmp_path / "slow", "task=arithmetic-latency", "eval_task=null", "steps=3", "engine.backend=local",
                  "rollout.batch_size=4", "reward_options.median_s=5", "reward_options.sigma=0",
                  "reward_options.cap_s=5", "reward.timeout=0.5")
    with pytest.raises(Exception) as failure:
        asyncio.run(run_training(slow, echo=lambda *a: None))
    assert "timed out after 0.5s" in str(failure.value)


def test_a_low_precision_engine_shows_its_mismatch_in_every_output_of_the_run(tmp_path, cache_dir, monkeypatch):
    """A float8 engine against the float32 trainer: the gap is measured every step (the trainer's version against
    pi_prox, older tokens against the kept previous weights) and shows in metrics.jsonl, TensorBoard (with the
    staleness histogram as scalars), the plot's lower panel, summary.json and a warning past mismatch_warn_kl."""
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("AREAL_CACHE_DIR", str(cache_dir))
    said = []
    run = config(tmp_path, "steps=4", "engine.dtype=float8", "tensorboard=true", "eval.limit=50",
                 "trainer.mismatch_warn_kl=1e-6", "checkpoint_every=0")
    summary = asyncio.run(run_training(run, echo=said.append))
    run_dir = tmp_path / summary["run_dir"].split("/")[-1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(m["mismatch_tokens"] > 0 and m["mismatch_kl"] > 1e-5 for m in metrics)  # float32 engines: ~1e-9
    assert all(m["mismatch_abs_max"] >= m["mismatch_abs_mean"] > 0 for m in metrics)
    assert summary["mismatch"]["kl_mean"] == pytest.approx(sum(m["mismatch_kl"] for m in metrics) / 4)
    warnings = [s for s in said if s.startswith("warning: step") and "mismatch KL" in s]
    assert len(warnings) == 1 and "trainer.correction=mask" in warnings[0]  # then at most every 50 steps
    assert any(s.startswith("engine/trainer mismatch: KL") for s in said)
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"mismatch_kl", "mismatch_abs_mean", "behav_capped_fraction"} <= set(tags)
    assert any(tag.startswith("staleness_hist/") for tag in tags)
    assert Image.open(run_dir / "reward_curve.png").size[1] > 600  # two panels (one is 440 px high)
