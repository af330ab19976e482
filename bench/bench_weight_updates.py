"""Interruptible weight updates vs waiting for in-flight generation, side by side (AReaL: +12-17%).

`interrupt`: on each new policy the engine pauses, drops the KV cache, loads the weights and continues
the in-flight requests. `wait`: admission stops until every in-flight request has finished, then the
weights are loaded. Same config otherwise (max staleness 1, `arithmetic-longtail`, whose long answers are
the stragglers a waiting update is stuck behind). The runs alternate (interrupt, wait, interrupt, wait, ...)
so drift in machine load hits both alike; the ratio is of the summed trajectories over the summed time.

    .venv/bin/python bench/bench_weight_updates.py [--steps 40] [--repeats 2] [KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import training_runs


def run_overrides(mode: str, steps: int) -> list[str]:
    """The config of a run of `mode` (interrupt, wait); bench_plan_validation.py predicts these runs."""
    return ["task=arithmetic-longtail", "eval_task=null", "rollout.max_new_tokens=20", f"steps={steps}",
            "rollout.max_staleness=1", f"rollout.weight_update={mode}", "checkpoint_every=0", "tensorboard=false"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="extra KEY=VALUE config overrides for every run")
    args = parser.parse_args()

    totals = {mode: {"trajectories": 0, "seconds": 0.0, "hold": [], "wait": []} for mode in ("interrupt", "wait")}
    with tempfile.TemporaryDirectory(prefix="bench-updates-") as tmp:
        for repeat in range(args.repeats):
            for mode in totals:
                run_dir = training_runs.train(f"{mode}{repeat}", Path(tmp), [*run_overrides(mode, args.steps),
                                                                             *args.overrides])
                run = training_runs.read_run(run_dir)
                total = totals[mode]
                total["trajectories"] += run["summary"]["trajectories"]
                total["seconds"] += run["summary"]["rl_seconds"]
                total["hold"] += [m["update_hold_seconds"] for m in run["metrics"]]
                total["wait"] += [m["wait_seconds"] for m in run["metrics"]]

    print(f"\n{args.repeats} x {args.steps} steps each, arithmetic-longtail, max staleness 1")
    rates = {}
    for mode, total in totals.items():
        rates[mode] = total["trajectories"] / total["seconds"]
        print(f"{mode:>9}: {rates[mode]:7.1f} trajectories/s; generation held per update "
              f"{1000 * sum(total['hold']) / len(total['hold']):6.1f} ms; trainer waiting for data "
              f"{sum(total['wait']) / len(total['wait']):.3f} s/step")
    print(f"ratio interrupt/wait: {rates['interrupt'] / rates['wait']:.2f}x trajectories/s")
    print("reproduce: .venv/bin/python bench/bench_weight_updates.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
