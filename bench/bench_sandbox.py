"""Sandbox throughput: warm container pool vs one `docker run` per execution, side by side.

Both run the same HumanEval canonical solutions with the same image, limits and harness; the only
difference is that the pool reuses warm containers while the baseline starts (and removes) a fresh
container per execution, which is what `docker run --rm -i` costs.

    python bench/bench_sandbox.py                    # 40 problems, 1 container / 1 worker
    python bench/bench_sandbox.py --problems 164 --concurrency 2

Needs a running Docker engine (bash sandbox/scripts/start-docker.sh) and the runner image
(areal sandbox build-image). Prints executions per second of each and their ratio.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from areal_code.formats import humaneval_execution
from areal_sandbox import SandboxConfig, open_sandbox

REPO = Path(__file__).resolve().parent.parent


def load_executions(data_dir: Path, count: int):
    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        samples = [json.loads(line) for line in f]
    return [humaneval_execution(s, s["canonical_solution"], {}) for s in samples[:count]]


def measure(sandbox, executions, concurrency: int) -> tuple[float, int]:
    """(executions per second, number passed) over all executions, `concurrency` at a time."""
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(sandbox.run, executions))
    elapsed = time.perf_counter() - started
    return len(executions) / elapsed, sum(r.passed for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=40, help="HumanEval problems to run (max 164)")
    parser.add_argument("--concurrency", type=int, default=1, help="executions at once (= pool size)")
    parser.add_argument("--image", default="areal-sandbox:latest")
    parser.add_argument("--data-dir", type=Path,
                        default=Path(os.environ.get("AREAL_DATA_DIR") or REPO.parent / "shared" / "data"))
    args = parser.parse_args(argv)

    executions = load_executions(args.data_dir, args.problems)
    base = SandboxConfig(image=args.image, pool_size=args.concurrency, timeout_s=10.0, total_timeout_s=30.0)

    with open_sandbox(base.replace(backend="pool"), prewarm=True) as pool:
        measure(pool, executions[: max(2, args.concurrency)], args.concurrency)  # warm caches
        pool_rate, pool_passed = measure(pool, executions, args.concurrency)
    with open_sandbox(base.replace(backend="run")) as run:
        run_rate, run_passed = measure(run, executions, args.concurrency)

    n = len(executions)
    print(f"HumanEval canonical solutions: {n} executions, concurrency {args.concurrency}, {os.cpu_count()} CPUs")
    print(f"{'backend':<32}{'exec/s':>10}{'ms/exec':>10}{'passed':>10}")
    print(f"{'warm pool (reused containers)':<32}{pool_rate:>10.2f}{1000 / pool_rate:>10.1f}{pool_passed:>7}/{n}")
    print(f"{'docker run per execution':<32}{run_rate:>10.2f}{1000 / run_rate:>10.1f}{run_passed:>7}/{n}")
    print(f"ratio (pool / docker run): {pool_rate / run_rate:.1f}x")
    print(f"reproduce: python bench/bench_sandbox.py --problems {args.problems} --concurrency {args.concurrency}")
    return 0 if pool_passed == run_passed == n else 1


if __name__ == "__main__":
    sys.exit(main())
