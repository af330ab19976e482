"""Checkpoint and resume: `kill -9` of a whole training run at a random moment, then `areal train --resume`."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from areal_core.eval.leaderboard import build_leaderboard
from areal_core.eval.store import ResultsStore
from tests.support import process_is_running

AREAL = str(Path(sys.executable).parent / "areal")
BATCH = 4


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = tmp_path_factory.mktemp("areal-cache")
    return {**os.environ, "AREAL_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}


def run_args(tmp_path, *overrides):
    return ["train", f"output_dir={tmp_path}", "name=resume", "eval_task=null", "warmup.enabled=false",
            "tensorboard=false", f"rollout.batch_size={BATCH}", "rollout.group_size=4", "trainer.ppo_minibatches=2",
            "engine.backend=server", "checkpoint_every=3", *overrides]


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def children_of(pid):
    """Every process whose session is `pid`'s (the run was started in its own session)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
    return [int(p) for p, s in (line.split() for line in out.splitlines()) if int(s) == pid and int(p) != pid]


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def assert_continuous(run_dir, steps):
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, steps + 1)), "a step repeated or missing"
    assert [m["version"] for m in metrics] == list(range(1, steps + 1))
    # batch k is prompts [k*B, (k+1)*B): none lost, none trained twice
    prompts = [p for m in metrics for p in m["prompts"]]
    assert sorted(prompts) == list(range(steps * BATCH))
    assert all(sorted(m["prompts"]) == list(range((m["step"] - 1) * BATCH, m["step"] * BATCH)) for m in metrics)
    clock = [m["elapsed_seconds"] for m in metrics]
    assert clock == sorted(clock), "the training clock must continue, not restart"
    return metrics


