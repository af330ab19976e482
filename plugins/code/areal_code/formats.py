"""Turn a task sample plus a program into a sandbox `Execution`, one function per test format.

  humaneval  ``prompt`` + completion, then ``test`` (defines ``check(candidate)``), then
             ``check(<entry_point>)``; the entry point is the only program name the tests use. A completion that defines the entry point itself is
             appended to the prompt (so the prompt's imports and helpers stay available); the
             prompt's helpers are restored before the tests run.
  mbpp       ``code`` then ``test_imports`` / ``test_setup_code``, then each of ``test_list`` (asserts)
             as one test; the functions the reference ``code`` defines are the program's names
             the tests call, even one named like a built-in.
  leetcode   ``tests.functional``: defines ``check(candidate)`` and ends with
             ``check(Solution().method)``; the program runs after LeetCode's usual imports.
  stdio      ``tests`` / ``test`` / ``input_output``: cases of stdin and expected stdout, in any of
             the shapes ``[{"input": s, "output": s}]``, ``[{"input": {"stdin": s}, "output":
             {"stdout": s}}]`` or ``{"inputs": [...], "outputs": [...]}``, possibly JSON-encoded.

Task data is only ever parsed as JSON; nothing is unpickled or evaluated on the host.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any, Callable

from areal_core.errors import InputError
from areal_sandbox import Execution

FORMATS = ("humaneval", "mbpp", "leetcode", "stdio")

# What LeetCode's Python 3 environment has imported before a solution runs (solutions use `List`,
# `Counter`, `inf`, `SortedList` ... without importing them).
LEETCODE_PRELUDE = """\
import bisect, collections, copy, datetime, functools, heapq, itertools, math, operator, random, re, string
from typing import *
from functools import *
from collections import *
from itertools import *
from heapq import *
from bisect import *
from string import *
from operator import *
from math import *
inf = float('inf')
try:
    from sortedcontainers import SortedList, SortedDict, SortedSet
except ImportError:
    pass
"""


def _field(sample: dict[str, Any], name: str, fmt: str) -> Any:
    if name not in sample or sample[name] is None:
        raise InputError(f"code reward ({fmt} format): the sample has no field {name!r} "
                         f"(fields present: {', '.join(sorted(sample)) or 'none'})")
    return sample[name]


def _maybe_json(value: Any, what: str) -> Any:
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("[", "{"):
            try:
                return json.loads(stripped)
            except ValueError as exc:
                raise InputError(f"code reward: {what} looks like JSON but does not parse ({exc})") from None
    return value


def detect_format(sample: dict[str, Any]) -> str:
    """The test format a sample's fields imply."""
    if "entry_point" in sample and "test" in sample:
        return "humaneval"
    if "test_list" in sample:
        return "mbpp"
    tests = _maybe_json(sample.get("tests"), "field 'tests'")
    if isinstance(tests, dict) and "functional" in tests:
        return "leetcode"
    if any(k in sample for k in ("tests", "test", "input_output")):
        return "stdio"
    raise InputError("code reward: cannot tell the test format from the sample's fields "
                     f"({', '.join(sorted(sample)) or 'none'}); set the reward option format= "
                     f"to one of {', '.join(FORMATS)}")


def humaneval_program(prompt: str, completion: str, entry_point: str) -> str:
    """The program for a HumanEval sample: the prompt plus the completion, whichever form it has."""
    if re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", completion, re.MULTILINE):
        return prompt.rstrip("\n") + "\n\n" + completion
    return prompt + completion


