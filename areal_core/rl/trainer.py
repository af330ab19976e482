"""The trainer: decoupled PPO over batches of trajectories, with dynamic micro-batching.

Two backends implement `TrainerBackend`, so the training run does not care which one runs: `LocalTrainer`
(one torch process) and `FSDPTrainer` (areal_core/rl/fsdp.py: FSDP2 ranks under torchrun); both are registered
as a default plugin (rl/backends.py), and `create_trainer` builds the one the config names. Both run the same
phases of `PPOLearner` (prepare, recompute_proximal, ppo_update); the FSDP ranks each take a balanced share of
every minibatch's micro-batches.
"""
from __future__ import annotations

import math
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import torch

from areal_core.engine.protocol import truncated_logprobs, truncates
from areal_core.engine.weight_sync import Bucket, WeightSender, gather_full, is_adapter, served_name
from areal_core.errors import ArealError
from areal_core.files import atomic_directory
from areal_core.rl.algorithms import (
    IMPOSSIBLE_LOGPROB,
    MAX_LOG_WEIGHT,
    MISMATCH_KEYS,
    PPOStats,
    aggregate_tokens,
    balance_microbatches,
    decoupled_ppo_loss,
    group_advantages,
    mismatch_sums,
    pack_microbatches,
    padding_fraction,
)
from areal_core.rl.checkpoint import (
    ADAPTERS_FILE,
    OPTIMIZER_TENSORS_FILE,
    WEIGHTS_FILE,
    CheckpointMeta,
    CheckpointTensors,
    StateLayout,
    check_model_keys,
    is_format_1,
    read_checkpoint,
    read_meta,
    stored_shapes,
    verify_checkpoint,
    write_checkpoint,
    write_model_files,
)
from areal_core.rl.config import TrainerConfig
from areal_core.rl.output_head import head_logprobs, hidden_states, use_hidden_state_head, uses_hidden_state_head
from areal_core.types import Trajectory


class TrainerError(ArealError):
    """The trainer cannot run: its worker processes died, did not answer, or were misconfigured."""


class TrainerBackend(Protocol):
    """A trainer: the decoupled PPO step in three phases, then weights published and checkpoints.

    The phases of one step, in order (the training run's loop calls them; `train_step` below does too):
    `prepare` the batch, `recompute_proximal` (pi_prox, under the weights before the update), then
    `ppo_update` with the advantages the run computed from the rewards. `prepare` returns a handle that only
    this trainer understands (the FSDP trainer's batch lives on its ranks)."""

    version: int    # policy version: the number of optimisation steps taken since the initial weights
    tokenizer: Any
    config: TrainerConfig

    def prepare(self, trajectories: Sequence[Trajectory], temperature: float, top_p: float = 1.0,
                top_k: int = -1) -> Any:
        """Plan minibatches of packed micro-batches for a batch and build their tensors; returns a handle.
        temperature, top_p, top_k: the rollout's sampling, under which every log-prob is taken (protocol.py)."""

    def recompute_proximal(self, batch: Any) -> None:
        """Compute pi_prox (and pi_ref) for the prepared batch with the current weights."""

    def ppo_update(self, batch: Any, advantages: torch.Tensor) -> dict[str, float]:
        """The optimizer steps of the decoupled PPO loss on the batch; the version goes up by one. Returns metrics."""

    def publish(self, directory: str | Path) -> Path:
        """Write the current weights (safetensors + config) where generation servers can load them."""

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Write weights, optimizer and scheduler state, RNG states and the version, atomically."""

    def load_checkpoint(self, directory: str | Path) -> int:
        """Restore a checkpoint written by either backend; returns its version."""

    def close(self) -> None:
        """Release processes and other resources; the trainer is unusable afterwards."""


@runtime_checkable
class WeightStreamingTrainer(Protocol):
    """A trainer that streams its weights to the engines without the disk (engine.weight_sync = distributed |
    delta; rl/weight_updates.py). An update: `stage_weights` plans the buckets, then for each one, while the engines
    receive it, `send_weight_bucket` broadcasts it over the group `join_weight_group` made (the trainer is rank 0)."""

    def stage_weights(self, cap_bytes: int, changed_only: bool = False) -> list[Bucket]:
        """The next update's buckets, each at most `cap_bytes` (a larger tensor alone); changed_only: only the
        parameters the optimizer changes (requires_grad)."""

    def join_weight_group(self, init_method: str, world_size: int, group_name: str, backend: str,
                          timeout: float) -> None:
        """Join the weight group as rank 0; returns once the engines have joined too."""

    def send_weight_bucket(self, index: int) -> None:
        """Broadcast staged bucket `index` (gathered from the shards first, on a sharded trainer)."""

    def leave_weight_group(self) -> None:
        """Leave the weight group (nothing when not in one)."""


def with_adapters(model: torch.nn.Module, config: TrainerConfig) -> torch.nn.Module:
    """The model with trainer.lora's adapters injected (rl/lora.py), or as it is without trainer.lora."""
    if config.lora is None:
        return model
    from areal_core.rl.lora import add_adapters

    return add_adapters(model, config.lora)


def trainable_model(model: torch.nn.Module, config: TrainerConfig) -> torch.nn.Module:
    """The policy as a learner trains it, in train mode: with trainer.lora's adapters, with trainer.gradient_checkpointing
    each decoder layer's activations recomputed in the backward pass, its log-probs taken from the hidden states
    where that is exact (rl/output_head.py). Before FSDP shards it."""
    model = with_adapters(model, config)
    if config.gradient_checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise TrainerError(f"trainer.gradient_checkpointing: {type(model).__name__} does not support it "
                               "(Hugging Face supports_gradient_checkpointing is false)")
        enable = getattr(model, "activation_checkpointing_enable", None)   # its name from transformers 5.2x on
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    use_hidden_state_head(model)
    return model.train()


def frozen_model(model: torch.nn.Module) -> torch.nn.Module:
    """A model the learner only evaluates (the reference, the weights before the last update), as `trainable_model`
    but without gradients."""
    use_hidden_state_head(model)
    return model.requires_grad_(False)


def served_state(state: dict[str, torch.Tensor], config: TrainerConfig) -> dict[str, torch.Tensor]:
    """A full model state as the engines serve it: with trainer.lora, each adapted weight merged."""
    if config.lora is None:
        return state
    from areal_core.rl.lora import merged_state

    return merged_state(state, config.lora.scale)


def create_trainer(model_path: str | Path, config: TrainerConfig, total_steps: int, version: int = 0,
                   scratch_dir: str | Path | None = None) -> TrainerBackend:
    """The trainer backend named by `config.backend` (from the plugin registry), loaded from the HF model
    directory `model_path`. `scratch_dir` (the run's `trainer/` directory): where a backend keeps files (the
    FSDP trainer: what its ranks read and its workers' log; across nodes it must be on a shared filesystem)."""
    from areal_core.plugins import backends

    factory = backends("trainer").get(config.backend).factory
    return factory(Path(model_path), config, total_steps=total_steps, version=version,
                   scratch_dir=Path(scratch_dir) if scratch_dir is not None else None)


