"""Audit variants: responses a reward must judge wrong (forgeries, hedges, near misses) or right (the
reference in another form), and the builders plugins use to make them for their answer format.

A mutator is ``fn(sample, rng, options) -> Iterable[Variant]``: ``sample`` is a task sample with its
reference, ``rng`` a seeded ``random.Random``, ``options`` the reward options the audit scores with (a
mutator may read them, e.g. to know whether an unboxed answer counts). Plugins register mutators for
their rewards with the ``register_audit_mutators`` hook; `answer_variants` builds the families every
answer-typed reward shares from three things: the right answer, some wrong ones and how a response
frames an answer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

# The families of the audit. Plugins may add their own (any short name).
REFERENCE = "reference"          # the reference answer as the task asks for it: must be right
EQUIVALENT = "equivalent"        # the reference in another form the format allows: must be right
HEDGE = "hedge"                  # "A or B", "A/B", "A (or maybe B)", "either A or B"
SEVERAL = "several_answers"      # several final answers, the right one among them
SUPERSET = "superset"            # a set, list, interval or range that contains the reference
NEAR_MISS = "near_miss"          # off by one, rounding, sign, units, one part changed
QUOTED = "quoted_reference"      # the reference quoted in the reasoning, a different final answer
OUTSIDE = "outside_tag"          # the right answer outside the tag or box the format asks for
DEGENERATE = "degenerate"        # empty, huge, binary, deeply nested outputs

HEDGE_TEMPLATES = ("{a} or {b}", "{a}/{b}", "{a} (or maybe {b})", "either {a} or {b}", "{a}, or possibly {b}")


@dataclass(frozen=True)
class Variant:
    """One response to judge. expect: True when the reward must judge it right, False when wrong."""

    family: str
    response: str
    expect: bool
    note: str = ""


Mutator = Callable[..., Iterable[Variant]]


def wrong(family: str, response: str, note: str) -> Variant:
    return Variant(family, response, False, note)


def right(family: str, response: str, note: str) -> Variant:
    return Variant(family, response, True, note)


def answer_variants(correct: str, wrongs: Sequence[tuple[str, str]], respond: Callable[[str], str], *,
                    equivalents: Iterable[tuple[str, str]] = (), supersets: Iterable[tuple[str, str]] = (),
                    outside: Sequence[tuple[str, str]] = (), outside_counts: bool = False,
                    several: Callable[[Sequence[str]], str] | None = None,
                    hedges: Sequence[str] = HEDGE_TEMPLATES) -> list[Variant]:
    """The shared families for an answer that is one value in a frame (a box, a tag, a bare line).

    correct:     the reference as the task asks for it; respond(correct) must be judged right.
    wrongs:      (answer, note) pairs of answers that are surely wrong (near misses), best first; the first
                 two also make hedges, several answers and quoted references.
    equivalents: (answer, note) pairs: the reference in another allowed form (framed by `respond`).
    supersets:   (answer, note) pairs containing the reference (framed by `respond`): must be wrong.
    outside:     (whole response, note) pairs stating the right answer outside the frame; right when
                 `outside_counts` (e.g. a lenient grader reads "The answer is 5"), else wrong.
    several:     how several framed answers make one response (default: one per line).
    hedges:      templates of a hedge between {a} and {b} (math leaves out "{a}/{b}": a division).
    """
    join = several or "\n".join
    variants = [right(REFERENCE, respond(correct), "the reference")]
    variants += [right(EQUIVALENT, respond(form), note) for form, note in equivalents]
    variants += [wrong(NEAR_MISS, respond(w), note) for w, note in wrongs]
    variants += [wrong(SUPERSET, respond(s), note) for s, note in supersets]
    for w, _ in wrongs[:2]:
        for template in hedges:
            variants.append(wrong(HEDGE, respond(template.format(a=correct, b=w)), template.format(a="right", b="wrong")))
            variants.append(wrong(HEDGE, respond(template.format(a=w, b=correct)), template.format(a="wrong", b="right")))
        variants.append(wrong(SEVERAL, join([respond(correct), respond(w)]), "right answer, then a wrong one"))
        variants.append(wrong(SEVERAL, join([respond(w), respond(correct)]), "wrong answer, then the right one"))
        variants.append(wrong(QUOTED, f"At first I thought the answer was {correct}, but no.\n" + respond(w),
                              "the reference in the reasoning, a wrong final answer"))
    if len(wrongs) >= 2:
        variants.append(wrong(SEVERAL, join([respond(wrongs[0][0]), respond(correct), respond(wrongs[1][0])]),
                              "the right answer between two wrong ones"))
    variants += [Variant(OUTSIDE, text, outside_counts, note) for text, note in outside]
    return variants


def degenerate_variants(respond: Callable[[str], str] | None = None) -> list[Variant]:
    """Outputs no reward may accept: empty, huge, binary, deeply nested. Every reward is audited on them
    as whole responses; a plugin passes `respond` to audit them framed as its answers too."""
    depth = 20_000
    bodies = [
        ("", "empty"),
        (" \n\t\n ", "whitespace only"),
        ("the answer " * 100_000, "huge (1.1 MB of prose)"),
        ("9" * 1_000_000, "huge (a million-digit number)"),
        ("".join(map(chr, range(256))) * 40, "binary (every byte value, NULs included)"),
        ("\ud800\udfff\x00\ufffe", "lone surrogates, NUL and a non-character"),
        ("(" * depth + ")" * depth, f"parentheses nested {depth:,} deep"),
        ("[" * depth + "]" * depth, f"brackets nested {depth:,} deep"),
        ("{" * depth + "}" * depth, f"braces nested {depth:,} deep"),
        ("\\boxed{" * 2_000 + "}" * 2_000, "boxes nested 2,000 deep"),
        ("<answer>" * 2_000 + "</answer>" * 2_000, "answer tags nested 2,000 deep"),
    ]
    if respond is None:
        return [wrong(DEGENERATE, body, note) for body, note in bodies]
    return [wrong(DEGENERATE, respond(body), f"{note}, as the answer") for body, note in bodies[:1] + bodies[3:]]
