"""Prepare function-mode tests in the supervisor (trusted code, long-lived, imports paid once).

The test code comes from the task, not the program, so it is parsed, instrumented and compiled here,
once, before the tests' process is forked (judge.py). Standard library only.
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


def free_names(trees: list[ast.AST]) -> list[str]:
    """Names the test code reads but never binds: the program's functions it calls (MBPP's
    ``remove_Occ``), the program's constants, or built-ins (left to the tests' process to sort out)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
    return sorted(loaded - bound)


def function_job(job: dict) -> dict:
    """Everything the tests' process needs (it is forked from the supervisor, so it gets code
    objects, not bytes). Raises ValueError/SyntaxError when the tests themselves are broken."""
    hook = "_areal_hook_" + os.urandom(8).hex()
    if job.get("check") is not None:
        module, total, parsed = instrument_check(job["check"], hook)
        candidate = job.get("candidate") or parsed
        if not candidate:
            raise ValueError("no candidate: give `candidate` or end the test code with check(<expr>)")
        trees: list[ast.AST] = [module]
        tests = [compile(module, "<tests>", "exec")]
        candidate_code = compile(candidate, "<candidate>", "eval")
    else:
        sources = job.get("tests") or []
        total = len(sources)
        trees = [ast.parse(t, f"<test {i}>") for i, t in enumerate(sources)]
        tests = [compile(tree, f"<test {i}>", "exec") for i, tree in enumerate(trees)]
        candidate = candidate_code = None
    return {
        "program": job["program"],
        "prelude": compile(job.get("prelude") or "", "<prelude>", "exec"),
        "setup": compile(job.get("setup") or "", "<setup>", "exec"),
        "tests": tests,
        "names": free_names(trees),
        "program_names": [str(name) for name in job.get("program_names") or []],
        "candidate": candidate_code,
        "candidate_text": candidate or "",
        "total": total,
        "hook": hook,
    }


def stdio_payload(program: str, token: str) -> bytes:
    return marshal.dumps({"token": token, "program": program})
