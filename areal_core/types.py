"""Messages that cross process and network boundaries.

All are frozen dataclasses with JSON-friendly fields, so they travel unchanged through pipes, Celery,
HTTP and JSONL files (`to_dict` / `from_dict` round-trip exactly).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RewardResult:
    """What a reward function returns, everywhere: training, `areal score`, evals, the reward service.

    score:   the reward, a finite float (0.0 when `error` is set).
    correct: True/False when the reward judges correctness; None when it only scores.
    details: JSON-serialisable facts about the judgement (e.g. the extracted answer).
    error:   set when the *verifier* failed (exception, timeout, dead worker). That is not a wrong
             answer: evals count errors separately, and training may drop such samples.
    """

    score: float
    correct: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def failure(cls, error: str, **details: Any) -> "RewardResult":
        """A verifier failure: score 0, correctness unknown."""
        return cls(score=0.0, correct=None, details=dict(details), error=error)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RewardResult":
        return cls(
            score=float(data["score"]),
            correct=data.get("correct"),
            details=dict(data.get("details") or {}),
            error=data.get("error"),
        )


def coerce_reward_output(value: Any, reward_name: str) -> RewardResult:
    """Turn what a reward function returned into a RewardResult.

    A plugin author may return a RewardResult, a bool (correct / wrong) or a number (a score).
    Anything else, or a non-finite number, is reported as a verifier error naming the reward.
    """
    if isinstance(value, RewardResult):
        result = value
    elif isinstance(value, bool):
        result = RewardResult(score=1.0 if value else 0.0, correct=value)
    elif isinstance(value, (int, float)):
        result = RewardResult(score=float(value))
    else:
        return RewardResult.failure(
            f"reward {reward_name!r} returned {type(value).__name__}; "
            "expected RewardResult, bool or float"
        )
    if not math.isfinite(result.score):
        return RewardResult.failure(f"reward {reward_name!r} returned a non-finite score {result.score!r}")
    return result


@dataclass(frozen=True)
class RewardRequest:
    """One reward evaluation: the reward's registry name, the task sample and the model's response.

    request_id makes retries and redeliveries idempotent; options are passed to the reward function
    as keyword arguments.
    """

    reward: str
    sample: dict[str, Any]
    response: str
    options: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RewardRequest":
        return cls(**data)


@dataclass(frozen=True)
class Trajectory:
    """One finished, scored response to one prompt, as the rollout controller hands it to the trainer.

    output_logprobs are the behaviour-policy log-probs the engine returned with each token;
    output_versions the policy version that produced each token (they differ within one trajectory
    when generation was interrupted by a weight update).
    """

    trajectory_id: str
    task: str
    sample_id: str
    group_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    output_logprobs: list[float]
    output_versions: list[int]
    response: str
    finish_reason: str
    reward: RewardResult

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        data = dict(data)
        data["reward"] = RewardResult.from_dict(data["reward"])
        return cls(**data)
