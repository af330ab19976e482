"""bench/gpu_check.sh, the GPU check of issue 22, run with --tiny (the same code at small sizes, on this CPU) so it
cannot rot: its figures all there and sound, its three runs the modes they claim. On a machine without the eval
data it builds the preset with a tokenizer prepared elsewhere (`--prepare`): so does this test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_tiny_measures_the_engine_the_trainer_and_three_runs(tmp_path, data_dir):
    env = {**os.environ, "PYTHON": sys.executable, "AREAL_DATA_DIR": str(data_dir)}
    prepared = subprocess.run(["bash", "bench/gpu_check.sh", "--prepare", str(tmp_path / "prepared")], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=600)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    assert (tmp_path / "prepared" / "tokenizer" / "tokenizer.json").exists()

    env.pop("AREAL_DATA_DIR")   # the GPU machine has no eval data: the prepared tokenizer stands in
    out = tmp_path / "out"
    done = subprocess.run(["bash", "bench/gpu_check.sh", "--tiny", "--device", "cpu", "--out", str(out),
                           "--tokenizer-from", str(tmp_path / "prepared" / "tokenizer")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert {p.name for p in out.iterdir()} == {"results.json", "report.md", "train.log", "plan-profile.yaml",
                                               "plan-profile.timings.json", "plan.log"}
    results = json.loads((out / "results.json").read_text())
    sizes = results["sizes"]

    assert results["machine"]["device"] == "cpu" and results["tiny"] is True
    assert [row["batch"] for row in results["engine"]] == sizes["throughput_batches"]
    for row in results["engine"]:   # every request exactly throughput_tokens long (EOS ignored)
        assert row["tokens"] == row["batch"] * sizes["throughput_tokens"] and row["tokens_per_second"] > 0

    trainer = results["trainer"]
    assert trainer["tokens"] == sizes["mfu_sequences"] * (sizes["mfu_prompt_tokens"] + sizes["mfu_response_tokens"])
    assert trainer["tflops"] > 0 and trainer["proximal_seconds"] > 0 and trainer["update_seconds"] > 0
    assert trainer["mfu"] is None   # no peak is known for a CPU: no MFU made up

    per_step = sizes["batch_size"] * sizes["group_size"]
    for mode, run in results["runs"].items():
        assert run["trajectories"] == sizes["steps"] * per_step, mode
        assert [s["step"] for s in run["steps"]] == list(range(1, sizes["steps"] + 1))
        assert all(1 <= s["response_length_mean"] <= sizes["lengths"]["max"] for s in run["steps"])
    assert all(s["staleness_max"] == 0 for s in results["runs"]["sync"]["steps"])
    assert all(s["staleness_max"] <= 1 for mode in ("async", "wait") for s in results["runs"][mode]["steps"])
    rates = {mode: run["trajectories_per_second"] for mode, run in results["runs"].items()}
    assert results["ratios"]["async_over_sync"] == rates["async"] / rates["sync"]
    assert results["ratios"]["interrupt_over_wait"] == rates["async"] / rates["wait"]

    # areal plan on the device (issue 23): a profile with the async run's config (its weights streamed, so the
    # stream measured too), each run predicted from it beside its steady throughput after step 1
    plan = results["plan"]
    assert plan["profile"]["generation"]["stream_byte_s"] > 0 and plan["profile"]["training"]["weight_bytes"] > 0
    assert all(source.startswith("measured by areal plan profile") for source in plan["profile"]["sources"].values())
    assert set(plan["runs"]) == {"sync", "async", "wait"}
    for mode, row in plan["runs"].items():
        steps = results["runs"][mode]["steps"]
        trajectories = (steps[-1]["trajectories_per_second"] * steps[-1]["elapsed_seconds"]
                        - steps[0]["trajectories_per_second"] * steps[0]["elapsed_seconds"])
        seconds = steps[-1]["elapsed_seconds"] - steps[0]["elapsed_seconds"]
        assert row["measured"] == pytest.approx(trajectories / seconds)
        assert row["predicted"] > 0 and row["error"] == pytest.approx(row["predicted"] / row["measured"] - 1)
        # where they part: each phase's seconds a step, the simulated run's steps as the real run's
        assert [s["step"] for s in row["predicted_steps"]] == list(range(1, sizes["steps"] + 1))
        assert set(row["measured_phases"]) == set(row["predicted_phases"]) == {
            "wait_seconds", "proximal_seconds", "update_seconds", "publish_seconds"}
        assert row["measured_phases"]["update_seconds"] > 0 and row["predicted_phases"]["update_seconds"] > 0
    assert plan["ratios"]["async_over_sync"]["predicted"] == pytest.approx(
        plan["runs"]["async"]["predicted"] / plan["runs"]["sync"]["predicted"])

    report = (out / "report.md").read_text()
    assert "async / sync" in report and "interrupt / wait" in report and "tokens/s" in report
    assert "`areal plan` on this device" in report and "| async_over_sync |" in report
    log = (out / "train.log").read_text()
    assert all(f"=== {mode}: areal train" in log for mode in ("sync", "async", "wait"))
