"""Function mode as the tests see it: the program's functions are proxies whose calls cross as data.

Each test runs a real execution in the real sandbox and checks one rule of the crossing: what
arrives, what a test can catch, what a call changes in place, what happens to objects that are not
data and to tests that hand the program something that is not data.
"""
from __future__ import annotations

import pytest

from areal_sandbox import Execution


def run(pool, program: str, *tests: str, **fields):
    result = pool.run(Execution(mode="function", program=program, tests=tests, stop_on_failure=False, **fields))
    assert not result.error, result.error
    return result


def verdicts(result) -> list[str]:
    return [t.verdict for t in result.tests]


def test_values_cross_with_their_types(pool):
    program = ("import collections, fractions\n"
               "def echo(*args, **kwargs):\n    return args, kwargs\n"
               "def special():\n    return collections.Counter('aab'), collections.deque([1], 3), fractions.Fraction(1, 3)\n"
               "def squares(n):\n    return (i * i for i in range(n))\n")
    result = run(pool, program,
                 "assert echo(1, 2.5, 'x', b'y', None, [1], (2,), {3}, {4: 5}, k=10**40) == "
                 "((1, 2.5, 'x', b'y', None, [1], (2,), {3}, {4: 5}), {'k': 10**40})",
                 "a, k = echo(float('nan'), -0.0)\nassert a[0] != a[0] and str(a[1]) == '-0.0'",
                 "assert echo((1, 2))[0][0] == (1, 2) and echo([1, 2])[0][0] != (1, 2)",
                 "import collections, fractions\nc, d, f = special()\n"
                 "assert type(c) is collections.Counter and c == collections.Counter('aab')\n"
                 "assert type(d) is collections.deque and d.maxlen == 3 and f == fractions.Fraction(1, 3)",
                 "g = squares(4)\nassert g != [0, 1, 4, 9] and list(g) == [0, 1, 4, 9]")
    assert verdicts(result) == ["passed"] * 5, result


def test_exceptions_cross_by_class_and_arguments(pool):
    program = ("class Invalid(ValueError):\n    pass\n"
               "def parse(text):\n    if not text:\n        raise Invalid('empty', 7)\n    return int(text)\n"
               "def look(d):\n    return d['missing']\n")
    result = run(pool, program,
                 "try:\n    parse('')\nexcept ValueError as exc:\n    assert exc.args == ('empty', 7)\n"
                 "    assert type(exc).__name__ == 'Invalid'\nelse:\n    assert False",
                 "try:\n    parse('x')\nexcept ValueError:\n    pass",
                 "try:\n    look({})\nexcept KeyError as exc:\n    assert str(exc) == \"'missing'\"",
                 "assert parse('')")  # an exception the test does not catch
    assert verdicts(result) == ["passed", "passed", "passed", "runtime_error"], result
    assert "Invalid: ('empty', 7)" in result.tests[3].message


def test_changes_a_call_makes_to_its_arguments_reach_the_tests_objects(pool):
    program = ("def fill(xs, table, seen):\n    xs.append(len(xs))\n    xs[0] = 'first'\n    table['k'] = xs[:]\n"
               "    seen.add(1)\n\ndef pure(xs):\n    return sorted(xs)\n")
    result = run(pool, program,
                 "xs, table, seen = [5], {}, set()\nassert fill(xs, table, seen=seen) is None\n"
                 "assert xs == ['first', 1] and table == {'k': ['first', 1]} and seen == {1}",
                 "xs = [3, 1]\nassert pure(xs) == [1, 3] and xs == [3, 1]")
    assert verdicts(result) == ["passed", "passed"], result


def test_objects_that_are_not_data_stay_with_the_program_and_reach_the_tests_as_stand_ins(pool):
    program = ("import re\n"
               "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
               "    def __eq__(self, other):\n        return True\n"
               "def longest_chain(pairs):\n    return max(p.b - p.a for p in pairs)\n"
               "def find(text):\n    return re.search('b+', text)\n"
               "def same(x):\n    return x\n")
    result = run(pool, program,
                 "assert find('abbc') and not find('xyz')",
                 "assert longest_chain([Pair(1, 5), Pair(2, 3)]) == 4",  # program objects made by the tests
                 "assert Pair(1, 2) == Pair(1, 2)",  # the program's __eq__ never runs here
                 "m = find('abbc')\nassert same(m) is m and m == m and m != find('abbc')",
                 "assert find('abbc') == 'bb'")
    assert verdicts(result) == ["passed", "passed", "wrong_answer", "passed", "wrong_answer"], result
    assert result.stand_ins == 8  # one per object (1 + 2 + 2 + 2 + 1): the same object twice is one


def test_a_test_that_hands_the_program_something_not_data_is_unsupported(pool):
    program = "def apply(f, x):\n    return f(x)\n\ndef keep(x):\n    return 1\n"
    result = run(pool, program,
                 "assert apply(lambda v: v + 1, 1) == 2",
                 "class Box:\n    pass\nassert keep(Box()) == 1",
                 "try:\n    apply(print, 1)\nexcept BaseException:\n    pass",  # swallowing it does not help
                 "assert keep(3) == 1")
    assert verdicts(result) == ["unsupported", "unsupported", "unsupported", "passed"], result
    assert "cannot cross the process boundary as data" in result.tests[0].message


def test_names_the_tests_read_resolve_to_the_program_only_where_they_should(pool):
    program = ("import sys\n"
               "def sum(a, b):\n    return a * b\n"  # the function under test shadows a built-in
               "def sorted(xs):\n    return [0]\n"  # a built-in the tests use: never the program's
               "LIMIT = 3\n"
               "def size(t):\n    return sys.getsizeof(t)\n")
    result = run(pool, program,
                 "assert sum(2, 5) == 10",
                 "assert sorted([2, 1]) == [1, 2]",
                 "assert LIMIT == 3",  # a constant of the program is not a value a test may compare to
                 "assert size((1, 2)) == sys.getsizeof((1, 2))",  # `sys` from the program's import
                 program_names=("sum", "size"))
    assert verdicts(result) == ["passed", "passed", "runtime_error", "passed"], result
    assert "NameError" in result.tests[2].message


