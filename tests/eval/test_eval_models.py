"""`areal eval` of real models: a model directory gives the accuracy `areal train` reported for the same
weights; an eval killed midway resumes and ends equal to an uninterrupted one; a server reached through
sglang:// gives the samples of the same model run in-process, and is recognised as the same model."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from areal_core.config import load_config
from areal_core.engine.launch import ServerProcess
from areal_core.eval.runner import run_evals
from areal_core.eval.sources import parse_model
from areal_core.eval.store import ResultsStore
from areal_core.rewards import RewardServiceConfig
from areal_core.rl.config import TrainConfig
from areal_core.rl.run import run_training
from areal_core.tasks import get_task

from eval_support import read_details, read_metrics

AREAL = str(Path(sys.executable).parent / "areal")


def eval_in_process(model: Path | str, db: Path, out: Path, **requested) -> list:
    """The evaluator behind `areal eval`, in this process (saves a process start where the CLI is not the point)."""
    settings = {"n": None, "k": None, "temperature": None, "top_p": None, "top_k": None, "max_new_tokens": None,
                "limit": None, "seed": 0, **requested}

    async def run():
        with ResultsStore(db) as store:
            return await run_evals(parse_model(str(model)), [get_task("arithmetic-test")], store, requested=settings,
                                   reward_service=RewardServiceConfig(workers=1), output_dir=out, echo=lambda _: None)

    return asyncio.run(run())


def test_eval_of_the_trained_model_reports_the_samples_and_accuracy_areal_train_reported(areal, tmp_path, monkeypatch):
    """`areal train` measures held-out accuracy (greedy, and sampled at T=1) on the model it starts from;
    `areal eval` of that model directory with the same settings and seed draws the very same responses, and
    so reports the same numbers. The property is the samples, whatever this machine's warm-up reached: 200
    responses equal one by one, the sampled ones diverse (a model that says one thing would prove nothing)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("AREAL_CACHE_DIR", str(cache))
    config = load_config(TrainConfig, None, [
        f"output_dir={tmp_path / 'runs'}", "steps=1", "warmup.steps=300", "warmup.stop_at_accuracy=null",
        "eval.limit=200", "rollout.batch_size=4", "rollout.group_size=4", "tensorboard=false"])
    summary = asyncio.run(run_training(config, echo=lambda *a: None))
    before, run_dir = summary["before"], Path(summary["run_dir"])
    [warm_model] = (cache / "warmup").iterdir()  # the model RL started from: evaluated at step 0

    def trained(decoding: str) -> list[str]:
        lines = (run_dir / "evals" / f"arithmetic-test-{decoding}-step0.samples.jsonl").read_text().splitlines()
        return [json.loads(line)["response"] for line in lines]

    common = ["--tasks", "arithmetic-test", "--limit", "200", "--n", "1", "--max-new-tokens", "16", "--seed", "0"]
    out = tmp_path / "evals"
    greedy = areal("eval", "--model", str(warm_model), *common, "--temperature", "0", "--output-dir", str(out),
                   "--name", "warm", "--db", str(tmp_path / "evals.sqlite"))
    assert greedy.returncode == 0, greedy.stderr
    assert [d["response"] for d in read_details(out, "warm", "arithmetic-test")] == trained("greedy")
    greedy_metrics = read_metrics(out, "warm", "arithmetic-test")["metrics"]
    assert greedy_metrics["accuracy"] == greedy_metrics["greedy_accuracy"] == before["greedy_accuracy"]
    [sampled] = eval_in_process(warm_model, tmp_path / "evals.sqlite", out, n=1, limit=200, temperature=1.0,
                                max_new_tokens=16, seed=0)
    assert [s.response for s in sampled.samples] == trained("sampled")
    assert len(set(trained("sampled"))) > 100
    assert sampled.metrics["accuracy"] == before["sampled_accuracy"]


def test_top_k_one_at_temperature_one_draws_the_greedy_responses_and_is_another_eval(tiny_model, tmp_path):
    """--top-k reaches the engine: sampling at T=1 from the single likeliest token is greedy decoding, response by
    response, while T=1 without it draws other responses. It is part of what makes an eval: the top-k eval is
    stored beside the untruncated one, not reported from it; without it the identity is the one stored before
    top_k existed (so earlier results still match)."""
    db, out = tmp_path / "evals.sqlite", tmp_path / "evals"
    common = {"n": 1, "limit": 40, "max_new_tokens": 12, "seed": 3}
    [greedy] = eval_in_process(tiny_model, db, out, temperature=0.0, **common)
    [sampled] = eval_in_process(tiny_model, db, out, temperature=1.0, **common)
    [top_one] = eval_in_process(tiny_model, db, out, temperature=1.0, top_k=1, **common)
    assert [s.response for s in top_one.samples] == [s.response for s in greedy.samples]
    assert [s.response for s in sampled.samples] != [s.response for s in greedy.samples]
    assert top_one.run_id != sampled.run_id and top_one.settings.top_k == 1
    assert "top-k 1" in top_one.settings.describe()
    assert "top_k" not in sampled.settings.identity()


