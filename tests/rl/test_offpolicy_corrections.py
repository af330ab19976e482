"""The off-policy corrections (algorithms.OFF_POLICY_CORRECTIONS, one config key: trainer.correction) by hand,
and the engine/trainer mismatch metrics every step reports, against log-probs computed here."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from areal_core.config import load_config
from areal_core.engine.model import init_model, load_model
from areal_core.errors import ConfigError
from areal_core.rl.algorithms import check_correction, decoupled_ppo_loss, mismatch_sums
from areal_core.rl.config import TrainConfig, TrainerConfig
from areal_core.rl.trainer import LocalTrainer, sequence_logprobs, train_step
from trainer_support import TEST_MODEL, make_batch

# Four tokens with advantage +1 and r = 1 (logprobs = prox), so each token's objective is its weight c(w).
WEIGHTS = [0.25, 1.0, 3.0, 8.0]
PROX = torch.zeros(1, 4)
BEHAV = -torch.tensor([WEIGHTS]).log()   # w = pi_prox / pi_behav = WEIGHTS
MASK = torch.ones(1, 4)


def loss_of(correction, bounds=None):
    loss, stats = decoupled_ppo_loss(PROX, PROX, BEHAV, torch.tensor([1.0]), MASK, correction=correction,
                                     correction_bounds=bounds)
    return -loss.item() * 4, stats   # the sum of the tokens' c(w) (the denominator is the 4 tokens)


@pytest.mark.parametrize("correction, expected, masked, truncated", [
    ("mask", 0.25 + 1.0 + 3.0, 1, 0),             # w = 8 > 5 masked
    ("icepop", 1.0 + 3.0, 2, 0),                  # w = 0.25 < 0.5 and w = 8 > 5 masked
    ("tis", 0.25 + 1.0 + 2.0 + 2.0, 0, 2),        # w clipped to [0, 2]
    ("none", 4.0, 0, 0),                          # c = 1
])
def test_each_token_correction_by_hand(correction, expected, masked, truncated):
    total, stats = loss_of(correction)
    assert total == pytest.approx(expected)
    assert (stats.masked_tokens, stats.truncated_tokens, stats.response_tokens) == (masked, truncated, 4)
    assert stats.behav_capped_fraction == pytest.approx((masked + truncated) / 4)


def test_bounds_override_the_defaults():
    assert loss_of("tis", [0.5, 4.0])[0] == pytest.approx(0.5 + 1.0 + 3.0 + 4.0)
    assert loss_of("mask", [0.0, 2.0])[0] == pytest.approx(0.25 + 1.0)


def test_sequence_mask_masks_whole_sequences_by_the_geometric_mean_of_their_weights():
    """Row 1's weights have geometric mean (0.5 * 2)^(1/2) = 1: kept, every token with c = 1 (rejection, not
    reweighting); row 2's is (2 * 2)^(1/2) = 2 > 1.25: masked whole (still counted in the denominator)."""
    behav = -torch.tensor([[0.5, 2.0], [2.0, 2.0]]).log()
    prox = torch.zeros(2, 2)
    loss, stats = decoupled_ppo_loss(prox, prox, behav, torch.tensor([1.0, 1.0]), torch.ones(2, 2),
                                     correction="sequence_mask")
    assert loss.item() == pytest.approx(-2 / 4)
    assert (stats.masked_tokens, stats.tokens) == (2, 2)


def test_unknown_corrections_and_bad_bounds_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown off-policy correction 'icepops'; one of mask, tis"):
        check_correction("icepops", None)
    with pytest.raises(ValueError, match=r"correction_bounds must be \[lo, hi\] with 0 <= lo <= 1 <= hi.*got \[2.0, 1.0\]"):
        check_correction("tis", [2.0, 1.0])
    with pytest.raises(ConfigError, match="icepops"):
        load_config(TrainConfig, None, ["trainer.correction=icepops"])
    assert load_config(TrainConfig, None, ["trainer.correction=icepop"]).trainer.correction == "icepop"


