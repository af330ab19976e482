"""Evals made during training go to the same results store as `areal eval`, are listed by the leaderboard,
reach `on_eval_result` plugins, and are recognised by `areal eval` of the same weights and settings."""
from __future__ import annotations

import asyncio
import json

from areal_core import hookimpl
from areal_core.engine.local import LocalEngine
from areal_core.eval.leaderboard import build_leaderboard
from areal_core.eval.records import EvalSettings
from areal_core.eval.runner import evaluate_task, record_eval
from areal_core.eval.store import ResultsStore
from areal_core.plugins import get_plugin_manager, reset_plugin_manager
from areal_core.rewards import RewardService, RewardServiceConfig
from areal_core.tasks import get_task


class EvalListener:
    """A plugin that keeps what `on_eval_result` tells it."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    @hookimpl
    def on_eval_result(self, model, task, metrics, details_path):
        self.seen.append({"model": model, "task": task, "metrics": metrics, "details_path": details_path})


def test_a_training_eval_is_recorded_listed_and_recognised_by_areal_eval(tiny_model, tmp_path, areal):
    task = get_task("arithmetic-test")
    settings = EvalSettings(n=2, k=(1, 2), temperature=1.0, top_p=1.0, max_new_tokens=8, limit=30, seed=5)
    listener = EvalListener()
    get_plugin_manager().register(listener, "eval-listener")
    try:
        async def run():
            async with LocalEngine(tiny_model, max_running_requests=16) as engine, \
                    RewardService(RewardServiceConfig(workers=1)) as rewards:
                return await evaluate_task(engine, task, engine.tokenizer, rewards, settings)

        result = asyncio.run(run())
        db = tmp_path / "evals.sqlite"
        run_id = record_eval(db, "demo-run@step40", task, result, model_path=tiny_model, step=40, run_dir=tmp_path / "run")
    finally:
        reset_plugin_manager()

    assert result.metrics["samples"] == 60
    details = tmp_path / "run" / "evals" / "arithmetic-test-sampled-step40.samples.jsonl"
    assert [json.loads(line)["response"] for line in details.read_text().splitlines()] == [s.response for s in result.samples]
    assert listener.seen == [{"model": "demo-run@step40", "task": "arithmetic-test", "metrics": result.metrics,
                              "details_path": str(details)}]
    with ResultsStore(db) as store:
        run = store.run(run_id)
        assert (run.source, run.step, run.finished, run.model) == ("train", 40, True, "demo-run@step40")
        assert len(store.samples(run_id)) == 60
        board = build_leaderboard(store)
        assert [s.model for s in board.standings] == ["demo-run@step40"]

    again = areal("eval", "--model", str(tiny_model), "--tasks", "arithmetic-test", "--n", "2", "--k", "1,2",
                  "--temperature", "1", "--top-p", "1", "--max-new-tokens", "8", "--limit", "30", "--seed", "5",
                  "--db", str(db), "--output-dir", str(tmp_path / "evals"), "--name", "tiny")
    assert again.returncode == 0, again.stderr
    assert f"identical eval already in the store as run #{run_id}" in again.stdout
    reported = json.loads((tmp_path / "evals" / "tiny" / "arithmetic-test.metrics.json").read_text())
    assert reported["metrics"] == result.metrics


def test_areal_train_writes_its_periodic_evals_to_the_store_the_leaderboard_reads(tmp_path, areal):
    db = tmp_path / "evals.sqlite"
    env = {"AREAL_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    trained = areal("train", f"output_dir={tmp_path / 'runs'}", "name=evaldemo", "steps=2", "eval.every=1",
                    "eval.limit=20", f"eval.db={db}", "warmup.enabled=false", "rollout.batch_size=4",
                    "rollout.group_size=4", "tensorboard=false", env=env)
    assert trained.returncode == 0, trained.stderr[-2000:]
    run_dir = next((tmp_path / "runs").glob("evaldemo-*"))
    evals = [json.loads(line) for line in (run_dir / "evals.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1, 2]
    with ResultsStore(db) as store:
        runs = [r for r in store.finished_runs(["arithmetic-test"]) if r.source == "train"]
    assert sorted(r.step for r in runs) == [0, 0, 1, 1, 2, 2]  # greedy and sampled at each eval
    board = areal("leaderboard", "--db", str(db), "--format", "json", "--decoding", "greedy")
    assert board.returncode == 0, board.stderr
    listed = board.stdout
    for step in (0, 1, 2):
        assert f"{run_dir.name}@step{step}" in listed
        assert (run_dir / "evals" / f"arithmetic-test-greedy-step{step}.samples.jsonl").exists()
