"""Benchmarks of the logic plugin, each a ratio of two things measured side by side in this run.

1. Hostile answers are cheap: time to reject a hostile response vs time to score a normal right answer.
2. The eval-free Countdown parser vs Python's own `eval` on the same benign expressions (the price of safety).
3. The truth-table K&K solver vs plain statement-by-statement enumeration (8 people).
4. Generation throughput per family (puzzles per second, no ratio; for sizing tasks).

Reproduce:  OMP_NUM_THREADS=1 .venv/bin/python bench/bench_logic.py
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from areal_logic import countdown, knights_knaves, sudoku, zebra


def per_call(fn: Callable[[], Any], min_time: float = 0.3, repeats: int = 5) -> float:
    """Median seconds per call over `repeats` rounds of at least `min_time` seconds each."""
    fn()
    rounds = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time / repeats:
                break
        rounds.append(elapsed / calls)
    return statistics.median(rounds)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:10.1f} us"


def main() -> None:
    print("== 1. hostile answers vs a normal right answer (reward call, in process) ==")
    kk_row = next(knights_knaves.generate(0, 1, people=6))
    cd_row = next(countdown.generate(0, 1, count=4))
    sd_row = next(sudoku.generate(0, 1, grid_size=9))
    zb_row = next(zebra.generate(0, 1, houses=4, attributes=3))
    sd_answer = "\n".join(" ".join(sd_row["solution"][r * 9:(r + 1) * 9]) for r in range(9))
    zb_answer = "\n".join(f"House {h + 1}: " + ", ".join(house.values()) for h, house in enumerate(zb_row["solution"]))
    cases = [
        ("knights_knaves", knights_knaves.reward, kk_row, f"<answer>{kk_row['solution_text_format']}</answer>", {
            "1 MB response": "A" * (1 << 20),
            "1 MB inside a raised response limit": "<answer>" + "Amelia is a knight. " * 50_000 + "</answer>",
            "Cyrillic look-alike": "<answer>" + kk_row["solution_text_format"].replace("a", "\u0430") + "</answer>",
        }),
        ("countdown", countdown.reward, cd_row, f"<answer>{cd_row['solution']}</answer>", {
            "9**9**9": "<answer>9**9**9</answer>",
            "deep nesting (60 levels)": "<answer>" + "(" * 60 + "9" + ")" * 60 + "</answer>",
            "1 MB of '+1'": "<answer>1" + "+1" * 500_000 + "</answer>",
        }),
        ("sudoku", sudoku.reward, sd_row, f"<answer>{sd_answer}</answer>", {
            "1 MB of digits": "<answer>" + "5" * (1 << 20) + "</answer>",
            "full-width digits": "<answer>" + sd_answer.replace("1", "\uff11") + "</answer>",
        }),
        ("zebra", zebra.reward, zb_row, f"<answer>{zb_answer}</answer>", {
            "1 MB of braces": "House 1: " + "{" * (1 << 20),
            "Greek look-alike": "<answer>" + zb_answer.replace("A", "\u0391") + "</answer>",
        }),
    ]
    for family, reward, row, good, hostile in cases:
        options = {"max_response_chars": 2_000_000} if family == "knights_knaves" else {}
        normal = per_call(lambda: reward(row, good))
        assert reward(row, good).score == 1.0
        print(f"{family:15s} right answer                        {us(normal)}")
        for label, response in hostile.items():
            opts = options if "raised" in label else {}
            result = reward(row, response, **opts)
            assert result.score == 0.0, (family, label, result)
            cost = per_call(lambda: reward(row, response, **opts))
            print(f"{family:15s} {label:36s}{us(cost)}   ratio to right answer {cost / normal:8.2f}x   ({result.details['failure']})")

    print("\n== 2. Countdown: eval-free parser vs Python eval on the same benign expressions ==")
    expressions = [row["solution"] for row in countdown.generate(1, 200, count=[3, 6])]
    ours = per_call(lambda: [countdown.evaluate_expression(e, max_numbers=16) for e in expressions]) / len(expressions)
    theirs = per_call(lambda: [eval(e, {"__builtins__": {}}) for e in expressions]) / len(expressions)  # noqa: S307 - trusted, generated text, for comparison only
    print(f"eval-free parser (exact Fractions) {us(ours)} per expression")
    print(f"Python eval (floats)               {us(theirs)} per expression")
    print(f"ratio parser / eval                {ours / theirs:10.2f}x")

    print("\n== 3. K&K solver: truth tables vs plain enumeration, 8 people ==")
    puzzles = [knights_knaves.parse_statements(r["statements"], 8) for r in knights_knaves.generate(2, 30, people=8, depth=2)]
    table = per_call(lambda: [knights_knaves.solve(p) for p in puzzles]) / len(puzzles)
    plain = per_call(lambda: [knights_knaves.solve_by_enumeration(p) for p in puzzles]) / len(puzzles)
    print(f"truth tables        {us(table)} per puzzle")
    print(f"plain enumeration   {us(plain)} per puzzle")
    print(f"speed-up            {plain / table:10.1f}x")

    print("\n== 4. generation throughput (puzzles/s, single core) ==")
    for label, make in [
        ("knights_knaves 3-7 people", lambda: list(knights_knaves.generate(3, 200, people=[3, 7]))),
        ("countdown 3-4 numbers", lambda: list(countdown.generate(3, 200, count=[3, 4]))),
        ("sudoku 4x4, 6 clues", lambda: list(sudoku.generate(3, 200, grid_size=4))),
        ("sudoku 9x9, 30 clues", lambda: list(sudoku.generate(3, 20, grid_size=9))),
        ("zebra 4 houses x 3", lambda: list(zebra.generate(3, 50, houses=4, attributes=3))),
        ("zebra 5 houses x 5", lambda: list(zebra.generate(3, 10, houses=5, attributes=5))),
    ]:
        start = time.perf_counter()
        rows = make()
        elapsed = time.perf_counter() - start
        print(f"{label:28s} {len(rows) / elapsed:10.0f} puzzles/s")

    print("\nreproduce: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_logic.py")


if __name__ == "__main__":
    main()
