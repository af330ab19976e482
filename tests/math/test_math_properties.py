"""Property tests (hypothesis): the verifier never raises, always answers within its timeout when run in
a worker, is consistent with itself, and the extractor finds the box (and refuses boxes that differ)."""
from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from areal_core import RewardResult
from areal_math import MathVerifier, extract_answer, verify

TOKENS = [
    "\\frac", "\\dfrac", "\\tfrac12", "{", "}", "^", "_", "\\sqrt", "[", "]", "(", ")", "0", "1", "2", "7", "9", "12",
    "0.5", "3.14", "x", "y", "e", "i", "\\pi", "+", "-", "*", "/", "!", "=", "<", "\\le", "\\geq", ",", "\\pm",
    "\\cup", "\\infty", "\\{", "\\}", "|", "\\left(", "\\right)", "\\left[", "\\right]", "\\sin", "\\log_2", "\\ln",
    "\\cdot", "\\times", ".", "\\%", "^\\circ", "\\text{", "\\text{ or }", " or ", " ", "\\boxed{", "\\fbox{",
    "\\begin{pmatrix}", "&", "\\\\", "\\end{pmatrix}", "10^{", "99999", "\\binom", "2003^{2002^{2001}}",
    "0.\\overline{3}", "$", "#### ", "**", "\\", "\\mathbb{R}", "\\in", "\\lfloor", "\\rfloor", "'", "\\$",
    "<think>", "</think>", "The answer is ", "Final Answer: ", "\n", "\\mbox{ cm}^2", "(C)", "204_5", "1,000",
]
latex_like = st.lists(st.sampled_from(TOKENS), min_size=0, max_size=30).map("".join) | st.text(max_size=60)
references = st.sampled_from(["5", "\\frac{1}{2}", "(3,4]", "x^2+1", "1,-2", "y = 2x + 3", "\\text{(C)}", "204_5",
                              "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\infty", "0.15", "1 \\pm \\sqrt{19}"]) | \
    latex_like.filter(lambda s: s.strip() != "")


def _is_verdict(result: RewardResult) -> bool:
    if result.error is not None:
        return result.score == 0.0 and result.correct is None
    return result.correct in (True, False) and result.score == (1.0 if result.correct else 0.0)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reference=references, response=latex_like)
def test_verify_never_raises_and_always_returns_a_verdict_or_an_error(reference: str, response: str) -> None:
    assert _is_verdict(verify(reference, response))


@pytest.fixture(scope="module")
def worker_verifier():
    mp = pytest.MonkeyPatch()
    mp.setenv("AREAL_PLUGINS", "math")  # the worker processes load only this plugin
    mp.setenv("OMP_NUM_THREADS", "1")
    with MathVerifier(timeout=5.0, workers=1) as verifier:
        verifier.verify("1", "\\boxed{1}")  # start-up (imports) outside the timed calls
        yield verifier
    mp.undo()


# A worker replaced after a timeout imports SymPy again before its next request runs.
START_UP_ALLOWANCE = 20.0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(reference=references, response=latex_like)
def test_verification_in_a_worker_returns_within_its_timeout(worker_verifier: MathVerifier, reference: str, response: str) -> None:
    start = time.monotonic()
    result = worker_verifier.verify(reference, response)
    elapsed = time.monotonic() - start
    assert _is_verdict(result)
    assert elapsed < worker_verifier.timeout + START_UP_ALLOWANCE
    if result.error and "timed out" in result.error:
        assert elapsed >= worker_verifier.timeout


# --- self-consistency on random well-formed expressions --------------------------------------------
def _expressions(max_leaves: int = 6):
    leaves = st.sampled_from(["1", "2", "3", "7", "10", "x", "y", "\\pi", "e", "\\frac{1}{2}", "0.25", "\\sqrt{2}"])

    def extend(children):
        return st.one_of(
            st.tuples(children, children).map(lambda t: f"{t[0]}+{t[1]}"),
            st.tuples(children, children).map(lambda t: f"({t[0]})-({t[1]})"),
            st.tuples(children, children).map(lambda t: f"({t[0]})\\cdot({t[1]})"),
            st.tuples(children, st.sampled_from(["2", "3", "7", "x+2"])).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
            st.tuples(children, st.sampled_from(["2", "3", "-1"])).map(lambda t: f"\\left({t[0]}\\right)^{{{t[1]}}}"),
            children.map(lambda c: f"\\sqrt{{({c})^2+1}}"),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=_expressions())
def test_an_expression_verifies_against_itself_and_not_against_itself_plus_one(expr: str) -> None:
    same = verify(expr, f"So the answer is $\\boxed{{{expr}}}$.")
    if same.details.get("method") == "undefined value":  # e.g. a division by (1)-(1): never correct
        assert same.correct is False
        return
    assert same.correct is True, same
    shifted = verify(expr, f"So the answer is $\\boxed{{{expr}+1}}$.")
    assert shifted.correct is False, shifted


@settings(max_examples=150, deadline=None)
@given(expr=_expressions(4))
def test_an_expression_verifies_against_its_expanded_reordered_form(expr: str) -> None:
    import sympy

    from areal_math.answer import Scalar, parse_answer

    parsed = parse_answer(expr)
    assume(isinstance(parsed, Scalar) and not parsed.approx and not parsed.expr.has(sympy.zoo, sympy.nan))
    rewritten = sympy.latex(sympy.expand(parsed.expr), order="rev-lex")  # SymPy's own LaTeX, other term order
    assert verify(expr, f"\\boxed{{{rewritten}}}").correct is True, rewritten


# --- extraction -------------------------------------------------------------------------------------
prose = st.text(alphabet=st.characters(blacklist_characters="\\{}$", blacklist_categories=("Cs",)), max_size=80)
answers = st.lists(st.sampled_from(["1", "23", "x", "+", "-", "\\frac{1}{2}", "\\sqrt{3}", "(", ")", "{a}", " ", "^2", ","]),
                   min_size=1, max_size=8).map("".join).filter(lambda s: s.strip() != "")


@settings(max_examples=300, deadline=None)
@given(before=prose, earlier=answers, answer=answers, after=prose)
def test_the_last_box_is_extracted_whatever_surrounds_it_with_the_earlier_one_if_it_differs(
        before: str, earlier: str, answer: str, after: str) -> None:
    assume("boxed" not in before + after and "fbox" not in before + after and "answer" not in before.lower())
    assume(not re.search(r"(?i)\b(?:or|either|maybe|perhaps|possibly|probably)\b", after))
    text = f"{before}\\boxed{{{earlier}}} so, more thinking. {before}\\boxed{{{answer}}}{after}"
    for mode in ("lenient", "strict"):
        found = extract_answer(text, mode)
        assert (found.source, found.answer) == ("boxed", answer.strip())
        same = re.sub(r"\s+", "", earlier) == re.sub(r"\s+", "", answer)
        assert found.others == (() if same else (earlier.strip(),))  # a differing box must be right too

