"""Compare a program's output with the expected output, the way competitive-programming judges do.

Standard library only: this module runs inside the sandbox image and on the host.

Modes:
  ``tokens`` (default): both texts are split on any whitespace and compared token by token, so line
      breaks, repeated spaces and trailing blanks do not matter.
  ``lines``:  compared line by line after stripping trailing whitespace of each line and trailing
      empty lines; tokens within a line compare as in ``tokens``.
  ``exact``:  byte-for-byte equal text.

A token whose expected value is a decimal number with a fraction or exponent (``0.5``, ``1e-9``)
matches an actual number within ``float_tol``, absolute or relative to the expected value.
Integers compare exactly (``1`` never matches ``1.0``; huge integers are never rounded).
"""
from __future__ import annotations

import math
import re

MODES = ("tokens", "lines", "exact")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_INTEGER = re.compile(r"[+-]?\d+\Z")


def _is_real(token: str) -> bool:
    return _NUMBER.match(token) is not None and _INTEGER.match(token) is None


def tokens_match(expected: str, actual: str, float_tol: float = 1e-6, case_sensitive: bool = True) -> bool:
    """One token: equal text, or (expected a real number) a number within `float_tol`."""
    if expected == actual:
        return True
    if not case_sensitive and expected.lower() == actual.lower():
        return True
    if float_tol > 0 and _is_real(expected) and _NUMBER.match(actual) is not None:
        a, b = float(expected), float(actual)
        if math.isfinite(a) and math.isfinite(b):
            return abs(a - b) <= float_tol * max(1.0, abs(a))
    return False


def _token_lists_match(expected: list[str], actual: list[str], float_tol: float, case_sensitive: bool) -> bool:
    if len(expected) != len(actual):
        return False
    return all(tokens_match(e, a, float_tol, case_sensitive) for e, a in zip(expected, actual))


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(expected: str, actual: str, mode: str = "tokens", float_tol: float = 1e-6,
                  case_sensitive: bool = True) -> bool:
    """True when `actual` is an accepted answer for `expected` under the given mode."""
    if mode == "exact":
        return expected == actual
    if mode == "tokens":
        return _token_lists_match(expected.split(), actual.split(), float_tol, case_sensitive)
    if mode == "lines":
        want, got = _lines(expected), _lines(actual)
        if len(want) != len(got):
            return False
        return all(_token_lists_match(w.split(), g.split(), float_tol, case_sensitive) for w, g in zip(want, got))
    raise ValueError(f"compare mode must be one of {', '.join(MODES)}, got {mode!r}")


def first_difference(expected: str, actual: str, limit: int = 80) -> str:
    """A short human-readable note on where two outputs first differ (for verdict messages)."""
    want, got = expected.split(), actual.split()
    for index, (w, g) in enumerate(zip(want, got)):
        if w != g:
            return f"token {index + 1}: expected {w[:limit]!r}, got {g[:limit]!r}"
    if len(want) != len(got):
        return f"expected {len(want)} tokens, got {len(got)}"
    return "outputs differ in whitespace"
