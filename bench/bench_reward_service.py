"""Reward service throughput: the same reward requests scored serially, by the local process pool and
by Celery workers on Redis, side by side in one run.

Workload: the `math` reward (SymPy verifier, plugins/math) on MATH-500 references (shared data), four
responses per problem: the reference boxed as is; the reference times (sin^2 k + cos^2 k), which only
a symbolic check accepts (~10 ms in SymPy); another problem's answer; and that wrong answer times the
same factor. 2,000 requests by default.

Serial runs every request in this process (the pure verifier cost). The local pool and Celery both use
`--workers` reward processes (Celery: one `areal worker --concurrency N`, requests sent in batches of
`--batch-size`). Per-request overhead is what a mode spends per request beyond the verifier itself:
(wall time x processes - serial time) / requests; since other work on the machine inflates wall
times, CPU time per request (client, reward processes, Celery worker, Redis) is shown beside it. The
two services run alternately for `--rounds` rounds (each round with its own responses, so verifier
caches do not carry over) and medians are reported. All modes must return identical results.

    .venv/bin/pip install -e plugins/math
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_reward_service.py            # starts its own redis-server
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_reward_service.py --broker redis://localhost:6379/0
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRIG_ONE = r"\left(\sin^2 9+\cos^2 9\right)"  # warm-up only


def data_dir() -> Path:
    env = os.environ.get("AREAL_DATA_DIR")
    return Path(env) if env else REPO.parent / "shared" / "data"


def make_requests(count: int, round_: int = 0):
    """`count` requests; each round uses another angle and another wrong answer, so that no verifier
    cache carries over from one round to the next."""
    from areal_core.types import RewardRequest

    path = data_dir() / "math500" / "test.jsonl"
    problems = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    one = rf"\left(\sin^2 {round_ + 1}+\cos^2 {round_ + 1}\right)"
    requests = []
    for variant in range(4):
        for i, problem in enumerate(problems):
            reference = problem["answer"]
            answer = reference if variant in (0, 1) else problems[(i + 1 + round_) % len(problems)]["answer"]
            boxed = answer if variant in (0, 2) else rf"\left({answer}\right){one}"
            requests.append(RewardRequest(reward="math", sample={"reference": reference},
                                          response=f"So the final answer is $\\boxed{{{boxed}}}$.",
                                          request_id=f"{round_}:{variant}:{problem['unique_id']}"))
    while len(requests) < count:
        requests += requests[: count - len(requests)]
    return requests[:count]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed: run scripts/start-redis.sh, or pass --broker URL")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                               stdout=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return process, f"redis://127.0.0.1:{port}/0"
        except redis.ConnectionError:
            time.sleep(0.05)
    sys.exit("redis-server did not start")


def start_worker(broker: str, workers: int, queue: str) -> subprocess.Popen:
    from areal_core.rewards.celery_app import make_celery_app

    name = f"bench-{os.getpid()}@bench"
    areal = Path(sys.executable).parent / "areal"
    process = subprocess.Popen([str(areal), "worker", "--broker", broker, "--queues", queue, "--concurrency",
                                str(workers), "--loglevel", "warning", "--hostname", name],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    app = make_celery_app(broker)
    deadline = time.monotonic() + 120
    while not app.control.ping(destination=[name], timeout=0.5):
        if process.poll() is not None or time.monotonic() > deadline:
            sys.exit("areal worker did not start")
    app.close()
    return process


def cpu_seconds(pids) -> float:
    """utime + stime of the given processes (all their threads), from /proc."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run_serial(requests):
    from areal_core.rewards import reward_registry
    from areal_core.rewards import call_reward

    spec = reward_registry().get(requests[0].reward)
    call_reward(spec, requests[0].sample, requests[0].response, requests[0].options)  # imports
    cpu, start = time.process_time(), time.perf_counter()
    results = [call_reward(spec, r.sample, r.response, r.options) for r in requests]
    return time.perf_counter() - start, time.process_time() - cpu, results


