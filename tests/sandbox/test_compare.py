"""The stdio output comparison (runs on the host and inside the sandbox image)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from areal_sandbox.harness.compare import first_difference, outputs_match

WORD = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8)
SPACE = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", " \n"])


@given(st.lists(WORD, min_size=1, max_size=20), st.data())
def test_token_mode_ignores_how_tokens_are_separated(tokens, data):
    layout = "".join(t + data.draw(SPACE) for t in tokens)
    assert outputs_match(" ".join(tokens), layout)
    assert outputs_match(layout, "\n".join(tokens) + "\n\n")


@given(st.lists(WORD, min_size=1, max_size=10), st.integers(min_value=0, max_value=9),
       st.text(st.sampled_from("abcdefXYZ"), min_size=1, max_size=5))
def test_a_changed_token_is_a_wrong_answer(tokens, position, replacement):
    index = position % len(tokens)
    changed = list(tokens)
    changed[index] = replacement
    assert outputs_match(" ".join(tokens), " ".join(changed)) == (replacement == tokens[index])


@given(st.lists(WORD, min_size=1, max_size=10))
def test_missing_or_extra_tokens_never_match(tokens):
    assert not outputs_match(" ".join(tokens), " ".join(tokens[:-1]))
    assert not outputs_match(" ".join(tokens), " ".join(tokens + ["x"]))


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), st.floats(min_value=-0.9, max_value=0.9))
def test_reals_match_within_the_tolerance(value, fraction):
    expected = f"{value:.6f}"
    base = float(expected)
    near = base + fraction * 1e-6 * max(1.0, abs(base))
    assert outputs_match(expected, repr(near), float_tol=1e-6)
    far = base + 3e-6 * max(1.0, abs(base))
    assert not outputs_match(expected, repr(far), float_tol=1e-6)


@given(st.integers(min_value=-10**30, max_value=10**30))
def test_integers_compare_exactly_even_when_huge(value):
    assert outputs_match(str(value), str(value))
    assert not outputs_match(str(value), str(value + 1))
    assert not outputs_match(str(value), f"{value}.0")


def test_lines_mode_keeps_line_structure_but_ignores_trailing_blanks():
    assert outputs_match("1 2\n3\n", "1 2   \n3\n\n\n", mode="lines")
    assert not outputs_match("1 2\n3\n", "1\n2 3\n", mode="lines")
    assert outputs_match("1 2\n3\n", "1\n2 3\n", mode="tokens")


def test_exact_mode_and_case_option():
    assert not outputs_match("YES\n", "YES", mode="exact")
    assert not outputs_match("YES", "yes")
    assert outputs_match("YES", "yes", case_sensitive=False)


def test_unknown_mode_is_rejected_by_name():
    with pytest.raises(ValueError, match="tokens, lines, exact"):
        outputs_match("a", "a", mode="fuzzy")


def test_first_difference_names_the_token():
    assert first_difference("1 2 3", "1 5 3") == "token 2: expected '2', got '5'"
    assert first_difference("1 2", "1 2 3") == "expected 2 tokens, got 3"
