"""Several boxed answers are judged together: right only if every one of them is (one answer written twice,
or in two forms, is one answer), unless some boxes are named the final answer; a hedge right after the box
is no answer. In both grading modes."""
from __future__ import annotations

import pytest

from areal_math import verify

CASES = [
    ("1/2", r"So $p=\boxed{\frac12}$. Thus the final answer is $\boxed{\dfrac{1}{2}}$.", True),
    ("5", r"$\boxed{x = 5}$. The answer is $\boxed{5}$.", True),
    ("1/2", r"\boxed{\frac{1}{2}}, i.e. \boxed{0.5}", True),
    ("12", "Part 1: \\boxed{3} ... **Final Answer**\n\\boxed{12}", True),
    ("12", r"The answer is $\boxed{12}$. Or is it? Yes.", True),
    ("12", r"$\boxed{12}$, which is the number of apples.", True),
    ("18", "So the final answer is $\\boxed{19}$.\nSo the final answer is $\\boxed{18}$.", False),
    ("18", r"\boxed{18} then \boxed{19}", False),
    ("19", r"\boxed{18} then \boxed{19}", False),
    ("12", r"So the final answer is $\boxed{12}$. Also $\boxed{13}$.", False),
    ("864", r"\boxed{864 \mbox{ inches}^3} ... The final answer is $\boxed{864 \mbox{ inches}^2}$.", True),
    (r"864 \mbox{ inches}^2", r"\boxed{864 \mbox{ inches}^3} then \boxed{864 \mbox{ inches}^2}", False),
    ("12", r"\boxed{12} (or possibly 13)", False),
    ("12", r"\boxed{12} or 13", False),
    ("12", r"The answer is $\boxed{12}$ (or possibly 13).", False),
    (r"\text{(C)}", r"The answer is $\boxed{C}$ (or possibly A).", False),
    (r"\text{(C)}", r"\boxed{(C)} (or maybe (A))", False),
    (r"\text{(C)}", r"\boxed{\text{(C)} (or maybe \text{(A)})}", False),
    (r"\text{(C)}", r"\boxed{(C) \ P(A) = 0.3}", True),
]


@pytest.mark.parametrize("mode", ["strict", "lenient"])
@pytest.mark.parametrize("reference, response, right", CASES)
def test_several_boxes_and_hedges_after_a_box(reference, response, right, mode):
    result = verify(reference, response, extract=mode)
    assert result.correct is right, result.details
