"""The mutators areal-core brings, registered as a default plugin: degenerate outputs for every reward, and,
for a reward no plugin wrote mutators for, hedges and several answers around its samples' `reference`."""
from __future__ import annotations

import random
from typing import Any

from areal_core.audit.variants import (HEDGE, HEDGE_TEMPLATES, NEAR_MISS, QUOTED, SEVERAL, Variant,
                                       degenerate_variants, wrong)
from areal_core.plugins import hookimpl

FRAMES = ("{}", "The answer is {}.")


def degenerate(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    return degenerate_variants()


def _near_miss(reference: str) -> str:
    try:
        return str(int(reference) + 1)
    except ValueError:
        pass
    try:
        return repr(float(reference) * 1.5 + 1.0)
    except ValueError:
        return reference[::-1] if reference[::-1] != reference else reference + "0"


def reference_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    """Whatever the answer format, a hedge between the reference and a wrong answer, two answers, or the
    reference quoted before a wrong one is no answer: all must be judged wrong. (What must be judged right
    depends on the format: only the reward's own mutators can say.) Nothing without a `reference`."""
    reference = sample.get("reference")
    if isinstance(reference, bool) or not isinstance(reference, (str, int, float)) or not str(reference).strip():
        return []
    right_answer = str(reference).strip()
    wrong_answer = _near_miss(right_answer)
    variants = []
    for frame in FRAMES:
        variants.append(wrong(NEAR_MISS, frame.format(wrong_answer), f"a near miss, framed {frame!r}"))
        for template in HEDGE_TEMPLATES:
            for a, b, order in ((right_answer, wrong_answer, "right, wrong"), (wrong_answer, right_answer, "wrong, right")):
                variants.append(wrong(HEDGE, frame.format(template.format(a=a, b=b)), f"{template!r} ({order})"))
        variants.append(wrong(SEVERAL, frame.format(right_answer) + "\n" + frame.format(wrong_answer), "right, then wrong"))
        variants.append(wrong(SEVERAL, frame.format(wrong_answer) + "\n" + frame.format(right_answer), "wrong, then right"))
        variants.append(wrong(QUOTED, f"It is not {right_answer}.\n" + frame.format(wrong_answer),
                              "the reference in the reasoning, a wrong final answer"))
    return variants


@hookimpl
def register_audit_mutators(register) -> None:
    register("*", degenerate, name="degenerate",
             description="empty, whitespace, huge, binary and deeply nested responses (must be judged wrong)")