async def run_modes(configs, rounds, count, warmup, worker_pids):
    """Alternate the services round by round, so a load change on the machine hits both alike."""
    from areal_core.rewards import RewardService

    services = {mode: RewardService(config) for mode, config in configs.items()}
    walls = {mode: [] for mode in services}
    cpus = {mode: [] for mode in services}
    outputs = {mode: [] for mode in services}
    try:
        for service in services.values():
            await service.start()
            await service.score(warmup)  # worker processes start and import SymPy before the clock runs
        for round_ in range(rounds):
            requests = make_requests(count, round_)
            for mode, service in services.items():
                pids = worker_pids(mode, service)
                cpu_before = time.process_time() + cpu_seconds(pids)
                start = time.perf_counter()
                outputs[mode].append(await service.score(requests))
                walls[mode].append(time.perf_counter() - start)
                cpus[mode].append(time.process_time() + cpu_seconds(pids) - cpu_before)
    finally:
        for service in services.values():
            await service.close()
    return walls, cpus, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2, help="reward processes for the local pool and Celery")
    parser.add_argument("--batch-size", type=int, default=32, help="requests per Celery task")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each service, alternating")
    parser.add_argument("--broker", default=None, help="Redis URL (default: start a redis-server on a free port)")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()

    os.environ.setdefault("AREAL_PLUGINS", "math")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from areal_core.rewards import reward_registry
    from areal_core.rewards import RewardServiceConfig
    from areal_core.types import RewardRequest

    if "math" not in reward_registry():
        sys.exit("the `math` reward is not installed (or AREAL_PLUGINS leaves it out): "
                 ".venv/bin/pip install -e plugins/math")
    requests = make_requests(args.requests)
    # Distinct from the measured requests, so no verifier cache is warmed for them.
    warmup = [RewardRequest(reward="math", sample={"reference": f"{k}/7"},
                            response=rf"\boxed{{\frac{{{k}}}{{7}}{TRIG_ONE}}}", request_id=f"warmup-{k}")
              for k in range(2 * args.batch_size * args.workers)]
    redis_process, broker = (None, args.broker) if args.broker else start_redis()
    queue = f"bench-{os.getpid()}"
    worker = start_worker(broker, args.workers, queue)
    redis_pids = [redis_process.pid] if redis_process else []

    def worker_pids(mode, service):
        if mode == "local pool":
            return [w.process.pid for w in service.backend.pool._workers]
        return [worker.pid, *descendants(worker.pid), *redis_pids]

    configs = {
        "local pool": RewardServiceConfig(backend="local", workers=args.workers, timeout=args.timeout),
        "celery": RewardServiceConfig(backend="celery", broker_url=broker, queue=queue, batch_size=args.batch_size,
                                      timeout=args.timeout),
    }
    print(f"{len(requests)} `math` reward requests (MATH-500 references), {args.workers} reward processes, "
          f"Celery batches of {args.batch_size}, {args.rounds} alternating rounds, broker {broker}", flush=True)
    try:
        serial_wall, serial_cpu, serial_results = run_serial(requests)
        walls, cpus, outputs = asyncio.run(run_modes(configs, args.rounds, args.requests, warmup, worker_pids))
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        if redis_process is not None:
            redis_process.kill()
            redis_process.wait()

    n = len(requests)
    verifier_ms = serial_cpu / n * 1000
    print(f"\n{'mode':<12}{'wall s (median)':>17}{'req/s':>9}{'overhead ms/req':>17}{'CPU ms/req':>12}"
          f"{'CPU overhead ms/req':>21}   rounds (wall s)")
    print(f"{'serial':<12}{serial_wall:>17.2f}{n / serial_wall:>9.1f}{0:>17.2f}{verifier_ms:>12.2f}{0:>21.2f}")
    medians = {}
    for mode in walls:
        wall = medians[mode] = statistics.median(walls[mode])
        cpu_ms = statistics.median(cpus[mode]) / n * 1000
        overhead = wall * args.workers / n * 1000 - serial_wall / n * 1000
        print(f"{mode:<12}{wall:>17.2f}{n / wall:>9.1f}{overhead:>17.2f}{cpu_ms:>12.2f}{cpu_ms - verifier_ms:>21.2f}"
              f"   {' '.join(f'{w:.2f}' for w in walls[mode])}")
    def as_dicts(results):
        return [r.to_dict() for r in results]

    same = as_dicts(outputs["local pool"][0]) == as_dicts(serial_results) and all(
        as_dicts(a) == as_dicts(b) for a, b in zip(outputs["local pool"], outputs["celery"]))
    correct = sum(r.correct is True for r in serial_results)
    errors = sum(r.error is not None for r in serial_results)
    print(f"\nverifier: {verifier_ms:.2f} ms CPU/request serially; {correct} correct, {errors} errors; "
          f"identical results in all three modes: {'yes' if same else 'NO'}")
    ratio = medians["celery"] / medians["local pool"]
    print(f"celery / local pool wall time (median of {args.rounds}): {ratio:.3f} ({100 * (ratio - 1):+.1f}%)")
    print("reproduce: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_reward_service.py "
          f"--requests {n} --workers {args.workers} --batch-size {args.batch_size} --rounds {args.rounds}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
