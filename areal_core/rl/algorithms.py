"""The mathematics of training, as short pure functions over tensors.

Notation: B sequences, T response tokens (right-padded), `mask` [B, T] marks real tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

AdvantageEstimator = Literal["grpo", "dr_grpo", "rloo"]


# -- advantages ---------------------------------------------------------------------------------
#   GRPO     A_i = (r_i - mean_g r) / (std_g r + eps)          (Shao et al. 2024)
#   Dr.GRPO  A_i =  r_i - mean_g r                              (Liu et al. 2025: no std division)
#   RLOO     A_i =  r_i - mean_{j != i, j in g} r_j             (Ahmadian et al. 2024: leave-one-out baseline)
# Statistics are taken over the members of each group that are present, so a failed sample (dropped
# before this point) changes only its own group. A group of one has no baseline: its advantage is 0.
def group_advantages(rewards: torch.Tensor, group_ids: Sequence[str | int], estimator: AdvantageEstimator = "grpo",
                     eps: float = 1e-6) -> torch.Tensor:
    """rewards [N], group_ids length N -> advantages [N] (one per sequence)."""
    rewards = rewards.double()
    advantages = torch.zeros_like(rewards)
    groups: dict[str | int, list[int]] = {}
    for index, group in enumerate(group_ids):
        groups.setdefault(group, []).append(index)
    for members in groups.values():
        idx = torch.tensor(members)
        r = rewards[idx]
        n = len(members)
        if n == 1:
            continue
        mean = r.mean()
        if estimator == "grpo":
            std = r.std(unbiased=False)
            advantages[idx] = (r - mean) / (std + eps) if std > 0 else torch.zeros_like(r)
        elif estimator == "dr_grpo":
            advantages[idx] = r - mean
        elif estimator == "rloo":
            advantages[idx] = r - (r.sum() - r) / (n - 1)
        else:
            raise ValueError(f"unknown advantage estimator {estimator!r}")
    return advantages.float()


# -- decoupled PPO --------------------------------------------------------------------------------
#   r_t = pi_theta(a_t) / pi_prox(a_t)                        ratio to the proximal policy
#   w_t = pi_prox(a_t) / pi_behav(a_t)   (detached)            behaviour importance weight
#   L   = -E_t[ w_t * min(r_t A_t, clip(r_t, 1 - eps, 1 + eps_high) A_t) ]
# pi_behav: log-probs the engine returned with each token (the policy that generated it, maybe stale);
# pi_prox:  log-probs recomputed with the trainer's weights at the start of the step.
# Tokens with w_t > behav_cap are masked out ("mask") or have w_t clipped to the cap ("cap").
# Plain PPO is pi_prox = pi_behav (w = 1).                      (Fu et al. 2025, AReaL, eq. 5)
@dataclass(frozen=True)
class PPOStats:
    loss: float
    clip_fraction: float
    behav_weight_mean: float
    behav_capped_fraction: float      # of the response tokens
    approx_kl: float
    tokens: int                       # response tokens in the loss (after the cap's masking)
    response_tokens: int = 0          # response tokens given (the mask before the cap)
    capped_tokens: int = 0            # of them, over the cap (masked or capped)


# Beyond e^20 (~5e8) a behaviour weight only says the behaviour policy could (almost) not have sampled the token.
MAX_LOG_WEIGHT = 20.0


def decoupled_ppo_loss(logprobs: torch.Tensor, prox_logprobs: torch.Tensor, behav_logprobs: torch.Tensor,
                       advantages: torch.Tensor, mask: torch.Tensor, *, eps_clip: float = 0.2,
                       eps_clip_high: float | None = None, behav_cap: float | None = 5.0,
                       behav_cap_mode: Literal["mask", "cap"] = "mask",
                       aggregation: Literal["token", "sequence"] = "token",
                       normaliser: float | None = None, dual_clip: float | None = None) -> tuple[torch.Tensor, PPOStats]:
    """logprobs / prox_logprobs / behav_logprobs / mask [B, T]; advantages [B] or [B, T].

    aggregation "token": sum over all real tokens / (normaliser or their count);
    "sequence": mean over each sequence's tokens, then mean over sequences.
    Either way a token the cap masks out stays in the denominator (the mask as given, not as capped), so
    masking one token never raises the weight of the others.
    """
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    mask = mask.float()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(logprobs - prox_logprobs)
    clipped = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + eps_high)
    objective = torch.minimum(ratio * advantages, clipped * advantages)
    if dual_clip is not None:
        # Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"): with A < 0 the
        # clipped objective is unbounded below as r grows; max(., c A) bounds it.
        objective = torch.where(advantages < 0, torch.maximum(objective, dual_clip * advantages), objective)
    # log w, bounded before exp: a behaviour log-prob of -inf (SGLang's for a token outside its kept set, or
    # float32's most negative number) would give w = inf and inf * 0 = NaN under the mask. Positions outside
    # the mask (padding, tool output) hold whatever they hold: their w is 1, then masked.
    response = mask > 0
    log_weight = torch.where(response, (prox_logprobs - behav_logprobs).detach(), torch.zeros_like(mask))
    log_weight = torch.nan_to_num(log_weight, nan=0.0, posinf=MAX_LOG_WEIGHT, neginf=-MAX_LOG_WEIGHT)
    log_weight = log_weight.clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)
    behav_weight = torch.exp(log_weight)
    response_tokens = int(response.sum())
    capped = torch.zeros_like(mask)
    if behav_cap is not None:
        over = ((log_weight > math.log(behav_cap)) & response).float()
        capped = over
        if behav_cap_mode == "mask":
            mask = mask * (1.0 - over)
        else:
            behav_weight = torch.clamp(behav_weight, max=behav_cap)
    per_token = torch.where(mask > 0, -behav_weight * objective * mask, torch.zeros_like(mask))
    if aggregation == "token":
        loss = per_token.sum() / (normaliser if normaliser is not None else mask.sum().clamp(min=1.0))
    else:
        loss = (per_token.sum(1) / response.float().sum(1).clamp(min=1.0)).mean()
    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        stats = PPOStats(
            loss=float(loss),
            clip_fraction=float(((ratio - clipped).abs() > 1e-8).float().mul(mask).sum() / n),
            behav_weight_mean=float((behav_weight * mask).sum() / n),
            behav_capped_fraction=float(capped.sum()) / max(response_tokens, 1),
            approx_kl=float(((prox_logprobs - logprobs) * mask).sum() / n),
            tokens=int(mask.sum()),
            response_tokens=response_tokens,
            capped_tokens=int(capped.sum()),
        )
    return loss, stats


def aggregate_tokens(values: torch.Tensor, mask: torch.Tensor, aggregation: Literal["token", "sequence"],
                     tokens: float, sequences: int) -> torch.Tensor:
    """A micro-batch's share of its minibatch's mean of per-token `values` [n, L] under `mask`, by the PPO term's
    rule (the KL penalty and the entropy bonus use it too): "token": the sum / the minibatch's `tokens`;
    "sequence": each sequence's mean, summed / the minibatch's `sequences`."""
    masked = values * mask
    if aggregation == "token":
        return masked.sum() / max(tokens, 1.0)
    return (masked.sum(1) / mask.sum(1).clamp(min=1.0)).sum() / max(sequences, 1)


# -- staleness control ----------------------------------------------------------------------------
#   The controller may submit prompt number N_r (1-based) only while  floor((N_r - 1) / B) <= i + eta,
#   i = current policy version, B = prompts per training batch, eta = max staleness.   (AReaL, sec. 5)
def may_submit(n_submitted: int, batch_size: int, version: int, max_staleness: int) -> bool:
    """True when the next prompt (number n_submitted + 1) may be submitted."""
    return n_submitted // batch_size <= version + max_staleness


# -- dynamic micro-batching -------------------------------------------------------------------------
# A micro-batch costs (count x longest) token positions, padding included, plus a fixed overhead per
# forward pass. With lengths sorted longest first, an optimal packing uses contiguous runs, so dynamic
# programming over the sorted order finds the packing of least total cost
#     cost = sum over micro-batches of (count x longest + overhead),   subject to count x longest <= budget.
# This beats first-fit decreasing, which tops up a batch of long sequences with short ones and pads them.
def pack_microbatches(lengths: Sequence[int], token_budget: int, overhead_tokens: int = 64) -> list[list[int]]:
    """Indices of sequences grouped into micro-batches with (count x max length) <= token_budget.
    A sequence longer than the budget gets a micro-batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    n = len(order)
    best = [0.0] * (n + 1)       # best[i]: least cost of packing order[i:]
    cut = [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        longest = lengths[order[i]]
        best[i], cut[i] = float("inf"), i + 1
        for j in range(i + 1, min(n, i + 4096) + 1):
            count = j - i
            if count > 1 and count * longest > token_budget:
                break
            cost = best[j] + count * longest + overhead_tokens
            if cost < best[i]:
                best[i], cut[i] = cost, j
    bins, i = [], 0
    while i < n:
        bins.append(order[i:cut[i]])
        i = cut[i]
    return bins


def padding_fraction(lengths: Sequence[int], microbatches: Sequence[Sequence[int]]) -> float:
    """Share of computed token positions that are padding."""
    padded = sum(len(mb) * max(lengths[i] for i in mb) for mb in microbatches if mb)
    return 1.0 - sum(lengths) / padded if padded else 0.0


def balance_microbatches(microbatches: list[list[int]], lengths: Sequence[int], ranks: int) -> list[list[list[int]]]:
    """Deal micro-batches to data-parallel ranks so every rank gets the same number (splitting the
    largest ones when needed) and similar token loads (largest first, to the lightest rank)."""
    mbs = [list(mb) for mb in microbatches]
    while len(mbs) % ranks:
        mbs.sort(key=lambda mb: -len(mb))
        if len(mbs[0]) < 2:
            mbs.append([])  # not enough sequences to split: an empty micro-batch does no work
            continue
        biggest = mbs.pop(0)
        mbs += [biggest[: len(biggest) // 2], biggest[len(biggest) // 2:]]
    load = [0] * ranks
    out: list[list[list[int]]] = [[] for _ in range(ranks)]
    per_rank = len(mbs) // ranks
    for mb in sorted(mbs, key=lambda mb: -sum(lengths[i] for i in mb)):
        candidates = [r for r in range(ranks) if len(out[r]) < per_rank]
        rank = min(candidates, key=lambda r: load[r])
        out[rank].append(mb)
        load[rank] += sum(lengths[i] for i in mb)
    return out