def test_limits_and_crashes_inside_a_call_keep_the_earlier_verdicts(pool):
    program = ("import os, time\n"
               "def f(x):\n    if x == 2:\n        time.sleep(30)\n    if x == 3:\n        os._exit(0)\n"
               "    if x == 4:\n        raise SystemExit(0)\n    if x == 5:\n        return bytearray(1 << 30)\n"
               "    return x\n")
    timed = run(pool, program, "assert f(1) == 1", "assert f(2) == 2", "assert f(1) == 1")
    assert verdicts(timed) == ["passed", "timeout", "skipped"], timed
    exited = run(pool, program, "assert f(1) == 1", "assert f(3) == 3", "assert f(1) == 1")
    assert verdicts(exited) == ["passed", "runtime_error", "runtime_error"], exited
    assert "before the tests completed" in exited.tests[1].message
    aborted = run(pool, program, "try:\n    f(4)\nexcept Exception:\n    pass", "assert f(1) == 1")
    assert verdicts(aborted) == ["runtime_error", "passed"], aborted
    memory = run(pool, program, "assert f(5)", "assert f(1) == 1")
    assert verdicts(memory) == ["memory_limit", "passed"], memory


@pytest.mark.parametrize("program, message", [
    ("def f(:\n", "does not compile"),
    ("raise RuntimeError('at import')\n", "RuntimeError: at import"),
    ("import os\nos._exit(3)\n", "exit status 3"),
])
def test_a_program_that_fails_to_load_fails_every_test(pool, program, message):
    result = run(pool, program, "assert f(1) == 1", "assert f(2) == 2")
    assert verdicts(result) == ["runtime_error", "runtime_error"], result
    assert message in result.tests[0].message, result.tests[0].message


def check_run(pool, program: str, check: str, **fields):
    result = pool.run(Execution(mode="function", program=program, check=check, candidate="f", stop_on_failure=False,
                                **fields))
    assert not result.error, result.error
    return result


@pytest.mark.parametrize("check", [
    # an assert in a helper the check defines, called after the last test
    "def eq(a, b):\n    assert a == b\ndef check(candidate):\n    assert candidate(1) == 1\n    eq(candidate(2), 4)\n",
    # a check whose asserts all sit in a nested helper: defining it passes nothing
    "def check(candidate):\n    def t(a, b):\n        assert candidate(a) == b\n    t(1, 1)\n    t(2, 4)\n",
    # a failure check written as a raise
    "def check(candidate):\n    assert candidate(1) == 1\n    if candidate(2) != 4:\n        raise Exception('wrong')\n",
    # assert True checks nothing
    "def check(candidate):\n    assert candidate(2) == 4\n    assert True, 'always'\n",
])
def test_a_check_that_fails_anywhere_passes_nothing(pool, check):
    result = check_run(pool, "def f(x):\n    return 1\n", check)
    assert "passed" not in verdicts(result), result
    # Cutting the run short before the failing statement (exit, kill everyone) does not keep the
    # pass of the test before it either.
    for escape in ("os._exit(0)", "os.kill(-1, 9)"):
        program = f"import os\ndef f(x):\n    if x == 2:\n        {escape}\n    return 1\n"
        cut = check_run(pool, program, check)
        assert "passed" not in verdicts(cut), (escape, cut)
    honest = check_run(pool, "def f(x):\n    return x * x\n", check)
    assert verdicts(honest) == ["passed"] * len(honest.tests), honest


def test_stop_iteration_from_the_program_cannot_end_a_tests_loop(pool):
    program = "def is_prime(n):\n    raise StopIteration\n"
    result = run(pool, program, "assert all(map(is_prime, [2, 3, 5, 7]))",
                 "for got, want in zip(map(is_prime, [2, 4]), [True, False]):\n    assert got == want")
    assert verdicts(result) == ["runtime_error", "runtime_error"], result


def test_only_the_tasks_program_names_are_the_programs(pool):
    """A helper the tests expect from the task (LeetCode's is_same_list) is never the program's."""
    program = "def f(x):\n    return None\ndef is_same(a, b):\n    return True\n"
    listed = run(pool, program, "assert is_same(f(1), [1])", program_names=("f",))
    assert verdicts(listed) == ["runtime_error"] and "NameError" in listed.tests[0].message, listed
    adhoc = run(pool, program, "assert is_same(f(1), [1])")  # no list: tests written by hand
    assert verdicts(adhoc) == ["passed"], adhoc


def test_what_the_program_sends_never_becomes_a_harness_error(pool):
    program = ("class E(ValueError):\n    def __str__(self):\n        return 'e'\n"
               "def big(*a):\n    raise E(10 ** 5000)\n"
               "def odd(*a):\n    raise ValueError('\\ud800 lone surrogate')\n")
    result = run(pool, program, "assert big()", "assert odd()", "assert big() == 1")
    assert verdicts(result) == ["runtime_error"] * 3, result
    assert "\\ud800" in result.tests[1].message
    result.tests[1].message.encode("utf-8")  # safe to write to a file
    forged = ("import os, marshal\nb = marshal.dumps(('load_error', 'program', 10 ** 5000), 2)\n"
              "os.write(4, len(b).to_bytes(4, 'big') + b)\nos._exit(0)\n")
    result = run(pool, forged, "assert f(1) == 1")
    assert verdicts(result) == ["runtime_error"], result
