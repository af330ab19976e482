"""Host-side checks of the harness pieces that need no container: test splitting, free names,
and the data-only format of calls and replies (`wire.py`)."""
from __future__ import annotations

import ast
import collections
import decimal
import enum
import fractions
import marshal
import math
import re

import pytest

from areal_sandbox.harness import prepare, wire
from areal_sandbox.image import harness_hash

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


def test_definitions_and_constant_asserts_are_not_tests():
    source = ("def check(candidate):\n    def helper(x):\n        assert candidate(x)\n"
              "    assert True, 'debug'\n    assert candidate(1) == 2\n    helper(3)\n")
    assert prepare.instrument_check(source, "_hook")[1] == 1
    nested_only = "def check(candidate):\n    def t(a):\n        assert candidate(a)\n    t(1)\n    t(2)\n"
    assert prepare.instrument_check(nested_only, "_hook")[1] == 1  # the whole body is one test


def test_a_trailing_check_call_gives_the_candidate_and_is_removed():
    source = "def check(candidate):\n    assert candidate(nums=[1]) == 1\n\n\ncheck(Solution().minOps)\n"
    module, count, candidate = prepare.instrument_check(source, "_hook")
    assert (count, candidate) == (1, "Solution().minOps")
    assert "Solution().minOps" not in __import__("ast").unparse(module)


def test_test_code_without_check_is_refused():
    with pytest.raises(ValueError, match="defines no function check"):
        prepare.instrument_check("assert True\n", "_hook")


def test_free_names_are_what_the_tests_read_and_do_not_bind():
    trees = [ast.parse("import math\nassert math.isclose(volume_sphere(10), 4188.79, rel_tol=1e-3)"),
             ast.parse("xs = [1]\nassert sorted(f(xs, key=lambda k: k)) == xs\nfor i in range(2): assert g(i)")]
    assert prepare.free_names(trees) == ["f", "g", "range", "sorted", "volume_sphere"]


DATA = [None, True, False, 0, -5, 2**31, -2**70, 10**5000, 1.5, -0.0, float("inf"), 1 + 2j, "", "a\udc80z",
        b"\x00x", (), (1, (2,)), [1, [2, [3]]], {1: "a", (2, 3): [4]}, {1, (2, 3)}, frozenset({"x"}), Ellipsis,
        list(range(3000)), "é" * 1000]


@pytest.mark.parametrize("value", DATA, ids=lambda v: type(v).__name__)
def test_plain_data_crosses_exactly(value):
    back = wire.strict_loads(marshal.dumps(value, wire.MARSHAL_VERSION))
    assert type(back) is type(value)
    assert back == value or (back != back and value != value)
    if isinstance(value, float):
        assert math.copysign(1.0, back) == math.copysign(1.0, value)


Point = collections.namedtuple("Point", "x y")


class Level(enum.IntEnum):
    HIGH = 3


@pytest.mark.parametrize("value, expected", [
    (collections.deque([1, 2], 5), collections.deque([1, 2], 5)),
    (collections.Counter("aab"), collections.Counter("aab")),
    (collections.OrderedDict(b=1, a=2), collections.OrderedDict(b=1, a=2)),
    (collections.defaultdict(list, {1: [2]}), collections.defaultdict(list, {1: [2]})),
    (bytearray(b"ab"), b"ab"), (range(1, 9, 2), range(1, 9, 2)),
    (fractions.Fraction(1, 3), fractions.Fraction(1, 3)), (decimal.Decimal("1.10"), decimal.Decimal("1.10")),
    (Point(1, 2), (1, 2)), (Level.HIGH, 3), ({(1, 2): Point(3, 4)}, {(1, 2): (3, 4)}),
])
def test_other_values_cross_tagged_as_built_in_values(value, expected):
    body = wire.strict_loads(wire.pack(("ok", 1), value))
    back = wire.unpack_value(body[2], body[3])
    assert back == expected and type(back) is type(expected)


def test_an_iterator_crosses_as_an_iterator_over_its_items():
    body = wire.strict_loads(wire.pack(("ok", 1), (x * x for x in range(4))))
    back = wire.unpack_value(body[2], body[3])
    assert not isinstance(back, list) and list(back) == [0, 1, 4, 9]


class AlwaysEqual:
    def __eq__(self, other):
        return True


class SneakyInt(int):
    def __eq__(self, other):
        return True


def test_subclasses_cross_as_their_built_in_value_and_compare_by_its_rules():
    body = wire.strict_loads(wire.pack(("ok", 1), [SneakyInt(3)]))
    back = wire.unpack_value(body[2], body[3])
    assert type(back[0]) is int and back[0] == 3 and back[0] != 4


def test_objects_that_are_not_data_never_cross():
    for value in (AlwaysEqual(), [1, AlwaysEqual()], {"k": lambda: 1}, re.compile("a")):
        with pytest.raises(wire.NotData):
            wire.pack(("ok", 1), value)
    kept = []
    opaque = lambda value, name: kept.append(value) or ("ob", len(kept) - 1, name, "", True)  # noqa: E731
    body = wire.strict_loads(wire.pack(("ok", 1), [AlwaysEqual()], opaque=opaque))
    assert body[3] == [("ob", 0, f"{__name__}.AlwaysEqual", "", True)] and kept[0].__class__ is AlwaysEqual


def test_a_value_that_contains_itself_does_not_cross():
    loop: list = []
    loop.append(loop)
    with pytest.raises(wire.NotData, match="nested deeper"):
        wire.pack(("ok", 1), loop)


@pytest.mark.parametrize("data", [
    marshal.dumps(compile("1", "<x>", "eval")),  # a code object
    marshal.dumps(["a", "a"], 4),  # version 4 writes references
    b"r\x00\x00\x00\x00",  # a reference
    b"(\x05\x00\x00\x00N",  # a tuple cut short
    b"u\xff\xff\xff\x7f",  # a length beyond the end
    b"l\xff\xff\xff\x7f",  # a huge integer with no digits
    b"l\x01\x00\x00\x00\xff\xff",  # a digit over 15 bits
    b"NN",  # bytes after the value
    b"<\x01\x00\x00\x00[\x00\x00\x00\x00",  # an unhashable set item
    b"u\x01\x00\x00\x00\xff",  # not UTF-8
    b"[\x01\x00\x00\x00" * 300 + b"N",  # nested too deep
    b"",
])
def test_the_strict_reader_refuses_anything_but_plain_data(data):
    with pytest.raises(wire.NotData):
        wire.strict_loads(data)


def test_unknown_or_malformed_records_are_refused():
    for body in [("zz", 1), ("rg", 1, 2, 0), ("dd", "eval", []), ("fr", 1, 0), ("de", "nan?"), (),
                 ("ct", [[1]]), ("ref", "f"), ("ob", 0, "x", "", True)]:
        with pytest.raises(wire.NotData):
            wire.untag(body)


def test_the_harness_hash_covers_every_harness_file():
    assert re.fullmatch(r"[0-9a-f]{16}", harness_hash())
