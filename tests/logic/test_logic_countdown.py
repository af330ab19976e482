"""Countdown: the eval-free expression parser, the rules, the generator and the solver."""
from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_logic import countdown as cd

PROPERTY = settings(deadline=None, max_examples=200)


def sample(numbers, target, use_all_numbers=False):
    return {"numbers": list(numbers), "target": target, "use_all_numbers": use_all_numbers}


# --- the expression language, checked against an independent evaluation of random trees ---------
@st.composite
def trees(draw, depth=4):
    """(tree, its exact value or None when it divides by zero) with random rendering choices."""
    if depth == 0 or draw(st.booleans()):
        return ("num", draw(st.integers(1, 999)))
    op = draw(st.sampled_from("+-*/"))
    return (op, draw(trees(depth=depth - 1)), draw(trees(depth=depth - 1)))


def value_of(tree):
    if tree[0] == "num":
        return Fraction(tree[1])
    left, right = value_of(tree[1]), value_of(tree[2])
    if left is None or right is None:
        return None
    if tree[0] == "/" and right == 0:
        return None
    return {"+": left + right, "-": left - right, "*": left * right}.get(tree[0]) if tree[0] != "/" else left / right


def leaves(tree):
    return [tree[1]] if tree[0] == "num" else leaves(tree[1]) + leaves(tree[2])


SYMBOLS = {"+": ["+"], "-": ["-", "\u2212"], "*": ["*", "\u00d7", "\u00b7"], "/": ["/", "\u00f7"]}


def render(tree, rng):
    if tree[0] == "num":
        return str(tree[1])
    symbol = rng.choice(SYMBOLS[tree[0]])
    space = rng.choice(["", " ", "  "])
    return f"({render(tree[1], rng)}{space}{symbol}{space}{render(tree[2], rng)})"


@PROPERTY
@given(tree=trees(), seed=st.integers(0, 10**6))
def test_parser_value_and_numbers_match_an_independent_evaluation_of_random_trees(tree, seed):
    text = render(tree, random.Random(seed))
    expected = value_of(tree)
    if expected is None:
        with pytest.raises(cd.Rejection, match="division by zero"):
            cd.evaluate_expression(text, max_numbers=64)
        return
    value, used = cd.evaluate_expression(text, max_numbers=64)
    assert value == expected
    assert used == leaves(tree)


def test_operator_precedence_and_left_associativity():
    for text, expected in [("2+3*4", 14), ("20-5-3", 12), ("48/4/2", 6), ("(2+3)*4", 20), ("2*3+4*5", 26),
                           ("100 - 4 * 3 / 6", 98), ("7 / 2", Fraction(7, 2))]:
        assert cd.evaluate_expression(text, max_numbers=8)[0] == expected, text


@PROPERTY
@given(text=st.text(max_size=300))
def test_arbitrary_text_never_raises_and_scores_within_bounds(text):
    for response in (text, f"<answer>{text}</answer>"):
        result = cd.reward(sample([1, 2, 3, 4], 10), response, partial_credit=True, format_score=0.1)
        assert 0.0 <= result.score <= 1.0 and result.error is None
        if result.score < 1.0:
            assert result.details["reason"]


# --- rules -------------------------------------------------------------------------------------
def test_right_expression_scores_one_and_reports_value_and_numbers():
    result = cd.reward(sample([25, 50, 75, 100], 175), "<think>...</think><answer>(100 + 75)</answer>")
    assert (result.score, result.correct) == (1.0, True)
    assert result.details["value"] == "175" and result.details["numbers_used"] == [100, 75]


def test_each_number_at_most_once_by_default_exactly_once_when_the_rule_says_so():
    assert cd.reward(sample([25, 50, 75, 100], 175), "<answer>100 + 75</answer>").score == 1.0
    strict = cd.reward(sample([25, 50, 75, 100], 175, use_all_numbers=True), "<answer>100 + 75</answer>")
    assert strict.score == 0.0 and "unused: 25, 50" in strict.details["reason"]
    assert cd.reward(sample([25, 50, 75, 100], 175, use_all_numbers=True), "<answer>100 + 75 + 50 - 25 - 25 </answer>").score == 0.0
    assert cd.reward(sample([25, 50, 75, 100], 175, use_all_numbers=True), "<answer>100 + 75 + 50 - 50</answer>").score == 0.0
    assert cd.reward(sample([25, 50, 75, 100], 175, use_all_numbers=True), "<answer>100 + 75 * (50 / 50)</answer>").score == 0.0
    assert cd.reward(sample([25, 50, 50, 100], 225, use_all_numbers=True), "<answer>100 + 25 + 50 + 50</answer>").score == 1.0
    # the reward option overrides the sample's rule
    assert cd.reward(sample([25, 50, 75, 100], 175, use_all_numbers=True), "<answer>100 + 75</answer>",
                     use_all_numbers=False).score == 1.0


def test_a_number_used_twice_or_not_given_is_wrong_but_well_formed():
    reused = cd.reward(sample([3, 5], 15), "<answer>3 * 5 + 3 - 3</answer>", format_score=0.1)
    assert reused.score == 0.1 and "beyond the numbers given" in reused.details["reason"]
    foreign = cd.reward(sample([3, 5], 15), "<answer>15</answer>")
    assert foreign.score == 0.0 and "15" in foreign.details["reason"]