def prompt_helpers(prompt: str, entry_point: str) -> str:
    """The prompt's own definitions other than the entry point (imports, helper functions such as
    HumanEval/32's ``poly``). They run again after the program, so that tests calling a helper get
    the prompt's version, not one the completion redefined (``def poly(*a): return 0``)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    kept = [node for node in tree.body
            if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point)
            and not isinstance(node, ast.Expr)]
    return ast.unparse(ast.Module(body=kept, type_ignores=[])) if kept else ""


def humaneval_execution(sample: dict[str, Any], code: str, options: dict[str, Any]) -> Execution:
    prompt = str(_field(sample, "prompt", "humaneval"))
    entry_point = str(_field(sample, "entry_point", "humaneval"))
    test = str(_field(sample, "test", "humaneval"))
    if not entry_point.isidentifier():
        raise InputError(f"code reward (humaneval format): entry_point {entry_point!r} is not a Python name")
    return Execution(mode="function", program=humaneval_program(prompt, code, entry_point), check=test,
                     candidate=entry_point, setup=prompt_helpers(prompt, entry_point),
                     program_names=(entry_point,), stop_on_failure=False)


def mbpp_execution(sample: dict[str, Any], code: str, options: dict[str, Any]) -> Execution:
    tests = _maybe_json(_field(sample, "test_list", "mbpp"), "field 'test_list'")
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests) or not tests:
        raise InputError("code reward (mbpp format): field 'test_list' must be a non-empty list of assert statements")
    imports = _maybe_json(sample.get("test_imports") or [], "field 'test_imports'")
    if isinstance(imports, str):
        imports = [imports]
    setup = "\n".join(list(imports) + [str(sample.get("test_setup_code") or "")])
    extra = _maybe_json(sample.get("challenge_test_list") or [], "field 'challenge_test_list'")
    if options.get("challenge_tests") and isinstance(extra, list):
        tests = tests + [t for t in extra if isinstance(t, str)]
    return Execution(mode="function", program=code, setup=setup, tests=tuple(tests),
                     test_names=tuple(f"assert {i}" for i in range(len(tests))),
                     program_names=reference_functions(sample.get("code")), stop_on_failure=False)


def reference_functions(reference) -> tuple[str, ...] | None:
    """The functions and classes the task's reference solution defines: the names its tests call
    from the program, even one that shadows a built-in (MBPP's task 126 is a function ``sum``).
    None without a reference: then every name the tests read and do not define may be the program's."""
    if not isinstance(reference, str):
        return None
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        return None
    return tuple(node.name for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def leetcode_execution(sample: dict[str, Any], code: str, options: dict[str, Any]) -> Execution:
    tests = _maybe_json(_field(sample, "tests", "leetcode"), "field 'tests'")
    if isinstance(tests, dict):
        tests = tests.get("functional")
    if not isinstance(tests, str) or "def check" not in tests:
        raise InputError("code reward (leetcode format): field 'tests' must hold 'functional' code that "
                         "defines check(candidate)")
    prelude = options.get("prelude")
    return Execution(mode="function", program=code, check=tests, candidate=options.get("candidate"),
                     prelude=LEETCODE_PRELUDE if prelude is None else str(prelude), program_names=(),
                     stop_on_failure=False)


def stdio_cases(sample: dict[str, Any]) -> list[dict[str, str]]:
    """Normalise the sample's test cases to [{"input": str, "output": str}]."""
    for name in ("tests", "test", "input_output"):
        if name in sample and sample[name] is not None:
            raw = _maybe_json(sample[name], f"field {name!r}")
            break
    else:
        raise InputError("code reward (stdio format): the sample has no field 'tests', 'test' or 'input_output' "
                         f"(fields present: {', '.join(sorted(sample)) or 'none'})")
    if isinstance(raw, dict) and "inputs" in raw and "outputs" in raw:
        if len(raw["inputs"]) != len(raw["outputs"]):
            raise InputError(f"code reward (stdio format): field {name!r} has {len(raw['inputs'])} inputs but "
                             f"{len(raw['outputs'])} outputs")
        raw = [{"input": i, "output": o} for i, o in zip(raw["inputs"], raw["outputs"])]
    if not isinstance(raw, list) or not raw:
        raise InputError(f"code reward (stdio format): field {name!r} must be a non-empty list of test cases")
    cases = []
    for index, case in enumerate(raw):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise InputError(f"code reward (stdio format): case {index} of field {name!r} needs 'input' and 'output'")
        given, expected = case["input"], case["output"]
        if isinstance(given, dict):
            given = given.get("stdin", "")
        if isinstance(expected, dict):
            expected = expected.get("stdout", "")
        if isinstance(given, list):
            given = "\n".join(map(str, given))
        if isinstance(expected, list):
            expected = "\n".join(map(str, expected))
        cases.append({"input": str(given), "output": str(expected)})
    return cases


def stdio_execution(sample: dict[str, Any], code: str, options: dict[str, Any]) -> Execution:
    cases = stdio_cases(sample)
    max_cases = options.get("max_cases")
    if max_cases:
        cases = cases[: int(max_cases)]
    compare = {"mode": options.get("compare", "tokens"), "float_tol": float(options.get("float_tol", 1e-6)),
               "case_sensitive": bool(options.get("case_sensitive", True))}
    return Execution(mode="stdio", program=code, cases=tuple(cases), compare=compare,
                     stop_on_failure=bool(options.get("stop_on_failure", True)))


BUILDERS: dict[str, Callable[[dict[str, Any], str, dict[str, Any]], Execution]] = {
    "humaneval": humaneval_execution,
    "mbpp": mbpp_execution,
    "leetcode": leetcode_execution,
    "stdio": stdio_execution,
}
