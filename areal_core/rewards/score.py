"""`areal score`: score a JSONL file of responses with a registered reward.

Rows are validated before any scoring starts (bad JSON, a missing `response` or a field the reward
requires is an error naming the line), scoring runs in the reward service (a local process pool, or
Celery workers with `--backend celery`) with a hard per-item timeout, and the output file appears only
when every row was scored (written to a temporary file, then renamed).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from areal_core.errors import InputError
from areal_core.files import atomic_write
from areal_core.rewards.config import RewardServiceConfig
from areal_core.rewards.contract import check_sample
from areal_core.rewards.registry import reward_registry
from areal_core.rewards.service import RewardService
from areal_core.types import RewardRequest, RewardResult

RESULT_FIELDS = ("score", "correct", "details", "error")


@dataclass(frozen=True)
class ScoreSummary:
    rows: int
    mean_score: float
    correct: int
    judged: int
    errors: int


def read_response_rows(path: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """(line number, "FILE:LINE", row) for each JSON object of a JSONL file of responses (blank lines
    skipped); InputError naming the first unreadable line or row without a string `response`."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read input ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if "response" not in row:
            raise InputError(f"{where}: missing field 'response'")
        if not isinstance(row["response"], str):
            raise InputError(f"{where}: field 'response' must be a string, got {type(row['response']).__name__}")
        rows.append((number, where, row))
    return rows


def read_score_input(path: Path, reward: str) -> list[dict[str, Any]]:
    """Read and validate the input rows; raise InputError naming the first bad line."""
    spec = reward_registry().get(reward)
    rows = []
    for _, where, row in read_response_rows(path):
        check_sample(spec, row, where)
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no rows to score")
    return rows


def score_rows(rows: list[dict[str, Any]], reward: str, options: Mapping[str, Any], workers: int = 2,
               timeout: float = 30.0, on_result: Callable[[int, RewardResult], None] | None = None, *,
               service: RewardServiceConfig | None = None) -> list[RewardResult]:
    """Score rows through the reward service; results in row order.

    service: the reward service configuration (default: the local backend with `workers` processes
    and `timeout`, which then override nothing else)."""
    requests = [
        RewardRequest(reward=reward, sample={k: v for k, v in row.items() if k != "response"},
                      response=row["response"], options=dict(options), request_id=str(i))
        for i, row in enumerate(rows)
    ]
    config = service or RewardServiceConfig(backend="local", workers=workers, timeout=timeout)

    async def run() -> list[RewardResult]:
        results: list[RewardResult | None] = [None] * len(requests)
        async with RewardService(config) as reward_service:
            async for index, result in reward_service.stream(requests):
                results[index] = result
                if on_result:
                    on_result(index, result)
        return results  # type: ignore[return-value]

    return asyncio.run(run())


def write_scored(rows: list[dict[str, Any]], results: list[RewardResult], output: Path) -> None:
    """Write rows + result fields atomically: the file is complete or absent."""
    atomic_write(output, (json.dumps({**row, **result.to_dict()}, ensure_ascii=False) + "\n"
                          for row, result in zip(rows, results)))


def summarise(results: list[RewardResult]) -> ScoreSummary:
    return ScoreSummary(
        rows=len(results),
        mean_score=sum(r.score for r in results) / len(results) if results else 0.0,
        correct=sum(r.correct is True for r in results),
        judged=sum(r.correct is not None for r in results),
        errors=sum(r.error is not None for r in results),
    )
