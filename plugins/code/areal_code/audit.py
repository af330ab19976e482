"""Mutators for `areal audit` on the code reward: programs that must fail their tests, and forms of a
passing program that must still pass.

The passing program is the data set's own solution (HumanEval's prompt + canonical solution, MBPP's code,
LeetCode's solution) or, for stdin/stdout tasks, which ship no solution, a program that looks each test's
input up and prints its expected output: it passes by construction, so every failure to pass it, and
every pass of a mutant, is the reward's. Wrong programs: the solution with its result perturbed (+1 or
x1.5+1, "x" appended, an element added, a boolean negated), a stub, a program that raises, one that exits before
the tests can run (sys.exit, os._exit at load or in the call); for stdin/stdout, the output off by one,
one case's output for every input, nothing, an extra line, a crash after the right output. The program
is the last python block (a documented rule: one program runs, so a draft block before it is no hedge,
and a wrong block after the solution must fail).
"""
from __future__ import annotations

import ast
import random
import re
from typing import Any

from areal_core.audit import (EQUIVALENT, NEAR_MISS, OUTSIDE, QUOTED, REFERENCE, SEVERAL, Variant,
                              degenerate_variants, right, wrong)

from areal_code.formats import detect_format, humaneval_program, reference_functions, stdio_cases

FORGERY = "forgery"

PERTURB = '''

def _areal_audit_perturbed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):  # far enough to fail a relative tolerance (math.isclose, rel_tol=1e-3)
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + [None]
    if isinstance(value, tuple):
        return value + (None,)
    if isinstance(value, (set, frozenset)):
        return type(value)(list(value) + [None])
    if isinstance(value, dict):
        return {**value, None: None}
    return 0 if value is None else None


def _areal_audit_wrap(function):
    def perturbed(*args, **kwargs):
        return _areal_audit_perturbed(function(*args, **kwargs))
    return perturbed
'''


def respond(program: str, language: str = "python") -> str:
    return f"Here is the solution.\n\n```{language}\n{program.rstrip()}\n```\n"


def _misplaced(program: str, wrong_program: str) -> list[Variant]:
    """The passing program quoted as text before a wrong block, or only in a block of another language."""
    quoted = "\n".join("    " + line for line in program.splitlines())
    return [wrong(QUOTED, f"A first version was:\n\n{quoted}\n\nbut the final one is:\n" + respond(wrong_program),
                  "the passing program quoted as text, then a wrong block"),
            wrong(OUTSIDE, respond(program, "text"), "the passing program in a ```text block, no python block")]


