"""`areal audit` of every built-in reward on its full data set: variants tried, false positives, false
negatives, errors, timeouts and verifications per second, one row per (task, grading mode).

Each row is one `areal audit` run, as a user runs it (the local reward pool, 2 workers). The code rows need
the Docker sandbox (`bash sandbox/scripts/start-docker.sh`; image built by `areal sandbox build-image`).

Reproduce:  AREAL_DATA_DIR=../shared/data .venv/bin/python bench/bench_audit.py [--only math500,humaneval] [--n 0]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AREAL = str(Path(sys.executable).with_name("areal"))
AUDITS = [
    ("knights_knaves_3ppl", None), ("knights_knaves_5ppl", None), ("knights_knaves_7ppl", None),
    ("knights_knaves-test", None), ("knights_knaves-test", "lenient"),
    ("countdown-test", None), ("countdown-test", "lenient"), ("sudoku_4x4-test", None), ("sudoku_9x9-test", None),
    ("sudoku_4x4-test", "lenient"), ("zebra-test", None), ("zebra-test", "lenient"),
    ("arithmetic-test", None), ("arithmetic-longtail-test", None),
    ("math500", None), ("math500", "lenient"), ("gsm8k", None), ("gsm8k", "lenient"), ("aime24", None),
    ("aime24", "lenient"), ("aime25", None), ("aime25", "lenient"), ("amc23", None), ("amc23", "lenient"),
    ("humaneval", None), ("mbpp", None), ("leetcode_functional", None), ("codeforces_stdio", None),
    ("code_contests_sample", None),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated task names")
    parser.add_argument("--n", default="0", help="samples per task (0: all)")
    args = parser.parse_args()
    only = {t for t in args.only.split(",") if t}
    rows = []
    print("| reward | task | grading | samples | variants | false pos. | false neg. (rate) | errors | timeouts | "
          "verif./s | wall |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for task, grading in AUDITS:
            if only and task not in only:
                continue
            out = Path(tmp) / f"{task}-{grading}.json"
            command = [AREAL, "audit", "--task", task, "--n", args.n, "--timeout", "60", "--quiet", "--output", str(out)]
            command += ["--grading", grading] if grading else []
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            wall = time.perf_counter() - started
            if not out.exists():
                print(f"| ? | {task} | {grading or 'train'} | audit failed to run: {done.stderr.strip()[-200:]} |")
                continue
            r = json.loads(out.read_text())
            t = r["totals"]
            rows.append(r)
            print(f"| {r['reward']} | {task} | {r['grading'] or '-'} | {r['samples']} | {r['variants']:,} | "
                  f"{t['false_positives']} | {t['false_negatives']} ({t['false_negative_rate']:.2%}) | {t['errors']} | "
                  f"{t['timeouts']} | {r['verifications_per_s']:,.0f} | {wall:.0f} s |", flush=True)
    variants = sum(r["variants"] for r in rows)
    fps = sum(r["totals"]["false_positives"] for r in rows)
    print(f"\n{len(rows)} audits, {variants:,} variants, {fps} false positives; "
          f"passed: {sum(r['passed'] for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
