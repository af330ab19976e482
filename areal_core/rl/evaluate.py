"""Held-out accuracy of the current policy, through the same engine and reward service as training."""
from __future__ import annotations

import asyncio
from typing import Any

from areal_core.engine.protocol import GenerateRequest, InferenceEngine, SamplingParams
from areal_core.rl.rollout import encode_prompt
from areal_core.tasks import Task
from areal_core.types import RewardRequest


async def evaluate_accuracy(engine: InferenceEngine, task: Task, tokenizer: Any, reward_service: Any, *,
                            temperature: float, max_new_tokens: int, samples_per_prompt: int = 1,
                            limit: int | None = None, seed: int = 0, concurrency: int = 256) -> dict[str, float]:
    """Mean reward and share judged correct over the task's samples (first `limit`), n samples each."""
    samples = task.samples()[: limit or None]
    slots = asyncio.Semaphore(concurrency)
    reward = task.spec.reward

    async def one(index: int, sample: dict[str, Any], k: int):
        async with slots:
            params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                                    seed=seed * 7919 + index * 31 + k)
            output = await engine.generate(GenerateRequest(encode_prompt(task, sample, tokenizer), params,
                                                           rid=f"eval-{task.name}-{index}-{k}"))
        text = tokenizer.decode(output.output_ids, skip_special_tokens=True)
        future = await reward_service.submit(RewardRequest(reward=reward.name, sample=sample, response=text,
                                                           options=dict(reward.options)))
        return await future

    results = await asyncio.gather(*(one(i, s, k) for i, s in enumerate(samples) for k in range(samples_per_prompt)))
    total = len(results)
    return {
        "accuracy": sum(r.correct is True for r in results) / total,
        "mean_reward": sum(r.score for r in results) / total,
        "errors": sum(r.error is not None for r in results),
        "total": total,
    }
