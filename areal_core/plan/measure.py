"""`areal plan profile`: a cost profile measured on this machine with the real engine, trainer and reward service of
a run's config, each started as `areal train` starts it (the embedded model, the local engine by default).

Generation: batches of B requests (prompt P tokens, L new tokens, EOS ignored) on one engine; the decode-step model
of plan/engine.py is fitted to their times by least squares (each run: L steps of B sequences over a growing
context, one prefill of B * P tokens). Weight load: the engine loads a weights directory. Training: the trainer's
pi_prox and update phases on two synthetic batches; the per-token cost is the slope between them, the rest the
optimizer step. Rewards: the task's reward on its own samples through the reward service, one request at a time after a warm-up.
"""
from __future__ import annotations

import asyncio
import math
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.plan.engine import GenerationCosts
from areal_core.plan.profile import Profile
from areal_core.plan.trainer import RewardCosts, TrainingCosts
from areal_core.rl.config import TrainConfig
from areal_core.types import RewardRequest, RewardResult, Trajectory
from areal_core.workflows.builtin import _Z99

# (requests, prompt tokens, new tokens) of each timed generation; L = 1 isolates the prefill
GENERATION_GRID = [(b, p, n) for b in (1, 4, 16) for p, n in ((16, 48), (96, 48), (96, 1))]
TRAINING_TOKENS = (512, 2048)
LOGNORMAL_P99_LIMIT = 0.99 * math.exp(_Z99 ** 2 / 2)   # the largest p99 / mean a log-normal has, less 1%


def decode_terms(requests: int, prompt: int, new: int) -> list[float]:
    """The coefficients of (step_s, sequence_s, context_token_s, prefill_token_s) in a run's seconds."""
    context = new * requests * prompt + requests * new * (new - 1) // 2   # summed over its steps
    return [float(new), float(new * requests), float(context), float(requests * prompt)]


def fit_generation(samples: list[tuple[int, int, int, float]]) -> dict[str, float]:
    """Least-squares (non-negative: a cost never helps) fit of the decode-step model to (B, P, L, seconds)."""
    names = ["step_s", "sequence_s", "context_token_s", "prefill_token_s"]
    rows = torch.tensor([decode_terms(b, p, n) for b, p, n, _ in samples], dtype=torch.float64)
    seconds = torch.tensor([s for *_, s in samples], dtype=torch.float64)
    active = list(range(len(names)))
    while True:   # drop the most negative coefficient and fit again (an active-set NNLS, small enough here)
        scale = rows[:, active].abs().max(dim=0).values
        solution = torch.linalg.lstsq(rows[:, active] / scale, seconds[:, None]).solution[:, 0] / scale
        if (solution >= 0).all() or len(active) == 1:
            break
        active.pop(int(solution.argmin()))
    fitted = dict.fromkeys(names, 0.0)
    fitted.update({names[i]: max(float(v), 0.0) for i, v in zip(active, solution)})
    return fitted


async def measure_generation(model_dir: Path, config: TrainConfig, scratch: Path
                             ) -> tuple[dict[str, float], dict[str, Any]]:
    """The run's engine (engine.backend, started as `areal train` starts it) timed on GENERATION_GRID."""
    from areal_core.engine import EngineTarget, start_engines

    async with start_engines(config.engine, EngineTarget(model=model_dir, urls=tuple(config.engine.urls)),
                             scratch) as engine:
        return await _time_generation(engine, model_dir, config)


async def _time_generation(engine: Any, model_dir: Path, config: TrainConfig) -> tuple[dict[str, float], dict[str, Any]]:
    engine_config = config.engine
    rng = random.Random(0)
    vocab = 32   # any ids of the vocabulary: only the lengths matter

    async def timed(requests: int, prompt: int, new: int) -> float:
        started = time.perf_counter()
        await asyncio.gather(*(engine.generate(GenerateRequest(
            [rng.randrange(1, vocab) for _ in range(prompt)], SamplingParams(max_new_tokens=new, ignore_eos=True),
            rid=f"profile-{requests}-{prompt}-{new}-{i}-{rng.random()}")) for i in range(requests)))
        return time.perf_counter() - started

    await timed(1, 16, 8)   # warm-up: the first forward passes pay for lazy initialisation
    samples = [(b, p, n, min([await timed(b, p, n) for _ in range(2)])) for b, p, n in GENERATION_GRID]
    started = time.perf_counter()
    await engine.update_weights(str(model_dir), 1)
    weight_load_s = time.perf_counter() - started
    fitted = fit_generation(samples)
    return {**fitted, "weight_load_s": weight_load_s, "max_running": engine_config.max_running_requests}, {
        "samples": [{"requests": b, "prompt": p, "new_tokens": n, "seconds": s} for b, p, n, s in samples]}


