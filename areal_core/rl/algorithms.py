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
#   L   = -E_t[ c(w)_t * min(r_t A_t, clip(r_t, 1 - eps, 1 + eps_high) A_t) ]
# pi_behav: log-probs the engine returned with each token (the policy that generated it, maybe stale, maybe
#           another numerical precision or kernel than the trainer's);
# pi_prox:  log-probs recomputed with the trainer's weights at the start of the step.
# c(w): the off-policy correction (OFF_POLICY_CORRECTIONS below): how the weight corrects for the gap between
# the engine that sampled and the trainer that learns (staleness and engine/trainer mismatch alike).
# Plain PPO is pi_prox = pi_behav (w = 1).                      (Fu et al. 2025, AReaL, eq. 5)
OffPolicyCorrection = Literal["mask", "tis", "icepop", "sequence_mask", "none"]

# Each correction, as applied to w with bounds [lo, hi] (trainer.correction_bounds; these are the defaults):
#   mask           c = w where w <= hi, else the token is masked out           [0, 5]   AReaL's decoupled PPO
#                  (Fu et al. 2025, "AReaL: A Large-Scale Asynchronous RL System for Language Reasoning")
#   tis            c = clip(w, lo, hi): truncated importance sampling          [0, 2]   (Yao et al. 2025, "Your
#                  Efficient RL Framework Secretly Brings You Off-Policy RL Training"; with bounds [0, 5], the
#                  decoupled weight capped rather than masked)
#   icepop         c = w where lo <= w <= hi, else masked: two-sided masking  [0.5, 5] (Ling Team 2025, IcePop:
#                  "Every Step Evolves: Scaling RL for Trillion-Scale Thinking Model"); mask is its one-sided case
#   sequence_mask  a sequence is masked whole when the geometric mean of its w, exp(mean_t log w_t), is outside
#                  [lo, hi]; the tokens of the others carry c = 1 (rejection, not reweighting)  [0.8, 1.25]
#                  (geometric-mean rejection sampling, as in verl's rollout correction "geo" mode)
#   none           c = 1: the mismatch is left uncorrected (the clip against pi_prox still bounds the step)
# A masked token stays in the loss's denominator, so masking never raises the weight of the others.
OFF_POLICY_CORRECTIONS: dict[str, tuple[float, float] | None] = {
    "mask": (0.0, 5.0), "tis": (0.0, 2.0), "icepop": (0.5, 5.0), "sequence_mask": (0.8, 1.25), "none": None}


def check_correction(correction: str, bounds: Sequence[float] | None) -> tuple[float, float] | None:
    """The bounds [lo, hi] the correction uses (its defaults when `bounds` is None); ValueError for an unknown
    correction or bounds that are not 0 <= lo <= 1 <= hi."""
    if correction not in OFF_POLICY_CORRECTIONS:
        raise ValueError(f"unknown off-policy correction {correction!r}; one of {', '.join(OFF_POLICY_CORRECTIONS)}")
    if bounds is None or correction == "none":
        return OFF_POLICY_CORRECTIONS[correction]
    if len(bounds) != 2 or not 0.0 <= bounds[0] <= 1.0 <= bounds[1] or bounds[0] == bounds[1]:
        raise ValueError(f"correction_bounds must be [lo, hi] with 0 <= lo <= 1 <= hi, lo < hi (an on-policy token, "
                         f"w = 1, must pass), got {list(bounds)}")
    return float(bounds[0]), float(bounds[1])


@dataclass(frozen=True)
class PPOStats:
    loss: float
    clip_fraction: float
    behav_weight_mean: float
    behav_capped_fraction: float      # of the response tokens: masked or truncated by the correction
    approx_kl: float
    tokens: int                       # response tokens in the loss (after the correction's masking)
    response_tokens: int = 0          # response tokens given (the mask before the correction)
    capped_tokens: int = 0            # of them, masked or truncated by the correction
    masked_tokens: int = 0            # of them, masked out by the correction
    truncated_tokens: int = 0         # of them, whose weight the correction truncated (tis)


# Beyond e^20 (~5e8) a behaviour weight only says the behaviour policy could (almost) not have sampled the token.
MAX_LOG_WEIGHT = 20.0
# A log-prob below this is of a token the policy cannot sample (float32's smallest probability is ~e^-104): one
# that top-p / top-k excludes (engine.protocol.EXCLUDED_LOGPROB), or SGLang's float32 minimum.
IMPOSSIBLE_LOGPROB = -1000.0


def behaviour_log_weights(prox_logprobs: torch.Tensor, behav_logprobs: torch.Tensor, response: torch.Tensor
                          ) -> torch.Tensor:
    """log w = log pi_prox - log pi_behav on the response tokens (0 elsewhere), detached, within +-MAX_LOG_WEIGHT.

    Bounded before any exp: a behaviour log-prob of -inf (or float32's most negative number, which SGLang returns
    for a token outside its kept set) would give w = inf and inf * 0 = NaN under the mask. Positions outside
    the mask (padding, tool output) hold whatever they hold: their log w is 0."""
    log_weight = torch.where(response, (prox_logprobs - behav_logprobs).detach(), torch.zeros_like(prox_logprobs))
    log_weight = torch.nan_to_num(log_weight, nan=0.0, posinf=MAX_LOG_WEIGHT, neginf=-MAX_LOG_WEIGHT)
    return log_weight.clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)


