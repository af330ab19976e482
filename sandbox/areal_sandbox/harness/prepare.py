"""Prepare function-mode tests in the supervisor (trusted code, long-lived, imports paid once).

The test code comes from the task, not the program, so it is parsed, instrumented and compiled here;
the runner receives code objects (``marshal``) and never needs ``ast``. Standard library only.
"""
from __future__ import annotations

import ast
import marshal
import os


def has_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def instrument_check(source: str, hook: str) -> tuple[ast.Module, int, str | None]:
    """Rewrite ``def check(candidate)`` so that each top-level statement holding an assert is one
    test reported through `hook`; a trailing ``check(<expr>)`` call is removed and its argument
    source returned as the candidate expression. Returns (module, number of tests, candidate)."""
    tree = ast.parse(source, "<tests>")
    candidate = None
    body = []
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "check"
                and len(call.args) == 1 and not call.keywords):
            candidate = ast.unparse(call.args[0])
            continue
        body.append(node)
    tree.body = body
    checks = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise ValueError("the test code defines no function check(candidate)")
    check = checks[-1]
    count = 0
    new_body: list[ast.stmt] = []
    for stmt in check.body:
        if not has_assert(stmt):
            new_body.append(stmt)
            continue
        wrapped = ast.parse(
            f"{hook}({count}, 'start', None)\n"
            "try:\n    pass\n"
            f"except BaseException as {hook}_exc:\n    {hook}({count}, 'error', {hook}_exc)\n"
            f"else:\n    {hook}({count}, 'ok', None)\n"
        ).body
        wrapped[1].body = [stmt]
        new_body.extend(wrapped)
        count += 1
    check.body = new_body or [ast.Pass()]
    ast.fix_missing_locations(tree)
    return tree, count, candidate


def function_payload(job: dict, token: str) -> bytes:
    """The runner's job (marshal): the program as text, everything else compiled.
    Raises ValueError/SyntaxError when the tests themselves are broken (a harness error)."""
    hook = "_areal_hook_" + os.urandom(8).hex()  # a name the program cannot predict
    if job.get("check") is not None:
        module, total, parsed = instrument_check(job["check"], hook)
        candidate = job.get("candidate") or parsed
        if not candidate:
            raise ValueError("no candidate: give `candidate` or end the test code with check(<expr>)")
        tests = [compile(module, "<tests>", "exec")]
        candidate_code = compile(candidate, "<candidate>", "eval")
    else:
        sources = job.get("tests") or []
        total = len(sources)
        tests = [compile(t, f"<test {i}>", "exec") for i, t in enumerate(sources)]
        candidate_code = None
    return marshal.dumps({
        "token": token,
        "program": job["program"],
        "prelude": compile(job.get("prelude") or "", "<prelude>", "exec"),
        "setup": compile(job.get("setup") or "", "<setup>", "exec"),
        "tests": tests,
        "candidate": candidate_code,
        "candidate_text": job.get("candidate") or "",
        "total": total,
        "hook": hook,
    })


def stdio_payload(program: str, token: str) -> bytes:
    return marshal.dumps({"token": token, "program": program})
