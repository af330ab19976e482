"""Hedges and several answers score 0 in any order; explanations, steps, echoed puzzles and tags mentioned
in the reasoning do not turn a right answer into a conflict. (The audit, `areal audit`, fuzzes these families
on whole data sets; these are the cases found by hand and in review.)"""
from __future__ import annotations

import pytest

from areal_logic import countdown, knights_knaves, sudoku

KK = {"names": ["Mason", "Ella", "Noah"], "solution": [True, False, True]}
REST = "\n(2) Ella is a knave\n(3) Noah is a knight"


@pytest.mark.parametrize("first", [
    "(1) Mason is a knight/knave", "(1) Mason is a knight (or maybe a knave)", "(1) Mason is either a knight or a knave",
    "(1) Mason is a knight or a knave", "(1) Mason is a knight, possibly a knave", "(1) Mason is a knight, but could be a knave",
    "(1) Mason is a knight. Or maybe a knave.", "(1) Mason is a knight... or a knave.", "(1) Mason is a knight\nor knave",
    "(1) Mason is a knight (50%) or knave (50%).", "(1) Mason is a knight? No, a knave.", "(1) Mason is a knight and a knave",
])
def test_a_hedged_role_is_a_conflict(first):
    result = knights_knaves.reward(KK, f"<answer>\n{first}{REST}\n</answer>")
    assert (result.score, result.details["failure"]) == (0.0, "conflict")


@pytest.mark.parametrize("first", [
    "(1) Mason is a knight, and knaves always lie, so Ella is a knave", "(1) Mason is a knight (a knave could not say that).",
    "(1) Mason is a knight - a knave would be lying.", "(1) Mason is a knight because knaves always lie",
    "(1) Mason is a knight, not a knave", "(1) Mason is a knight, or else a knave would contradict.",
])
def test_an_aside_about_knaves_is_not_a_second_role(first):
    assert knights_knaves.reward(KK, f"<answer>\n{first}{REST}\n</answer>").score == 1.0


def test_answer_tags_named_in_the_reasoning_are_not_answers():
    response = f"<think>I must answer inside <answer> </answer> tags.</think><answer>\n(1) Mason is a knight{REST}\n</answer>"
    assert knights_knaves.reward(KK, response).score == 1.0
    assert countdown.reward({"numbers": [25, 5, 4], "target": 80},
                            "<think>Like <answer>(1 + 2) * 3</answer>.</think><answer>(25 - 5) * 4</answer>").score == 1.0


CD = {"numbers": [25, 5, 4], "target": 80}


@pytest.mark.parametrize("answer, right", [
    ("(25-5)*4 = 80\n(25 - 5) * 4", True), ("(25 - 5) * 4\n\n(25 - 5) × 4 = 80", True),
    ("25 - 5 = 20\n20 * 4 = 80\n(25 - 5) * 4 = 80", True), ("(25 - 5) * 4\n80", True), ("4 * (25 - 5)\n(25 - 5) * 4", True),
    ("Alternatively: 25 * 4 - 5\n(25 - 5) * 4", False), ("25*4-5 ?\n(25 - 5) * 4", False),
    ("(25 - 5) * 4 + 1\n(25 - 5) * 4", False), ("(25 - 5) * 4\n(25 - 5) * 4 + 1", False),
    ("(25 - 5) * 4 - 1 = 80\n(25 - 5) * 4", False),
])
def test_countdown_tells_other_answers_from_steps(answer, right):
    assert countdown.reward(CD, f"<answer>{answer}</answer>").score == (1.0 if right else 0.0)


SD = {"puzzle": "0310103400200000", "solution": "4312123434212143"}
RIGHT = "4 3 1 2\n1 2 3 4\n3 4 2 1\n2 1 4 3"
WRONG = "4 3 2 1\n1 2 3 4\n3 4 2 1\n2 1 4 3"


@pytest.mark.parametrize("answer, right", [
    (RIGHT, True), (". 3 | 1 .\n1 . | 3 4\n----+----\n. . | 2 .\n. . | . .\n\nSolved:\n" + RIGHT, True),
    (RIGHT + "\n\n" + RIGHT, True), ("[[4,3,1,2],[1,2,3,4],[3,4,2,1],[2,1,4,3]]", True),
    (WRONG + "\n" + RIGHT, False), (RIGHT + "\n" + WRONG, False), ("[[4,3,2,1],[1,2,3,4],[3,4,2,1],[2,1,4,3]]\n" + RIGHT, False),
    ("4321123434212143\n" + RIGHT, False), (RIGHT + "\nor maybe: 4321 1234 3421 2143", False), ("0 0 0 0\n" + WRONG + "\n" + RIGHT, False),
])
def test_sudoku_several_complete_grids_are_a_conflict(answer, right):
    assert sudoku.reward(SD, f"<answer>\n{answer}\n</answer>").score == (1.0 if right else 0.0)
