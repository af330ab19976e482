"""Tool-use tasks: multiplications a tiny model cannot do in its head, and a calculator it can call.

`calculator` asks `4821*613=` (a 4-digit by a 3-digit number); the `tool_calls` workflow lets the model write
`<tool name="calculator">4821*613</tool>`, appends `<result>2955273</result>`, and the model answers `2955273`
(exact match, digits in their usual order). Every sample also holds its ideal episode as `transcript` (a list
of turns) for a supervised warm-up on training problems, which trains on the model's turns and never on the
tool's.
"""
from __future__ import annotations

import asyncio
import math
import random
import re
from typing import Any, Iterator

from areal_arithmetic import _OPS as _ARITHMETIC_OPS
from areal_arithmetic import _is_heldout

_OPS = {**_ARITHMETIC_OPS, "%": lambda a, b: a % b}

CALL = '<tool name="calculator">{expression}</tool>'
RESULT = "<result>{output}</result>"


def _shapes(shapes: list[str]) -> list[tuple[int, str, int]]:
    parsed = []
    for shape in shapes:
        match = re.fullmatch(r"(\d+)([-+*%])(\d+)", str(shape))
        if match is None or not (1 <= int(match.group(1)) <= 12 and 1 <= int(match.group(3)) <= 12):
            raise ValueError(f"shape {shape!r}: expected DIGITS OP DIGITS with 1-12 digits, e.g. '4*3'")
        parsed.append((int(match.group(1)), match.group(2), int(match.group(3))))
    if not parsed:
        raise ValueError("shapes is empty")
    return parsed


def generate_calculator(seed: int, size: int, shapes: tuple[str, ...] = ("4*3",), split: str = "train",
                        heldout_fraction: float = 0.05, answer_digits: int | None = None) -> Iterator[dict[str, Any]]:
    """`size` problems `a op b=`, each of a shape drawn from `shapes` ("4*3": a 4-digit times a 3-digit number),
    with answers of exactly `answer_digits` digits when given; each carries its whole ideal episode as
    `transcript` (the call, the tool's result, the answer) for warm-ups."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    kinds = _shapes(list(shapes))
    rng = random.Random(f"areal-calculator:{seed}:{split}:{','.join(shapes)}")
    produced, seen, draws = 0, set(), 0
    while produced < size:
        draws += 1
        if draws > 100 * size + 10_000:
            raise ValueError(f"cannot draw {size} distinct {split} problems of shapes {list(shapes)}"
                             + (f" with {answer_digits}-digit answers" if answer_digits else ""))
        digits_a, op, digits_b = rng.choice(kinds)
        a = rng.randrange(10 ** (digits_a - 1), 10**digits_a)
        b = rng.randrange(10 ** (digits_b - 1) if digits_b > 1 else 1, 10**digits_b)  # (no b = 0: a % 0)
        if _is_heldout(a, op, b, heldout_fraction) != (split == "test") or (a, op, b) in seen:
            continue
        if answer_digits is not None and len(str(abs(_OPS[op](a, b)))) != answer_digits:
            continue
        seen.add((a, op, b))
        produced += 1
        expression, answer = f"{a}{op}{b}", str(_OPS[op](a, b))
        yield {"id": expression, "question": f"{expression}=", "reference": answer,
               "transcript": [{"role": "assistant", "text": CALL.format(expression=expression)},
                              {"role": "tool", "text": RESULT.format(output=answer)},
                              {"role": "assistant", "text": answer}]}


WORKFLOW = {"name": "tool_calls", "options": {"tools": ["calculator"], "call_format": "xml",
                                              "result_format": RESULT,
                                              "max_turns": 3, "max_tool_calls": 2, "max_total_tokens": 160,
                                              "max_tool_output_chars": 40}}


def calculator_task(name: str, description: str, split: str, size: int, **options: Any) -> dict[str, Any]:
    return {
        "name": name, "description": description,
        "dataset": {"generator": "calculator", "seed": 0, "size": size, "options": {"split": split, **options}},
        "prompt": {"template": "{{ question }}"},
        "reward": {"name": "arithmetic"},
        "workflow": WORKFLOW,
        "eval": {"n": 1, "k": [1], "temperature": 0.0, "max_new_tokens": 40},
    }


# 7-digit products (4 in 5 of all 4-by-3-digit ones): the answer is always as long, so a model that copies the
# tool's result by position is not also asked to find where a shorter one ends.
TASKS = [
    calculator_task("calculator", "4-digit times 3-digit multiplication (7-digit products) with a calculator tool "
                    "(training split)", "train", 20000, answer_digits=7),
    calculator_task("calculator-test", "4-digit times 3-digit multiplication (7-digit products) with a calculator "
                    "tool (held-out split)", "test", 200, answer_digits=7),
]


async def calculator_after_latency(arguments: str, *, min_s: float = 0.05, max_s: float = 0.5, **options: Any):
    """The calculator behind a wait drawn log-uniformly from [min_s, max_s] (a remote tool, a search API, a
    sandbox in miniature): for rehearsing tool latency on any machine (`bench/bench_agentic.py`)."""
    from areal_core.workflows import calculator

    if not 0 <= min_s <= max_s:
        raise ValueError(f"need 0 <= min_s <= max_s, got {min_s}, {max_s}")
    low = math.log(max(min_s, 1e-6))
    await asyncio.sleep(math.exp(random.uniform(low, math.log(max(max_s, 1e-6)))) if max_s > 0 else 0.0)
    return calculator(arguments)
