"""areal-math: a SymPy answer verifier for math tasks, registered as the reward ``math``.

    from areal_math import verify
    verify("\\frac{1}{2}", "... so the answer is \\boxed{0.5}")   # RewardResult(score=1.0, correct=True, ...)

The pipeline: find the final answer in the response (`areal_math.extract`), parse it and the reference
into typed answers (`areal_math.answer`, `areal_math.latex`), compare them (`areal_math.equivalence`).
`verify` runs in the calling process; SymPy work is kept cheap by guards (huge powers stay unevaluated,
simplify only runs on small expressions), but only a process can be stopped for sure: the reward pool
(`areal score`, training) and `MathVerifier` run each verification in a killable worker process with a
hard timeout.

Reward options (task spec ``reward.options`` or ``areal score --option k=v``):
  rel_tol  (float, 1e-4)  relative tolerance for a decimal approximation of an exact value
  strict   (bool, False)  no decimal tolerance, no percent/degree conversions, no vector-as-tuple or
                          one-element-list leniency
  extract  ("lenient")    "lenient" (evals; "auto" is its old name): every answer cue, the last explicit
                          final answer wins, the object found inside a final-answer sentence, chain
                          markers and sign-offs cut; "strict" (training) or "boxed": only \\boxed{};
                          "none": the whole response
Grading modes (`areal train` uses strict, `areal eval` lenient; a task spec's reward.modes chooses):
  strict = {extract: strict}, lenient = {extract: lenient}
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from areal_core import RewardResult, hookimpl
from areal_core.errors import ConfigError, InputError

from areal_math.answer import parse_answer
from areal_math.equivalence import Options, VerifierFailure, equivalent
from areal_math.extract import EXTRACT_MODES, extract_answer
from areal_math.isolated import MathVerifier

__version__ = "0.2.0"

OPTION_DEFAULTS: dict[str, Any] = {"rel_tol": 1e-4, "strict": False, "extract": "lenient"}


def reference_text(reference: Any) -> str:
    """A reference as text: data sets store answers as str, int (AIME 2025) or float (AMC 2023)."""
    if isinstance(reference, bool) or reference is None:
        raise InputError(f"reference {reference!r} is not an answer; expected a string or a number")
    if isinstance(reference, int):
        return str(reference)
    if isinstance(reference, float):
        if not math.isfinite(reference):
            raise InputError(f"reference {reference!r} is not a finite number")
        return str(int(reference)) if reference.is_integer() else repr(reference)
    if isinstance(reference, str):
        if not reference.strip():
            raise InputError("reference is an empty string; expected the answer")
        return reference
    raise InputError(f"reference of type {type(reference).__name__} is not an answer; expected a string or a number")


def check_options(options: Mapping[str, Any]) -> Options:
    """Validate reward options; a bad one is a ConfigError naming it and what was expected."""
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        raise ConfigError(f"reward 'math' got unknown option(s) {', '.join(map(repr, unknown))}; "
                          f"expected some of {', '.join(OPTION_DEFAULTS)}")
    rel_tol = options.get("rel_tol", OPTION_DEFAULTS["rel_tol"])
    if isinstance(rel_tol, bool) or not isinstance(rel_tol, (int, float)) or not 0 <= rel_tol < 1:
        raise ConfigError(f"reward 'math' option rel_tol={rel_tol!r}: expected a number in [0, 1)")
    strict = options.get("strict", OPTION_DEFAULTS["strict"])
    if not isinstance(strict, bool):
        raise ConfigError(f"reward 'math' option strict={strict!r}: expected true or false")
    extract = options.get("extract", OPTION_DEFAULTS["extract"])
    if extract not in EXTRACT_MODES:
        raise ConfigError(f"reward 'math' option extract={extract!r}: expected one of {', '.join(EXTRACT_MODES)}")
    return Options(rel_tol=float(rel_tol), strict=strict)


def verify(reference: Any, response: str, **options: Any) -> RewardResult:
    """Score one response against a reference answer, in this process.

    correct=True/False is the judgement (a response without an answer is simply wrong); `error` is set
    only when the verifier itself could not decide (a value too large to evaluate, an internal failure).
    `details` holds the extracted answer, how it was found and how the comparison ended.
    """
    opts = check_options(options)
    ref_text = reference_text(reference)
    if not isinstance(response, str):
        raise InputError(f"response of type {type(response).__name__} is not text")
    extraction = extract_answer(response, options.get("extract", "auto"))
    details: dict[str, Any] = {
        "extracted": None if extraction.answer is None else extraction.answer[:500],
        "extracted_by": extraction.source,
        "reference": ref_text[:500],
    }
    if extraction.answer is None:
        return RewardResult(score=0.0, correct=False, details={**details, "reason": "no answer found"})
    answer_text = extraction.answer
    if options.get("extract", "lenient") in ("lenient", "auto"):
        ref_text, answer_text = lenient_form(ref_text), lenient_form(answer_text)
    try:
        reference_answer = parse_answer(ref_text)
        answer = parse_answer(answer_text)
        outcome = equivalent(reference_answer, answer, opts)
    except VerifierFailure as exc:
        return RewardResult.failure(str(exc), **details)
    except RecursionError:
        return RewardResult.failure("the answer is nested too deeply to compare", **details)
    except Exception as exc:  # SymPy raises a wide range of types on odd input; a failure, not a wrong answer
        return RewardResult.failure(f"the verifier failed: {type(exc).__name__}: {str(exc)[:300]}", **details)
    details["method"] = outcome.method
    return RewardResult(score=1.0 if outcome.equal else 0.0, correct=outcome.equal, details=details)


_DECIMAL_COMMA = re.compile(r"^\$?\s*(-?\d+),(\d{2})\s*\$?$|^\$?\s*(-?0),(\d+)\s*\$?$")
_APPROX_TAIL = re.compile(r"\s*(?:\\approx|≈)[^=]*$")


def lenient_form(text: str) -> str:
    """How an answer reads in lenient mode (evals), as math-verify reads it: a decimal comma where
    it cannot be a thousands separator or a list (``1000,99``, ``0,111``: two decimals, or a leading
    zero), and a chain of equalities by its last side (``x = 5+5+1 = 7 = 11`` is ``x = 11``; a
    trailing ``\\approx 1.3`` dropped). Strict mode (training) reads neither."""
    stripped = text.strip()
    m = _DECIMAL_COMMA.match(stripped)
    if m:
        return ".".join(g for g in m.groups() if g is not None)
    if "=" in stripped and not re.search(r"[<>,;]|\\(?:le|ge|ne|neq|leq|geq|text|quad)(?![A-Za-z])", stripped):
        sides = [side.strip() for side in _APPROX_TAIL.sub("", stripped).split("=")]
        if len(sides) >= 3 and all(sides):
            first = sides[0]
            return f"{first} = {sides[-1]}" if re.fullmatch(r"[A-Za-z](?:_\{?\w+\}?)?", first) else sides[-1]
        if len(sides) == 2 and all(sides) and _APPROX_TAIL.search(stripped):
            return f"{sides[0]} = {sides[1]}"
    return text


def math_reward(sample: dict[str, Any], response: str, **options: Any) -> RewardResult:
    """The `math` reward: `verify(sample["reference"], response, **options)`."""
    return verify(sample["reference"], response, **options)


@hookimpl
def register_rewards(register):
    register(
        "math", math_reward, required_fields=("reference",),
        modes={"strict": {"extract": "strict"}, "lenient": {"extract": "lenient"}},
        description="Math answer verifier: extracts the final answer (\\boxed{} first) and compares it "
                    "with `reference` exactly, symbolically (SymPy), or within rel_tol for decimals.",
    )


__all__ = ["verify", "math_reward", "MathVerifier", "parse_answer", "extract_answer", "equivalent",
           "check_options", "reference_text", "__version__"]
