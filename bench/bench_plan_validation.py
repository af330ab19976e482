"""`areal plan` checked against this machine: measure the runs, profile, predict them, in one sitting.

1. Every configuration of `bench/bench_async_vs_sync.py` (sync; async: eta 1, interrupt) and
   `bench/bench_weight_updates.py` (eta 1, interrupt; eta 1, wait), and a tool-using pair (tools-sync, tools-async:
   the calculator task, every turn a call of a tool that waits 50-500 ms, as in bench_agentic.py) is run for real
   (`areal train`, its own process). Runs alternate across repeats so drift in machine load hits every mode alike.
2. The workload: the first synchronous run of each family (the demo's, the tools'); its response lengths (a tool
   run's policy turns; metrics.jsonl, `areal plan --lengths RUN_DIR`), its reward rate and its share of uniform groups
   (which the step loop skips, so they set what is trained), the share of its responses it trained and their prompt
   and response lengths, and a tool run's calls (calls per episode, a call's seconds, a result's tokens) are the
   workload its family's predictions take. Nothing else of a measured run goes in (no timing).
3. `areal plan profile CONFIG --lengths RUN_DIR` of each family, taken `--profiles` times spread over the measured
   runs (this machine's speed drifts over minutes, and a profile is timed once where a configuration runs `--repeats`
   times), measures this machine with the family's config (the embedded model, the local engine and trainer in one
   process; arithmetic-longtail, or the tool pair's calculator episodes, their calls and tools' seconds drawn from the
   workload), as a user profiles for the run they plan: decode-step costs, trainer costs, what the rollout path costs
   a request (a turn) beyond the engine, how much generation and training slow each other on the shared cores (on
   batches of the workload's shape), reward latency. Each configuration is then predicted on each of its family's
   profiles (a simulated run of the real controller on its costs); its prediction is their mean.

Throughput is steady state in both: trajectories of steps skip+1..N over their seconds (the first steps pay for
starting the reward workers and the first forward passes, which a profile does not describe). Goals (issue #23):
each predicted throughput within 15% of the measured one, each predicted ratio within 10%.

    .venv/bin/python bench/bench_plan_validation.py [--steps 40] [--skip 3] [--repeats 2] [--profiles 3]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import bench_async_vs_sync
import bench_weight_updates
import training_runs

GOAL_THROUGHPUT, GOAL_RATIO = 0.15, 0.10


# Episodes of the tool_calls workflow on the calculator task whose every turn is a call (bench_agentic.py's format:
# the episode's shape does not depend on what the untrained model writes) of a tool that waits 50-500 ms: two calls,
# three turns an episode; asynchrony hides the tools' waits
TOOL_CALLS = (r'rollout.workflow_options={tools: [calculator_latency], call_format: {pattern: "(?P<args>[\\s\\S]*)", '
              r'stop: "</tool>", tool: calculator_latency}}')


def tool_overrides(steps: int) -> list[str]:
    return ["task=calculator", TOOL_CALLS, "eval_task=null", "warmup.enabled=false", f"steps={steps}",
            "checkpoint_every=0", "rollout.max_new_tokens=24", "rollout.batch_size=8", "rollout.group_size=4"]


def configurations(steps: int, every: int) -> dict[str, tuple[list[str], bool]]:
    """name -> (overrides, --sync) of each bench run predicted and measured."""
    return {"sync": (bench_async_vs_sync.run_overrides(steps, every), True),
            "async": (bench_async_vs_sync.run_overrides(steps, every), False),
            "interrupt": (bench_weight_updates.run_overrides("interrupt", steps), False),
            "wait": (bench_weight_updates.run_overrides("wait", steps), False),
            "tools-sync": (tool_overrides(steps), True),
            "tools-async": (tool_overrides(steps), False)}


RATIOS = {"async / sync (bench_async_vs_sync)": ("async", "sync"),
          "interrupt / wait (bench_weight_updates)": ("interrupt", "wait"),
          "tools: async / sync (tool latency)": ("tools-async", "tools-sync")}


def family(name: str) -> str:
    """Runs of one family share a workload: the first synchronous run of it."""
    return "tools" if name.startswith("tools") else "demo"


def predict(profile_path: Path, overrides: list[str], sync: bool, workload_run: Path, skip: int, out: Path
            ) -> tuple[float, dict[str, Any]]:
    import dataclasses

    from areal_core.config import load_config
    from areal_core.engine.model import build_char_tokenizer
    from areal_core.plan.profile import load_profile
    from areal_core.plan.simulate import simulate
    from areal_core.plan.workload import load_workload
    from areal_core.rl.config import SYNC_OVERRIDES, TrainConfig

    config = load_config(TrainConfig, None, [*overrides, f"output_dir={out}", *(SYNC_OVERRIDES if sync else [])])
    profile = load_profile(profile_path)
    workload = load_workload(workload_run)   # its lengths, reward rate, uniform groups, tool calls (areal plan --lengths)
    rewards = dataclasses.replace(profile.rewards, **workload.rewards)
    costs = dataclasses.replace(profile.cluster(profile.gpus_per_server, profile.reference_gpus), rewards=rewards)
    shutil.rmtree(out, ignore_errors=True)   # a run directory of its own (its metrics.jsonl is appended to)
    simulate(config, costs, build_char_tokenizer(), out, lengths=workload)
    simulated = training_runs.read_run(out)
    return training_runs.steady_throughput(simulated["metrics"], skip), simulated


def profile_points(runs: int, profiles: int, earliest: int = 1) -> list[int]:
    """After how many of the sitting's `runs` each profile is taken: evenly spread between them, none before the
    `earliest` (the profiles take each family's first sync run's lengths)."""
    return [max(earliest, min(runs, round((k + 1) * runs / (profiles + 1)))) for k in range(profiles)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=3, help="first steps left out of the steady-state throughput")
    parser.add_argument("--every", type=int, default=10, help="bench_async_vs_sync's keep_policy_every")
    parser.add_argument("--repeats", type=int, default=2, help="measured runs of each configuration")
    parser.add_argument("--profiles", type=int, default=3,
                        help="profiles taken, spread over the measured runs; a prediction is the mean of theirs")
    parser.add_argument("--profile-repeats", type=int, default=3,
                        help="areal plan profile --repeats: times each batch-level timing is taken")
    parser.add_argument("--output", type=Path, default=None, help="keep everything here (default: a temp dir)")
    args = parser.parse_args()
    if args.repeats < 1 or args.profiles < 1:
        parser.error("--repeats and --profiles must be >= 1")
    areal = str(Path(sys.executable).with_name("areal"))
    runs = configurations(args.steps, args.every)

    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        out = args.output or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        measured: dict[str, list[float]] = {name: [] for name in runs}
        workload_runs: dict[str, Path] = {}

        # every run of the sitting in turn: the configurations alternate across repeats, so that drift in machine
        # load hits every mode alike
        order = [(repeat, name) for repeat in range(args.repeats) for name in runs]

        def measure(turns: list[tuple[int, str]]) -> None:
            for repeat, name in turns:
                overrides, sync = runs[name]
                run_dir = training_runs.train(f"{name}{repeat}", out / "measured", overrides, sync=sync)
                metrics = training_runs.read_run(run_dir)["metrics"]
                measured[name].append(training_runs.steady_throughput(metrics, args.skip))
                workload_runs.setdefault(family(name), run_dir)   # a family's first (sync) run: its workload

        def take_profile(index: int, family_name: str) -> Path:
            # the profile's batches through the rollout path get the workload's lengths (and a tool run's calls), as
            # a user profiles for the run they plan (how much engine and trainer slow each other on these cores, and
            # what a turn costs the path, depend on them)
            profile = out / f"profile-{family_name}{index}.yaml"
            overrides, _ = runs["sync" if family_name == "demo" else "tools-sync"]
            profile_args = [a for a in overrides
                            if not a.startswith(("steps=", "keep_policy_every=", "checkpoint_every="))]
            workload_run = workload_runs[family_name]
            print(f"$ areal plan profile {' '.join(profile_args)} --lengths {workload_run}", flush=True)
            result = subprocess.run([areal, "plan", "profile", *profile_args, "--output", str(profile),
                                     "--repeats", str(args.profile_repeats), "--lengths", str(workload_run)],
                                    capture_output=True, text=True)
            if result.returncode:
                raise SystemExit(f"areal plan profile failed ({result.returncode}):\n{result.stdout}{result.stderr}")
            print(result.stdout, flush=True)
            return profile

        # The profiles spread over the measured runs, as the runs are (this machine's speed drifts by up to ~1.7x
        # over minutes: one profile taken in a fast minute read every prediction 20-30% high, val18). Each needs its
        # family's workload, so none comes before both families' first sync runs.
        families = sorted({family(name) for name in runs})
        earliest = 1 + max(next(k for k, (_, name) in enumerate(order) if family(name) == f and runs[name][1])
                           for f in families)
        done, profiles = 0, {f: [] for f in families}
        for point in profile_points(len(order), args.profiles, earliest):
            measure(order[done:point])
            done = point
            for f in families:
                profiles[f].append(take_profile(len(profiles[f]), f))
        measure(order[done:])

        # each configuration predicted on every profile; the prediction is their mean, as the measurement is the runs'
        predictions: dict[str, list[float]] = {}
        for name, (overrides, sync) in runs.items():
            predictions[name] = [predict(profile, overrides, sync, workload_runs[family(name)], args.skip,
                                         out / "predicted" / f"{name}-{profile.stem}")[0]
                                 for profile in profiles[family(name)]]
            print(f"predicted {name}: " + ", ".join(f"{value:.1f}" for value in predictions[name])
                  + " trajectories/s (one per profile)", flush=True)
        predicted = {name: statistics.fmean(values) for name, values in predictions.items()}

    means = {name: statistics.fmean(values) for name, values in measured.items()}
    rows, met = [], True
    print(f"\n{args.repeats} x {args.steps} steps per configuration, steady state from step {args.skip + 1}; "
          f"workload: each family's first sync run (the demo's; the tool runs')")
    print(f"{'run':<12} | {'measured traj/s':>16} | {'predicted':>9} | {'error':>7}")
    for name in runs:
        error = predicted[name] / means[name] - 1
        met &= abs(error) <= GOAL_THROUGHPUT
        spread = ", ".join(f"{v:.0f}" for v in measured[name])
        print(f"{name:<12} | {means[name]:>7.1f} ({spread}) | {predicted[name]:>9.1f} | {error:>+7.1%}")
        rows.append({"run": name, "measured": measured[name], "predicted": predicted[name],
                     "predictions": predictions[name], "error": error})
    print(f"\n{'ratio':<40} | {'measured':>8} | {'predicted':>9} | {'error':>7}")
    for label, (a, b) in RATIOS.items():
        real, guess = means[a] / means[b], predicted[a] / predicted[b]
        error = guess / real - 1
        met &= abs(error) <= GOAL_RATIO
        print(f"{label:<40} | {real:>7.2f}x | {guess:>8.2f}x | {error:>+7.1%}")
        rows.append({"ratio": label, "measured": real, "predicted": guess, "error": error})
    print(f"goals (throughput within {GOAL_THROUGHPUT:.0%}, ratios within {GOAL_RATIO:.0%}): {'met' if met else 'NOT met'}")
    if args.output:
        (args.output / "validation.json").write_text(json.dumps(rows, indent=2))
    print("reproduce: .venv/bin/python bench/bench_plan_validation.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
