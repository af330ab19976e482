"""Host-side checks of the harness pieces that need no container: test splitting, the return guard."""
from __future__ import annotations

import collections
import re

import pytest

from areal_sandbox.harness import prepare, runner
from areal_sandbox.image import harness_hash

runner._init_function_mode()

HUMANEVAL_STYLE = '''
METADATA = {}


def check(candidate):
    assert candidate(1) == 2
    x = candidate(2)
    assert x == 3
    for i in range(3):
        assert candidate(i) == i + 1
    print("not a test")
'''


def test_each_top_level_statement_with_an_assert_is_one_test():
    _, count, candidate = prepare.instrument_check(HUMANEVAL_STYLE, "_hook")
    assert (count, candidate) == (3, None)


def test_a_trailing_check_call_gives_the_candidate_and_is_removed():
    source = "def check(candidate):\n    assert candidate(nums=[1]) == 1\n\n\ncheck(Solution().minOps)\n"
    module, count, candidate = prepare.instrument_check(source, "_hook")
    assert (count, candidate) == (1, "Solution().minOps")
    assert "Solution().minOps" not in __import__("ast").unparse(module)


def test_test_code_without_check_is_refused():
    with pytest.raises(ValueError, match="defines no function check"):
        prepare.instrument_check("assert True\n", "_hook")


class AlwaysEqual:
    def __eq__(self, other):
        return True


class SneakyInt(int):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [1, 2.5, "s", None, [1, (2, {3: "x"})], {1, 2}, frozenset(), b"x",
                                   collections.Counter("ab"), collections.deque([1]), range(3),
                                   re.match("a", "a"), {"k": [1.0]}.items()])
def test_built_in_values_pass_the_guard(value):
    assert runner.ReturnGuard().plain(value) == ""


@pytest.mark.parametrize("value", [AlwaysEqual(), SneakyInt(3), [1, [AlwaysEqual()]], {"k": SneakyInt(1)},
                                   (AlwaysEqual(),)])
def test_objects_that_can_fake_equality_fail_the_guard(value):
    assert runner.ReturnGuard().plain(value) != ""


def test_a_patched_stdlib_class_fails_the_guard():
    counter = collections.Counter("ab")
    original = collections.Counter.__eq__
    collections.Counter.__eq__ = lambda self, other: True
    try:
        assert "replaced __eq__" in runner.ReturnGuard().plain(counter)
    finally:
        collections.Counter.__eq__ = original


def test_a_guard_violation_is_not_an_exception_a_test_can_swallow():
    guard = runner.ReturnGuard()
    wrapped = guard.wrap(lambda: AlwaysEqual(), "f()")
    with pytest.raises(runner.GuardViolation):
        try:
            wrapped()
        except Exception:  # what a test's own error handling would do
            pass
    assert "AlwaysEqual" in guard.violation


def test_the_harness_hash_covers_every_harness_file():
    assert re.fullmatch(r"[0-9a-f]{16}", harness_hash())
