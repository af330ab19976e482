"""Accuracy and speed of the `math` verifier (areal-math) against Hugging Face math-verify, side by side.

Three sets, all scored by both verifiers in this one process:
  golden   the labelled golden set of tests/math/math_golden_cases.py (reference, response, verdict)
  math500  MATH-500 self-consistency: every reference r against "... \\boxed{r}" (should be correct)
           and against the next reference in the file (should be wrong unless the two are
           equivalent by the hand-made list EQUIVALENT_REFERENCES in the golden module)
  mv-suite math-verify's own regression cases (tests/math/data/math_verify_cases.json): areal-math
           scores each prediction against the case's reference in both grading modes, lenient and
           strict; math-verify parses the gold and the prediction as its own test does

A verdict counts as right when the verifier's reward (1 correct, 0 otherwise; a verifier error is 0)
matches the label. Throughput is verifications per second over the whole set, one process, one thread,
with areal-math's parse cache and SymPy's cache cleared before each timed pass.

Reproduce (math-verify is a benchmark-only extra):
    .venv/bin/pip install -e 'plugins/math[bench]'
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_math_verify.py [--data-dir ../shared/data] [--repeat 3]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent


def load_golden():
    spec = importlib.util.spec_from_file_location("math_golden_cases", REPO / "tests" / "math" / "math_golden_cases.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["math_golden_cases"] = module
    spec.loader.exec_module(module)
    return module


def as_text(reference: Any) -> str:
    from areal_math import reference_text

    return reference_text(reference)


def golden_set(golden, skip: tuple[str, ...] = ()) -> list[tuple[str, str, bool]]:
    return [(as_text(c.reference), c.response, c.expected is True) for c in golden.CASES if c.category not in skip]


def math500_set(data_dir: Path, golden) -> list[tuple[str, str, bool]]:
    refs = [json.loads(line)["answer"] for line in (data_dir / "math500" / "test.jsonl").read_text().splitlines() if line.strip()]
    equivalent = {frozenset(pair) for pair, _ in golden.EQUIVALENT_REFERENCES}
    items = []
    for i, ref in enumerate(refs):
        items.append((ref, f"Let us reason step by step. ... Therefore the answer is $\\boxed{{{ref}}}$.", True))
        other = refs[(i + 1) % len(refs)]
        same = other == ref or frozenset((ref, other)) in equivalent
        items.append((ref, f"Let us reason step by step. ... Therefore the answer is $\\boxed{{{other}}}$.", same))
    return items


def mv_suite_set() -> list[tuple[str, str, bool, str]]:
    cases = json.loads((REPO / "tests" / "math" / "data" / "math_verify_cases.json").read_text())["cases"]
    return [(c["reference"], c["pred"], bool(c["expected"]), c["gold"]) for c in cases]


def ours(mode: str = "lenient") -> Callable[..., bool]:
    from areal_math import verify

    def run(reference: str, response: str, gold: str | None = None) -> bool:
        return verify(reference, response, extract=mode).score > 0

    return run


def hf_math_verify() -> Callable[..., bool]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    targets = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]

    def run(reference: str, response: str, gold: str | None = None) -> bool:
        try:
            if gold is None:
                parsed_gold = parse("$" + reference + "$")
                answer = parse(response)
            else:  # as math-verify's own test does: both sides through the same extraction
                parsed_gold, answer = parse(gold, targets), parse(response, targets)
            return bool(verify(parsed_gold, answer))
        except Exception:
            return False

    return run


def measure(fn: Callable[[str, str], bool], items: list[tuple[str, str, bool]], repeat: int,
            reset: Callable[[], None]) -> tuple[float, float, float, list[int]]:
    """(accuracy, verifications per second in the first pass and the best of `repeat` passes,
    indices judged wrongly)."""
    times: list[float] = []
    wrong: list[int] = []
    for _ in range(repeat):
        reset()
        start = time.perf_counter()
        verdicts = [fn(ref, resp, *rest) for ref, resp, _, *rest in items]
        times.append(time.perf_counter() - start)
        wrong = [i for i, (v, item) in enumerate(zip(verdicts, items)) if v != item[2]]
    return 1 - len(wrong) / len(items), len(items) / times[0], len(items) / min(times), wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("AREAL_DATA_DIR", REPO.parent / "shared" / "data")))
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per verifier and set (best is kept)")
    parser.add_argument("--show-wrong", type=int, default=10, help="list up to this many misjudged items per verifier")
    args = parser.parse_args()

    try:
        import math_verify  # noqa: F401
    except ImportError:
        sys.exit("math-verify is not installed: .venv/bin/pip install -e 'plugins/math[bench]'")
    from areal_math.answer import parse_answer

    golden = load_golden()
    # golden-nohuge: without the huge-value cases, where math-verify waits for its own 5 s timeout
    sets = {"golden": golden_set(golden), "golden-nohuge": golden_set(golden, skip=("huge",)),
            "math500": math500_set(args.data_dir, golden), "mv-suite": mv_suite_set()}
    from sympy.core.cache import clear_cache

    def reset_ours() -> None:
        parse_answer.cache_clear()
        clear_cache()

    # SymPy's own cache is cleared before every pass of either verifier: each pass starts cold
    verifiers = {"areal-math": (ours(), reset_ours), "math-verify": (hf_math_verify(), clear_cache),
                 "areal strict": (ours("strict"), reset_ours)}
    for fn, reset in verifiers.values():  # warm up imports and lazy initialisation outside the timing
        fn("1", "\\boxed{1}")

    print(f"{'set':<14} {'items':>6} {'verifier':<12} {'accuracy':>9} {'verif/s first':>14} {'verif/s best':>13}")
    results: dict[tuple[str, str], tuple[float, float, float, list[int]]] = {}
    for set_name, items in sets.items():
        for name, (fn, reset) in verifiers.items():
            if name == "areal strict" and set_name != "mv-suite":
                continue  # the other sets' labels are lenient judgements
            results[(set_name, name)] = measure(fn, items, args.repeat, reset)
            acc, first, best, _ = results[(set_name, name)]
            print(f"{set_name:<14} {len(items):>6} {name:<12} {acc:>9.2%} {first:>14.1f} {best:>13.1f}", flush=True)
    print()
    for set_name in sets:
        m_acc, m_first, m_best, _ = results[(set_name, "math-verify")]
        for name in ("areal-math", "areal strict"):
            if (set_name, name) not in results:
                continue
            a_acc, a_first, a_best, _ = results[(set_name, name)]
            print(f"{set_name}: accuracy {name} {a_acc:.2%} vs math-verify {m_acc:.2%}; throughput ratio "
                  f"{name}/math-verify = {a_first / m_first:.1f}x (first pass), {a_best / m_best:.1f}x (best pass)")
    for (set_name, name), (_, _, _, wrong) in results.items():
        if wrong and args.show_wrong:
            print(f"\n{name} misjudged {len(wrong)} of {set_name}:")
            for i in wrong[:args.show_wrong]:
                ref, resp, label = sets[set_name][i][:3]
                print(f"  expected {'correct' if label else 'wrong'}: reference {ref!r}, response {resp[-80:]!r}")
    print("\nreproduce: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_math_verify.py"
          f" --repeat {args.repeat}")


if __name__ == "__main__":
    main()