def synthetic_batch(tokens: int, seed: int) -> list[Trajectory]:
    """Groups of 4 trajectories of 16 prompt and 48 response tokens, about `tokens` in all, rewards 0 and 1."""
    rng = random.Random(seed)
    batch = []
    for k in range(max(4, tokens // 64 // 4 * 4)):
        output = [rng.randrange(1, 32) for _ in range(48)]
        batch.append(Trajectory(trajectory_id=f"{seed}-{k}", task="profile", sample_id=str(k // 4),
                                group_id=str(k // 4), prompt_token_ids=[rng.randrange(1, 32) for _ in range(16)],
                                output_token_ids=output, output_logprobs=[-3.0] * 48, output_versions=[0] * 48,
                                response="", finish_reason="length", reward=RewardResult(score=float(k % 2))))
    return batch


def measure_training(model_dir: Path, config: TrainConfig, scratch: Path) -> tuple[dict[str, float], int]:
    """The trainer's costs, and how many processes (GPUs, on a GPU machine) it ran on."""
    from areal_core.rl.algorithms import group_advantages
    from areal_core.rl.trainer import create_trainer

    trainer = create_trainer(model_dir, config.trainer, total_steps=100, scratch_dir=scratch / "trainer")
    ranks = max(1, int(getattr(trainer, "world_size", 1)))   # a sharded trainer's ranks; one process otherwise
    phases: dict[int, tuple[float, float]] = {}
    try:
        for index, tokens in enumerate((TRAINING_TOKENS[0], *TRAINING_TOKENS)):   # the first is a warm-up
            batch = synthetic_batch(tokens, index)
            started = time.perf_counter()
            prepared = trainer.prepare(batch, config.rollout.temperature)
            trainer.recompute_proximal(prepared)
            proximal = time.perf_counter()
            advantages = group_advantages(torch.tensor([t.reward.score for t in batch]), [t.group_id for t in batch],
                                          config.trainer.advantage)
            trainer.ppo_update(prepared, advantages)
            actual = sum(len(t.prompt_token_ids) + len(t.output_token_ids) for t in batch)
            phases[actual] = (proximal - started, time.perf_counter() - proximal)
        started = time.perf_counter()
        trainer.publish(scratch / "published")
        publish_s = time.perf_counter() - started
        started = time.perf_counter()
        trainer.save_checkpoint(scratch / "checkpoint")
        checkpoint_s = time.perf_counter() - started
    finally:
        trainer.close()
    (small, (prox_small, update_small)), (large, (prox_large, update_large)) = sorted(phases.items())
    update_token_s = max(0.0, (update_large - update_small) / (large - small))
    return {"proximal_token_s": max(0.0, (prox_large - prox_small) / (large - small)) or prox_large / large,
            "update_token_s": update_token_s or update_large / large,
            "optimizer_step_s": max(0.0, update_small - small * update_token_s) / config.trainer.ppo_minibatches,
            "publish_s": publish_s, "checkpoint_s": checkpoint_s}, ranks


async def measure_rewards(config: TrainConfig, requests: int = 32) -> dict[str, float]:
    from areal_core.rewards import RewardService
    from areal_core.tasks import get_task

    task = get_task(config.task, config.data_dir)
    samples = task.samples()[:requests]
    latencies: list[float] = []
    async with RewardService(config.reward) as service:
        for index, sample in enumerate([samples[0], *samples]):   # one at a time: each one's own latency
            started = time.perf_counter()
            await (await service.submit(RewardRequest(task.spec.reward.name, sample, str(sample.get("answer", "")),
                                                      request_id=f"profile-{index}")))
            if index:   # the first pays for starting the workers
                latencies.append(time.perf_counter() - started)
    ordered = sorted(latencies)
    mean = statistics.fmean(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    # of 32 requests the p99 is the slowest: one outlier must not ask for a tail no log-normal has
    return {"mean_s": mean, "p99_s": min(max(p99, mean), LOGNORMAL_P99_LIMIT * mean), "workers": config.reward.workers}


async def measure_profile(config: TrainConfig, name: str | None = None) -> tuple[Profile, dict[str, Any]]:
    """This machine's profile for `config`'s model, engine, trainer and reward; and the raw timings."""
    from areal_core.rl.model_cache import resolve_model

    model_dir = resolve_model(config.model)
    with tempfile.TemporaryDirectory(prefix="areal-profile-") as scratch:
        generation, raw = await measure_generation(model_dir, config, Path(scratch))
        training, ranks = await asyncio.to_thread(measure_training, model_dir, config, Path(scratch))
    rewards = await measure_rewards(config)
    where = (f"measured by areal plan profile on {time.strftime('%Y-%m-%d')}, {platform.machine()} "
             f"{platform.processor() or platform.node()}, torch {torch.__version__} with {torch.get_num_threads()} "
             f"threads, model {config.model.path}, task {config.task}")
    sources = {f"{part}.{key}": where for part, values in (("generation", generation), ("training", training),
                                                           ("rewards", rewards)) for key in values}
    profile = Profile(name or f"{Path(str(config.model.path)).name}-{platform.node()}", GenerationCosts(**generation),
                      TrainingCosts(**training), RewardCosts(**rewards), sources=sources, reference_gpus=ranks)
    return profile, {**raw, "training": training, "rewards": rewards}
