"""Prepare function-mode tests in the supervisor (trusted code, long-lived, imports paid once).

The test code comes from the task, not the program, so it is parsed, instrumented and compiled here,
once, before the tests' process is forked (judge.py). Standard library only.
"""
from __future__ import annotations

import ast
import functools
import marshal


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def has_assert(node: ast.AST) -> bool:
    """True when the statement itself asserts something: asserts inside a nested function or
    class only run when it is called (a definition passes nothing), and ``assert True`` or any
    other constant checks nothing (HumanEval's 48 ``assert True, "..."`` lines)."""
    if isinstance(node, _NESTED):
        return False
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Assert) and not isinstance(item.test, ast.Constant):
            return True
        stack.extend(child for child in ast.iter_child_nodes(item) if not isinstance(child, _NESTED))
    return False


def _reported(stmts: list[ast.stmt], hook: str, index: int) -> list[ast.stmt]:
    """`stmts` as test number `index`: a start event, then ok or the exception that stopped them."""
    wrapped = ast.parse(
        f"{hook}({index}, 'start', None)\n"
        "try:\n    pass\n"
        f"except BaseException as {hook}_exc:\n    {hook}({index}, 'error', {hook}_exc)\n"
        f"else:\n    {hook}({index}, 'ok', None)\n"
    ).body
    wrapped[1].body = stmts
    return wrapped


def checks_between_tests(tree: ast.Module) -> bool:
    """True when check() has a statement that is not a test after its first test: such a statement
    can fail the run after tests passed (judge.py's ``void``), so a run cut short before check()
    finished must not keep those passes (the program could cut it short to escape the statement)."""
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    body = checks[-1].body if checks else []
    tests = [index for index, stmt in enumerate(body) if has_assert(stmt)]
    return bool(tests) and any(not has_assert(stmt) and not _inert(stmt) for stmt in body[tests[0] + 1:])


def _inert(stmt: ast.stmt) -> bool:
    """A statement that cannot fail: ``pass``, a bare constant, ``assert True, "..."``."""
    if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
        return True
    return isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and bool(stmt.test.value)


def instrument_check(source: str, hook: str) -> tuple[ast.Module, int, str | None]:
    """Rewrite ``def check(candidate)`` so that each top-level statement holding an assert is one
    test reported through `hook` (a check whose asserts all sit in helpers it defines is one test);
    a trailing ``check(<expr>)`` call is removed and its argument source returned as the candidate
    expression. Returns (module, number of tests, candidate). Any other statement of check() that
    raises fails the whole run (judge.py): it is a check too (``if ...: raise``, a helper's assert)."""
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
        new_body.extend(_reported([stmt], hook, count))
        count += 1
    if count == 0:
        new_body, count = _reported(list(check.body), hook, 0), 1
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


# The tests' process cannot be reached by the program, so the hook's name need not be secret: one
# name lets prepared tests be reused (a group of responses to one prompt shares its tests).
HOOK = "_areal_test_hook"


@functools.lru_cache(maxsize=256)
def prepared_tests(check: str | None, candidate: str | None, tests: tuple[str, ...] | None,
                   prelude: str, setup: str) -> dict:
    """The compiled, instrumented tests of a job (everything but the program); cached."""
    if check is not None:
        module, total, parsed = instrument_check(check, HOOK)
        candidate = candidate or parsed
        if not candidate:
            raise ValueError("no candidate: give `candidate` or end the test code with check(<expr>)")
        original = ast.parse(check, "<tests>")  # the names as written, without the hook
        names, all_or_nothing = free_names([original]), checks_between_tests(original)
        compiled = [compile(module, "<tests>", "exec")]
        candidate_code = compile(candidate, "<candidate>", "eval")
    else:
        total = len(tests or ())
        trees = [ast.parse(t, f"<test {i}>") for i, t in enumerate(tests or ())]
        names, all_or_nothing = free_names(trees), False
        compiled = [compile(tree, f"<test {i}>", "exec") for i, tree in enumerate(trees)]
        candidate = candidate_code = None
    return {
        "prelude": compile(prelude, "<prelude>", "exec"),
        "setup": compile(setup, "<setup>", "exec"),
        "tests": compiled,
        "names": names,
        "candidate": candidate_code,
        "candidate_text": candidate or "",
        "total": total,
        "all_or_nothing": all_or_nothing,
        "hook": HOOK,
    }


def function_job(job: dict) -> dict:
    """Everything the tests' process needs (it is forked from the supervisor, so it gets code
    objects, not bytes). Raises ValueError/SyntaxError when the tests themselves are broken."""
    tests = job.get("tests")
    prepared = dict(prepared_tests(job.get("check"), job.get("candidate"),
                                   None if tests is None else tuple(str(t) for t in tests),
                                   job.get("prelude") or "", job.get("setup") or ""))
    prepared["program"] = job["program"]
    # None: every name the tests read and do not define may be the program's (ad-hoc tests);
    # a list: only those (the data set formats), so a test's helper is never the program's.
    names = job.get("program_names")
    prepared["program_names"] = None if names is None else [str(n) for n in names]
    return prepared


def stdio_payload(program: str, token: str) -> bytes:
    return marshal.dumps({"token": token, "program": program})
