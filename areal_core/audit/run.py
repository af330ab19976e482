"""Run an audit: make the variants of a task's samples, score them through the reward service, report.

An audit passes when no response that must be judged wrong is judged right (0 false positives), at most
`max_fn_rate` of the responses that must be judged right are not (a verifier error on one counts against
it: an error is never a pass), and the verifier neither failed nor timed out on any response (unless
`allow_errors`: a crash or a hang on a hostile response costs a training run its sample). Errors and
timeouts are counted apart, per family; so is the highest score a must-be-wrong response got (partial
credit or a format score on a hedge is reward too).
"""
from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from areal_core.audit import ANY_REWARD, DEGENERATE, MutatorSpec, Variant, has_own_mutators, mutators_for
from areal_core.errors import PluginError
from areal_core.rewards.config import RewardServiceConfig
from areal_core.rewards.score import score_rows
from areal_core.types import RewardResult

# Degenerate outputs do not depend on the sample much and are large: audit them on a few samples.
DEGENERATE_SAMPLES = 3
EXCERPT_CHARS = 300


@dataclass
class FamilyCounts:
    must_be_wrong: int = 0
    must_be_right: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    errors: int = 0
    timeouts: int = 0
    max_wrong_score: float = 0.0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"must_be_wrong": self.must_be_wrong, "must_be_right": self.must_be_right,
                "false_positives": self.false_positives, "false_negatives": self.false_negatives,
                "false_positive_rate": _rate(self.false_positives, self.must_be_wrong),
                "false_negative_rate": _rate(self.false_negatives, self.must_be_right),
                "errors": self.errors, "timeouts": self.timeouts, "max_wrong_score": self.max_wrong_score,
                "examples": self.examples}


def _rate(count: int, total: int) -> float:
    return count / total if total else 0.0


def _excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates stay readable
    return text if len(text) <= limit else f"{text[:limit // 2]} ... [{len(text):,} chars] ... {text[-limit // 2:]}"


def pick_samples(samples: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """`n` samples drawn with `seed`, in data set order (all of them when n is 0 or at least their number)."""
    if not n or n >= len(samples):
        return list(samples)
    chosen = sorted(random.Random(f"areal-audit:{seed}").sample(range(len(samples)), n))
    return [samples[i] for i in chosen]


def make_variants(samples: list[dict[str, Any]], mutators: list[MutatorSpec], options: Mapping[str, Any],
                  seed: int) -> list[tuple[dict[str, Any], Variant, str]]:
    """(sample, variant, mutator name) for every sample and mutator; a mutator that raises or yields
    something else than Variants is a PluginError naming it and the sample."""
    made = []
    for index, sample in enumerate(samples):
        rng_seed = f"areal-audit:{seed}:{sample.get('id', index)}"
        for spec in mutators:
            if spec.reward == ANY_REWARD and index >= DEGENERATE_SAMPLES:
                continue
            where = f"audit mutator {spec.name!r} of plugin {spec.plugin!r} on sample {sample.get('id', index)!r}"
            try:
                variants = list(spec.fn(dict(sample), random.Random(rng_seed), dict(options)))
            except Exception as exc:
                raise PluginError(f"{where} raised {type(exc).__name__}: {exc}") from exc
            for variant in variants:
                if not isinstance(variant, Variant) or not isinstance(variant.response, str):
                    raise PluginError(f"{where} yielded {type(variant).__name__}; expected areal_core.audit.Variant "
                                      "with a string response")
                if variant.family == DEGENERATE and index >= DEGENERATE_SAMPLES:
                    continue
                made.append((sample, variant, spec.name))
    return made


def judged_right(result: RewardResult) -> bool:
    """What the audit counts as a pass: correct, or, for a reward that only scores, a full score."""
    return result.correct is True or (result.correct is None and result.error is None and result.score >= 1.0)


def audit(reward: str, task_name: str, samples: list[dict[str, Any]], options: Mapping[str, Any], *,
          mode: str | None, seed: int = 0, service: RewardServiceConfig, max_fn_rate: float = 0.01,
          allow_errors: bool = False,
          examples: int = 3, on_result: Callable[[int, RewardResult], None] | None = None,
          on_variants: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Audit `reward` on `samples`; the report as a JSON-ready dict (see the module docstring)."""
    mutators = mutators_for(reward)
    made = make_variants(samples, mutators, options, seed)
    if on_variants is not None:
        on_variants(len(made))
    rows = [{**sample, "response": variant.response} for sample, variant, _ in made]
    started = time.perf_counter()
    results = score_rows(rows, reward, options, service.workers, service.timeout, on_result=on_result, service=service)
    wall = time.perf_counter() - started
    families: dict[str, FamilyCounts] = defaultdict(FamilyCounts)
    total = FamilyCounts()
    for (sample, variant, mutator), result in zip(made, results):
        judged = judged_right(result)
        failed = judged != variant.expect
        timed_out = bool(result.error and result.details.get("timed_out"))
        counts = families[variant.family]
        for tally in (counts, total):
            tally.must_be_right += variant.expect
            tally.must_be_wrong += not variant.expect
            tally.false_negatives += failed and variant.expect
            tally.false_positives += failed and not variant.expect
            tally.timeouts += timed_out
            tally.errors += bool(result.error) and not timed_out
            if not variant.expect:
                tally.max_wrong_score = max(tally.max_wrong_score, result.score)
        if (failed or result.error) and len(counts.examples) < examples:
            counts.examples.append({
                "kind": "error" if result.error else "false_positive" if judged else "false_negative",
                "sample": sample.get("id"), "mutator": mutator, "note": variant.note,
                "response": _excerpt(variant.response), "score": result.score, "correct": result.correct,
                "error": result.error, "details": _excerpt(json.dumps(result.details, default=str), 500)})
    totals = {k: v for k, v in total.to_dict().items() if k != "examples"}
    return {
        "reward": reward, "task": task_name, "grading": mode, "options": dict(options), "seed": seed,
        "samples": len(samples), "variants": len(made), "mutators": [f"{s.name} ({s.plugin})" for s in mutators],
        "own_mutators": has_own_mutators(reward),
        "backend": service.backend, "workers": service.workers, "timeout_s": service.timeout,
        "wall_s": round(wall, 3), "verifications_per_s": round(len(made) / wall, 2) if wall > 0 else None,
        # a worker's time per verification: what one verification costs, whatever the pool size
        "seconds_per_verification": round(wall * service.workers / len(made), 6) if made else None,
        "max_false_negative_rate": max_fn_rate, "allow_errors": allow_errors,
        "passed": (totals["false_positives"] == 0 and totals["false_negative_rate"] <= max_fn_rate
                   and (allow_errors or totals["errors"] + totals["timeouts"] == 0)),
        "totals": totals,
        "families": {name: families[name].to_dict() for name in sorted(families)},
    }