def test_fractional_steps_are_exact_and_allowed_unless_integer_steps_is_set():
    puzzle = sample([1, 3, 4, 6], 24)
    answer = "<answer>6 / (1 - 3 / 4)</answer>"
    assert cd.reward(puzzle, answer).score == 1.0
    strict = cd.reward(puzzle, answer, integer_steps=True)
    assert strict.score == 0.0 and "integer_steps" in strict.details["reason"]


def test_a_trailing_equals_target_and_latex_operators_are_accepted():
    puzzle = sample([3, 4, 5], 17)
    assert cd.reward(puzzle, "<answer>3 * 4 + 5 = 17</answer>").score == 1.0
    assert cd.reward(puzzle, r"The answer is $\boxed{3 \times 4 + 5}$").score == 1.0
    assert cd.reward(puzzle, "<answer>3 * 4 + 5 = 12 + 5 = 17</answer>").details["failure"] == "unparseable"


def test_wrong_value_scores_zero_format_score_or_closeness_with_partial_credit():
    puzzle = sample([10, 20, 30], 100)
    answer = "<answer>10 + 20 + 30</answer>"
    assert cd.reward(puzzle, answer).score == 0.0
    assert cd.reward(puzzle, answer, format_score=0.1).score == pytest.approx(0.1)
    assert cd.reward(puzzle, answer, partial_credit=True).score == pytest.approx(0.6)
    assert cd.reward(puzzle, "<answer>10 * 20 * 30</answer>", partial_credit=True).score == 0.0


def test_text_instead_of_an_expression_gets_no_format_score():
    result = cd.reward(sample([1, 2], 3), "<answer>one plus two</answer>", format_score=0.1)
    assert (result.score, result.details["failure"]) == (0.0, "unparseable")


# --- hostile answers -------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, reason", [
    ("9**9**9", "powers"),
    ("9 ^ 9 ^ 9", "powers"),
    ("(" * 60 + "9" + ")" * 60, "nest deeper"),
    ("(" * 100_000 + "9" + ")" * 100_000, "characters"),
    ("9" * 5000, "characters"),
    ("99999999999999999999 * 9", "digits"),
    ("1" + "+1" * 400, "more than 12 numbers"),
    ("- - - - 9", "unary minus"),
    ("__import__('os').system('true')", "unexpected"),
    ("lambda: 9", "unexpected"),
    ("9e9999", "unexpected"),
    ("2.5 * 4", "not a whole number"),
    ("\uff19 * 9", "FULLWIDTH DIGIT NINE"),
    ("9 * \u0669", "ARABIC-INDIC DIGIT NINE"),
    ("9 * 9\u00b2", "SUPERSCRIPT TWO"),
    ("9 9", "missing operator"),
    ("9 / (9 - 9)", "division by zero"),
])
def test_hostile_expressions_are_rejected_with_score_zero_and_a_reason(answer, reason):
    result = cd.reward(sample([9, 9, 9, 9], 81), f"<answer>{answer}</answer>", partial_credit=True, format_score=0.5)
    assert (result.score, result.correct, result.error) == (0.0, False, None)
    assert reason in result.details["reason"]


@pytest.mark.timeout(60)
def test_a_one_megabyte_response_is_rejected_unread():
    result = cd.reward(sample([9, 9], 81), "<answer>" + "9*" * 500_000 + "9</answer>")
    assert (result.score, result.details["failure"]) == (0.0, "too_long")


# --- generation and solving ------------------------------------------------------------------
@pytest.mark.parametrize("count, use_all", [(3, False), (4, False), (4, True), ([3, 5], True)])
def test_every_generated_puzzle_is_solvable_and_its_construction_scores_one(count, use_all):
    rows = list(cd.generate(0, 300, count=count, use_all_numbers=use_all))
    for row in rows:
        assert row["target"] not in row["numbers"] and 10 <= row["target"] <= 1000
        assert cd.reward(row, f"<answer>{row['solution']}</answer>").score == 1.0, row
    for row in rows[:100]:  # the solver finds a (possibly different) solution on its own
        found = cd.solve(row["numbers"], row["target"], use_all_numbers=use_all)
        assert found is not None and cd.reward(row, f"<answer>{found}</answer>").score == 1.0, (row, found)


def test_solver_reports_an_unreachable_target_and_respects_the_rule():
    assert cd.solve([2, 2], 7) is None
    assert cd.solve([2, 3, 100], 5) is not None
    assert cd.solve([2, 3, 100], 5, use_all_numbers=True, integer_steps=False) is None
    found = cd.solve([1, 2, 4], 7, use_all_numbers=True)
    value, used = cd.evaluate_expression(found, max_numbers=3)
    assert value == 7 and sorted(used) == [1, 2, 4]


def test_generation_is_deterministic_by_seed_and_the_splits_are_disjoint():
    assert list(cd.generate(3, 50)) == list(cd.generate(3, 50))
    assert list(cd.generate(3, 50)) != list(cd.generate(4, 50))
    key = lambda row: (tuple(sorted(row["numbers"])), row["target"])  # noqa: E731
    train = {key(r) for r in cd.generate(0, 2000, count=3, max_number=20, split="train")}
    test = {key(r) for r in cd.generate(0, 300, count=3, max_number=20, split="test")}
    assert not train & test


@pytest.mark.parametrize("options, message", [
    ({"count": 1}, "count"), ({"count": "four"}, "count"), ({"max_number": 1}, "max_number"),
    ({"min_target": 50, "max_target": 10}, "min_target"), ({"heldout_fraction": 1.5}, "heldout_fraction"),
])
def test_bad_generator_options_are_config_errors_naming_the_option(options, message):
    from areal_core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        list(cd.generate(0, 1, **options))