def off_policy_correction(log_weight: torch.Tensor, response: torch.Tensor, correction: str,
                          bounds: tuple[float, float] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(c(w) [B, T], masked [B, T] bool, truncated [B, T] bool) of OFF_POLICY_CORRECTIONS, for log w on the
    response tokens `response` [B, T] bool."""
    nothing = torch.zeros_like(response)
    if correction == "none" or bounds is None:
        return torch.ones_like(log_weight), nothing, nothing
    low, high = bounds
    log_low = math.log(low) if low > 0 else -math.inf
    log_high = math.log(high)
    weight = torch.exp(log_weight)
    if correction in ("mask", "icepop"):
        outside = ((log_weight > log_high) | (log_weight < log_low)) & response
        return weight, outside, nothing
    if correction == "tis":
        truncated = ((log_weight > log_high) | (log_weight < log_low)) & response
        return torch.clamp(weight, min=low, max=high), nothing, truncated
    if correction == "sequence_mask":
        tokens = response.float().sum(1, keepdim=True).clamp(min=1.0)
        geometric = (log_weight * response).sum(1, keepdim=True) / tokens   # log of the geometric mean
        outside = ((geometric > log_high) | (geometric < log_low)) & response
        return torch.ones_like(log_weight), outside, nothing
    raise ValueError(f"unknown off-policy correction {correction!r}; one of {', '.join(OFF_POLICY_CORRECTIONS)}")


def decoupled_ppo_loss(logprobs: torch.Tensor, prox_logprobs: torch.Tensor, behav_logprobs: torch.Tensor,
                       advantages: torch.Tensor, mask: torch.Tensor, *, eps_clip: float = 0.2,
                       eps_clip_high: float | None = None, correction: str = "mask",
                       correction_bounds: Sequence[float] | None = None,
                       aggregation: Literal["token", "sequence"] = "token",
                       normaliser: float | None = None, dual_clip: float | None = None) -> tuple[torch.Tensor, PPOStats]:
    """logprobs / prox_logprobs / behav_logprobs / mask [B, T]; advantages [B] or [B, T].

    correction / correction_bounds: OFF_POLICY_CORRECTIONS (bounds None: the correction's defaults).
    aggregation "token": sum over all real tokens / (normaliser or their count);
    "sequence": mean over each sequence's tokens, then mean over sequences.
    Either way a token the correction masks out stays in the denominator (the mask as given, not as masked), so
    masking one token never raises the weight of the others.
    """
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    bounds = check_correction(correction, correction_bounds)
    mask = mask.float()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    # Bounded like log w: a token pi_prox excludes (top-p) but pi_theta keeps would give r = e^10000 = inf.
    ratio = torch.exp((logprobs - prox_logprobs).clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT))
    clipped = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + eps_high)
    objective = torch.minimum(ratio * advantages, clipped * advantages)
    if dual_clip is not None:
        # Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"): with A < 0 the
        # clipped objective is unbounded below as r grows; max(., c A) bounds it.
        objective = torch.where(advantages < 0, torch.maximum(objective, dual_clip * advantages), objective)
    response = mask > 0
    weight, masked, truncated = off_policy_correction(behaviour_log_weights(prox_logprobs, behav_logprobs, response),
                                                      response, correction, bounds)
    # A token the proximal policy cannot sample (outside its top-p set) is no sample of the policy the step is
    # anchored to: masked, whatever the correction.
    masked = masked | (response & (prox_logprobs < IMPOSSIBLE_LOGPROB))
    response_tokens = int(response.sum())
    denominator = response.float()
    mask = mask * (1.0 - masked.float())
    per_token = torch.where(mask > 0, -weight * objective * mask, torch.zeros_like(mask))
    loss = aggregate_tokens(per_token, denominator, aggregation,
                            normaliser if normaliser is not None else float(denominator.sum()), logprobs.shape[0])
    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        capped = masked | truncated
        stats = PPOStats(
            loss=float(loss),
            clip_fraction=float(((ratio - clipped).abs() > 1e-8).float().mul(mask).sum() / n),
            behav_weight_mean=float((weight * mask).sum() / n),
            behav_capped_fraction=float(capped.sum()) / max(response_tokens, 1),
            approx_kl=float(((prox_logprobs - logprobs) * mask).sum() / n),
            tokens=int(mask.sum()),
            response_tokens=response_tokens,
            capped_tokens=int(capped.sum()),
            masked_tokens=int(masked.sum()),
            truncated_tokens=int(truncated.sum()),
        )
    return loss, stats


# -- engine / trainer mismatch ------------------------------------------------------------------------------
#   delta_t = log pi_trainer(a_t) - log pi_engine(a_t)  on tokens the engine sampled with the very weights the
#   trainer holds (so any gap is numerics: precision, kernels, truncation), bounded like log w above.
#   k3_t = exp(delta_t) - 1 - delta_t >= 0: an unbiased estimate of KL(pi_engine || pi_trainer) from the engine's
#   samples (Schulman 2020, "Approximating KL Divergence").
MISMATCH_KEYS = ("tokens", "abs_sum", "k3_sum", "large_count")
MISMATCH_LARGE = 0.1   # |delta| above this (a ratio outside ~[0.9, 1.1]) counts as a large gap


def mismatch_sums(trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, tokens: torch.Tensor
                  ) -> tuple[dict[str, float], float]:
    """({tokens, abs_sum, k3_sum, large_count}, max |delta|) over the tokens `tokens` [B, T] bool: sums, so that
    micro-batches and ranks add up; the means are the sums over `tokens`."""
    delta = behaviour_log_weights(trainer_logprobs.detach(), engine_logprobs, tokens)
    size = delta.abs()
    picked = tokens.float()
    sums = {"tokens": float(picked.sum()), "abs_sum": float((size * picked).sum()),
            "k3_sum": float(((torch.exp(delta) - 1.0 - delta) * picked).sum()),
            "large_count": float(((size > MISMATCH_LARGE) & tokens).sum())}
    return sums, float(size.max()) if bool(tokens.any()) else 0.0


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