def test_mismatch_sums_by_hand():
    trainer = torch.tensor([[0.0, math.log(0.5), 0.0, 0.0]])
    engine = torch.tensor([[0.0, math.log(0.4), -math.inf, 5.0]])
    tokens = torch.tensor([[True, True, True, False]])   # the last is another version's token: not counted
    sums, largest = mismatch_sums(trainer, engine, tokens)
    delta = [0.0, math.log(0.5 / 0.4), 20.0]             # -inf is bounded at MAX_LOG_WEIGHT, like log w
    assert sums["tokens"] == 3 and sums["large_count"] == 2
    assert sums["abs_sum"] == pytest.approx(sum(abs(d) for d in delta))
    assert sums["k3_sum"] == pytest.approx(sum(math.exp(d) - 1 - d for d in delta), rel=1e-5)
    assert largest == pytest.approx(20.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=6, **TEST_MODEL)


def own_logprobs(model, traj, top_p=1.0, top_k=-1):
    tokens = torch.tensor([traj.prompt_token_ids + traj.output_token_ids])
    with torch.no_grad():
        lp = sequence_logprobs(model, tokens, torch.ones_like(tokens), 1.0, top_p=top_p, top_k=top_k)[0]
    return lp[0, len(traj.prompt_token_ids) - 1:]


@pytest.mark.parametrize("decoupled", [True, False])
def test_a_step_reports_the_gap_on_the_tokens_of_the_trainers_version_only(model_dir, decoupled):
    """Half the trajectories were sampled by the weights the trainer holds (version 3), with a known gap; the
    rest are a version older, with a larger one that must not count."""
    batch = make_batch(model_dir, seed=7, groups=4)
    model = load_model(model_dir)
    deltas, changed = [], []
    for i, traj in enumerate(batch):
        own = own_logprobs(model, traj)
        current = i % 2 == 0
        gap = torch.full_like(own, 0.02 if current else 0.5) * (1 - 2 * (torch.arange(len(own)) % 2))
        changed.append(dataclasses.replace(traj, output_logprobs=(own - gap).tolist(),
                                           output_versions=[3 if current else 2] * len(own)))
        if current:
            deltas += gap.tolist()
    batch = changed
    config = TrainerConfig(decoupled=decoupled, ppo_minibatches=1, micro_batch_tokens=256)
    metrics = train_step(LocalTrainer(model_dir, config, 10, version=3), batch, 1.0)
    assert metrics["mismatch_tokens"] == len(deltas)
    assert metrics["mismatch_abs_mean"] == pytest.approx(0.02, abs=1e-4)
    assert metrics["mismatch_kl"] == pytest.approx(sum(math.exp(d) - 1 - d for d in deltas) / len(deltas), rel=2e-2)
    assert metrics["mismatch_abs_max"] == pytest.approx(0.02, abs=1e-4)
    assert metrics["mismatch_large_fraction"] == 0.0


def test_with_top_p_the_trainer_recomputes_what_the_engine_drew_from(model_dir):
    """Behaviour log-probs of the renormalised top-p distribution (what the engines record): the trainer, told the
    rollout's top_p, recomputes the same, so the measured gap is ~0; recomputing the untruncated distribution
    instead shows a gap of log(kept mass) on every token."""
    batch = make_batch(model_dir, seed=8, groups=3)
    model = load_model(model_dir)
    batch = [dataclasses.replace(t, output_logprobs=own_logprobs(model, t, top_p=0.9).tolist()) for t in batch]
    config = TrainerConfig(ppo_minibatches=1, micro_batch_tokens=256)
    truncated = train_step(LocalTrainer(model_dir, config, 10), batch, 1.0, top_p=0.9)
    untruncated = train_step(LocalTrainer(model_dir, config, 10), batch, 1.0)
    assert truncated["mismatch_abs_max"] < 1e-4 and truncated["mismatch_tokens"] > 0
    assert untruncated["mismatch_abs_mean"] > 10 * truncated["mismatch_abs_mean"] + 1e-3


