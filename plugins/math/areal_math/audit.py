"""Mutators for `areal audit` on the math reward: what a policy could try, and what must still count.

Numeric references (integers, decimals, fractions) get numeric near misses (off by one, sign, a factor of
ten, rounding), supersets (a set, a list, an interval, a ± range containing the reference) and equivalent
forms (a decimal for a fraction, `\\dfrac`, trailing zeros, thousands written `1{,}000`, `x = ...`).
Other references (expressions, intervals, tuples, choices, text) get one digit or letter changed, and the
shared families: hedges, several boxes, the reference quoted before a wrong box. An unboxed answer
("The answer is 5") is right only where the grading reads it (lenient, the eval mode).
"""
from __future__ import annotations

import random
import re
from fractions import Fraction
from typing import Any

from areal_core.audit import EQUIVALENT, OUTSIDE, SUPERSET, Variant, answer_variants, degenerate_variants, right, wrong

from areal_math import reference_text
from areal_math.answer import _UNIT_CANONICAL, clean, unit_signature

_INTEGER = re.compile(r"^-?\d+$")
_DECIMAL = re.compile(r"^-?\d*\.\d+$")
_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$|^(-?\d+)/(\d+)$")
_CHOICE = re.compile(r"^\\text\{\s*\(?([A-E])\)?\s*\}$|^\(?([A-E])\)$")


# "{a}/{b}" is left out: between numbers it is a division (0/1 is 0), not a hedge.
HEDGES = ("{a} or {b}", "{a} \\text{{ or }} {b}", "{a} (or maybe {b})", "either {a} or {b}", "{a}, or possibly {b}",
          "{a} \\lor {b}", "{a} \\text{{ (or perhaps }} {b} \\text{{)}}")


def respond(answer: str) -> str:
    return f"Let me work through the problem step by step.\nSo the final answer is $\\boxed{{{answer}}}$."


def numeric_value(reference: str) -> Fraction | None:
    """The exact value of a plain numeric reference (integer, decimal, fraction), else None."""
    text = reference.strip().strip("$").strip()
    if _INTEGER.match(text) or _DECIMAL.match(text):
        return Fraction(text)
    m = _FRACTION.match(text)
    if m:
        sign, numerator, denominator = (m.group(1), m.group(2), m.group(3)) if m.group(2) else ("", m.group(4), m.group(5))
        if int(denominator):
            return Fraction(int(numerator), int(denominator)) * (-1 if sign else 1)
    return None


def latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _decimal(value: Fraction) -> str | None:
    """The exact decimal of a value whose denominator has only the factors 2 and 5, else None."""
    d = value.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    if d != 1:
        return None
    places = 0
    while (value * 10 ** places).denominator != 1:
        places += 1
    return f"{float(value):.{places}f}"


def _numeric(reference: str, value: Fraction) -> tuple[list, list, list]:
    wrongs = [(latex(value + 1), "one more"), (latex(value - 1), "one less")]
    if value:
        wrongs += [(latex(-value), "the sign flipped"), (latex(value * 10), "ten times the value")]
    if value.denominator != 1 and abs(value - round(value)) * 1000 > abs(value):
        wrongs.append((str(round(value)), "rounded to a whole number"))
    equivalents = [(f" {reference} ", "spaces inside the box"), (f"x = {reference}", "x = ...")]
    if value.denominator == 1:
        equivalents.append((f"{value.numerator}.0", "with .0"))
        if abs(value) >= 1000:
            equivalents.append((f"{value.numerator:,}".replace(",", "{,}"), "thousands written {,}"))
    else:
        decimal = _decimal(value)
        if decimal is not None and decimal != reference.strip():
            equivalents.append((decimal, "the exact decimal"))
        if "\\frac" in reference:
            equivalents.append((reference.replace("\\frac", "\\dfrac"), "\\dfrac for \\frac"))
    low, high = latex(value - 1), latex(value + 1)
    supersets = [(f"\\{{{reference}, {high}\\}}", "a set holding it"), (f"{reference}, {high}", "a list holding it"),
                 (f"[{low}, {high}]", "an interval around it"), (f"{reference} \\pm 1", "a ± range around it"),
                 (f"{low} \\le x \\le {high}", "an inequality around it")]
    return wrongs, equivalents, supersets


