"""Staleness ablation on the CPU demo: final held-out accuracy at max staleness eta = 0, 1, 4, 8, with the
decoupled PPO objective and with plain PPO (pi_prox = pi_behav), all else equal (AReaL, Table 2: decoupled
at eta=4 matches eta=0, plain PPO falls apart).

Every run starts from the same warmed-up model (cached after the first run) with the same seed and
steps; accuracy is measured on the held-out split (greedy and sampled at T=1) after the last step.
The trainer is slower than generation on this CPU, so the controller runs as far ahead as eta allows
and the data really is that stale (the observed maximum staleness is printed).

    .venv/bin/python bench/bench_staleness.py [--steps 120] [--etas 0,1,4,8] [KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import training_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--etas", default="0,1,4,8")
    parser.add_argument("--limit", type=int, default=500, help="held-out problems")
    parser.add_argument("overrides", nargs="*", help="extra KEY=VALUE config overrides for every run")
    args = parser.parse_args()
    etas = [int(e) for e in args.etas.split(",")]

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-staleness-") as tmp:
        for objective, decoupled in (("decoupled", "true"), ("plain", "false")):
            for eta in etas:
                run_dir = training_runs.train(f"{objective}-eta{eta}", Path(tmp), [
                    f"steps={args.steps}", f"rollout.max_staleness={eta}", f"trainer.decoupled={decoupled}",
                    f"eval.limit={args.limit}", "checkpoint_every=0", "tensorboard=false", *args.overrides])
                run = training_runs.read_run(run_dir)
                after = run["summary"]["after"]
                rows.append((objective, eta, max(m["staleness_max"] for m in run["metrics"]),
                             after["greedy_accuracy"], after["sampled_accuracy"], run["summary"]["rl_seconds"],
                             run["summary"]["before"]["sampled_accuracy"]))
                print(f"  {objective} eta={eta}: sampled {after['sampled_accuracy']:.1%}, greedy "
                      f"{after['greedy_accuracy']:.1%}", flush=True)

    print(f"\nheld-out accuracy after {args.steps} steps (start: sampled {rows[0][6]:.1%}); {args.limit} problems")
    print(f"{'objective':>10} {'eta':>4} {'max stale':>9} {'greedy':>8} {'sampled':>8} {'RL s':>7}")
    for objective, eta, stale, greedy, sampled, seconds, _ in rows:
        print(f"{objective:>10} {eta:>4} {stale:>9} {greedy:>8.1%} {sampled:>8.1%} {seconds:>7.1f}")
    result = {(o, e): s for o, e, _, _, s, _, _ in rows}
    for objective in ("decoupled", "plain"):
        if (objective, 0) in result:
            gaps = ", ".join(f"eta={e}: {100 * (result[(objective, e)] - result[(objective, 0)]):+.1f} pts"
                             for e in etas if e and (objective, e) in result)
            print(f"{objective}: sampled accuracy vs eta=0: {gaps}")
    print("reproduce: .venv/bin/python bench/bench_staleness.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