def _called_names(tests: str) -> set[str]:
    try:
        tree = ast.parse(tests)
    except SyntaxError:
        return set()
    return {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _function_program(sample: dict[str, Any], fmt: str) -> tuple[str, list[str], str] | None:
    """(the passing program, the names whose results to perturb, the rebinding code), or None."""
    if fmt == "humaneval":
        entry = str(sample["entry_point"])
        program = humaneval_program(str(sample["prompt"]), str(sample["canonical_solution"]), entry)
        return program, [entry], f"\n{entry} = _areal_audit_wrap({entry})\n"
    if fmt == "mbpp":
        program = str(sample.get("code") or "")
        functions = [n for n in reference_functions(program) or () if n in _called_names("\n".join(sample["test_list"]))]
        if not program or not functions:
            return None
        return program, functions, "".join(f"\n{name} = _areal_audit_wrap({name})\n" for name in functions)
    if fmt == "leetcode":
        program = sample.get("solutions") or sample.get("solution")
        program = program[0] if isinstance(program, list) and program else program
        if not isinstance(program, str) or "class Solution" not in program:
            return None
        tree = ast.parse(program)
        methods = [item.name for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Solution"
                   for item in node.body if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")]
        return program, methods, "".join(f"\nSolution.{m} = _areal_audit_wrap(Solution.{m})\n" for m in methods)
    return None


def _stub(names: list[str], fmt: str, body: str) -> str:
    if fmt == "leetcode":
        return "class Solution:\n" + "".join(f"    def {name}(self, *args, **kwargs):\n        {body}\n" for name in names)
    return "".join(f"def {name}(*args, **kwargs):\n    {body}\n\n" for name in names)


def function_variants(sample: dict[str, Any], fmt: str) -> list[Variant]:
    made = _function_program(sample, fmt)
    if made is None:
        return []
    program, names, rebind = made
    perturbed = program + PERTURB + rebind
    exit_in_call = "import os\n" + "".join(
        (f"Solution.{n} = lambda self, *a, **k: os._exit(0)\n" if fmt == "leetcode" else f"{n} = lambda *a, **k: os._exit(0)\n")
        for n in names)
    variants = [
        right(REFERENCE, respond(program), "the data set's solution"),
        right(EQUIVALENT, f"```\n{program}\n```", "an untagged fence"),
        right(EQUIVALENT, f"~~~python\n{program}\n~~~", "a ~~~ fence"),
        right(EQUIVALENT, respond(program, "py"), "tagged py"),
        right(EQUIVALENT, f"I will reason first.\n{respond(program)}\nThis runs in O(n) time.", "prose around the block"),
        right(EQUIVALENT, program, "no fence at all (a completion)"),
        right(EQUIVALENT, respond(perturbed) + "\nOn second thought:\n" + respond(program),
              "a wrong draft block, then the solution (the last block is the program)"),
        wrong(NEAR_MISS, respond(perturbed), "the solution with its result perturbed"),
        wrong(NEAR_MISS, respond(_stub(names, fmt, "return None")), "a stub returning None"),
        wrong(NEAR_MISS, respond(_stub(names, fmt, "raise NotImplementedError"), ), "a stub that raises"),
        wrong(SEVERAL, respond(program) + "\nOr, shorter:\n" + respond(perturbed), "the solution, then a wrong block"),
        wrong(FORGERY, respond(program + "\n\nimport sys\nsys.exit(0)\n"), "the solution, then sys.exit(0) at load"),
        wrong(FORGERY, respond(program + "\n\nimport os\nos._exit(0)\n"), "the solution, then os._exit(0) at load"),
        wrong(FORGERY, respond(program + "\n\n" + exit_in_call), "os._exit(0) when called"),
    ]
    return variants + _misplaced(program, perturbed) + degenerate_variants(respond)[:3]


LOOKUP = '''import sys

ANSWERS = {answers!r}
data = sys.stdin.read()
sys.stdout.write({transform}ANSWERS.get(data.strip(), ""){end})
{after}'''


def _lookup(cases: list[dict[str, str]], transform: str = "", end: str = "", after: str = "",
            outputs: list[str] | None = None) -> str:
    answers = {case["input"].strip(): out for case, out in zip(cases, outputs or [c["output"] for c in cases])}
    return LOOKUP.format(answers=answers, transform=transform, end=end, after=after)


def _off_by_one(output: str) -> str:
    numbers = list(re.finditer(r"-?\d+", output))
    if numbers:
        last = numbers[-1]
        return output[:last.start()] + str(int(last.group()) + 1) + output[last.end():]
    tokens = list(re.finditer(r"\S+", output))
    if tokens:
        last = tokens[-1]
        return output[:last.end()] + "x" + output[last.end():]
    return "x"


def stdio_variants(sample: dict[str, Any]) -> list[Variant]:
    cases = stdio_cases(sample)
    if len({case["input"].strip() for case in cases}) != len(cases):
        return []  # two cases with one input: no lookup program passes both
    program = _lookup(cases)
    outputs = [case["output"] for case in cases]
    trailing = [re.sub(r"[ \t]*(\n|$)", r"  \1", out) for out in outputs]
    variants = [
        right(REFERENCE, respond(program), "a program that prints each test's expected output"),
        right(EQUIVALENT, respond(_lookup(cases, outputs=trailing)), "spaces at the end of every line"),
        right(EQUIVALENT, respond(_lookup(cases, outputs=[out.rstrip("\n") for out in outputs])), "no final newline"),
        right(EQUIVALENT, respond(_lookup(cases, outputs=[out + "\n\n" for out in outputs])), "extra blank lines at the end"),
        right(EQUIVALENT, respond(_lookup(cases, outputs=[re.sub(r"(?<=\S) (?=\S)", "  ", o) for o in outputs])),
              "two spaces between tokens"),
        right(EQUIVALENT, f"```\n{program}\n```", "an untagged fence"),
        wrong(NEAR_MISS, respond(_lookup(cases, outputs=[_off_by_one(o) for o in outputs])), "each output off by one"),
        wrong(NEAR_MISS, respond(_lookup(cases, outputs=[o + "\n0\n" for o in outputs])), "an extra line"),
        wrong(NEAR_MISS, respond("import sys\nsys.stdin.read()\n"), "prints nothing"),
        wrong(NEAR_MISS, respond(_lookup(cases, outputs=[o.split("\n", 1)[0] + "\n" for o in outputs]))
              if any(o.strip().count("\n") for o in outputs) else respond("print()\n"), "only the first line of each output"),
        wrong(SEVERAL, respond(program) + "\nOr:\n" + respond(_lookup(cases, outputs=[_off_by_one(o) for o in outputs])),
              "the passing program, then a wrong block"),
        wrong(FORGERY, respond(_lookup(cases, after="sys.stdout.flush()\nraise SystemExit(1)\n")),
              "the right output, then exit status 1"),
        wrong(FORGERY, respond(_lookup(cases, after="sys.stdout.flush()\nimport os\nos.kill(os.getpid(), 9)\n")),
              "the right output, then killed by a signal"),
    ]
    variants += _misplaced(program, _lookup(cases, outputs=[_off_by_one(o) for o in outputs]))
    if len({out.strip() for out in outputs}) > 1:
        first = outputs[0]
        variants.append(wrong(NEAR_MISS, respond(f"print({first!r}, end='')\n"), "the first case's output for every input"))
    return variants + degenerate_variants(respond)[:3]


def code_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    fmt = options.get("format") or "auto"
    fmt = detect_format(sample) if fmt == "auto" else fmt
    return stdio_variants(sample) if fmt == "stdio" else function_variants(sample, fmt)