def train_step(trainer: TrainerBackend, trajectories: Sequence[Trajectory], temperature: float, top_p: float = 1.0,
               top_k: int = -1) -> dict[str, float]:
    """One whole step, the phases in order: prepare, pi_prox, advantages from the rewards, PPO update.
    Adds `train_seconds` (the caller's view: every phase, and for the FSDP trainer the round trips)."""
    started = time.perf_counter()
    batch = trainer.prepare(trajectories, temperature, top_p, top_k)
    trainer.recompute_proximal(batch)
    advantages = group_advantages(torch.tensor([t.reward.score for t in trajectories]),
                                  [t.group_id for t in trajectories], trainer.config.advantage)
    metrics = trainer.ppo_update(batch, advantages)
    return {**metrics, "train_seconds": time.perf_counter() - started}


def trains_differently(model: torch.nn.Module) -> bool:
    """Whether the model's train-mode forward is another function than its eval-mode one: dropout (a module or a
    config setting above 0), or any other train-mode randomness (router jitter, stochastic depth, a plugin's
    noise), found by running one short input both ways. The model's mode and the random state are kept."""
    settings = getattr(getattr(model, "config", None), "to_dict", dict)()
    if any(any(word in key for word in ("dropout", "pdrop", "jitter", "drop_path", "layerdrop"))
           and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
           for key, value in settings.items()):
        return True
    if any(isinstance(module, torch.nn.Dropout) and module.p > 0 for module in model.modules()):
        return True
    param = next(model.parameters())
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 2))
    probe = (torch.arange(1, 17, device=param.device) % max(vocab, 2))[None]
    training = model.training
    with torch.random.fork_rng(devices=[param.device] if param.device.type == "cuda" else []), torch.no_grad():
        try:
            outputs = []
            for mode in (True, False):
                model.train(mode)
                outputs.append(model(input_ids=probe).logits.float())
        finally:
            model.train(training)
    return not torch.allclose(outputs[0], outputs[1], rtol=1e-4, atol=1e-5)