@pytest.mark.parametrize("correction", ["mask", "tis", "icepop", "sequence_mask", "none"])
def test_a_token_the_proximal_policy_excludes_is_masked_not_infinite(correction):
    """Under top-p the trainer's pi_prox may exclude a token (log-prob EXCLUDED_LOGPROB) that pi_theta, one
    minibatch later, keeps: r = e^10000 = inf made the loss inf and the gradient NaN. Such a token is masked."""
    from areal_core.engine.protocol import EXCLUDED_LOGPROB

    lp = torch.tensor([[math.log(0.5), math.log(0.3)]], requires_grad=True)
    prox = torch.tensor([[math.log(0.5), EXCLUDED_LOGPROB]])
    behav = torch.tensor([[math.log(0.5), math.log(0.2)]])
    loss, stats = decoupled_ppo_loss(lp, prox, behav, torch.tensor([-1.0]), torch.ones(1, 2), correction=correction)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert stats.masked_tokens >= 1 and lp.grad[0, 1] == 0


def test_the_loglinear_prox_by_hand():
    """v = 3, half of the step's optimizer steps taken (progress 0.5): a token of version 2 gets alpha = 1 / 1.5, one
    of version 3 (the trainer's) keeps its behaviour log-prob, a position off the response is left as it was."""
    from areal_core.rl.trainer import loglinear_prox

    behav = torch.tensor([[-1.0, -2.0, -0.5]])
    logprobs = torch.tensor([[-1.6, -1.0, -3.0]])
    versions = torch.tensor([[2, 3, -1]])
    prox = loglinear_prox(behav, logprobs, versions, version=3, progress=0.5)
    assert prox.tolist()[0] == pytest.approx([-1.0 + (1 / 1.5) * (-0.6), -2.0, -0.5])


def test_loglinear_prox_skips_the_recompute_pass_and_reports_its_error(model_dir):
    """proximal=loglinear runs one forward before the update (the error's sample) where recompute runs one per
    micro-batch of the later minibatches, and the step reports the approximation's mean absolute error."""
    batch = [dataclasses.replace(t, output_versions=[4] * len(t.output_token_ids)) for t in make_batch(model_dir, 9, 6)]
    counts = {}
    for proximal in ("recompute", "loglinear"):
        config = TrainerConfig(proximal=proximal, ppo_minibatches=2, micro_batch_tokens=64, lr=1e-2)
        trainer = LocalTrainer(model_dir, config, 10, version=5)
        calls = []
        hook = trainer.model.register_forward_hook(lambda *_: calls.append(1))
        prepared = trainer.prepare(batch, 1.0)
        trainer.recompute_proximal(prepared)
        counts[proximal] = (len(calls), len(prepared.microbatches[1]))
        hook.remove()
        metrics = trainer.ppo_update(prepared, torch.linspace(-1, 1, len(batch)))
        assert math.isfinite(metrics["loss"])
    assert counts["recompute"][0] == counts["recompute"][1] > 1 and counts["loglinear"][0] == 1
    assert 0 < metrics["prox_approx_error"] < 0.5


def test_a_config_saved_before_trainer_correction_still_loads(tmp_path):
    """A run saved with behav_cap / behav_cap_mode resumes: the keys are read as today's correction keys."""
    saved = tmp_path / "config.yaml"
    saved.write_text("trainer:\n  behav_cap: 4.0\n  behav_cap_mode: cap\n")
    trainer = load_config(TrainConfig, saved, []).trainer
    assert (trainer.correction, trainer.correction_bounds) == ("tis", [0.0, 4.0])
    saved.write_text("trainer:\n  behav_cap: null\n")
    assert load_config(TrainConfig, saved, []).trainer.correction == "none"
    with pytest.raises(ValueError, match="0 <= lo <= 1 <= hi"):
        check_correction("mask", [0.0, 0.9])   # would mask every on-policy token
