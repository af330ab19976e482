"""The trainer: decoupled PPO over batches of trajectories, with dynamic micro-batching.

`LocalTrainer` is one torch process. Any trainer backend (the FSDP one included) implements
`TrainerBackend`, so the training loop does not care which one runs.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Sequence

import torch

from areal_core.rl.algorithms import (
    AdvantageEstimator,
    decoupled_ppo_loss,
    group_advantages,
    pack_microbatches,
    padding_fraction,
)
from areal_core.types import Trajectory


@dataclass
class TrainerConfig:
    """Optimisation and loss settings (the defaults suit the CPU demo)."""

    backend: Literal["local", "fsdp"] = "local"
    lr: float = 3e-4                    # the CPU demo collapses above ~3e-4
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    advantage: AdvantageEstimator = "grpo"
    decoupled: bool = True              # False: plain PPO, pi_prox = pi_behav
    eps_clip: float = 0.2
    eps_clip_high: float | None = None  # None: same as eps_clip
    behav_cap: float | None = 5.0       # cap on pi_prox / pi_behav (None: off)
    behav_cap_mode: Literal["mask", "cap"] = "mask"
    aggregation: Literal["token", "sequence"] = "token"
    kl_coef: float = 0.0                # KL(pi_theta || pi_ref) penalty (k3 estimator); 0: no reference model
    ppo_minibatches: int = 8            # optimizer steps per batch (each on a random share of the batch)
    microbatching: Literal["packed", "fixed"] = "packed"
    micro_batch_tokens: int = 4096      # packed: budget of padded tokens per micro-batch
    micro_batch_size: int = 16          # fixed: sequences per micro-batch
    dtype: str = "float32"
    device: str = "cpu"


class TrainerBackend(Protocol):
    version: int

    def train_step(self, trajectories: Sequence[Trajectory], temperature: float) -> dict[str, float]:
        """One optimisation step on a batch; returns metrics."""

    def publish(self, directory: str | Path) -> Path:
        """Write the current weights (safetensors + config) where generation servers can load them."""


def sequence_logprobs(model: torch.nn.Module, tokens: torch.Tensor, attention: torch.Tensor,
                      temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens / attention [n, L] -> (log p(token_{j+1} | tokens_<=j) under softmax(logits / T), entropy), both [n, L-1].

    The same quantity the engines return as the behaviour log-prob (see engine/protocol.py)."""
    logits = model(input_ids=tokens, attention_mask=attention).logits[:, :-1].float()
    logits = logits / (temperature if temperature > 0 else 1.0)
    logprobs = torch.log_softmax(logits, dim=-1)
    picked = logprobs.gather(-1, tokens[:, 1:, None])[..., 0]
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    return picked, entropy


@dataclass
class _MicroBatch:
    tokens: torch.Tensor        # [n, L]
    attention: torch.Tensor     # [n, L]
    response: torch.Tensor      # [n, L-1]  1 where position j predicts a response token
    behav: torch.Tensor         # [n, L-1]
    advantages: torch.Tensor    # [n]
    indices: list[int]


def build_microbatch(trajectories: Sequence[Trajectory], indices: list[int], advantages: torch.Tensor,
                     pad_id: int, device: torch.device) -> _MicroBatch:
    seqs = [trajectories[i].prompt_token_ids + trajectories[i].output_token_ids for i in indices]
    width = max(len(s) for s in seqs)
    n = len(indices)
    tokens = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    response = torch.zeros((n, width - 1))
    behav = torch.zeros((n, width - 1))
    for row, i in enumerate(indices):
        traj = trajectories[i]
        p, t = len(traj.prompt_token_ids), len(traj.output_token_ids)
        tokens[row, : p + t] = torch.tensor(traj.prompt_token_ids + traj.output_token_ids)
        attention[row, : p + t] = 1
        response[row, p - 1: p - 1 + t] = 1.0
        behav[row, p - 1: p - 1 + t] = torch.tensor(traj.output_logprobs)
    return _MicroBatch(tokens.to(device), attention.to(device), response.to(device), behav.to(device),
                       advantages[indices].to(device), indices)


def lr_factor(step: int, config: TrainerConfig, total_steps: int) -> float:
    """Linear warm-up, then constant / cosine / linear decay to 0 at `total_steps`."""
    if config.warmup_steps and step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.lr_schedule == "constant" or total_steps <= config.warmup_steps:
        return 1.0
    progress = min(1.0, (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps))
    if config.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


