"""The code reward when some programs loop to the sandbox's timeout: rewards/s one program at a time per
worker vs side by side (the reward is io_bound), and the trainer's wait per step, sync vs async.

Workload: HumanEval (shared data), one replayed completion per problem, mixed as a policy early in training
writes them: the canonical solution (right), `return None` (wrong, fails fast) and `while True: pass`
(loops until the sandbox's timeout, `--program-timeout` s), in the proportions `--mix` right:wrong:looping,
shuffled with `--seed`. Everything runs for real: the local reward pool (`--workers` processes), the Docker
sandbox, the code reward.

1. rewards/s: all responses scored through the reward service with `concurrency={"code": 1}` (one program
   at a time per worker, as every reward ran before) and with the reward's own concurrency (4 per worker).
2. the wait per step: the responses replayed in batches of `--batch` as a rollout controller sends them,
   generation and a trainer step emulated by sleeps of `--gen` and `--train` s (the model is not what is
   measured). sync: generate a batch, score it, wait for every reward, train. async (max staleness eta):
   generation runs ahead up to eta batches, so rewards are scored while the trainer trains; a step waits
   only for its own batch's last reward. Reported: the mean wait, the run's wall time, their ratios.

    .venv/bin/python bench/bench_code_latency.py                  # needs Docker and the sandbox image
    .venv/bin/python bench/bench_code_latency.py --mix 7:2:1 --program-timeout 3 --workers 2
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def responses(mix: tuple[int, int, int], seed: int) -> list[tuple[dict, str, str]]:
    """(sample, response, kind) for every HumanEval problem, kinds in the proportions of `mix`."""
    from areal_core.tasks import get_task

    samples = get_task("humaneval").samples()
    kinds = [kind for kind, count in zip(("right", "wrong", "looping"), mix) for _ in range(count)]
    rng = random.Random(seed)
    rows = []
    for i, sample in enumerate(samples):
        kind = kinds[i % len(kinds)]
        body = {"right": sample["canonical_solution"], "wrong": "    return None\n",
                "looping": "    while True:\n        pass\n"}[kind]
        rows.append((sample, body, kind))
    rng.shuffle(rows)
    return rows


def requests_of(rows, options):
    from areal_core.types import RewardRequest

    return [RewardRequest(reward="code", sample=sample, response=body, options=options) for sample, body, _ in rows]


async def rewards_per_second(rows, options, workers: int, concurrency: dict[str, int]) -> tuple[float, list]:
    from areal_core.rewards import RewardService, RewardServiceConfig

    config = RewardServiceConfig(workers=workers, timeout=120, concurrency=concurrency)
    async with RewardService(config) as service:
        await service.score(requests_of(rows[:2 * workers], options))  # containers warm, workers up
        start = time.perf_counter()
        results = await service.score(requests_of(rows, options))
        return len(rows) / (time.perf_counter() - start), results


async def replay_steps(rows, options, workers: int, batch: int, gen: float, train: float, eta: int) -> dict:
    """The trainer's wait per step when the replayed responses arrive as a rollout controller sends them."""
    from areal_core.rewards import RewardService, RewardServiceConfig

    requests = requests_of(rows, options)
    steps = len(requests) // batch
    waits = []
    async with RewardService(RewardServiceConfig(workers=workers, timeout=120)) as service:
        await service.score(requests[:2 * workers])
        batches: list[asyncio.Future] = []
        trained = asyncio.Event()
        progress = {"trained": 0}

        async def generate() -> None:
            for k in range(steps):
                while k > progress["trained"] + eta:  # staleness control: at most eta batches ahead
                    trained.clear()
                    await trained.wait()
                await asyncio.sleep(gen)  # the engine produces batch k
                futures = [await service.submit(r) for r in requests[k * batch:(k + 1) * batch]]
                batches.append(asyncio.gather(*futures))

        start = time.perf_counter()
        producer = asyncio.create_task(generate())
        for k in range(steps):
            while len(batches) <= k:
                await asyncio.sleep(0.001)
            waited = time.perf_counter()
            await batches[k]
            waits.append(time.perf_counter() - waited)
            await asyncio.sleep(train)  # the trainer's step
            progress["trained"] = k + 1
            trained.set()
        await producer
        return {"steps": steps, "wall": time.perf_counter() - start, "wait": statistics.mean(waits),
                "max_wait": max(waits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", default="7:2:1", help="right:wrong:looping programs")
    parser.add_argument("--program-timeout", type=float, default=3.0, help="sandbox timeout of one program run")
    parser.add_argument("--workers", type=int, default=2, help="reward worker processes")
    parser.add_argument("--batch", type=int, default=16, help="responses per training step")
    parser.add_argument("--gen", type=float, default=0.5, help="seconds the engine takes per batch (emulated)")
    parser.add_argument("--train", type=float, default=0.5, help="seconds a trainer step takes (emulated)")
    parser.add_argument("--etas", default="1,2,4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image", default="areal-sandbox:latest")
    args = parser.parse_args()
    mix = tuple(int(x) for x in args.mix.split(":"))
    rows = responses(mix, args.seed)
    options = {"timeout": args.program_timeout, "image": args.image}
    counts = {kind: sum(k == kind for *_, k in rows) for kind in ("right", "wrong", "looping")}
    print(f"{len(rows)} HumanEval responses: {counts}; program timeout {args.program_timeout}s; "
          f"{args.workers} reward workers")

    serial, serial_results = asyncio.run(rewards_per_second(rows, options, args.workers, {"code": 1}))
    side, side_results = asyncio.run(rewards_per_second(rows, options, args.workers, {}))
    assert [r.correct for r in serial_results] == [r.correct for r in side_results]
    right = sum(bool(r.correct) for r in side_results)
    errors = sum(r.error is not None for r in side_results)
    assert right == counts["right"] and errors == 0, (right, errors)
    print(f"rewards/s: one program at a time per worker {serial:.2f}, side by side (concurrency 4) {side:.2f} "
          f"-> {side / serial:.2f}x; {right} right, {errors} errors, same verdicts")

    sync = asyncio.run(replay_steps(rows, options, args.workers, args.batch, args.gen, args.train, 0))
    print(f"\nper step ({args.batch} responses, generation {args.gen}s, trainer {args.train}s emulated):")
    print(f"{'mode':>8} | {'wait/step':>9} | {'max wait':>8} | {'wall':>7} | vs sync")
    print(f"{'sync':>8} | {sync['wait']:>8.2f}s | {sync['max_wait']:>7.2f}s | {sync['wall']:>6.1f}s | 1.00x")
    for eta in (int(e) for e in args.etas.split(",")):
        run = asyncio.run(replay_steps(rows, options, args.workers, args.batch, args.gen, args.train, eta))
        print(f"{f'async-{eta}':>8} | {run['wait']:>8.2f}s | {run['max_wait']:>7.2f}s | {run['wall']:>6.1f}s | "
              f"{sync['wall'] / run['wall']:.2f}x")
    print("reproduce: .venv/bin/python bench/bench_code_latency.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    data = REPO.parent / "shared" / "data"
    if "AREAL_DATA_DIR" not in os.environ and data.exists():
        os.environ["AREAL_DATA_DIR"] = str(data)
    main()
