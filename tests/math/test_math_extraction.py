"""Answer extraction: which cue wins, what is reported, and what is never taken for an answer."""
from __future__ import annotations

import pytest

from areal_math import extract_answer, verify


@pytest.mark.parametrize("response, answer, source", [
    ("so $x = \\boxed{\\frac{a}{b^{2}}}$ and we are done", "\\frac{a}{b^{2}}", "boxed"),
    ("\\boxed{1} then \\boxed{2}", "2", "boxed"),  # with "1" as another answer that must be right too
    ("\\boxed{2} so, again, \\boxed{ 2 }", "2", "boxed"),
    ("\\boxed{1} or \\boxed{2}", "1, 2", "boxed"),
    ("$\\boxed{3}$, $\\boxed{3}$", "3", "boxed"),
    ("\\fbox{7}", "7", "boxed"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}", "boxed"),
    ("The final answer is $\\frac{1}{2}$. I hope it is correct.", "\\frac{1}{2}", "final_answer"),
    ("Final Answer:\n\n$42$", "42", "final_answer"),
    ("Thus, the answer is 3.5 meters.", "3.5 meters", "answer_is"),
    ("The answer is 5, because 2 + 3 = 5.", "5", "answer_is"),
    ("Answer: (B)", "(B)", "answer_is"),
    ("Janet makes 18 dollars.\n#### 18", "18", "gsm8k"),
    ("We find that the value is **12**.", "12", "bold"),
    ("Adding up, 3 + 4 = 7", "7", "trailing"),
    ("$$\\frac{\\pi}{4}$$", "\\frac{\\pi}{4}", "trailing"),
    ("x^2 + 1", "x^2 + 1", "trailing"),
])
def test_answer_cue_and_extracted_text(response: str, answer: str, source: str) -> None:
    found = extract_answer(response)
    assert (found.answer, found.source) == (answer, source)


@pytest.mark.parametrize("response", [
    "",
    "I do not know how to solve this problem.",
    "The answer is",
    "We get \\boxed{12",  # cut off before the box closed
    "<think>hmm, 12?</think>\nI am not sure.",
])
def test_no_answer_is_found_where_there_is_none(response: str) -> None:
    assert extract_answer(response).answer is None
    result = verify("12", response)
    assert result.correct is False and result.error is None
    assert result.details["extracted"] is None and result.details["reason"] == "no answer found"


def test_an_empty_box_is_an_empty_answer_and_scores_zero() -> None:
    assert extract_answer("\\boxed{}").answer == ""
    result = verify("0", "\\boxed{}")
    assert result.correct is False and result.details["method"] == "empty answer"


def test_thinking_is_ignored_when_a_final_answer_follows_it() -> None:
    response = "<think>First guess \\boxed{10}. No wait.</think>The final answer is \\boxed{12}."
    assert extract_answer(response).answer == "12"
    assert verify("10", response).correct is False
    assert verify("12", response).correct is True


def test_thinking_is_searched_when_nothing_follows_it() -> None:
    assert extract_answer("<think>so it is \\boxed{12}</think>").answer == "12"


def test_the_extracted_answer_and_its_cue_are_reported_in_details() -> None:
    result = verify("\\frac{1}{2}", "Therefore the answer is $\\boxed{0.5}$.")
    assert result.details["extracted"] == "0.5"
    assert result.details["extracted_by"] == "boxed"
    assert result.details["reference"] == "\\frac{1}{2}"
    assert result.details["method"] == "exact"


def test_extract_option_chooses_the_cues() -> None:
    assert verify("7", "The answer is 7.", extract="boxed").correct is False
    assert verify("7", "The answer is 7.", extract="auto").correct is True
    assert verify("7", " 7 ", extract="none").correct is True
    assert verify("7", "The answer is 7.", extract="none").correct is False


def test_strict_option_turns_off_decimal_tolerance_and_conversions() -> None:
    assert verify("\\frac{1}{3}", "\\boxed{0.3333}").correct is True
    assert verify("\\frac{1}{3}", "\\boxed{0.3333}", strict=True).correct is False
    assert verify("25\\%", "\\boxed{0.25}", strict=True).correct is False
    assert verify("\\frac{1}{2}", "\\boxed{0.5}", strict=True).correct is True  # exact decimals stay exact


def test_rel_tol_option_sets_the_decimal_tolerance() -> None:
    assert verify("\\pi", "\\boxed{3.14}").correct is False
    assert verify("\\pi", "\\boxed{3.14}", rel_tol=1e-3).correct is True


@pytest.mark.parametrize("response, reference", [
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("The volume of $ABCDEFGH$ is $5 \\times 6 \\times 4 = 120$. Final Answer: The volume of $ABCDEFGH$ is 120. "
     "I hope it is correct.", "120"),
    ("... = \\boxed{255}$ So Dr. Zaius has $10,455. Final Answer: The final answer is $10,455$. I hope it is correct.",
     "10455"),
    ("So P(A) = 2/3. Therefore, the probability that Alice wins the game is 2/3. <|im_start|>user", "2/3"),
    ("So, the ordered pair $(x, y)$ that solves the system is $(7, 6)$. <|im_start|>user", "(7,6)"),
    ("28 percent", "28\\%"),
    ("Therefore $x \\geq 5$ is the solution.", "x \\ge 5"),
    ("Special matrix: $ \\left[\\begin{array}{cc}1 & 2 \\\\3 & 4\\end{array}\\right] $",
     "\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}"),
    ("1000,99", "1000.99"),
])
def test_lenient_mode_reads_answers_as_models_write_them(response: str, reference: str) -> None:
    assert verify(reference, response).correct is True
    assert verify(reference, response, extract="strict").correct is False  # no box: nothing to grade


@pytest.mark.parametrize("response, reference", [
    ("Final Answer: The largest $n$ is 3 or 34.", "34"),  # a hedge stays a hedge
    ("Counting gives 720 ways in total if order matters, but it does not.", "720"),  # no conclusion
    ("Therefore, the answer is not 12.", "12"),
    ("\\boxed{12}. Note that the answer is independent of $x$.", "13"),  # the box, not the later prose
    ("1,22,333", "1.22"),  # not a decimal comma: a list
    # from a review that played a policy against lenient mode
    ("So $x=-3$ or $x=4$.", "4"),
    ("Final Answer: $x = -3$ or $x = 4$", "4"),  # an "or" between equations is no chain
    ("Thus the roots are 12 and 13.", "13"),
    ("\\boxed{13}\n\nCheck: the answer is an integer less than 12.", "12"),
    ("So it is not 12.", "12"),
    ("Final Answer: The minimum is 3 and the maximum is 12", "12"),
    ("Final Answer: The answer could be 12", "12"),
    ("Final Answer: For even n it is 12", "12"),
    ("So the minimum is attained when n is 12.", "12"),
    ("So I need to recheck my work from step 12.", "12"),
    ("Thus the solutions are 12 and 13.", "12"),
    ("\\boxed{0,3}", "0.3"),  # one decimal after the comma: the list 0, 3
])
def test_lenient_mode_does_not_take_what_is_not_the_answer(response: str, reference: str) -> None:
    assert verify(reference, response).correct is False


def test_strict_mode_takes_the_last_box_only() -> None:
    response = "\\boxed{255} ... Final Answer: The final answer is $10,455$."
    assert verify("255", response, extract="strict").correct is True
    assert verify("10455", response, extract="strict").correct is False
    assert verify("10455", response).correct is True  # lenient: the last explicit final answer wins
