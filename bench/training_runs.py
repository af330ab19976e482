"""Shared by the training benchmarks: run `areal train` as a user would (its own process) and read the run."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def seed_overrides(seed: int) -> list[str]:
    """Every seed of a run set to `seed`: the trainer's (seed), the prompt order and sampling (rollout.seed), the
    embedded model's initialisation and the warm-up's batches. Varying `seed=` alone trains on the same prompts
    in the same order, sampled the same way."""
    return [f"seed={seed}", f"rollout.seed={seed}", f"model.seed={seed}", f"warmup.seed={seed}"]


def train(name: str, output_dir: Path, overrides: list[str], sync: bool = False) -> Path:
    """Run `areal train` to the end; returns its run directory."""
    areal = Path(sys.executable).with_name("areal")
    command = [str(areal), "train", f"name={name}", f"output_dir={output_dir}", *overrides, *(["--sync"] if sync else [])]
    print(f"[{time.strftime('%X')}] areal {' '.join(command[1:])}", flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return max(output_dir.glob(f"{name}-*"))


def steady_throughput(metrics: list[dict[str, Any]], skip: int = 1) -> float:
    """Trajectories per second over steps skip+1..N (cumulative trajectories = rate x elapsed at each step): the
    first steps pay for starting the reward workers and the first forward passes, which a profile does not
    describe. A run of no more than `skip` steps: its last step's rate."""
    if len(metrics) <= skip:
        return metrics[-1]["trajectories_per_second"]
    first, last = metrics[skip - 1], metrics[-1]
    done = (last["trajectories_per_second"] * last["elapsed_seconds"]
            - first["trajectories_per_second"] * first["elapsed_seconds"])
    return done / (last["elapsed_seconds"] - first["elapsed_seconds"])


def read_run(run_dir: Path) -> dict[str, Any]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    evals = run_dir / "evals.jsonl"
    return {"metrics": [json.loads(line) for line in lines],
            "evals": [json.loads(line) for line in evals.read_text().splitlines()] if evals.exists() else [],
            "summary": json.loads((run_dir / "summary.json").read_text())}
