"""Sandbox throughput on HumanEval canonical solutions, warm pool, side by side with a baseline.

    python bench/bench_sandbox.py                                  # vs the harness before the proxy design
    python bench/bench_sandbox.py --problems 164 --concurrency 1 2 --rounds 3
    python bench/bench_sandbox.py --against docker-run             # warm pool vs `docker run` per execution

`--against baseline` (the default) measures this checkout's sandbox against the sandbox package (and
the code plugin's test formats) of an older commit (`--baseline-ref`; by default the last one whose
function-mode tests ran inside the program's interpreter). They are taken with `git archive` into a
temporary directory, an image is built from that harness (tag ``areal-sandbox:baseline-REF``, kept), and it is run in a child
process with that directory first on PYTHONPATH. Both use the same data, limits, pool size and
machine; rounds alternate (baseline, current, baseline, ...) so that the machine's drift hits both.

Needs a running Docker engine (bash sandbox/scripts/start-docker.sh) and git. Prints executions
per second of each, their ratio, and the command to reproduce it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The last commit whose function-mode harness ran the tests inside the program's interpreter.
DEFAULT_BASELINE = "6a50bcf"


def load_executions(data_dir: Path, count: int):
    from areal_code.formats import humaneval_execution

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


def worker(args) -> int:
    """One measurement with whatever `areal_sandbox` this interpreter imports; prints JSON."""
    from areal_sandbox import SandboxConfig, open_sandbox
    from areal_sandbox.docker_backend import check_image, docker_client
    from areal_sandbox.errors import ImageMissingError
    from areal_sandbox.image import build_image_offline

    client = docker_client()
    try:
        check_image(client, args.image)
    except ImageMissingError:
        build_image_offline(client, args.image)
    executions = load_executions(args.data_dir, args.problems)
    config = SandboxConfig(image=args.image, pool_size=args.concurrency, timeout_s=10.0, total_timeout_s=30.0)
    backend = "run" if args.backend == "run" else "pool"
    with open_sandbox(config.replace(backend=backend), prewarm=backend == "pool") as sandbox:
        if backend == "pool":
            measure(sandbox, executions[: max(2, args.concurrency)], args.concurrency)  # warm caches
        rate, passed = measure(sandbox, executions, args.concurrency)
    print(json.dumps({"rate": rate, "passed": passed, "total": len(executions)}))
    return 0


class Contender:
    """A sandbox package to measure: this checkout's, or an older commit's."""

    def __init__(self, label: str, image: str, backend: str = "pool", package_dirs: list[Path] = ()) -> None:
        self.label, self.image, self.backend, self.package_dirs = label, image, backend, list(package_dirs)

    def run(self, args, concurrency: int) -> dict:
        env = dict(os.environ)
        if self.package_dirs:
            env["PYTHONPATH"] = os.pathsep.join([str(p) for p in self.package_dirs]
                                                + [p for p in [env.get("PYTHONPATH")] if p])
        command = [sys.executable, __file__, "--worker", "--image", self.image, "--backend", self.backend,
                   "--problems", str(args.problems), "--concurrency", str(concurrency), "--data-dir", str(args.data_dir)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"{self.label}: the measurement failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def baseline_packages(ref: str, scratch: Path) -> list[Path]:
    """The `sandbox/` and `plugins/code/` directories of commit `ref` (the sandbox and the code
    plugin's test formats of that time), extracted with git archive under `scratch`."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "sandbox", "plugins/code"], capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {ref} sandbox plugins/code failed: {archive.stderr.decode()[-500:]}")
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive.stdout, check=True)
    return [scratch / "sandbox", scratch / "plugins" / "code"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=80, help="HumanEval problems to run (max 164)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2], help="executions at once (= pool size)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per concurrency")
    parser.add_argument("--against", choices=("baseline", "docker-run"), default="baseline")
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE)
    parser.add_argument("--image", default="areal-sandbox:latest")
    parser.add_argument("--data-dir", type=Path,
                        default=Path(os.environ.get("AREAL_DATA_DIR") or REPO.parent / "shared" / "data"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="pool", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.concurrency = args.concurrency[0]
        return worker(args)

    with tempfile.TemporaryDirectory(prefix="areal-bench-sandbox-") as scratch:
        current = Contender("current (proxy: tests in their own process)", args.image)
        if args.against == "baseline":
            other = Contender(f"baseline {args.baseline_ref} (tests in the program's process)",
                              f"areal-sandbox:baseline-{args.baseline_ref}",
                              package_dirs=baseline_packages(args.baseline_ref, Path(scratch)))
        else:
            other = Contender("docker run per execution", args.image, backend="run")
        rows = []
        for concurrency in args.concurrency:
            rates: dict[str, list[float]] = {other.label: [], current.label: []}
            passed: dict[str, int] = {}
            for _ in range(args.rounds):
                for contender in (other, current):
                    result = contender.run(args, concurrency)
                    rates[contender.label].append(result["rate"])
                    passed[contender.label] = min(passed.get(contender.label, result["passed"]), result["passed"])
            rows.append((concurrency, rates, passed))

    print(f"HumanEval canonical solutions: {args.problems} executions per round, {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs; warm pool of `concurrency` containers")
    print(f"{'concurrency':<13}{'sandbox':<56}{'exec/s (rounds)':>26}{'passed':>9}")
    ok = True
    for concurrency, rates, passed in rows:
        for label, values in rates.items():
            shown = " ".join(f"{v:.2f}" for v in values)
            print(f"{concurrency:<13}{label:<56}{shown:>26}{passed[label]:>6}/{args.problems}")
            ok &= passed[label] == args.problems
        base, new = (statistics.median(v) for v in rates.values())
        print(f"{'':<13}ratio current / {'baseline' if args.against == 'baseline' else 'docker run'} "
              f"(medians): {new / base:.2f}")
    print(f"reproduce: python bench/bench_sandbox.py --problems {args.problems} --concurrency "
          f"{' '.join(map(str, args.concurrency))} --rounds {args.rounds} --against {args.against}"
          + (f" --baseline-ref {args.baseline_ref}" if args.against == "baseline" else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
