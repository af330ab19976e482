"""Asynchronous vs synchronous RL when the tail is reward latency, side by side: wall-clock to the same
held-out accuracy and trajectories/s, on the local reward pool and on Celery workers, over seeds.

The demo task graded by `arithmetic_latency` (task `arithmetic-latency`): the demo's exact match behind a
wait drawn per answer from a log-normal (median `--median`, shape `--sigma`, capped at `--cap`), as an LLM
judge, a remote verifier or a sandbox answers. The reward is `async def`, so a reward worker holds up to
256 waits at once. Every run trains the same warmed-up embedded model with the same config; only the mode
differs:

    sync     rollout.max_staleness=0, weight updates wait for in-flight requests (`areal train --sync`)
    async-K  rollout.max_staleness=K, interruptible weight updates (the default mode)

Each run keeps its policy every `--every` steps; afterwards the policies are scored on the held-out split
(`arithmetic-test`, sampled at T=1). Per backend and seed the target is the accuracy every mode reaches
(the lowest of their best); wall-clock to the target is the training clock at the first kept policy that
reaches it. The seed sets the model's initialisation, the prompts' order, the sampling and the latency
draws. Before the training runs, the three ways to register the same blocking wait (a plain reward: one
call at a time per worker; io_bound: threads; async) score one set of requests through each backend.

    .venv/bin/python bench/bench_latency_tail.py                     # starts its own redis-server and worker
    .venv/bin/python bench/bench_latency_tail.py --steps 40 --seeds 0 --backends local --etas 4
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import training_runs
from bench_async_vs_sync import score_policies_of
from bench_reward_service import start_redis, start_worker

TASK, EVAL_TASK, MAX_NEW_TOKENS = "arithmetic-latency", "arithmetic-test", 8
QUEUE = "bench-latency"
# Celery worker: reward batches at once (one reward process each). 16 batches of 32 cover a step of 512.
CELERY_BATCHES = 16


def latency_options(args: argparse.Namespace, seed: int) -> dict[str, float]:
    return {"median_s": args.median, "sigma": args.sigma, "cap_s": args.cap, "latency_seed": seed}


def train(mode: str, eta: int, backend: str, broker: str | None, seed: int, output: Path,
          args: argparse.Namespace) -> Path:
    overrides = [f"task={TASK}", "eval_task=null", f"steps={args.steps}", f"keep_policy_every={args.every}",
                 "checkpoint_every=0", *training_runs.seed_overrides(seed), f"rollout.max_new_tokens={MAX_NEW_TOKENS}",
                 *(f"reward_options.{k}={v}" for k, v in latency_options(args, seed).items())]
    if backend == "celery":
        overrides += ["reward.backend=celery", f"reward.broker_url={broker}", f"reward.queue={QUEUE}"]
    if mode != "sync":
        overrides.append(f"rollout.max_staleness={eta}")
    return training_runs.train(f"{backend}-s{seed}-{mode}", output, overrides, sync=(mode == "sync"))


async def score_registrations(backend: str, broker: str | None, count: int, args: argparse.Namespace) -> dict[str, float]:
    """Rewards/s of the same wait registered three ways, `count` requests through one reward worker process
    (local) or one Celery worker running CELERY_BATCHES batches at once."""
    from areal_core.rewards import RewardService, RewardServiceConfig
    from areal_core.tasks import get_task
    from areal_core.types import RewardRequest

    samples = get_task(TASK).samples()[:count]
    options = latency_options(args, 0)
    if backend == "local":
        config = RewardServiceConfig(workers=1, timeout=60)
    else:
        config = RewardServiceConfig(backend="celery", broker_url=broker, queue=QUEUE, timeout=60)
    rates = {}
    async with RewardService(config) as service:
        for reward in ("arithmetic_latency_serial", "arithmetic_latency_threads", "arithmetic_latency"):
            requests = [RewardRequest(reward=reward, sample=s, response=s["reference"], options=options) for s in samples]
            await service.score(requests[:4])  # workers started, rewards measured
            start = time.perf_counter()
            results = await service.score(requests)
            rates[reward] = count / (time.perf_counter() - start)
            assert all(r.correct for r in results), [r.error for r in results if r.error][:3]
    return rates


def summarise(run_dir: Path, seed: int, args: argparse.Namespace) -> dict:
    run = training_runs.read_run(run_dir)
    clock = {m["step"]: m["elapsed_seconds"] for m in run["metrics"]}
    accuracy = asyncio.run(score_policies_of(run_dir, EVAL_TASK, MAX_NEW_TOKENS, args.limit, seed))
    summary = run["summary"]
    return {"clock": clock, "accuracy": accuracy, "rl_seconds": summary["rl_seconds"],
            "traj_per_s": summary["trajectories_per_second"],
            "wait": statistics.mean(m["wait_seconds"] for m in run["metrics"]),
            "staleness": max(m["staleness_max"] for m in run["metrics"]),
            "dropped": sum(m["dropped_responses"] for m in run["metrics"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10, help="keep (and later score) the policy every N steps")
    parser.add_argument("--limit", type=int, default=500, help="held-out problems scored per policy")
    parser.add_argument("--median", type=float, default=0.03, help="median reward latency, seconds")
    parser.add_argument("--sigma", type=float, default=1.5, help="log-normal shape of the reward latency")
    parser.add_argument("--cap", type=float, default=3.0, help="longest reward latency, seconds")
    parser.add_argument("--etas", default="1,2,4", help="max staleness of the async runs")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--backends", default="local,celery")
    parser.add_argument("--rewards", type=int, default=128, help="requests per registration in the rewards/s table")
    parser.add_argument("--broker", default=None, help="Redis URL (default: start a redis-server on a free port)")
    parser.add_argument("--output", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()
    etas = [int(e) for e in args.etas.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    backends = args.backends.split(",")
    modes = ["sync", *(f"async-{eta}" for eta in etas)]

    redis_process = worker = None
    broker = args.broker
    if "celery" in backends:
        if broker is None:
            redis_process, broker = start_redis()
        worker = start_worker(broker, CELERY_BATCHES, QUEUE)
    figures: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "rewards_per_s": {}, "runs": {}}
    try:
        print(f"reward latency: log-normal, median {args.median}s, sigma {args.sigma}, cap {args.cap}s")
        for backend in backends:
            rates = asyncio.run(score_registrations(backend, broker, args.rewards, args))
            figures["rewards_per_s"][backend] = rates
            print(f"{backend}: rewards/s of {args.rewards} requests: " + ", ".join(
                f"{name.removeprefix('arithmetic_latency_') if name != 'arithmetic_latency' else 'async'} {rate:.1f}"
                for name, rate in rates.items()))
        with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
            output = args.output or Path(tmp)
            for backend in backends:
                for seed in seeds:
                    runs = {}
                    for mode in modes:
                        eta = int(mode.split("-")[1]) if mode != "sync" else 0
                        run_dir = train(mode, eta, backend, broker, seed, output, args)
                        runs[mode] = summarise(run_dir, seed, args)
                    figures["runs"][f"{backend}/seed{seed}"] = runs
                    report(backend, seed, runs)
    finally:
        if worker is not None:
            worker.kill()
        if redis_process is not None:
            redis_process.kill()
    overall(figures["runs"], modes)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    print("reproduce: .venv/bin/python bench/bench_latency_tail.py " + " ".join(sys.argv[1:]))


def reached(run: dict, target: float) -> tuple[int, float]:
    step = min(s for s, a in run["accuracy"].items() if a >= target)
    return step, run["clock"][step]


def report(backend: str, seed: int, runs: dict) -> None:
    target = min(max(r["accuracy"].values()) for r in runs.values())
    for run in runs.values():
        run["target"], (run["target_step"], run["target_seconds"]) = target, reached(run, target)
    sync = runs["sync"]
    print(f"\n{backend}, seed {seed}: held-out sampled accuracy by step (training clock, s)")
    print(f"{'step':>5} | " + " | ".join(f"{mode:>16}" for mode in runs))
    for step in sorted(sync["accuracy"]):
        cells = [f"{r['accuracy'].get(step, float('nan')):>6.1%} {r['clock'].get(step, float('nan')):>8.1f}s"
                 for r in runs.values()]
        print(f"{step:>5} | " + " | ".join(f"{c:>16}" for c in cells))
    for mode, run in runs.items():
        print(f"{mode:>8}: {run['rl_seconds']:.1f}s RL, {run['traj_per_s']:.0f} traj/s ({run['traj_per_s'] / sync['traj_per_s']:.2f}x), "
              f"wait/step {run['wait']:.2f}s, max staleness {run['staleness']}, dropped {run['dropped']}; "
              f"{target:.1%} at step {run['target_step']} after {run['target_seconds']:.1f}s "
              f"({sync['target_seconds'] / run['target_seconds']:.2f}x faster than sync)")


def overall(all_runs: dict, modes: list[str]) -> None:
    print("\nmean over seeds: async/sync, trajectories/s and wall-clock to equal held-out accuracy")
    backends = sorted({key.split("/")[0] for key in all_runs})
    for backend in backends:
        keyed = [runs for key, runs in all_runs.items() if key.startswith(backend + "/")]
        for mode in modes[1:]:
            speed = [r[mode]["traj_per_s"] / r["sync"]["traj_per_s"] for r in keyed]
            clock = [r["sync"]["target_seconds"] / r[mode]["target_seconds"] for r in keyed]
            print(f"{backend:>7} {mode:>8}: throughput {statistics.mean(speed):.2f}x "
                  f"({', '.join(f'{s:.2f}' for s in speed)}), wall-clock to equal accuracy {statistics.mean(clock):.2f}x "
                  f"({', '.join(f'{c:.2f}' for c in clock)})")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