def sequence_logprobs(model: torch.nn.Module, tokens: torch.Tensor, attention: torch.Tensor,
                      temperature: float, entropy_grad: bool = False, top_p: float = 1.0,
                      top_k: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens / attention [n, L] -> (log p(token_{j+1} | tokens_<=j) under softmax(logits / T), entropy), both [n, L-1].

    The same quantity the engines return as the behaviour log-prob (see engine/protocol.py): with top-p / top-k,
    that of the renormalised truncated distribution. The entropy (of the distribution the log-probs are of)
    carries a gradient only with `entropy_grad` (for an entropy bonus in the loss)."""
    if not truncates(top_p, top_k) or temperature <= 0:
        n, width = tokens.shape[0], tokens.shape[1] - 1
        rows = torch.arange(n, device=tokens.device)[:, None].expand(n, width)
        cols = torch.arange(width, device=tokens.device)[None, :].expand(n, width)
        logprobs, entropy = forward_logprobs(model, temperature, entropy_grad, (rows, cols, tokens[:, 1:]),
                                             input_ids=tokens, attention_mask=attention)
        return logprobs, entropy[:, :-1]
    logits = model(input_ids=tokens, attention_mask=attention).logits[:, :-1]
    logprobs, entropy = _logprobs_and_entropy(logits, temperature, entropy_grad, top_p, top_k)
    return logprobs.gather(-1, tokens[:, 1:, None])[..., 0], entropy


# Positions per chunk of the vocabulary softmax: each chunk's [chunk, V] temporaries live one at a time and are
# recomputed in the backward pass, so a step holds the logits and their gradient, not ~8 tensors of their size
# (at Qwen's 151,936 tokens and a 4096-token micro-batch each is 2.5 GB in float32: a 0.5B FSDP rank ran out of
# 24 GiB in its first update with an entropy bonus, bench/bench_real_size.py).
SOFTMAX_CHUNK = 512


def _normaliser_and_entropy(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logsumexp(logits / T) and the entropy of softmax(logits / T), both [P], for logits [P, V]."""
    scaled = logits / (temperature if temperature > 0 else 1.0)
    normaliser = torch.logsumexp(scaled, dim=-1)
    logprobs = scaled - normaliser[:, None]
    return normaliser, -(logprobs.exp() * logprobs).sum(-1)


def picked_logprobs(logits: torch.Tensor, temperature: float, entropy_grad: bool,
                    index: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(logits / T) at `index` (the leading coordinates of `logits` [..., V], then the token ids), and
    the entropy at every position of `logits[..., 0]`, the softmax taken SOFTMAX_CHUNK positions at a time
    (checkpointed: the backward pass recomputes each chunk). The same values as a whole log_softmax, to float
    rounding."""
    from torch.utils.checkpoint import checkpoint

    # float32 once, before the two paths (the chunks' normaliser and the picked logits) fork: their gradients then
    # add up in float32 and are rounded to a bfloat16 model's dtype once, as with one log_softmax (added in
    # bfloat16, a confident token's 1 - p rounded to 0)
    logits = logits.float()
    if logits.numel() == 0:
        empty = logits.sum(-1)
        return logits[index], empty
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(SOFTMAX_CHUNK):
        if torch.is_grad_enabled() and chunk.requires_grad:
            parts.append(checkpoint(_normaliser_and_entropy, chunk, temperature, use_reentrant=False))
        else:
            parts.append(_normaliser_and_entropy(chunk, temperature))
    normaliser = torch.cat([n for n, _ in parts]).reshape(logits.shape[:-1])
    entropy = torch.cat([e for _, e in parts]).reshape(logits.shape[:-1])
    if not entropy_grad:
        entropy = entropy.detach()
    *where, token = index
    scale = temperature if temperature > 0 else 1.0
    return logits[(*where, token)] / scale - normaliser[tuple(where)], entropy


def forward_logprobs(model: torch.nn.Module, temperature: float, entropy_grad: bool, index: tuple[torch.Tensor, ...],
                     **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass of `inputs`, then `picked_logprobs` at `index` (the entropy at every input position): from
    the hidden states a chunk at a time where the model was checked for it (rl/output_head.py), else from its
    logits."""
    if uses_hidden_state_head(model):
        hidden, head = hidden_states(model, **inputs)
        return head_logprobs(hidden, head, temperature, entropy_grad, index)
    return picked_logprobs(model(**inputs).logits, temperature, entropy_grad, index)


def _logprobs_and_entropy(logits: torch.Tensor, temperature: float, entropy_grad: bool, top_p: float = 1.0,
                          top_k: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-softmax of logits / T over the vocabulary [..., V] (renormalised over what top-p / top-k keep), and
    the entropy [...] (a gradient only with `entropy_grad`)."""
    logprobs = torch.log_softmax(logits.float() / (temperature if temperature > 0 else 1.0), dim=-1)
    if temperature > 0 and truncates(top_p, top_k):
        logprobs = truncated_logprobs(logprobs, top_p, top_k)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = -(logprobs.exp() * logprobs).sum(-1)  # an excluded token: e^-10000 * -10000 = 0
    return logprobs, entropy


def microbatch_logprobs(model: torch.nn.Module, mb: "_MicroBatch", temperature: float,
                        entropy_grad: bool = False, top_p: float = 1.0, top_k: int = -1
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """`sequence_logprobs` of the micro-batch's rows [n, L-1], computed on its shared-prompt packing when it
    has one: one forward over the packed rows, then each sequence's positions picked out of it."""
    shared = mb.shared
    if shared is None:
        return sequence_logprobs(model, mb.tokens, mb.attention, temperature, entropy_grad, top_p, top_k)
    mask = shared.allowed
    if getattr(model.config, "_attn_implementation", None) != "sdpa":  # eager adds the mask: a bool one is ignored
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
    inputs = {"input_ids": shared.tokens, "attention_mask": mask, "position_ids": shared.positions}
    if not truncates(top_p, top_k) or temperature <= 0:
        logprobs, entropy = forward_logprobs(model, temperature, entropy_grad,
                                             (shared.rows, shared.cols, mb.tokens[:, 1:]), **inputs)
        return logprobs, entropy[shared.rows, shared.cols]
    logits = model(**inputs).logits
    packed, entropy = _logprobs_and_entropy(logits, temperature, entropy_grad, top_p, top_k)  # [R, W, V], [R, W]
    return packed[shared.rows, shared.cols, mb.tokens[:, 1:]], entropy[shared.rows, shared.cols]  # [n, L-1] each


@dataclass
class _SharedPrompts:
    """The micro-batch with each prompt once: a packed row is a prompt followed by every response to it
    (`allowed`: a response sees the prompt and its own earlier tokens; positions restart after the prompt),
    and sequence i's position j is packed row rows[i], column cols[i, j]."""
    tokens: torch.Tensor        # [R, W]
    positions: torch.Tensor     # [R, W]
    allowed: torch.Tensor       # [R, 1, W, W] bool
    rows: torch.Tensor          # [n, 1]
    cols: torch.Tensor          # [n, L-1]


@dataclass
class _MicroBatch:
    tokens: torch.Tensor        # [n, L]
    attention: torch.Tensor     # [n, L]
    response: torch.Tensor      # [n, L-1]  1 where position j predicts a response token
    behav: torch.Tensor         # [n, L-1]
    indices: list[int]
    versions: torch.Tensor | None = None  # [n, L-1] the policy version of each response token (-1 elsewhere)
    shared: _SharedPrompts | None = None
    advantages: torch.Tensor | None = None  # [n], set by the update (zero for the empty micro-batch)


@dataclass
class _MicroBatchResult:
    loss: torch.Tensor          # the micro-batch's share of its minibatch's loss (with the KL and entropy terms)
    stats: PPOStats
    entropy: torch.Tensor       # [n, L-1], detached
    kl: float                   # the KL term's value (0 without a reference model)
    prox: torch.Tensor          # [n, L-1] the pi_prox the loss used
    logprobs: torch.Tensor      # [n, L-1] this forward's log-probs, detached


@dataclass
class PreparedBatch:
    """A batch ready for the PPO phases: its minibatch plan, this rank's micro-batches, and (once
    recompute_proximal has run) pi_prox and pi_ref per micro-batch (None: taken from the first forward)."""
    trajectories: list[Trajectory]
    temperature: float
    top_p: float
    top_k: int
    plan: list[list[list[int]]]           # minibatch -> micro-batch -> trajectory indices (all ranks)
    mine: list[list[list[int]]]           # this rank's share of the plan
    microbatches: list[list[_MicroBatch]]
    lengths: list[int]
    prox: list[list[torch.Tensor | None]] = field(default_factory=list)
    ref: list[list[torch.Tensor | None]] = field(default_factory=list)
    previous_mismatch: tuple[dict[str, float], float] | None = None  # mismatch_sums on tokens one version old
    prox_exact_sample: torch.Tensor | None = None  # proximal=loglinear: exact pi_prox of minibatch 1's first
    updated: bool = False


def shared_prompt_rows(rows: Sequence[Trajectory]) -> list[tuple[tuple[int, ...], list[int]]]:
    """(prompt, indices of `rows` behind it) of each row of the shared-prompt packing.

    A packed row takes another response only while its attention area (width squared) stays within that
    of the separate rows it replaces, so neither the tokens nor the attention work ever grow: short
    answers to long prompts share a row, long answers keep their own."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for k, traj in enumerate(rows):
        by_prompt.setdefault(tuple(traj.prompt_token_ids), []).append(k)
    groups: list[tuple[tuple[int, ...], list[int]]] = []
    for prompt, members in by_prompt.items():
        p, current, row_width, area = len(prompt), [], len(prompt), 0
        for k in members:
            length = len(rows[k].output_token_ids)
            if current and (row_width + length) ** 2 > area + (p + length) ** 2:
                groups.append((prompt, current))
                current, row_width, area = [], p, 0
            current.append(k)
            row_width += length
            area += (p + length) ** 2
        groups.append((prompt, current))
    return groups


def share_prompts(rows: Sequence[Trajectory], width: int, pad_id: int, device: torch.device) -> _SharedPrompts | None:
    """The shared-prompt packing of `rows` (padded to `width` tokens: shared_prompt_rows), or None when it saves
    nothing."""
    groups = shared_prompt_rows(rows)
    if len(groups) == len(rows):
        return None
    packed, segments, positions = [], [], []
    rows_of = [0] * len(rows)
    cols_of: list[list[int]] = [[]] * len(rows)
    for r, (prompt, members) in enumerate(groups):
        p = len(prompt)
        tokens, segment, position = list(prompt), [0] * p, list(range(p))
        for s, k in enumerate(members, 1):
            output = rows[k].output_token_ids
            start = len(tokens)
            tokens += output
            segment += [s] * len(output)
            position += range(p, p + len(output))
            # position j predicts token j+1: prompt positions are shared, response token u sits at start + u
            cols = list(range(p)) + [start + u for u in range(len(output) - 1)]
            cols_of[k] = cols + [0] * (width - 1 - len(cols))
            rows_of[k] = r
        packed.append(tokens)
        segments.append(segment)
        positions.append(position)
    packed_width = max(map(len, packed))
    tokens = torch.tensor([t + [pad_id] * (packed_width - len(t)) for t in packed], dtype=torch.long)
    segment = torch.tensor([g + [-1] * (packed_width - len(g)) for g in segments])
    position = torch.tensor([q + [0] * (packed_width - len(q)) for q in positions], dtype=torch.long)
    index = torch.arange(packed_width)
    allowed = ((index[None, None, :] <= index[None, :, None])
               & ((segment[:, None, :] == 0) | (segment[:, None, :] == segment[:, :, None]))
               & (segment[:, None, :] >= 0))
    allowed |= torch.eye(packed_width, dtype=torch.bool)  # padding sees itself: no row without any key (NaN)
    return _SharedPrompts(tokens.to(device), position.to(device), allowed[:, None].to(device),
                          torch.tensor(rows_of, dtype=torch.long, device=device)[:, None],
                          torch.tensor(cols_of, dtype=torch.long, device=device))


def microbatch_positions(rows: Sequence[Trajectory], shared_prompts: bool = False) -> int:
    """Token positions the forward pass of a micro-batch of `rows` computes (build_microbatch's layout): every row
    padded to the widest, or a prompt's responses packed behind it (share_prompts) when that saves rows; an empty
    micro-batch's one row of two padding tokens."""
    if not rows:
        return 2
    if shared_prompts:
        packed = shared_prompt_rows(rows)
        if len(packed) < len(rows):
            return len(packed) * max(len(prompt) + sum(len(rows[k].output_token_ids) for k in members)
                                     for prompt, members in packed)
    return len(rows) * max(len(t.prompt_token_ids) + len(t.output_token_ids) for t in rows)


def step_shape(trajectories: Sequence[Trajectory], config: TrainerConfig, shared_prompts: bool,
               version: int = 0, ranks: int = 1) -> tuple[int, int]:
    """(token positions, passes) of one training step over the batch: the positions of every rank's micro-batches,
    in the step's own plan (plan_minibatches), dealt as rank_share deals them (a micro-batch split in two, an empty
    one's two padding positions) and in build_microbatch's layout; the forward/backward passes each of `ranks`
    data-parallel ranks runs (the same number for all, at least one a minibatch). What `areal
    plan`'s trainer cost counts: padding and prompts packed once change the work as much as the tokens do, and a
    pass has a cost of its own."""
    if not trajectories:
        return 0, 0
    plan = plan_minibatches(trajectories, config, version)
    ranks = max(1, ranks)
    lengths = [len(t.prompt_token_ids) + len(t.output_token_ids) for t in trajectories]
    positions = passes = 0
    for minibatch in plan:   # as rank_share deals them: split to whole passes a rank, an empty one where too few
        shares = [minibatch] if ranks == 1 else balance_microbatches(minibatch, lengths, ranks)
        positions += sum(microbatch_positions([trajectories[i] for i in micro], shared_prompts)
                         for share in shares for micro in share)
        passes += len(shares[0])
    return positions, passes


def build_microbatch(trajectories: Sequence[Trajectory], indices: list[int], pad_id: int, device: torch.device,
                     shared_prompts: bool = False) -> _MicroBatch:
    if not indices:
        # A data-parallel rank with fewer sequences than micro-batches still runs every forward and backward
        # pass (the FSDP collectives must line up): one row of two padding tokens, no response token, so its
        # loss and gradient are exactly zero.
        return _MicroBatch(torch.full((1, 2), pad_id, dtype=torch.long, device=device),
                           torch.ones((1, 2), dtype=torch.long, device=device), torch.zeros((1, 1), device=device),
                           torch.zeros((1, 1), device=device), [], torch.full((1, 1), -1, device=device),
                           advantages=torch.zeros(1, device=device))
    # Rows built as padded Python lists and turned into tensors once (per-row tensor writes cost more
    # than the forward pass for the tiny model).
    rows = [trajectories[i] for i in indices]
    width = max(len(t.prompt_token_ids) + len(t.output_token_ids) for t in rows)
    token_rows, attention_rows, response_rows, behav_rows, version_rows = [], [], [], [], []
    for traj in rows:
        p, t = len(traj.prompt_token_ids), len(traj.output_token_ids)
        pad = width - p - t
        token_rows.append(traj.prompt_token_ids + traj.output_token_ids + [pad_id] * pad)
        attention_rows.append([1] * (p + t) + [0] * pad)
        # The loss mask: only the policy's own tokens are trained on (a tool result in an episode is not).
        response_rows.append([0.0] * (p - 1) + [float(m) for m in traj.loss_mask] + [0.0] * pad)
        behav_rows.append([0.0] * (p - 1) + list(traj.output_logprobs) + [0.0] * pad)
        version_rows.append([-1] * (p - 1) + [v if m else -1 for v, m in zip(traj.output_versions, traj.loss_mask)]
                            + [-1] * pad)
    tokens = torch.tensor(token_rows, dtype=torch.long)
    attention = torch.tensor(attention_rows, dtype=torch.long)
    response = torch.tensor(response_rows, dtype=torch.float32)
    behav = torch.tensor(behav_rows, dtype=torch.float32)
    versions = torch.tensor(version_rows, dtype=torch.long)
    return _MicroBatch(tokens.to(device), attention.to(device), response.to(device), behav.to(device), indices,
                       versions.to(device), share_prompts(rows, width, pad_id, device) if shared_prompts else None)


def loglinear_prox(behav: torch.Tensor, logprobs: torch.Tensor, versions: torch.Tensor, version: int,
                   progress: float) -> torch.Tensor:
    """pi_prox without its forward pass (trainer.proximal=loglinear; AReaL 2.0's approximation, as in Fu et al.'s
    AReaL repository): log-linear in the policy version between the token's behaviour policy (version v_b) and the
    weights now (version v + progress, `progress` the share of this step's optimizer steps taken):

        log pi_prox ~ log pi_behav + alpha (log pi_theta - log pi_behav),   alpha = (v - v_b) / (v + progress - v_b)

    so a token of the trainer's version (v_b = v) keeps its behaviour log-prob, and an older one is placed between.
    behav / logprobs / versions [n, L-1] (versions -1 off the response); logprobs detached."""
    stale = (version - versions).clamp(min=0).to(logprobs.dtype)
    alpha = torch.where(versions >= 0, stale / (stale + progress), torch.zeros_like(stale))
    floor = logprobs - MAX_LOG_WEIGHT  # a behaviour log-prob of -inf (SGLang's outside its kept set) stays finite
    behav = torch.maximum(behav, floor)
    return behav + alpha * (logprobs - behav)


def mismatch_metrics(sums: dict[str, float], largest: float) -> dict[str, float]:
    """The step's engine/trainer mismatch metrics from the summed `mismatch_sums` (keys mismatch_<key>): over the
    tokens sampled with the weights the trainer held, mean |delta|, the k3 KL, the largest |delta|, the share with
    |delta| > MISMATCH_LARGE, and how many tokens that was (0: none this step; the others are then 0)."""
    tokens = sums["mismatch_tokens"]
    share = (lambda key: sums[key] / tokens) if tokens else (lambda key: 0.0)
    return {"mismatch_abs_mean": share("mismatch_abs_sum"), "mismatch_kl": share("mismatch_k3_sum"),
            "mismatch_abs_max": largest, "mismatch_large_fraction": share("mismatch_large_count"),
            "mismatch_tokens": tokens}


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


def plan_minibatches(trajectories: Sequence[Trajectory], config: TrainerConfig, version: int) -> list[list[list[int]]]:
    """Minibatches (one optimizer step each; a random split of the batch, seeded by the policy version so
    every backend and every rank draws the same) of micro-batches (one forward/backward each: packed under
    the token budget, or a fixed number of sequences)."""
    lengths = [len(t.prompt_token_ids) + len(t.output_token_ids) for t in trajectories]
    order = torch.randperm(len(trajectories), generator=torch.Generator().manual_seed(version)).tolist()
    n_mini = max(1, min(config.ppo_minibatches, len(trajectories)))
    plan = []
    for members in (order[k::n_mini] for k in range(n_mini)):
        if config.microbatching == "packed":
            micro = pack_microbatches([lengths[i] for i in members], config.micro_batch_tokens)
            plan.append([[members[j] for j in mb] for mb in micro])
        else:
            size = config.micro_batch_size
            plan.append([members[i: i + size] for i in range(0, len(members), size)])
    return plan


def rank_share(plan: list[list[list[int]]], lengths: Sequence[int], rank: int, ranks: int) -> list[list[list[int]]]:
    """The micro-batches data-parallel `rank` of `ranks` runs, per minibatch: every rank the same number
    (an empty micro-batch where there is too little to split), with similar token loads."""
    if ranks == 1:
        return plan
    return [balance_microbatches(minibatch, lengths, ranks)[rank] for minibatch in plan]


class DataParallel:
    """Where this process sits among the data-parallel trainer processes: rank 0 of 1 for the local
    trainer; a torch.distributed process group for the FSDP ranks."""

    def __init__(self, rank: int = 0, size: int = 1, device: torch.device | None = None, group: Any = None) -> None:
        self.rank, self.size, self.group = rank, size, group
        self.device = device or torch.device("cpu")

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over the ranks."""
        if self.size == 1:
            return list(values)
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, group=self.group)
        return tensor.tolist()

    def min_max(self, value: float) -> tuple[float, float]:
        """(least, largest) of `value` over the ranks."""
        if self.size == 1:
            return value, value
        import torch.distributed as dist

        tensor = torch.tensor([-value, value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)
        return -tensor[0].item(), tensor[1].item()


def clip_gradients(model: torch.nn.Module, max_norm: float) -> float:
    """Clip the gradients to a global L2 norm of `max_norm`; returns the norm before clipping. Under FSDP
    the gradients are shards (DTensors) and the norm is reduced over all ranks."""
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    full_tensor = getattr(total, "full_tensor", None)  # a DTensor under FSDP2
    return float(full_tensor() if full_tensor is not None else total)


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class PPOLearner:
    """Model, reference model, AdamW and LR schedule, and the decoupled PPO step, in one of `dp.size`
    data-parallel processes. The local trainer holds one with a plain model; each FSDP rank holds one with
    a sharded model. The step's arithmetic is the same, so both reach the same weights on the same data."""

    def __init__(self, model: torch.nn.Module, reference: torch.nn.Module | None, config: TrainerConfig,
                 total_steps: int, version: int, pad_id: int, dp: DataParallel | None = None,
                 train_mode_differs: bool | None = None, previous: torch.nn.Module | None = None) -> None:
        self.model, self.reference, self.config, self.version, self.pad_id = model, reference, config, version, pad_id
        # A copy of the weights before the last update (trainer.measure_stale_mismatch; built and sharded like the
        # model): an async run's tokens are mostly one version old, and only these weights can tell their
        # engine/trainer gap from the policy's own change. Holds version `previous_version` (None: not yet).
        self.previous, self.previous_version = previous, None
        self.dp = dp or DataParallel(device=torch.device(config.device))
        self.device = self.dp.device
        # Only what trains (with trainer.lora, the adapters): a frozen weight has no optimizer state.
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                                           betas=tuple(config.betas), weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: lr_factor(step, config, total_steps))
        # The first minibatch's training forward runs on the very weights pi_prox is taken from (nothing
        # has been updated yet), so its detached log-probs are pi_prox and its no-grad pass is skipped:
        # with 2 minibatches a quarter of the step's forward work. Not when the train and eval forwards differ
        # (dropout, router jitter: trains_differently).
        # (FSDP asks before sharding: the probe's forward on a sharded model is not one FSDP expects.)
        self.prox_from_first_forward = not (trains_differently(model) if train_mode_differs is None
                                            else train_mode_differs)
        self.share_prompts = config.share_prompts and getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager")

    def _microbatch_loss(self, mb: _MicroBatch, prox: torch.Tensor | None, ref: torch.Tensor | None,
                         batch: "PreparedBatch", mini_tokens: float, mini_sequences: int,
                         progress: float = 0.0) -> "_MicroBatchResult":
        """This micro-batch's share of its minibatch's loss (normalised over the whole minibatch, on every
        rank, so the shares add up to the minibatch loss), with what the step's metrics need."""
        config = self.config
        logprobs, entropy = microbatch_logprobs(self.model, mb, batch.temperature, config.entropy_coef != 0,
                                                batch.top_p, batch.top_k)
        if prox is None and progress > 0:  # proximal=loglinear
            prox = loglinear_prox(mb.behav, logprobs.detach(), mb.versions, self.version, progress)
        elif prox is None:  # the first minibatch: this forward is pi_prox (see __init__)
            prox = logprobs.detach()
        # constant (Dr. GRPO) is a token sum over a fixed count: sequences x L_max instead of the tokens there are.
        mode = "sequence" if config.aggregation == "sequence" else "token"
        tokens = mini_sequences * config.aggregation_tokens if config.aggregation == "constant" else mini_tokens
        loss, stats = decoupled_ppo_loss(
            logprobs, prox, mb.behav, mb.advantages, mb.response, eps_clip=config.eps_clip,
            eps_clip_high=config.eps_clip_high, correction=config.correction if config.decoupled else "none",
            correction_bounds=config.correction_bounds, aggregation=mode, dual_clip=config.dual_clip,
            normaliser=tokens if mode == "token" else None)
        if mode == "sequence":
            loss = loss * len(mb.indices) / mini_sequences
        kl_value = 0.0
        if ref is not None:
            # k3 estimator of KL(pi_theta || pi_ref): exp(ref - lp) - (ref - lp) - 1, per token; bounded like log w
            # (under top-p one of the two may exclude a token: a log-prob of -1e4) and 0 off the response.
            delta = torch.where(mb.response > 0, (ref - logprobs).clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT),
                                torch.zeros_like(logprobs))
            kl = aggregate_tokens(torch.exp(delta) - delta - 1.0, mb.response, mode, tokens, mini_sequences)
            loss = loss + config.kl_coef * kl
            kl_value = kl.item()
        if config.entropy_coef:
            bonus = aggregate_tokens(entropy, mb.response, mode, tokens, mini_sequences)
            loss = loss - config.entropy_coef * bonus
        return _MicroBatchResult(loss, stats, entropy.detach(), kl_value, prox, logprobs.detach())

    def _mismatch(self, mb: _MicroBatch, result: "_MicroBatchResult", first_minibatch: bool
                  ) -> tuple[dict[str, float], float] | None:
        """The engine/trainer gap on the micro-batch's tokens the engine sampled with the weights the trainer holds
        (version = self.version, before this step's update): against pi_prox, or with plain PPO (no pi_prox) against
        the first minibatch's forward; None where neither is the trainer's own pre-update log-prob (also a
        log-linear pi_prox after the first minibatch)."""
        if self.config.decoupled and (first_minibatch or self.config.proximal == "recompute"):
            trainer_logprobs = result.prox  # (a log-linear pi_prox is no measurement: only the first minibatch's)
        elif first_minibatch:
            trainer_logprobs = result.logprobs
        else:
            return None
        return mismatch_sums(trainer_logprobs, mb.behav, (mb.response > 0) & (mb.versions == self.version))

    # -- the step, phase by phase (see TrainerBackend) -----------------------------------------------------
    def prepare(self, trajectories: Sequence[Trajectory], temperature: float, top_p: float = 1.0,
                top_k: int = -1) -> "PreparedBatch":
        """Split the batch into minibatches of micro-batches (this rank's share) and build their tensors."""
        if not trajectories:
            raise ValueError("a training step needs at least one trajectory")
        plan = plan_minibatches(trajectories, self.config, self.version)
        lengths = [len(t.prompt_token_ids) + len(t.output_token_ids) for t in trajectories]
        mine = rank_share(plan, lengths, self.dp.rank, self.dp.size)
        microbatches = [[build_microbatch(trajectories, g, self.pad_id, self.device, self.share_prompts)
                         for g in minibatch] for minibatch in mine]
        return PreparedBatch(list(trajectories), temperature, top_p, top_k, plan, mine, microbatches, lengths)

    def recompute_proximal(self, batch: "PreparedBatch") -> None:
        """pi_prox: log-probs of the batch under the current weights, before this step's update (and pi_ref's,
        with a KL penalty). Plain PPO takes pi_behav instead."""
        if batch.prox:
            raise ValueError("recompute_proximal runs once per prepared batch")
        config = self.config
        with torch.no_grad():
            self.model.eval()
            batch.previous_mismatch = self._previous_mismatch(batch)
            for m, minibatch in enumerate(batch.microbatches):
                if not config.decoupled:
                    batch.prox.append([mb.behav for mb in minibatch])
                elif m == 0 and self.prox_from_first_forward:
                    batch.prox.append([None] * len(minibatch))
                elif m > 0 and config.proximal == "loglinear":  # from each forward of the update (loglinear_prox)
                    batch.prox.append([None] * len(minibatch))
                    if m == 1:  # the exact pi_prox of one micro-batch per rank: the approximation's error
                        batch.prox_exact_sample = microbatch_logprobs(self.model, minibatch[0], batch.temperature,
                                                                      False, batch.top_p, batch.top_k)[0]
                else:
                    batch.prox.append([microbatch_logprobs(self.model, mb, batch.temperature, False, batch.top_p,
                                                           batch.top_k)[0] for mb in minibatch])
                batch.ref.append([microbatch_logprobs(self.reference, mb, batch.temperature, False, batch.top_p,
                                                      batch.top_k)[0]
                                  if self.reference is not None else None for mb in minibatch])
            self.model.train()

    def _previous_mismatch(self, batch: "PreparedBatch") -> tuple[dict[str, float], float] | None:
        """The engine/trainer gap on the tokens one version old, from the weights before the last update, on this
        rank's first micro-batch (one forward on every rank, so the FSDP collectives line up); None without them."""
        if self.previous is None or self.previous_version is None or self.previous_version != self.version - 1:
            return None
        mb = batch.microbatches[0][0]
        self.previous.eval()
        logprobs = microbatch_logprobs(self.previous, mb, batch.temperature, False, batch.top_p, batch.top_k)[0]
        return mismatch_sums(logprobs, mb.behav, (mb.response > 0) & (mb.versions == self.previous_version))

    @torch.no_grad()
    def _keep_previous(self) -> None:
        """Copy the weights about to be updated (version self.version) into `previous` (shard by shard under FSDP)."""
        if self.previous is None:
            return
        for module in (self.model, self.previous):  # FSDP2 leaves the root unsharded after a forward: shard it back
            for unit in module.modules():
                if hasattr(unit, "reshard") and hasattr(unit, "unshard"):
                    unit.reshard()
        for kept, live in zip(self.previous.parameters(), self.model.parameters()):
            kept.copy_(live)
        self.previous_version = self.version

    def _add_metrics(self, sums: dict[str, float], mb: _MicroBatch, result: _MicroBatchResult, m: int,
                     exact_prox: torch.Tensor | None, total_tokens: float, n_mini: int) -> float:
        """Add micro-batch `mb`'s part (of minibatch m) to this rank's metric sums; returns its largest mismatch
        |delta| (0 where it measured none). exact_prox: pi_prox recomputed for it, to measure a log-linear one."""
        stats = result.stats
        sums["loss"] += result.loss.item() / n_mini
        sums["kl_ref"] += result.kl / n_mini
        weight = stats.tokens / max(total_tokens, 1.0)
        for key in ("clip_fraction", "behav_weight_mean", "approx_kl"):
            sums[key] += getattr(stats, key) * weight
        for key, count in (("behav_capped_fraction", stats.capped_tokens),  # shares of the policy's tokens
                           ("correction_masked_fraction", stats.masked_tokens),
                           ("correction_truncated_fraction", stats.truncated_tokens)):
            sums[key] += count / max(total_tokens, 1.0)
        sums["entropy"] += float((result.entropy * mb.response).sum()) / max(total_tokens, 1.0)
        if exact_prox is not None:  # (tokens either side excludes under top-p would swamp the mean: left out)
            picked = (mb.response > 0) & (exact_prox > IMPOSSIBLE_LOGPROB) & (result.prox > IMPOSSIBLE_LOGPROB)
            sums["prox_error_sum"] += float((result.prox - exact_prox).abs()[picked].sum())
            sums["prox_error_tokens"] += float(picked.sum())
        mismatch = self._mismatch(mb, result, m == 0)
        if mismatch is None:
            return 0.0
        for key, value in mismatch[0].items():
            sums[f"mismatch_{key}"] += value
        return mismatch[1]

    def ppo_update(self, batch: "PreparedBatch", advantages: torch.Tensor) -> dict[str, float]:
        """One optimizer step per minibatch on the decoupled PPO loss, then the LR schedule; the policy version
        goes up by one. `advantages` [N]: one per trajectory of the batch."""
        config, dp, trajectories, plan = self.config, self.dp, batch.trajectories, batch.plan
        if len(batch.prox) != len(plan) or batch.updated:
            raise ValueError("ppo_update takes a prepared batch once, after recompute_proximal")
        batch.updated = True
        self._keep_previous()
        advantages = torch.as_tensor(advantages, dtype=torch.float32)
        total_tokens = float(sum(t.policy_tokens for t in trajectories))
        keys = ("loss", "kl_ref", "clip_fraction", "behav_weight_mean", "approx_kl", "behav_capped_fraction",
                "correction_masked_fraction", "correction_truncated_fraction", "entropy", "prox_error_sum",
                "prox_error_tokens", "positions", *(f"mismatch_{key}" for key in MISMATCH_KEYS))
        sums = dict.fromkeys(keys, 0.0)   # this rank's part of each metric; summed over the ranks below
        mismatch_max = 0.0
        if batch.previous_mismatch is not None:
            for key, value in batch.previous_mismatch[0].items():
                sums[f"mismatch_{key}"] += value
            mismatch_max = batch.previous_mismatch[1]
        grad_norms, lr = [], self.optimizer.param_groups[0]["lr"]
        # pi_prox stays the policy at the start of the step, so later minibatches see ratios != 1 and the
        # clipping applies.
        n_mini = len(plan)
        # Nothing to learn (every advantage 0, no KL or entropy term): no gradient, but AdamW's momentum and
        # weight decay would still move the weights. The step is skipped; the version still advances.
        skip = not bool(advantages.any()) and not config.kl_coef and not config.entropy_coef
        for m, members in enumerate(plan):
            # Normalisers count the whole minibatch (all ranks' micro-batches), so each rank's losses are its
            # share of the one minibatch loss.
            mini_tokens = max(1.0, float(sum(trajectories[i].policy_tokens for mb in members for i in mb)))
            mini_sequences = sum(len(mb) for mb in members)
            self.optimizer.zero_grad(set_to_none=True)
            for j, mb in enumerate(batch.microbatches[m]):
                if mb.indices:  # (an empty micro-batch keeps its zero advantage)
                    mb.advantages = advantages[mb.indices].to(self.device)
                result = self._microbatch_loss(mb, batch.prox[m][j], batch.ref[m][j], batch, mini_tokens,
                                               mini_sequences, m / n_mini)
                # FSDP averages gradients over the ranks; each rank's loss is already its share of the sum,
                # so scale by the rank count to make the reduced gradient the local trainer's sum.
                (result.loss * dp.size).backward()
                # the token positions a pass computes, padding and a shared prompt's once included (what `areal
                # plan` costs a step by; step_shape counts the same)
                sums["positions"] += (mb.shared.tokens if mb.shared is not None else mb.tokens).numel()
                exact = batch.prox_exact_sample if (m, j) == (1, 0) else None
                mismatch_max = max(mismatch_max, self._add_metrics(sums, mb, result, m, exact, total_tokens, n_mini))
            grad_norms.append(clip_gradients(self.model, config.grad_clip))
            if not skip:
                self.optimizer.step()
        # Nothing reads the gradients after the last step: kept, they sat through the next pi_prox, weight sync and
        # checkpoint (a quarter of a rank's theoretical memory).
        self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # a skipped step: torch warns that the schedule moves without a step
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            self.scheduler.step()
        self.version += 1
        sums = dict(zip(keys, dp.sum([sums[key] for key in keys])))
        mismatch_max = dp.min_max(mismatch_max)[1]
        rank_min, rank_max = dp.min_max(float(sum(len(minibatch) for minibatch in batch.mine)))
        group_rewards: dict[str, list[float]] = {}
        for t in trajectories:
            group_rewards.setdefault(t.group_id, []).append(t.reward.score)
        mixed = [len(set(v)) > 1 for v in group_rewards.values()]
        groups = [mb for minibatch in plan for mb in minibatch]
        return {
            **{key: value for key, value in sums.items() if not key.startswith(("mismatch_", "prox_error"))},
            **({"prox_approx_error": sums["prox_error_sum"] / sums["prox_error_tokens"]}
               if sums["prox_error_tokens"] else {}),
            **mismatch_metrics(sums, mismatch_max),
            "grad_norm": sum(grad_norms) / len(grad_norms), "lr": lr,
            "reward_mean": sum(t.reward.score for t in trajectories) / len(trajectories),
            "mixed_group_fraction": sum(mixed) / len(mixed),
            "sequences": len(trajectories), "response_tokens": total_tokens,
            "microbatches": len(groups), "minibatches": n_mini, "optimizer_skipped": float(skip),
            "padding_fraction": padding_fraction(batch.lengths, groups),
            # forward/backward passes per data-parallel rank (equal on every rank, or the collectives would hang)
            "rank_microbatches_min": rank_min, "rank_microbatches_max": rank_max,
        }

    # -- full (unsharded) states, for publishing and checkpoints -------------------------------------------
    def full_model_state(self) -> dict[str, torch.Tensor]:
        """The full weights on the CPU, on rank 0 (empty elsewhere). Every rank must call it: each sharded tensor
        is gathered onto rank 0 alone, once however many names it has (a tied head is its embedding)."""
        state: dict[str, torch.Tensor] = {}
        gathered: dict[int, torch.Tensor | None] = {}
        for name, tensor in self.model.state_dict(keep_vars=True).items():   # a tied weight: one object
            if id(tensor) not in gathered:
                full = gather_full(tensor)
                gathered[id(tensor)] = full.cpu() if full is not None and self.dp.rank == 0 else None
            if gathered[id(tensor)] is not None:
                state[name] = gathered[id(tensor)]
        return state

    def load_full_state(self, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any],
                        optimizer_stepped: bool, scheduler_state: dict[str, Any],
                        rng_states: list[dict[str, torch.Tensor]], version: int) -> None:
        """Load full states (keyed by parameter name): a checkpoint of format 1. With several ranks only rank 0 passes the weights and
        optimizer state (the others pass {}: rank 0 broadcasts them); every rank passes whether the
        optimizer had taken a step, the scheduler and RNG states and the version."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        broadcast = self.dp.size > 1
        # strict=False: a tied output head is stored once, as the embedding (check_model_keys vets names and shapes).
        set_model_state_dict(self.model, model_state,
                             options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=broadcast, strict=False))
        if optimizer_stepped:
            set_optimizer_state_dict(self.model, self.optimizer, optimizer_state,
                                     options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=broadcast))
        else:
            self.optimizer.state = defaultdict(dict)  # as freshly built: AdamW creates its state at the first step
        self.scheduler.load_state_dict(scheduler_state)
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr
        set_rng_state(rng_states[self.dp.rank] if self.dp.rank < len(rng_states) else rng_states[0], self.device)
        self.version = version
        self.previous_version = None  # the kept previous weights are not the checkpoint's

    # -- checkpoints, a tensor at a time (checkpoint.py): the full state is never in memory at once ------------
    def _stored_tensors(self) -> list[tuple[str, str, torch.Tensor]]:
        """(file, stored name, this rank's tensor) of every weight a checkpoint holds, in the files' order."""
        tied = self.tied_embeddings
        return [(ADAPTERS_FILE, name, t) if is_adapter(name) else (WEIGHTS_FILE, served_name(name), t)
                for name, t in self.model.state_dict().items() if not (tied and name == "lm_head.weight")]

    def _optimizer_tensors(self) -> list[tuple[str, str, torch.Tensor]]:
        """(file, "<state>/<parameter>", this rank's tensor) of the optimizer's tensor states."""
        return [(OPTIMIZER_TENSORS_FILE, f"{key}/{name}", value)
                for name, param in self.model.named_parameters() for key, value in sorted(
                    self.optimizer.state.get(param, {}).items()) if torch.is_tensor(value) and value.dim() > 0]

    def state_layout(self) -> StateLayout:
        """The layout of this trainer's checkpoint; the same on every rank (global shapes)."""
        files: dict[str, list] = {WEIGHTS_FILE: [], ADAPTERS_FILE: [], OPTIMIZER_TENSORS_FILE: []}
        for file, name, t in self._stored_tensors() + self._optimizer_tensors():
            files[file].append((name, t.dtype, tuple(t.shape)))
        names = {param: name for name, param in self.model.named_parameters()}
        scalars = {names[param]: {key: float(value) for key, value in state.items()
                                  if not torch.is_tensor(value) or value.dim() == 0}
                   for param, state in self.optimizer.state.items() if state}
        groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": [names[p] for p in group["params"]]}
                  for group in self.optimizer.param_groups]
        return StateLayout(files, scalars, groups)

    def full_tensors(self) -> Iterator[tuple[str, str, torch.Tensor | None]]:
        """(file, name, full tensor on the CPU) of the layout, one at a time: every rank iterates (a sharded
        tensor is gathered onto rank 0 alone); rank 0 gets the tensors, the others None."""
        for file, name, t in self._stored_tensors() + self._optimizer_tensors():
            full = gather_full(t)
            yield file, name, full.cpu() if full is not None and self.dp.rank == 0 else None
            del full

    def load_tensors(self, tensors: CheckpointTensors | None, meta: CheckpointMeta) -> None:
        """Load a checkpoint tensor by tensor: rank 0 reads each (`tensors`; None on the other ranks), every
        rank takes its shard; then the optimizer's scalars and settings, scheduler, RNG and version."""
        with torch.no_grad():
            for file, name, target in self._stored_tensors():
                self._take(target, tensors.get(file, name) if tensors is not None else None)
            self.optimizer.state = defaultdict(dict)   # as freshly built; AdamW creates it at the first step
            if meta.optimizer_stepped:
                for name, param in self.model.named_parameters():
                    scalars = meta.optimizer_scalars.get(name)
                    if scalars is None:
                        continue
                    state = self.optimizer.state[param]
                    # AdamW keeps its step count as a float32 scalar tensor on the CPU (not capturable, not fused)
                    state.update({key: torch.tensor(value, dtype=torch.float32) for key, value in scalars.items()})
                    for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                        stored = f"{key}/{name}"
                        if stored in meta.tensor_names:
                            state[key] = torch.empty_like(param)
                            self._take(state[key], tensors.get(OPTIMIZER_TENSORS_FILE, stored) if tensors else None)
        for group, saved in zip(self.optimizer.param_groups, meta.param_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.scheduler.load_state_dict(meta.scheduler_state)
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr
        set_rng_state(meta.rng_states[self.dp.rank] if self.dp.rank < len(meta.rng_states) else meta.rng_states[0],
                      self.device)
        self.version = meta.version
        self.previous_version = None  # the kept previous weights are not the checkpoint's

    def _take(self, target: torch.Tensor, full: torch.Tensor | None) -> None:
        """Copy the full tensor rank 0 read into `target`: its shard of it when sharded, else all of it."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        if full is None:   # another rank than 0: room for what rank 0 sends
            full = torch.empty(target.shape, dtype=target.dtype)
        full = full.to(device=target.device, dtype=target.dtype)
        if isinstance(target, DTensor):
            target.to_local().copy_(distribute_tensor(full, target.device_mesh, target.placements,
                                                      src_data_rank=0).to_local())
            return
        if self.dp.size > 1:
            torch.distributed.broadcast(full, src=0, group=self.dp.group)
        target.copy_(full)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """name -> full (unsharded) shape of every entry of the model's state."""
        return {name: tuple(t.shape) for name, t in self.model.state_dict().items()}

    @property
    def tied_embeddings(self) -> bool:
        return bool(getattr(self.model.config, "tie_word_embeddings", False))


class LocalTrainer:
    """Decoupled PPO in one process: AdamW, gradient clipping, LR schedule, packed micro-batches."""

    def __init__(self, model_path: str | Path, config: TrainerConfig, total_steps: int, version: int = 0) -> None:
        from areal_core.engine.model import load_model, load_tokenizer

        self.config = config
        model = trainable_model(load_model(model_path, dtype=config.dtype, device=config.device), config)
        self.tokenizer = load_tokenizer(model_path)
        reference = previous = None
        if config.kl_coef > 0:   # the base model (LoRA's adapters start at zero)
            reference = frozen_model(load_model(model_path, dtype=config.dtype, device=config.device))
        if config.measure_stale_mismatch:   # the same structure as the model: its parameters are copied one by one
            previous = frozen_model(with_adapters(load_model(model_path, dtype=config.dtype, device=config.device),
                                                  config))
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.learner = PPOLearner(model, reference, config, total_steps, version, pad_id, previous=previous)
        self.sender = WeightSender(model, config.lora.scale if config.lora else None)

    @property
    def version(self) -> int:
        return self.learner.version

    @version.setter
    def version(self, value: int) -> None:
        self.learner.version = value

    @property
    def model(self) -> torch.nn.Module:
        return self.learner.model

    def prepare(self, trajectories: Sequence[Trajectory], temperature: float, top_p: float = 1.0,
                top_k: int = -1) -> PreparedBatch:
        return self.learner.prepare(trajectories, temperature, top_p, top_k)

    def recompute_proximal(self, batch: PreparedBatch) -> None:
        self.learner.recompute_proximal(batch)

    def ppo_update(self, batch: PreparedBatch, advantages: torch.Tensor) -> dict[str, float]:
        return self.learner.ppo_update(batch, advantages)

    def publish(self, directory: str | Path) -> Path:
        """Write the weights as safetensors (plus config and tokenizer) into `directory`, atomically
        (temp dir + rename), in the layout `save_pretrained` uses, so any server can load them."""
        directory = Path(directory)
        with atomic_directory(directory, durable=False) as tmp:
            write_model_files(tmp, served_state(self.model.state_dict(), self.config), self.model.config,
                              self.tokenizer)
        return directory

    # -- weights streamed to the engines (WeightStreamingTrainer) -------------------------------------------
    def stage_weights(self, cap_bytes: int, changed_only: bool = False) -> list[Bucket]:
        return self.sender.stage(cap_bytes, changed_only)

    def weight_bucket(self, index: int) -> list[tuple[str, torch.Tensor]]:
        """Staged bucket `index`'s tensors themselves, for an engine in this process to copy (no copy made here)."""
        return self.sender.tensors(index)

    def join_weight_group(self, init_method: str, world_size: int, group_name: str, backend: str,
                          timeout: float) -> None:
        self.sender.join(init_method, world_size, group_name, backend, timeout)

    def send_weight_bucket(self, index: int) -> None:
        self.sender.send(index)

    def leave_weight_group(self) -> None:
        self.sender.leave()

    def save_checkpoint(self, directory: str | Path) -> Path:
        learner = self.learner
        return write_checkpoint(
            directory, version=learner.version, layout=learner.state_layout(), tensors=learner.full_tensors(),
            scheduler_state=learner.scheduler.state_dict(), rng_states=[rng_state(learner.device)],
            model_config=self.model.config, tokenizer=self.tokenizer, backend="local")

    def load_checkpoint(self, directory: str | Path) -> int:
        learner = self.learner
        manifest = verify_checkpoint(directory)
        check_model_keys(directory, stored_shapes(directory, manifest), learner.parameter_shapes(),
                         learner.tied_embeddings)
        if is_format_1(manifest):
            checkpoint = read_checkpoint(directory, manifest)
            learner.load_full_state(checkpoint.model_state, checkpoint.optimizer_state,
                                    bool(checkpoint.optimizer_state), checkpoint.scheduler_state,
                                    checkpoint.rng_states, checkpoint.version)
        else:
            learner.load_tensors(CheckpointTensors(directory, manifest), read_meta(directory, manifest))
        return learner.version

    def close(self) -> None:
        """Leave a weight group; nothing else to release: the model lives in this process."""
        self.sender.leave()
