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

    A multi-turn episode (a workflow with tools or feedback, `areal_core.workflows`) is one trajectory too:
    the output holds every turn's tokens in order, and `output_loss_mask` says which the policy produced (1)
    and which were appended for it (0: tool results, feedback, turn markers); those carry log-prob 0.0 and
    are never trained on. None means every output token is the policy's (a single generation). `turns` is
    the transcript: one {role, start, end, text, ...} per segment of the output (token offsets), and
    `episode` what the workflow recorded (its name, tool calls, per-turn scores, why it ended).
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
    output_loss_mask: list[int] | None = None
    turns: list[dict[str, Any]] = field(default_factory=list)
    episode: dict[str, Any] = field(default_factory=dict)
    # Wall-clock seconds of the episode (generation, tools and reward) and of its reward calls alone: the
    # per-phase figures of a run's metrics (episode_seconds_mean, reward_seconds_mean).
    seconds: float = 0.0
    reward_seconds: float = 0.0

    @property
    def loss_mask(self) -> list[int]:
        """Per output token: 1 when the policy produced it (trained on), 0 when it was appended for it."""
        return self.output_loss_mask if self.output_loss_mask is not None else [1] * len(self.output_token_ids)

    @property
    def policy_tokens(self) -> int:
        """How many output tokens the policy produced: what the loss trains on and normalises by."""
        return sum(self.output_loss_mask) if self.output_loss_mask is not None else len(self.output_token_ids)

    @property
    def policy_versions(self) -> list[int]:
        """The versions of the policy's own tokens (staleness counts these)."""
        if self.output_loss_mask is None:
            return self.output_versions
        return [v for v, m in zip(self.output_versions, self.output_loss_mask) if m]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        data = dict(data)
        data["reward"] = RewardResult.from_dict(data["reward"])
        return cls(**data)
