"""Staleness ablation on the CPU demo: final held-out accuracy at max staleness eta = 0, 1, 4, 8, with the
decoupled PPO objective and with plain PPO (pi_prox = pi_behav), all else equal (AReaL, Table 2: decoupled
at eta=4 matches eta=0, plain PPO falls apart).

Every run starts from the same warmed-up model (cached after the first run) with the same seed and
steps; accuracy is measured on the held-out split (greedy and sampled at T=1) after the last step.
The trainer is slower than generation on this CPU, so the controller runs as far ahead as eta allows
and the data really is that stale (the observed maximum staleness is printed).

    .venv/bin/python bench/bench_staleness.py [--steps 120] [--etas 0,1,4,8] [--objectives decoupled,plain]
        [--seeds 0,1,2] [--parallel 2] [KEY=VALUE ...]

With several seeds each cell reports the mean and its standard error; the spread between runs of one
config (about ±5 points on this demo) is what a difference between cells must beat.

What stale data costs depends on how far the policy moves per step. With the demo's learning rate (3e-4)
the policy changes a lot each step and decoupled eta=4 ends far below eta=0. Large-model runs such as
AReaL's move the policy little per step; the demo's setting closest to that is `--steps 1800
trainer.lr=2.5e-5`, where decoupled eta=4 matches eta=0 (bench/RESULTS.md has every setting). Its
five-seed table, two runs at a time (about 20 minutes a run, 2.5 hours in all):

    .venv/bin/python bench/bench_staleness.py --steps 1800 --etas 0,4 --objectives decoupled
        --seeds 0,1,2,3,4 --parallel 2 trainer.lr=2.5e-5
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import training_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--etas", default="0,1,4,8")
    parser.add_argument("--objectives", default="decoupled,plain")
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds; each cell runs once per seed")
    parser.add_argument("--limit", type=int, default=500, help="held-out problems")
    parser.add_argument("--parallel", type=int, default=1, help="training runs side by side (one torch thread each)")
    parser.add_argument("overrides", nargs="*", help="extra KEY=VALUE config overrides for every run")
    args = parser.parse_args()
    etas = [int(e) for e in args.etas.split(",")]
    objectives = args.objectives.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]

    cells = [(objective, eta, seed) for seed in seeds for objective in objectives for eta in etas
             # At eta=0 every token is on-policy, so pi_prox = pi_behav: plain PPO is the same algorithm as
             # decoupled PPO; its cell is the decoupled run.
             if not (objective == "plain" and eta == 0 and "decoupled" in objectives)]

    def run_cell(cell: tuple[str, int, int], tmp: Path) -> dict:
        objective, eta, seed = cell
        run_dir = training_runs.train(f"{objective}-eta{eta}-seed{seed}", tmp, [
            f"steps={args.steps}", f"rollout.max_staleness={eta}",
            f"trainer.decoupled={'true' if objective == 'decoupled' else 'false'}",
            f"seed={seed}", f"rollout.seed={seed}", f"eval.limit={args.limit}", "checkpoint_every=0",
            "tensorboard=false", *args.overrides])
        run = training_runs.read_run(run_dir)
        after = run["summary"]["after"]
        print(f"  {objective} eta={eta} seed={seed}: sampled {after['sampled_accuracy']:.1%}, greedy "
              f"{after['greedy_accuracy']:.1%}", flush=True)
        return {"seed": seed, "stale": max(m["staleness_max"] for m in run["metrics"]), "greedy": after["greedy_accuracy"],
                "sampled": after["sampled_accuracy"], "start": run["summary"]["before"]["sampled_accuracy"]}

    runs: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-staleness-") as tmp:
        # Each run uses one torch thread (engine.torch_threads=1), so runs side by side share the cores
        # without oversubscribing them.
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            results = list(pool.map(lambda cell: run_cell(cell, Path(tmp)), cells))
    for (objective, eta, _), result in zip(cells, results):
        runs.setdefault((objective, eta), []).append(result)
    if "plain" in objectives and ("decoupled", 0) in runs:
        runs[("plain", 0)] = runs[("decoupled", 0)]

    def mean_se(values: list[float]) -> tuple[float, float]:
        mean = sum(values) / len(values)
        if len(values) < 2:
            return mean, float("nan")
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return mean, (var / len(values)) ** 0.5

    start = next(iter(runs.values()))[0]["start"]
    print(f"\nheld-out accuracy after {args.steps} steps (start: sampled {start:.1%}); {args.limit} problems; "
          f"mean ± standard error over seeds {args.seeds}")
    print(f"{'objective':>10} {'eta':>4} {'max stale':>9} {'greedy':>15} {'sampled':>15} {'runs (sampled)':>24}")
    for (objective, eta), cell in sorted(runs.items(), key=lambda item: (objectives.index(item[0][0]), item[0][1])):
        g, g_se = mean_se([r["greedy"] for r in cell])
        s, s_se = mean_se([r["sampled"] for r in cell])
        each = " ".join(f"{r['sampled']:.1%}" for r in cell)
        g_err, s_err = (f"±{se:>5.1%}" if len(cell) > 1 else " " * 6 for se in (g_se, s_se))  # one run: no error
        print(f"{objective:>10} {eta:>4} {max(r['stale'] for r in cell):>9} {g:>8.1%} {g_err} "
              f"{s:>8.1%} {s_err} {each:>24}")
    for objective in objectives:
        if (objective, 0) not in runs:
            continue
        base = {r["seed"]: r["sampled"] for r in runs[(objective, 0)]}
        gaps = []
        for eta in etas:
            if eta and (objective, eta) in runs:
                # Paired by seed: runs of one seed share the warm-up, the data order and the sampling seed.
                diffs = [100 * (r["sampled"] - base[r["seed"]]) for r in runs[(objective, eta)]]
                mean, se = mean_se(diffs)
                gaps.append(f"eta={eta}: {mean:+.1f} ± {se:.1f} pts" if len(diffs) > 1 else f"eta={eta}: {mean:+.1f} pts")
        if gaps:
            print(f"{objective}: sampled accuracy vs eta=0, paired by seed (mean ± standard error): {', '.join(gaps)}")
    print("reproduce: .venv/bin/python bench/bench_staleness.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
