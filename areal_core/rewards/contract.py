"""The reward contract and how one reward call is made.

A reward function is looked up **by name** in the registry, so the same name works in this process,
in a reward worker process or on a Celery worker on another machine:

    fn(sample: dict, response: str, **options) -> RewardResult | bool | float

It must not rely on state outside its arguments. `call_reward` is the only place a reward function is
invoked: exceptions become `RewardResult.error` (a verifier failure, distinct from a wrong answer).
Hard timeouts cannot be enforced in-process; the reward pool (`areal_core.rewards.pool`) runs this in
killable worker processes.
"""
from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from areal_core.errors import InputError
from areal_core.types import RewardResult, coerce_reward_output

RewardFn = Callable[..., Any]


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: its name, function, the plugin that provides it and the sample fields it needs."""

    name: str
    fn: RewardFn
    plugin: str
    required_fields: tuple[str, ...] = ()
    description: str = ""
    # Grading modes: the options each one stands for, e.g. math's {"strict": {"extract": "strict"},
    # "lenient": {"extract": "lenient"}}. Training uses "strict" and evals "lenient" unless the task
    # spec says otherwise (`reward.modes`); a reward without modes is graded one way.
    modes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def missing_fields(self, sample: Mapping[str, Any]) -> list[str]:
        return [f for f in self.required_fields if f not in sample]


def check_sample(spec: RewardSpec, sample: Mapping[str, Any], where: str) -> None:
    """Raise InputError naming `where` when the sample lacks a field the reward requires."""
    missing = spec.missing_fields(sample)
    if missing:
        raise InputError(
            f"{where}: missing field {', '.join(map(repr, missing))} required by reward {spec.name!r} "
            f"(fields present: {', '.join(sorted(sample)) or 'none'})"
        )


def call_reward(spec: RewardSpec, sample: Mapping[str, Any], response: str, options: Mapping[str, Any]) -> RewardResult:
    """Run one reward function; never raises for anything the function does."""
    try:
        output = spec.fn(dict(sample), response, **dict(options))
    except Exception as exc:
        tb = traceback.format_exc(limit=-3)
        return RewardResult.failure(
            f"reward {spec.name!r} raised {type(exc).__name__}: {exc}", traceback=tb[-2000:]
        )
    result = coerce_reward_output(output, spec.name)
    try:
        json.dumps(result.details)
    except (TypeError, ValueError) as exc:
        return RewardResult.failure(f"reward {spec.name!r} returned details that are not JSON-serialisable: {exc}")
    return result
