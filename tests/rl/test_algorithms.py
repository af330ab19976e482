"""The training mathematics against values computed by hand."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_core.rl.algorithms import (
    balance_microbatches,
    decoupled_ppo_loss,
    group_advantages,
    may_submit,
    pack_microbatches,
    padding_fraction,
)


def test_grpo_advantages_normalise_within_each_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, ["a", "a", "a", "a", "b", "b"], "grpo", eps=0.0)
    # group a: mean 0.5, population std 0.5 -> +-1; group b: all equal -> 0
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0, 0.0, 0.0])


def test_dr_grpo_and_rloo_advantages():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    groups = ["g"] * 4
    assert group_advantages(rewards, groups, "dr_grpo").tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    # RLOO: baseline = mean of the other three
    assert group_advantages(rewards, groups, "rloo").tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


def test_incomplete_group_changes_only_its_own_advantages():
    full = group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]), ["a", "a", "a", "b", "b", "b"])
    # one sample of group a failed and was dropped
    partial = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0]), ["a", "a", "b", "b", "b"])
    assert partial[2:].tolist() == pytest.approx(full[3:].tolist())
    assert partial[:2].tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    # a group left with one member has no baseline: advantage 0
    assert group_advantages(torch.tensor([1.0]), ["a"]).tolist() == [0.0]


def test_decoupled_ppo_loss_matches_hand_computation():
    # One sequence, three tokens; advantage +1.
    lp = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.2)]])
    prox = torch.tensor([[math.log(0.4), math.log(0.6), math.log(0.2)]])
    behav = torch.tensor([[math.log(0.4), math.log(0.3), math.log(0.01)]])
    mask = torch.ones(1, 3)
    loss, stats = decoupled_ppo_loss(lp, prox, behav, torch.tensor([1.0]), mask, eps_clip=0.2, correction="mask")
    # token 1: r = 1.25 -> clipped to 1.2, w = 1 -> 1.2
    # token 2: r = 1.5  -> clipped to 1.2, w = 2 -> 2.4
    # token 3: w = 0.2 / 0.01 = 20 > 5 -> masked out (it still counts in the denominator)
    assert loss.item() == pytest.approx(-(1.2 + 2.4) / 3)
    assert (stats.tokens, stats.masked_tokens, stats.truncated_tokens) == (2, 1, 0)
    assert stats.clip_fraction == pytest.approx(1.0)
    capped, stats = decoupled_ppo_loss(lp, prox, behav, torch.tensor([1.0]), mask, eps_clip=0.2, correction="tis",
                                       correction_bounds=[0.0, 5.0])
    # truncation keeps token 3 with w = 5 and r = 1: 5 * 1 = 5
    assert capped.item() == pytest.approx(-(1.2 + 2.4 + 5.0) / 3)
    assert (stats.masked_tokens, stats.truncated_tokens) == (0, 1)


def test_negative_advantage_uses_the_pessimistic_side_and_asymmetric_clip():
    lp = torch.tensor([[math.log(0.3), math.log(0.9)]])
    prox = torch.tensor([[math.log(0.6), math.log(0.6)]])
    loss, _ = decoupled_ppo_loss(lp, prox, prox, torch.tensor([-1.0]), torch.ones(1, 2), eps_clip=0.2,
                                 eps_clip_high=0.28)
    # token 1: r = 0.5 -> min(-0.5, -0.8) = -0.8 ; token 2: r = 1.5 -> min(-1.5, -1.28) = -1.5
    assert loss.item() == pytest.approx((0.8 + 1.5) / 2)


def test_plain_ppo_is_decoupled_ppo_with_prox_equal_behav():
    torch.manual_seed(0)
    lp, behav = torch.randn(3, 5), torch.randn(3, 5)
    adv, mask = torch.randn(3), (torch.rand(3, 5) > 0.2).float()
    plain, stats = decoupled_ppo_loss(lp, behav, behav, adv, mask, correction="none")
    assert stats.behav_weight_mean == pytest.approx(1.0)
    ratio = torch.exp(lp - behav)
    a = adv[:, None]
    expected = -(torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a) * mask).sum() / mask.sum()
    assert plain.item() == pytest.approx(expected.item(), rel=1e-6)


def test_loss_gradient_flows_only_through_current_logprobs():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    prox = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = decoupled_ppo_loss(lp, prox, prox.detach() - 0.1, torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    assert lp.grad is not None and torch.all(lp.grad != 0)


def test_sequence_aggregation_weights_sequences_equally():
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([2.0, 1.0])
    token, _ = decoupled_ppo_loss(lp, lp, lp, adv, mask, aggregation="token")
    seq, _ = decoupled_ppo_loss(lp, lp, lp, adv, mask, aggregation="sequence")
    assert token.item() == pytest.approx(-(2 + 4) / 5)
    assert seq.item() == pytest.approx(-(2 + 1) / 2)


@pytest.mark.parametrize("submitted, version, eta, allowed", [
    (0, 0, 0, True), (31, 0, 0, True), (32, 0, 0, False), (32, 1, 0, True),
    (63, 0, 1, True), (64, 0, 1, False), (64, 1, 1, True), (160, 0, 4, False), (159, 0, 4, True),
])
def test_staleness_rule(submitted, version, eta, allowed):
    # prompt number N = submitted + 1 may start while floor((N - 1) / B) <= version + eta, with B = 32
    assert may_submit(submitted, 32, version, eta) is allowed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=200), st.integers(300, 3000))
def test_packing_respects_the_budget_and_places_every_sequence_once(lengths, budget):
    bins = pack_microbatches(lengths, budget)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    for b in bins:
        assert len(b) * max(lengths[i] for i in b) <= budget
    assert 0.0 <= padding_fraction(lengths, bins) < 1.0


def test_packing_groups_similar_lengths_and_beats_fixed_batches_on_padding():
    lengths = [10] * 30 + [200] * 2 + [50] * 20
    packed = pack_microbatches(lengths, 1000)
    fixed = [list(range(i, min(i + 16, len(lengths)))) for i in range(0, len(lengths), 16)]
    assert padding_fraction(lengths, packed) < 0.1 < padding_fraction(lengths, fixed)


def test_balanced_microbatches_give_every_rank_the_same_count():
    lengths = [5, 9, 30, 7, 12, 3, 40]
    bins = pack_microbatches(lengths, 60)
    ranks = balance_microbatches(bins, lengths, 2)
    assert len(ranks[0]) == len(ranks[1])
    assert sorted(i for r in ranks for mb in r for i in mb) == list(range(len(lengths)))


@pytest.mark.parametrize("correction", ["mask", "tis", "icepop", "sequence_mask", "none"])
def test_a_behaviour_logprob_of_minus_infinity_gives_no_nan(correction):
    """SGLang returns -inf (or float32's most negative number) for a token outside its kept set; a padding
    position may hold anything. Neither may reach the loss or the gradient as NaN (exp(+inf) * 0)."""
    lp = torch.tensor([[math.log(0.5), math.log(0.4), math.log(0.3), 0.0]], requires_grad=True)
    prox = torch.tensor([[math.log(0.5), math.log(0.4), math.log(0.3), 0.0]])
    behav = torch.tensor([[math.log(0.5), -math.inf, torch.finfo(torch.float32).min, -math.inf]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last position is padding
    loss, stats = decoupled_ppo_loss(lp, prox, behav, torch.tensor([1.0]), mask, correction=correction)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert math.isfinite(stats.behav_weight_mean)
    if correction in ("mask", "icepop"):  # the two impossible tokens are masked; the first one counts, of 3
        assert loss.item() == pytest.approx(-1.0 / 3) and stats.tokens == 1


def test_the_capped_fraction_counts_response_tokens_only():
    """1 of 4 response tokens over the cap, in a row padded to 8: a quarter of the tokens, not an eighth."""
    lp = prox = torch.zeros(1, 8)
    behav = torch.tensor([[0.0, 0.0, -5.0, 0.0, 0.0, 0.0, 0.0, 0.0]])  # w = e^5 > 5 on the third token
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    _, stats = decoupled_ppo_loss(lp, prox, behav, torch.tensor([1.0]), mask, correction="mask")
    assert stats.behav_capped_fraction == pytest.approx(0.25)
    assert (stats.capped_tokens, stats.response_tokens, stats.tokens) == (1, 4, 3)


def test_a_masked_token_counts_in_its_sequences_denominator_as_in_the_tokens():
    """The cap masks a token out of the loss in both aggregations; it stays in the denominator of both (token:
    the minibatch's tokens; sequence: its sequence's tokens), so masking never raises the other tokens' weight."""
    lp = prox = torch.zeros(1, 4)
    behav = torch.tensor([[0.0, 0.0, -5.0, 0.0]])  # the third token's w = e^5 > 5: masked
    mask = torch.ones(1, 4)
    token, _ = decoupled_ppo_loss(lp, prox, behav, torch.tensor([1.0]), mask, normaliser=4.0)
    seq, _ = decoupled_ppo_loss(lp, prox, behav, torch.tensor([1.0]), mask, aggregation="sequence")
    assert token.item() == pytest.approx(-3 / 4) and seq.item() == pytest.approx(-3 / 4)


def test_dual_clip_bounds_the_objective_of_a_negative_advantage():
    """r = 5 on a token with A = -1: PPO's min(r A, clip(r) A) = -5, unbounded as r grows; dual-clip c = 3
    bounds it at c A = -3 (Ye et al. 2020). Positive advantages are untouched."""
    lp = torch.tensor([[math.log(0.5), math.log(0.5)]])
    prox = torch.tensor([[math.log(0.1), math.log(0.1)]])
    plain, _ = decoupled_ppo_loss(lp, prox, prox, torch.tensor([-1.0]), torch.ones(1, 2))
    dual, _ = decoupled_ppo_loss(lp, prox, prox, torch.tensor([-1.0]), torch.ones(1, 2), dual_clip=3.0)
    positive, _ = decoupled_ppo_loss(lp, prox, prox, torch.tensor([1.0]), torch.ones(1, 2), dual_clip=3.0)
    assert plain.item() == pytest.approx(5.0) and dual.item() == pytest.approx(3.0)
    assert positive.item() == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        decoupled_ppo_loss(lp, prox, prox, torch.tensor([-1.0]), torch.ones(1, 2), dual_clip=1.0)
