"""Held-out accuracy of the current policy, through the same engine and reward service as training.

A thin view of `areal_core.eval.runner.evaluate_task`, the evaluator `areal eval` uses: the same seeds per
(problem, sample), so `areal eval` of the same weights with the same settings reports the same accuracy.
"""
from __future__ import annotations

from typing import Any

from areal_core.eval.records import EvalSettings
from areal_core.eval.runner import evaluate_task
from areal_core.tasks import Task


async def evaluate_accuracy(engine: Any, task: Task, tokenizer: Any, reward_service: Any, *,
                            temperature: float, max_new_tokens: int, samples_per_prompt: int = 1,
                            limit: int | None = None, seed: int = 0, top_p: float = 1.0,
                            concurrency: int = 256) -> dict[str, float]:
    """Share judged correct and mean reward over the task's first `limit` samples, n samples each."""
    settings = EvalSettings(n=samples_per_prompt, k=(1,), temperature=temperature, top_p=top_p,
                            max_new_tokens=max_new_tokens, limit=limit, seed=seed)
    metrics = (await evaluate_task(engine, task, tokenizer, reward_service, settings, concurrency=concurrency)).metrics
    return {"accuracy": metrics["accuracy"], "mean_reward": metrics["mean_score"], "errors": metrics["errors"],
            "total": metrics["samples"]}
