"""Batches of trajectories for trainer tests: real token ids and behaviour log-probs from the tiny model."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from areal_core.engine.model import load_model
from areal_core.rl.trainer import sequence_logprobs
from areal_core.types import RewardResult, Trajectory

# A small tiny model keeps every forward pass (and torchrun start-up) short on two CPU cores.
TEST_MODEL = {"num_hidden_layers": 2, "hidden_size": 96, "intermediate_size": 288}


def make_batch(model_dir: str | Path, seed: int, groups: int = 4, group_size: int = 4) -> list[Trajectory]:
    """`groups` prompts x `group_size` responses of random lengths, with 0/1 rewards. The behaviour
    log-probs are the model's own plus noise, as from a slightly stale policy, so the importance weights
    and clipping of decoupled PPO are exercised."""
    rng = random.Random(seed)
    noise = torch.Generator().manual_seed(seed)
    model = load_model(model_dir)
    batch = []
    for g in range(groups):
        prompt = [rng.randrange(5, 100) for _ in range(rng.randrange(3, 12))]
        for k in range(group_size):
            output = [rng.randrange(5, 100) for _ in range(rng.randrange(1, 30))]
            tokens = torch.tensor([prompt + output])
            with torch.no_grad():
                logprobs = sequence_logprobs(model, tokens, torch.ones_like(tokens), 1.0)[0][0, len(prompt) - 1:]
            behaviour = logprobs + 0.05 * torch.randn(logprobs.shape, generator=noise)
            batch.append(Trajectory(
                trajectory_id=f"{seed}-{g}-{k}", task="test", sample_id=f"{seed}-{g}", group_id=f"{seed}-{g}",
                prompt_token_ids=prompt, output_token_ids=output, output_logprobs=behaviour.tolist(),
                output_versions=[0] * len(output), response="", finish_reason="stop",
                reward=RewardResult(score=float(rng.random() < 0.5))))
    return batch


def load_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(directory) / "model.safetensors"))


# Shared by the FSDP tests. Two minibatches per batch and a small token budget: several micro-batches
# per minibatch, some split across ranks. A KL penalty brings in the (also sharded) reference model; the cosine schedule with
# warm-up makes the LR differ at every step, so a wrong scheduler state would show.
SETTINGS = {"ppo_minibatches": 2, "micro_batch_tokens": 128, "kl_coef": 0.05, "lr_schedule": "cosine",
            "warmup_steps": 1, "lr": 1e-3}
TOTAL_STEPS = 6
COMPARED = ("loss", "grad_norm", "lr", "entropy", "kl_ref", "approx_kl", "clip_fraction", "behav_weight_mean",
            "reward_mean", "response_tokens", "microbatches", "padding_fraction")