class LocalTrainer:
    """Decoupled PPO in one process: AdamW, gradient clipping, LR schedule, packed micro-batches."""

    def __init__(self, model_path: str | Path, config: TrainerConfig, total_steps: int, version: int = 0) -> None:
        from areal_core.engine.model import load_model, load_tokenizer

        self.config = config
        self.device = torch.device(config.device)
        self.model = load_model(model_path, dtype=config.dtype, device=config.device).train()
        self.tokenizer = load_tokenizer(model_path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.reference = None
        if config.kl_coef > 0:
            self.reference = load_model(model_path, dtype=config.dtype, device=config.device)
            self.reference.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr, betas=tuple(config.betas),
                                           weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: lr_factor(step, config, total_steps))
        self.version = version

    def plan(self, trajectories: Sequence[Trajectory]) -> list[list[list[int]]]:
        """Minibatches (one optimizer step each; a random split of the batch) of micro-batches (one
        forward/backward each: packed under the token budget, or a fixed number of sequences)."""
        lengths = [len(t.prompt_token_ids) + len(t.output_token_ids) for t in trajectories]
        order = torch.randperm(len(trajectories), generator=torch.Generator().manual_seed(self.version)).tolist()
        n_mini = max(1, min(self.config.ppo_minibatches, len(trajectories)))
        plan = []
        for members in (order[k::n_mini] for k in range(n_mini)):
            if self.config.microbatching == "packed":
                micro = pack_microbatches([lengths[i] for i in members], self.config.micro_batch_tokens)
                plan.append([[members[j] for j in mb] for mb in micro])
            else:
                size = self.config.micro_batch_size
                plan.append([members[i: i + size] for i in range(0, len(members), size)])
        return plan

    def train_step(self, trajectories: Sequence[Trajectory], temperature: float) -> dict[str, float]:
        if not trajectories:
            raise ValueError("train_step needs at least one trajectory")
        started = time.perf_counter()
        config = self.config
        rewards = torch.tensor([t.reward.score for t in trajectories])
        advantages = group_advantages(rewards, [t.group_id for t in trajectories], config.advantage)
        plan = self.plan(trajectories)
        groups = [mb for mini in plan for mb in mini]
        lengths = [len(t.prompt_token_ids) + len(t.output_token_ids) for t in trajectories]
        batches = [build_microbatch(trajectories, g, advantages, self.pad_id, self.device) for g in groups]
        minibatches, position = [], 0
        for mini in plan:
            minibatches.append(list(range(position, position + len(mini))))
            position += len(mini)
        total_tokens = float(sum(len(t.output_token_ids) for t in trajectories))

        # pi_prox: the trainer's current weights, before this step's update.
        prox, ref = [], []
        with torch.no_grad():
            self.model.eval()
            for mb in batches:
                prox.append(sequence_logprobs(self.model, mb.tokens, mb.attention, temperature)[0]
                            if config.decoupled else mb.behav)
                if self.reference is not None:
                    ref.append(sequence_logprobs(self.reference, mb.tokens, mb.attention, temperature)[0])
            self.model.train()

        sums: dict[str, float] = {"clip_fraction": 0.0, "behav_weight_mean": 0.0, "behav_capped_fraction": 0.0,
                                  "approx_kl": 0.0, "entropy": 0.0, "kl_ref": 0.0}
        loss_total, grad_norms, lr = 0.0, [], self.optimizer.param_groups[0]["lr"]
        # One optimizer step per minibatch. pi_prox stays the policy at the start of the step, so later
        # minibatches see ratios != 1 and the clipping applies.
        n_mini = len(minibatches)
        for members in minibatches:
            mini_tokens = float(sum(batches[i].response.sum() for i in members))
            mini_sequences = sum(len(batches[i].indices) for i in members)
            self.optimizer.zero_grad(set_to_none=True)
            for i in members:
                mb = batches[i]
                logprobs, entropy = sequence_logprobs(self.model, mb.tokens, mb.attention, temperature)
                normaliser = mini_tokens if config.aggregation == "token" else None
                loss, stats = decoupled_ppo_loss(
                    logprobs, prox[i], mb.behav, mb.advantages, mb.response, eps_clip=config.eps_clip,
                    eps_clip_high=config.eps_clip_high, behav_cap=config.behav_cap if config.decoupled else None,
                    behav_cap_mode=config.behav_cap_mode, aggregation=config.aggregation, normaliser=normaliser)
                if config.aggregation == "sequence":
                    loss = loss * len(mb.indices) / mini_sequences
                if self.reference is not None:
                    # k3 estimator of KL(pi_theta || pi_ref): exp(ref - lp) - (ref - lp) - 1, per token.
                    delta = ref[i] - logprobs
                    kl = ((torch.exp(delta) - delta - 1.0) * mb.response).sum() / mini_tokens
                    loss = loss + config.kl_coef * kl
                    sums["kl_ref"] += kl.item() / n_mini
                loss.backward()
                loss_total += loss.item() / n_mini
                weight = stats.tokens / max(total_tokens, 1.0)
                for key in ("clip_fraction", "behav_weight_mean", "approx_kl"):
                    sums[key] += getattr(stats, key) * weight
                sums["behav_capped_fraction"] += stats.behav_capped_fraction * len(mb.indices) / len(trajectories)
                sums["entropy"] += float((entropy * mb.response).sum()) / max(total_tokens, 1.0)
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)))
            self.optimizer.step()
        self.scheduler.step()
        self.version += 1
        grad_norm = sum(grad_norms) / len(grad_norms)
        group_rewards: dict[str, list[float]] = {}
        for t in trajectories:
            group_rewards.setdefault(t.group_id, []).append(t.reward.score)
        mixed = [len(set(v)) > 1 for v in group_rewards.values()]
        return {
            "loss": loss_total, "grad_norm": float(grad_norm), "lr": lr, **sums,
            "reward_mean": float(rewards.mean()), "mixed_group_fraction": sum(mixed) / len(mixed),
            "sequences": len(trajectories), "response_tokens": total_tokens,
            "microbatches": len(batches), "minibatches": n_mini, "padding_fraction": padding_fraction(lengths, groups),
            "train_seconds": time.perf_counter() - started,
        }

    def publish(self, directory: str | Path) -> Path:
        """Write the weights as safetensors (plus config and tokenizer) into `directory`, atomically
        (temp dir + rename), in the layout `save_pretrained` uses, so any server can load them."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
            if getattr(self.model.config, "tie_word_embeddings", False):
                state.pop("lm_head.weight", None)  # the same tensor as the embedding; stored once
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            self.model.config.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            if directory.exists():
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return directory