def _changed(reference: str) -> list[tuple[str, str]]:
    """A non-numeric reference with one part changed: the last digit, else a choice letter, else a term."""
    m = _CHOICE.match(reference.strip())
    if m:
        letter = m.group(1) or m.group(2)
        other = "B" if letter == "A" else "A"
        return [(reference.replace(letter, other), f"choice {other} for {letter}")]
    digits = list(re.finditer(r"\d", reference))
    if digits:
        d = digits[-1]
        return [(reference[:d.start()] + str((int(d.group()) + 1) % 10) + reference[d.end():], "one digit changed"),
                (f"{reference} + 1" if not reference.lstrip().startswith(("(", "[", "\\{", "\\text")) else
                 reference[:digits[0].start()] + str((int(digits[0].group()) + 1) % 10) + reference[digits[0].end():],
                 "plus one" if not reference.lstrip().startswith(("(", "[", "\\{", "\\text")) else "first digit changed")]
    return [(f"{reference} + 1", "plus one")]


_OTHER_UNIT = {"cm": "m", "m": "cm", "in": "feet", "ft": "inches", "mm": "cm", "km": "m"}


def _unit_changes(reference: str) -> list[tuple[str, str]]:
    """The reference with its unit changed (cm for m, a cube for a square), when it states a known unit."""
    if not unit_signature(clean(reference)[1].units):
        return []
    changes = []
    for m in re.finditer(r"[A-Za-z]+", reference):
        base = _UNIT_CANONICAL.get(m.group().lower())
        if base is not None:
            other = _OTHER_UNIT.get(base, "km")
            changes.append((reference[:m.start()] + other + reference[m.end():], f"unit {m.group()} changed to {other}"))
            break
    power = re.search(r"\^\s*\{?\s*([23])", reference)
    if power:
        changes.append((reference[:power.start(1)] + ("3" if power.group(1) == "2" else "2") + reference[power.end(1):],
                        "the unit's power changed"))
    return changes


def math_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    reference = reference_text(sample["reference"]).strip()
    value = numeric_value(reference)
    if value is not None:
        wrongs, equivalents, supersets = _numeric(reference, value)
    else:
        wrongs, equivalents, supersets = _changed(reference), [(f" {reference} ", "spaces inside the box")], []
        if "\\left" in reference:
            equivalents.append((reference.replace("\\left", "").replace("\\right", ""), "without \\left and \\right"))
        if "\\frac" in reference:
            equivalents.append((reference.replace("\\frac", "\\dfrac"), "\\dfrac for \\frac"))
    wrongs += _unit_changes(reference)
    lenient = options.get("extract", "lenient") in ("lenient", "auto")
    outside = [(f"Let me work through the problem step by step.\nThe answer is ${reference}$.",
                "'The answer is ...' without a box")]
    variants = answer_variants(reference, wrongs, respond, equivalents=equivalents, supersets=supersets,
                               outside=outside, outside_counts=lenient, hedges=HEDGES)
    variants.append(wrong(OUTSIDE, f"The answer is ${reference}$ or ${wrongs[0][0]}$.",
                          "an unboxed hedge"))
    variants.append(wrong(SUPERSET, respond(reference) + f" Also $\\boxed{{{wrongs[0][0]}}}$.",
                          "a second box after the answer"))
    variants.append(right(EQUIVALENT, respond(reference) + f" Again: $\\boxed{{{reference}}}$.", "the same box twice"))
    for form, note in equivalents[1:2]:
        variants.append(right(EQUIVALENT, f"We get $\\boxed{{{form}}}$.\n" + respond(reference),
                              f"an earlier box in another form ({note})"))
    return variants + degenerate_variants(respond)


__all__ = ["math_variants", "numeric_value"]
