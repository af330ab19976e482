"""Off-policy corrections in the trainer: behaviour log-probs the trainer's policy could not have produced
(-inf from SGLang for a token outside its kept set) reach neither the loss nor the gradient as NaN, and the
share of capped tokens is a share of the policy's tokens, whatever the micro-batches; the KL penalty follows the
PPO term's aggregation."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from areal_core.engine.model import init_model, load_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, sequence_logprobs, train_step
from areal_core.types import RewardResult
from trainer_support import TEST_MODEL, make_batch


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=5, **TEST_MODEL)


@pytest.mark.parametrize("minibatches", [1, 2])
def test_impossible_behaviour_tokens_are_capped_counted_and_never_nan(model_dir, minibatches):
    batch = make_batch(model_dir, seed=3, groups=6)
    impossible = 0
    for t in batch[::3]:  # the first token of every third trajectory: -inf, or float32's most negative
        t.output_logprobs[0] = -math.inf if impossible % 2 else -3.4028234663852886e38
        impossible += 1
    config = TrainerConfig(lr=1e-3, ppo_minibatches=minibatches, micro_batch_tokens=128, correction="mask")
    metrics = train_step(LocalTrainer(model_dir, config, 10), batch, 1.0)
    assert metrics["microbatches"] > minibatches
    assert all(math.isfinite(metrics[k]) for k in ("loss", "grad_norm", "behav_weight_mean", "approx_kl"))
    tokens = sum(len(t.output_token_ids) for t in batch)
    assert metrics["behav_capped_fraction"] == pytest.approx(impossible / tokens)  # the noise caps no others


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_the_kl_penalty_is_aggregated_as_the_ppo_term(model_dir, aggregation):
    """kl_ref (the k3 estimate of KL(pi_theta || pi_ref)) is the minibatch's token mean under token
    aggregation and the mean of the sequences' token means under sequence aggregation, as the PPO term."""
    batch = make_batch(model_dir, seed=4, groups=4)
    config = TrainerConfig(lr=1e-2, kl_coef=0.1, aggregation=aggregation, micro_batch_tokens=128, ppo_minibatches=1)
    trainer = LocalTrainer(model_dir, config, 10)
    train_step(trainer, batch, 1.0)  # the policy moves away from the reference (the initial weights)
    reference = load_model(model_dir)
    per_sequence, total, count = [], 0.0, 0
    for t in batch:
        tokens = torch.tensor([t.prompt_token_ids + t.output_token_ids])
        with torch.no_grad():
            policy = sequence_logprobs(trainer.model, tokens, torch.ones_like(tokens), 1.0)[0][0, len(t.prompt_token_ids) - 1:]
            ref = sequence_logprobs(reference, tokens, torch.ones_like(tokens), 1.0)[0][0, len(t.prompt_token_ids) - 1:]
        k3 = torch.exp(ref - policy) - (ref - policy) - 1.0
        per_sequence.append(float(k3.mean()))
        total, count = total + float(k3.sum()), count + len(k3)
    expected = sum(per_sequence) / len(per_sequence) if aggregation == "sequence" else total / count
    metrics = train_step(trainer, batch, 1.0)
    assert metrics["kl_ref"] > 1e-6 and metrics["kl_ref"] == pytest.approx(expected, rel=1e-3)


def test_a_batch_without_advantages_leaves_the_weights_where_they_are(model_dir):
    """Every group's rewards uniform: all advantages 0, so no gradient, but Adam's momentum from earlier steps
    would still move the weights. The step is skipped (reported) and the policy version still advances."""
    mixed = make_batch(model_dir, seed=8, groups=4)
    uniform = [dataclasses.replace(t, reward=RewardResult(score=1.0)) for t in make_batch(model_dir, seed=9, groups=4)]
    trainer = LocalTrainer(model_dir, TrainerConfig(lr=1e-2), 10)
    assert train_step(trainer, mixed, 1.0)["optimizer_skipped"] == 0.0  # momentum now nonzero
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    version = trainer.version
    metrics = train_step(trainer, uniform, 1.0)
    assert metrics["optimizer_skipped"] == 1.0 and trainer.version == version + 1
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_constant_aggregation_is_dr_grpos_normaliser(model_dir):
    """Dr. GRPO's loss is sum over tokens / (G x L_max) with a constant L_max, not the token mean: the same
    step's loss is the token mean's x tokens / (sequences x L_max)."""
    batch = make_batch(model_dir, seed=6, groups=4)
    tokens = sum(len(t.output_token_ids) for t in batch)
    losses = {}
    for aggregation in ("token", "constant"):
        config = TrainerConfig(aggregation=aggregation, aggregation_tokens=40, ppo_minibatches=1, advantage="dr_grpo")
        losses[aggregation] = train_step(LocalTrainer(model_dir, config, 10), batch, 1.0)["loss"]
    assert losses["token"] != 0
    assert losses["constant"] == pytest.approx(losses["token"] * tokens / (len(batch) * 40), rel=1e-5)
    with pytest.raises(ValueError, match="aggregation_tokens"):
        TrainerConfig(aggregation="constant").validate()


def test_steps_on_a_batch_make_its_rewarded_responses_more_likely_and_the_others_less(model_dir):
    """The direction of learning, without a run to wait for: a few steps on one batch raise the log-probability
    of each group's rewarded responses against the group's others (what `areal train` relies on to raise
    reward; the reward itself rising is shown by the demo and the benchmarks, not asserted here)."""
    batch = make_batch(model_dir, seed=11, groups=6)
    trainer = LocalTrainer(model_dir, TrainerConfig(lr=1e-3, ppo_minibatches=1, micro_batch_tokens=4096), 10)

    def mean_logprob(model, t):
        tokens = torch.tensor([t.prompt_token_ids + t.output_token_ids])
        with torch.no_grad():
            return float(sequence_logprobs(model, tokens, torch.ones_like(tokens), 1.0)[0][0, len(t.prompt_token_ids) - 1:].mean())

    before = [mean_logprob(trainer.model, t) for t in batch]
    for _ in range(3):
        train_step(trainer, batch, 1.0)
    after = [mean_logprob(trainer.model, t) for t in batch]
    mixed = {t.group_id for t in batch if t.reward.score == 1.0} & {t.group_id for t in batch if t.reward.score == 0.0}
    moved = [(a - b, t.reward.score) for a, b, t in zip(after, before, batch) if t.group_id in mixed]
    rewarded, others = [d for d, score in moved if score == 1.0], [d for d, score in moved if score == 0.0]
    assert len(mixed) >= 3 and rewarded and others   # groups that score alike have no advantage: left out
    assert min(rewarded) > 0 > max(others), (rewarded, others)