def stored_samples(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("select count(*) from samples").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def test_an_eval_killed_midway_resumes_and_ends_equal_to_an_uninterrupted_run(tiny_model, tmp_path):
    args = ["eval", "--model", str(tiny_model), "--tasks", "arithmetic-test", "--limit", "100", "--n", "4",
            "--temperature", "1", "--k", "1,2,4", "--quiet"]
    env = {**os.environ, "AREAL_EVAL_DB": str(tmp_path / "resumed.sqlite")}
    out = tmp_path / "resumed"
    process = subprocess.Popen([AREAL, *args, "--output-dir", str(out)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while stored_samples(tmp_path / "resumed.sqlite") < 80:
        assert process.poll() is None, f"the eval ended before it could be killed: {process.stderr.read()}"
        assert time.monotonic() < deadline, "no samples were stored within 120 s"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stderr.close()
    done_before = stored_samples(tmp_path / "resumed.sqlite")
    assert 80 <= done_before < 400, done_before
    with sqlite3.connect(tmp_path / "resumed.sqlite") as conn:
        assert conn.execute("select status from runs").fetchall() == [("running",)]

    resumed = subprocess.run([AREAL, *args, "--output-dir", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"arithmetic-test: resuming run #1: {done_before} of 400 samples were done" in resumed.stdout

    [uninterrupted] = eval_in_process(tiny_model, tmp_path / "whole.sqlite", tmp_path / "whole", n=4, k=(1, 2, 4),
                                      limit=100, temperature=1.0)
    fields = ("prompt_id", "sample_index", "response", "score", "verdict", "extracted")
    resumed_rows = [tuple(row[f] for f in fields) for row in read_details(out, tiny_model.name, "arithmetic-test")]
    assert resumed_rows == [tuple(getattr(s, f) for f in fields) for s in uninterrupted.samples]
    assert len(set(r[2] for r in resumed_rows)) > 300  # sampled noise, reproduced exactly, not one repeated string
    assert read_metrics(out, tiny_model.name, "arithmetic-test")["metrics"] == uninterrupted.metrics
    with sqlite3.connect(tmp_path / "resumed.sqlite") as conn:
        assert conn.execute("select id, status from runs").fetchall() == [(1, "finished")]


def test_a_server_reached_through_sglang_url_gives_the_samples_of_the_same_model_in_process(tiny_model, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    requested = {"n": 2, "limit": 40, "temperature": 1.0, "max_new_tokens": 8}
    [local] = eval_in_process(tiny_model, tmp_path / "local.sqlite", tmp_path / "local", **requested)
    with ServerProcess.areal(tiny_model, port, log_path=tmp_path / "serve.log") as server:
        server.wait_ready(120)
        args = [AREAL, "eval", "--model", f"sglang://127.0.0.1:{port}", "--tasks", "arithmetic-test", "--limit", "40",
                "--n", "2", "--temperature", "1", "--max-new-tokens", "8", "--name", "served", "--quiet"]
        remote = subprocess.run([*args, "--db", str(tmp_path / "remote.sqlite"), "--output-dir", str(tmp_path / "remote")],
                                capture_output=True, text=True, timeout=300)
    assert remote.returncode == 0, remote.stderr
    assert_same_samples_and_model(tmp_path / "remote", "served", local, f"sglang://127.0.0.1:{port}")


def assert_same_samples_and_model(output_dir: Path, name: str, local, model_ref: str) -> None:
    """The eval stored under `name` drew the samples of the in-process eval `local`, of the same model: the
    same model hash, hence the same identity key, so either eval stored first is recognised when the other
    is run against the same store."""
    served = read_details(output_dir, name, "arithmetic-test")
    assert [(d["prompt_id"], d["sample_index"], d["response"]) for d in served] == \
        [(s.prompt_id, s.sample_index, s.response) for s in local.samples]
    manifest = read_metrics(output_dir, name, "arithmetic-test")["manifest"]
    assert manifest["model_ref"] == model_ref
    assert manifest["model_hash"] == local.manifest["model_hash"] and manifest["key"] == local.manifest["key"]


def test_a_model_directory_served_by_another_engine_backend_gives_the_samples_of_the_in_process_engine(
        tiny_model, tmp_path):
    """`--model server:DIR`: the eval starts an `areal serve` process on the directory (found in the engine
    registry like `engine.backend=server`), logs it under the output directory, and draws the same samples as
    the in-process engine; the model is the same model (same hash and identity key)."""
    requested = {"n": 2, "limit": 20, "temperature": 1.0, "max_new_tokens": 8}
    [local] = eval_in_process(tiny_model, tmp_path / "local.sqlite", tmp_path / "local", **requested)
    args = [AREAL, "eval", "--model", f"server:{tiny_model}", "--tasks", "arithmetic-test", "--limit", "20", "--n",
            "2", "--temperature", "1", "--max-new-tokens", "8", "--name", "served", "--quiet", "--torch-threads", "1"]
    served = subprocess.run([*args, "--db", str(tmp_path / "served.sqlite"), "--output-dir", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stderr
    assert_same_samples_and_model(tmp_path / "out", "served", local, f"server:{tiny_model}")
    assert "serving" in (tmp_path / "out" / "served" / "engine-0.log").read_text()
