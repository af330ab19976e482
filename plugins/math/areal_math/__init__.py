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
from functools import lru_cache
from typing import Any, Mapping

from areal_core import RewardResult, hookimpl
from areal_core.errors import ConfigError, InputError

from areal_math.answer import MAX_ANSWER_CHARS, clean, parse_answer, unit_signature
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
    extraction = extract_answer(response, options.get("extract", "lenient"))
    details: dict[str, Any] = {
        "extracted": None if extraction.answer is None else extraction.answer[:500],
        "extracted_by": extraction.source,
        "reference": ref_text[:500],
    }
    if extraction.answer is None:
        reason = ("the boxed answer is hedged ('or possibly ...' right after it)" if extraction.source == "hedged"
                  else "no answer found")
        return RewardResult(score=0.0, correct=False, details={**details, "reason": reason})
    answer_text = extraction.answer
    if len(answer_text) > MAX_ANSWER_CHARS:  # no answer is this long; cleaning it would cost quadratic time
        return RewardResult(score=0.0, correct=False, details={
            **details, "reason": f"the answer is {len(answer_text):,} characters; at most {MAX_ANSWER_CHARS:,} are compared"})
    if options.get("extract", "lenient") in ("lenient", "auto"):
        answer_text, ref_text = lenient_form(answer_text, ref_text), lenient_reference(ref_text)
    if _units_differ(answer_text, ref_text):  # 15 cm^3 for 15 cm^2: a unit change is a different answer
        return RewardResult(score=0.0, correct=False, details={**details, "method": "different units"})
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
    if outcome.equal and extraction.others:  # several boxed answers: right only if each one is
        differing = [other for other in extraction.others if not _same_as(reference_answer, ref_text, other, opts)]
        if differing:
            return RewardResult(score=0.0, correct=False, details={
                **details, "method": "several different boxed answers", "other_answer": differing[0][:200]})
    return RewardResult(score=1.0 if outcome.equal else 0.0, correct=outcome.equal, details=details)


@lru_cache(maxsize=4096)
def _stated_units(text: str) -> frozenset[tuple[str, int]] | None:
    return unit_signature(clean(text)[1].units)


def _units_differ(answer_text: str, ref_text: str) -> bool:
    """Whether both state units and they differ. The answer is cleaned only when the reference states a
    unit (most do not), and a reference's units once per process: no second cleaning on the hot path."""
    expected = _stated_units(ref_text)
    if not expected:
        return False
    stated = unit_signature(clean(answer_text)[1].units)
    return bool(stated and stated != expected)


def _same_as(reference_answer: Any, ref_text: str, text: str, opts: Options) -> bool:
    if len(text) > MAX_ANSWER_CHARS or _units_differ(text, ref_text):
        return False
    try:
        return equivalent(reference_answer, parse_answer(text), opts).equal
    except Exception:  # an odd answer SymPy cannot compare is not the same answer
        return False


_DECIMAL_COMMA = re.compile(r"^\$?\s*(-?\d+),(\d{2})\s*\$?$|^\$?\s*(-?0),(\d{2,})\s*\$?$")
_APPROX_TAIL = re.compile(r"\s*(?:\\approx|≈)[^=]*$")
# Anything but math between the sides of a chain: then it is not one chain (x = -3 or x = 4).
_NOT_A_CHAIN = re.compile(r"[$<>,;|]|\s/\s|\\(?:le|ge|ne|neq|leq|geq|lor|vee|wedge|land|mid|quad|qquad|enspace|to|"
                          r"implies|Rightarrow|rightarrow|text\w*|mbox|mathrm|operatorname)(?![A-Za-z])|\\\\|\\ |"
                          r"(?<![A-Za-z\\])[A-Za-z]{2,}")
_MATH_COMMANDS = re.compile(r"\\(?:frac|dfrac|sqrt|cdot|times|pi|left|right)(?![A-Za-z])")
_DECIMAL = re.compile(r"-?\d*\.\d+")


def lenient_form(answer: str, reference: str) -> str:
    """How a response's answer reads in lenient mode (evals), as math-verify reads it: a decimal
    comma where the reference is a decimal and the comma cannot be a thousands separator or a list
    (``1000,99``, ``0,111``: two decimals, or a leading zero); a chain of equalities that is math
    only, by its last side (``x = 5+5+1 = 7 = 11`` reads ``x = 11``; a trailing ``\\approx 1.3``
    dropped). Words, boxes, separators or connectives between the sides keep a chain whole
    (``x = -3 or x = 4``). The reference is never rewritten. Strict mode (training) reads neither."""
    stripped = answer.strip()
    m = _DECIMAL_COMMA.match(stripped)
    if m and _DECIMAL.fullmatch(reference.strip().strip("$").strip()):
        return ".".join(g for g in m.groups() if g is not None)
    return equality_chain(answer)


_LEADING_ZERO_DECIMAL = re.compile(r"^\$?\s*(-?0),(\d{3,})\s*\$?$")


def lenient_reference(reference: str) -> str:
    """A reference as lenient mode reads it: an equality chain by its last side, and a decimal comma
    only where no list reads the same (``0,111``: a leading zero and three or more decimals; a
    reference ``1,22`` may be the list 1, 22 and stays as it is)."""
    m = _LEADING_ZERO_DECIMAL.match(reference.strip())
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    return equality_chain(reference)


def equality_chain(text: str) -> str:
    """A chain of equalities that is math only, by its last side (``x = 5+5+1 = 7 = 11`` reads
    ``x = 11``, ``1 = \\zzz = x = 0`` reads ``0``); a trailing ``\\approx ...`` dropped. Lenient mode
    reads a reference this way too (the data set's own chain states its answer last)."""
    stripped = text.strip()
    body = _APPROX_TAIL.sub("", stripped)
    if "=" in body and not _NOT_A_CHAIN.search(_MATH_COMMANDS.sub(" ", body)):
        sides = [side.strip() for side in body.split("=")]
        if len(sides) >= 3 and all(sides):
            first = sides[0]
            return f"{first} = {sides[-1]}" if re.fullmatch(r"[A-Za-z](?:_\{?\w+\}?)?", first) else sides[-1]
        if len(sides) == 2 and all(sides) and body != stripped:
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


@hookimpl
def register_audit_mutators(register):
    from areal_math.audit import math_variants

    register("math", math_variants, description="numeric near misses, supersets, hedges, several boxes, equivalent forms")


__all__ = ["verify", "math_reward", "MathVerifier", "parse_answer", "extract_answer", "equivalent",
           "check_options", "reference_text", "__version__"]
