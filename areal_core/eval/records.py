"""What an eval is made of: its sampling settings and one scored sample. Frozen and JSON-friendly, so
they travel unchanged between the runner, the results store, the details files and the leaderboard."""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["correct", "wrong", "error", "scored"]


@dataclass(frozen=True)
class EvalSettings:
    """How responses are produced. `temperature`, `top_p` and `max_new_tokens` are None for replayed
    responses (produced elsewhere). `k` only chooses which metrics are reported: it is not part of what
    makes two evals identical, since every pass@k with k <= n comes from the same samples. `top_k` -1 is off."""

    n: int
    k: tuple[int, ...] = (1,)
    temperature: float | None = 0.0
    top_p: float | None = 1.0
    max_new_tokens: int | None = None
    limit: int | None = None
    seed: int = 0
    top_k: int = -1

    @property
    def decoding(self) -> Literal["greedy", "sampled", "replay"]:
        if self.temperature is None:
            return "replay"
        return "greedy" if self.temperature == 0 else "sampled"

    def identity(self) -> dict[str, Any]:
        """The settings that change the samples (everything but k)."""
        data = dataclasses.asdict(self)
        data.pop("k")
        if data["top_k"] == -1:
            data.pop("top_k")  # (off: the identity evals stored before top_k existed have)
        return data

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "k": list(self.k)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalSettings":
        return cls(**{**data, "k": tuple(data.get("k") or (1,))})

    def describe(self) -> str:
        """e.g. `n=8, T=0.6, top-p 0.95, 1024 tokens` or `greedy, 16 tokens` or `replayed, n=1`."""
        if self.decoding == "replay":
            return f"replayed, n={self.n}"
        parts = ["greedy" if self.decoding == "greedy" else f"T={self.temperature:g}"]
        if self.decoding == "sampled" and self.top_p not in (None, 1.0):
            parts.append(f"top-p {self.top_p:g}")
        if self.decoding == "sampled" and self.top_k != -1:
            parts.append(f"top-k {self.top_k}")
        parts.append(f"{self.max_new_tokens} tokens")
        return f"n={self.n}, " + ", ".join(parts)


def sample_seed(seed: int, prompt_id: str, sample_index: int) -> int:
    """The sampling seed of one (problem, sample): a hash, so it never collides across problems or
    samples, depends on the problem's id rather than its position, and fits SGLang's 31-bit seeds."""
    digest = hashlib.blake2b(f"{seed}:{prompt_id}:{sample_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


@dataclass(frozen=True)
class EvalSample:
    """One scored response: the problem's id and position, which of its n samples, and the reward's
    judgement. `error` is a verifier failure (it raised, hung or crashed), not a wrong answer."""

    prompt_id: str
    problem_index: int
    sample_index: int
    response: str
    score: float
    correct: bool | None
    error: str | None = None
    extracted: str | None = None
    finish_reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # A multi-turn workflow's transcript: one {role, start, end, tokens, text, ...} per turn (None: one generation).
    transcript: list[dict[str, Any]] | None = None

    @property
    def verdict(self) -> Verdict:
        if self.error is not None:
            return "error"
        if self.correct is None:
            return "scored"
        return "correct" if self.correct else "wrong"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "verdict": self.verdict}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalSample":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
