"""The entropy bonus: with no policy-gradient signal, a step with `entropy_coef` > 0 raises the entropy of
the batch's responses and one without it changes nothing."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from areal_core.engine.model import init_model, load_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, sequence_logprobs, train_step
from trainer_support import TEST_MODEL, load_weights, make_batch


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=11, **TEST_MODEL)


@pytest.fixture(scope="module")
def uniform_batch(model_dir):
    """Every response rewarded alike: all advantages are 0, so only the entropy term can move the weights."""
    batch = make_batch(model_dir, seed=3)
    return [dataclasses.replace(t, reward=dataclasses.replace(t.reward, score=1.0)) for t in batch]


def response_entropy(model_dir, batch) -> float:
    model = load_model(model_dir)
    total, count = 0.0, 0
    with torch.no_grad():
        for t in batch:
            tokens = torch.tensor([t.prompt_token_ids + t.output_token_ids])
            entropy = sequence_logprobs(model, tokens, torch.ones_like(tokens), 1.0)[1][0]
            total += float(entropy[len(t.prompt_token_ids) - 1:].sum())
            count += len(t.output_token_ids)
    return total / count


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_entropy_bonus_raises_the_entropy_of_the_responses(model_dir, uniform_batch, tmp_path, aggregation):
    trainer = LocalTrainer(model_dir, TrainerConfig(entropy_coef=0.1, lr=1e-3, aggregation=aggregation, ppo_minibatches=1), 10)
    before = response_entropy(model_dir, uniform_batch)
    metrics = train_step(trainer, uniform_batch, 1.0)
    trainer.publish(tmp_path / "after")
    after = response_entropy(tmp_path / "after", uniform_batch)
    assert metrics["entropy"] == pytest.approx(before, rel=1e-4)  # one minibatch: logged before the update
    assert after > before + 1e-3
    assert metrics["loss"] < 0  # the loss is minus the bonus when the advantages are all 0


def test_without_the_bonus_zero_advantages_leave_the_weights_alone(model_dir, uniform_batch, tmp_path):
    trainer = LocalTrainer(model_dir, TrainerConfig(entropy_coef=0.0, lr=1e-3), 10)
    train_step(trainer, uniform_batch, 1.0)
    trainer.publish(tmp_path / "after")
    before, after = load_weights(model_dir), load_weights(tmp_path / "after")
    assert all(torch.equal(before[name], after[name]) for name in before)
