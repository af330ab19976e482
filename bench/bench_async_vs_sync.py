"""Asynchronous vs synchronous RL, side by side: wall-clock to the same held-out accuracy, trajectories/s.

Both runs train the same warmed-up embedded model on `arithmetic-longtail` (addition whose answer
length is long-tailed: half are 3 tokens, a few reach 16, like reasoning rollouts in miniature) with the
same config and seed; only the mode differs:

    sync   rollout.max_staleness=0, weight updates wait for in-flight requests (`areal train --sync`)
    async  rollout.max_staleness=1, interruptible weight updates (the default)

Neither run evaluates while training (evaluation would compete with rollouts for the cores): each keeps
its policy every `--every` steps and the policies are scored afterwards on the held-out split, sampled at
temperature 1. The target is the accuracy both runs reach (the lower of the two best); wall-clock to the
target is the training clock (metrics.jsonl `elapsed_seconds`) at the first kept policy that reaches it.

    .venv/bin/python bench/bench_async_vs_sync.py [--steps 120] [--every 10] [--limit 500]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import training_runs

TASK, EVAL_TASK, MAX_NEW_TOKENS = "arithmetic-longtail", "arithmetic-longtail-test", 20


def run_overrides(steps: int, every: int) -> list[str]:
    """Both runs' config (sync adds --sync); bench_plan_validation.py predicts these runs."""
    return [f"task={TASK}", "eval_task=null", f"steps={steps}", f"keep_policy_every={every}", "checkpoint_every=0",
            f"rollout.max_new_tokens={MAX_NEW_TOKENS}"]


def train(mode: str, output_dir: Path, steps: int, every: int, extra: list[str]) -> Path:
    return training_runs.train(mode, output_dir, [*run_overrides(steps, every), *extra], sync=(mode == "sync"))


async def score_policies(run_dir: Path, limit: int, seed: int) -> dict[int, float]:
    return await score_policies_of(run_dir, EVAL_TASK, MAX_NEW_TOKENS, limit, seed)


async def score_policies_of(run_dir: Path, eval_task: str, max_new_tokens: int, limit: int, seed: int) -> dict[int, float]:
    """Held-out sampled (T=1) accuracy on `eval_task` of every policy the run kept, through the local engine."""
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.model import load_tokenizer
    from areal_core.rewards import RewardService, RewardServiceConfig
    from areal_core.eval.records import EvalSettings
    from areal_core.eval.runner import evaluate_task
    from areal_core.tasks import get_task

    task = get_task(eval_task)
    accuracy = {}
    async with RewardService(RewardServiceConfig(workers=1)) as rewards:
        for policy in sorted((run_dir / "policies").iterdir()):
            engine = LocalEngine(policy, torch_threads=1).start()
            try:
                settings = EvalSettings(n=1, temperature=1.0, max_new_tokens=max_new_tokens, limit=limit, seed=seed)
                result = (await evaluate_task(engine, task, load_tokenizer(policy), rewards, settings)).metrics
            finally:
                await engine.close()
            accuracy[int(policy.name.removeprefix("step"))] = result["accuracy"]
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--every", type=int, default=10, help="keep (and later score) the policy every N steps")
    parser.add_argument("--limit", type=int, default=500, help="held-out problems scored per policy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra KEY=VALUE config overrides for both runs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        output = args.output or Path(tmp)
        runs = {mode: train(mode, output, args.steps, args.every, [*training_runs.seed_overrides(args.seed),
                                                                   *args.overrides])
                for mode in ("sync", "async")}
        results = {}
        for mode, run_dir in runs.items():
            run = training_runs.read_run(run_dir)
            run["clock"] = {m["step"]: m["elapsed_seconds"] for m in run["metrics"]}
            run["accuracy"] = asyncio.run(score_policies(run_dir, args.limit, args.seed))
            results[mode] = run

    target = min(max(r["accuracy"].values()) for r in results.values())
    print(f"\nheld-out sampled accuracy (T=1, {args.limit} problems of {EVAL_TASK}) by step; training clock in s")
    print(f"{'step':>6} | {'sync acc':>8} {'clock':>7} | {'async acc':>9} {'clock':>7}")
    for step in sorted(results["sync"]["accuracy"]):
        row = [f"{step:>6}"]
        for mode in ("sync", "async"):
            r = results[mode]
            row.append(f"{r['accuracy'].get(step, float('nan')):>8.1%} {r['clock'].get(step, float('nan')):>7.1f}")
        print(" | ".join(row))
    reached = {}
    for mode, r in results.items():
        step = min(s for s, a in r["accuracy"].items() if a >= target)
        reached[mode] = (step, r["clock"][step])
        s = r["summary"]
        stale = max(m["staleness_max"] for m in r["metrics"])
        print(f"{mode:>5}: {s['steps']} steps in {s['rl_seconds']:.1f}s, {s['trajectories_per_second']:.0f} trajectories/s, "
              f"max staleness {stale}; reaches {target:.1%} at step {step} after {r['clock'][step]:.1f}s")
    speed = results["async"]["summary"]["trajectories_per_second"] / results["sync"]["summary"]["trajectories_per_second"]
    print(f"ratio async/sync: wall-clock to {target:.1%} held-out accuracy {reached['sync'][1] / reached['async'][1]:.2f}x "
          f"faster; trajectories/s {speed:.2f}x")
    print("reproduce: .venv/bin/python bench/bench_async_vs_sync.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