def kill_after_a_random_checkpoint(tmp_path, env, args, checkpoints, delay):
    """Start `areal train ARGS` in its own session, wait for one of `checkpoints` (picked at random), let it run
    up to `delay` seconds more (mid-step, mid-checkpoint, mid-publish), then SIGKILL the whole session.
    Returns (run_dir, target checkpoint, steps logged whole); every process of the run is gone."""
    run = subprocess.Popen([AREAL, *args], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        target = random.choice(checkpoints)
        wait_for(lambda: list(tmp_path.glob(f"resume-*/checkpoints/step{target:06d}")), 300, f"checkpoint {target}")
        run_dir = next(tmp_path.glob("resume-*"))
        time.sleep(random.uniform(0.0, delay))
        children = children_of(run.pid)
        assert children, "the run should have an engine server or trainer ranks, and reward workers"
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    wait_for(lambda: not any(process_is_running(p) for p in children), 10, "the run's processes to be gone")
    logged = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []
    return run_dir, target, sum(1 for line in logged if line.endswith("}"))  # the kill may cut a line short


def resume(run_dir, env):
    """`areal train --resume RUN_DIR` to the end; returns the step of the checkpoint it resumed from."""
    resumed = subprocess.run([AREAL, "train", "--resume", str(run_dir)], env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return int(resumed.stdout.split("resuming")[1].split("from step")[1].split()[0])


def test_kill_9_at_a_random_moment_then_resume_loses_and_repeats_nothing(tmp_path, env):
    # after the first, second or third checkpoint, so also with older ones kept
    run_dir, target, killed_at = kill_after_a_random_checkpoint(tmp_path, env, run_args(tmp_path, "steps=12"),
                                                                [3, 6, 9], delay=1.5)
    checkpoint = resume(run_dir, env)
    assert target <= checkpoint <= max(target, killed_at) and checkpoint % 3 == 0
    assert_continuous(run_dir, 12)
    # what the killed run logged after its checkpoint is redone, and kept aside rather than deleted
    superseded = run_dir / "metrics.jsonl.superseded"
    redone = [json.loads(line)["step"] for line in superseded.read_text().splitlines()
              if line.endswith("}")] if superseded.exists() else []
    assert redone == list(range(checkpoint + 1, killed_at + 1))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["trajectories"] == 12 * BATCH * 4


def test_a_damaged_checkpoint_is_detected_and_the_previous_one_is_used(tmp_path, env):
    db = tmp_path / "results.db"
    evals = ["eval_task=arithmetic-test", "eval.every=3", "eval.limit=8", "eval.sampled=false", f"eval.db={db}"]
    first = subprocess.run([AREAL, *run_args(tmp_path, "steps=6", "keep_policy_every=3", *evals)], env=env,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = next(tmp_path.glob("resume-*"))
    # the kept policies: whole model directories, nothing half-copied beside them
    assert sorted(p.name for p in (run_dir / "policies").iterdir()) == ["step000003", "step000006"]
    assert all((run_dir / "policies" / name / "model.safetensors").stat().st_size > 0
               and (run_dir / "policies" / name / "config.json").exists() for name in ["step000003", "step000006"])
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["step000003", "step000006"]
    weights = run_dir / "checkpoints" / "step000006" / "trainer" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    weights.write_bytes(bytes(data))
    # and a directory a kill left half-written: never taken for a checkpoint
    (run_dir / "checkpoints" / ".step000009.tmp-x").mkdir()

    saved_config = (run_dir / "config.yaml").read_text()
    refused = subprocess.run([AREAL, "train", "--resume", str(run_dir), "rollout.batch_size=8"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert "rollout.batch_size=8 (the run has 4)" in refused.stderr and "cannot change on resume" in refused.stderr
    assert (run_dir / "config.yaml").read_text() == saved_config

    resumed = subprocess.run([AREAL, "train", "--resume", str(run_dir), "steps=8"], env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "skipping damaged checkpoint step000006" in resumed.stdout
    assert "from step000003" in resumed.stdout
    assert_continuous(run_dir, 8)
    # step 6 was evaluated again with the weights trained anew: the leaderboard shows that eval, once
    assert [e["step"] for e in read_jsonl(run_dir / "evals.jsonl")] == [0, 3, 6, 8]
    assert [json.loads(line)["step"] for line in (run_dir / "evals.jsonl.superseded").read_text().splitlines()] == [6]
    assert "1 eval record(s) of steps after 3 marked superseded" in resumed.stdout
    with ResultsStore(db) as store:
        recorded = [store.run(run_id) for run_id in range(1, 6)]  # the five evals, in the order they ran
        board = build_leaderboard(store)
    runs = {(run.step, run.status): run for run in recorded}
    assert [(run.step, run.status) for run in recorded] == [(0, "finished"), (3, "finished"), (6, "superseded"),
                                                            (6, "finished"), (8, "finished")]
    assert runs[(6, "finished")].id > runs[(6, "superseded")].id
    assert sorted(s.model for s in board.standings) == [f"{run_dir.name}@step{n}" for n in (0, 3, 6, 8)]
    assert next(s for s in board.standings if s.model.endswith("@step6")).runs["arithmetic-test"].id == \
        runs[(6, "finished")].id


def test_resume_of_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path, areal):
    result = areal("train", "--resume", str(tmp_path))
    assert result.returncode == 2 and "not a run directory (no config.yaml in it)" in result.stderr


def test_fsdp_training_run_checkpoints_and_resumes_through_areal_train(tmp_path, env):
    args = run_args(tmp_path, "steps=2", "trainer.backend=fsdp", "trainer.fsdp_processes=2", "engine.backend=local",
                    "checkpoint_every=1")
    first = subprocess.run([AREAL, *args], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = next(tmp_path.glob("resume-*"))
    assert "FSDP trainer start" in (run_dir / "trainer" / "workers.log").read_text()  # torchrun ran in the run dir
    resumed = subprocess.run([AREAL, "train", "--resume", str(run_dir), "steps=3"], env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step000002" in resumed.stdout
    assert_continuous(run_dir, 3)


def test_kill_9_of_an_fsdp_run_then_resume_loses_and_repeats_nothing(tmp_path, env):
    """The same with the FSDP2 trainer: torchrun and its two ranks die with the run, and the resumed run
    starts new ones from the checkpoint."""
    args = run_args(tmp_path, "steps=6", "trainer.backend=fsdp", "trainer.fsdp_processes=2", "engine.backend=local",
                    "checkpoint_every=2")
    run_dir, target, _ = kill_after_a_random_checkpoint(tmp_path, env, args, [2, 4], delay=1.0)
    checkpoint = resume(run_dir, env)
    assert checkpoint >= target and checkpoint % 2 == 0
    assert_continuous(run_dir, 6)


def test_kill_9_of_a_tool_using_run_then_resume_loses_and_repeats_nothing(tmp_path, env):
    """Episodes of the tool_calls workflow (the calculator task) in flight or finished but not trained on when
    the run dies: after --resume every prompt is trained on exactly once, and every step still reports its
    tool-call rate (finished episodes come back from the checkpoint whole, unfinished ones are redone)."""
    args = run_args(tmp_path, "steps=9", "task=calculator", "rollout.max_new_tokens=24", "rollout.max_staleness=2")
    run_dir, target, killed_at = kill_after_a_random_checkpoint(tmp_path, env, args, [3, 6], delay=1.5)
    checkpoint = resume(run_dir, env)
    assert target <= checkpoint <= max(target, killed_at)
    metrics = assert_continuous(run_dir, 9)
    assert all({"tool_call_rate", "tool_calls_mean", "policy_token_fraction"} <= set(m) for m in metrics)


def test_kill_9_of_a_lora_run_then_resume_keeps_training_the_same_adapters(tmp_path, env):
    """trainer.lora through a whole run: killed after a checkpoint, resumed, every prompt trained on once; each
    checkpoint holds the unchanged base model and the adapters, which go on training after the resume; and
    checkpoints.jsonl records each checkpoint's seconds and bytes."""
    from safetensors.torch import load_file

    # an untrained model scores 0 everywhere: the entropy bonus gives every step a gradient, so the adapters move
    # (12 steps: a step takes ~0.3 s, so the run, killed within half a second of checkpoint 2 or 4, is far from done)
    args = run_args(tmp_path, "steps=12", "checkpoint_every=2", "keep_checkpoints=6", "trainer.entropy_coef=0.01",
                    "rollout.skip_uniform_groups=false",
                    "trainer.lora={rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}")
    run_dir, target, _ = kill_after_a_random_checkpoint(tmp_path, env, args, [2, 4], delay=0.5)
    checkpoint = resume(run_dir, env)
    assert target <= checkpoint < 12, "the kill came too late to leave steps for the resumed run"
    assert_continuous(run_dir, 12)
    before = run_dir / "checkpoints" / f"step{checkpoint:06d}" / "trainer"
    after = run_dir / "checkpoints" / "step000012" / "trainer"
    assert (before / "model.safetensors").read_bytes() == (after / "model.safetensors").read_bytes()
    old, new = load_file(before / "adapters.safetensors"), load_file(after / "adapters.safetensors")
    assert set(old) == set(new) and any(".lora_B." in name for name in new)
    assert any(not torch.equal(old[name], new[name]) for name in new)
    records = read_jsonl(run_dir / "checkpoints.jsonl")
    steps = [r["step"] for r in records]   # none twice; the kill may fall between a checkpoint and its record
    every = set(range(2, 13, 2))
    assert steps == sorted(set(steps)) and {s for s in every if s > checkpoint} <= set(steps) <= every
    assert all(r["seconds"] > 0 and r["bytes"] > 0 for r in records)
    assert records[-1]["path"] == "checkpoints/step000012"
