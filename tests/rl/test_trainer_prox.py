"""pi_prox of the first minibatch is taken from its own training forward instead of a separate no-grad
pass: the step must come out as with the separate pass, and a model with dropout must not take the
shortcut (its training forward is not the policy)."""
from __future__ import annotations

import json

import pytest
import torch

from areal_core.engine.model import init_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, train_step, trains_differently
from trainer_support import TEST_MODEL, make_batch


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=5, **TEST_MODEL)


@pytest.mark.parametrize("minibatches", [1, 2])
def test_prox_from_the_first_forward_gives_the_step_of_a_separate_prox_pass(model_dir, minibatches):
    batch = make_batch(model_dir, seed=7, groups=6)
    config = TrainerConfig(lr=1e-3, ppo_minibatches=minibatches, micro_batch_tokens=256)
    shortcut, separate = LocalTrainer(model_dir, config, 10), LocalTrainer(model_dir, config, 10)
    assert shortcut.learner.prox_from_first_forward
    separate.learner.prox_from_first_forward = False
    for _ in range(2):  # the second step starts from updated weights and AdamW state
        fast, slow = train_step(shortcut, batch, 1.0), train_step(separate, batch, 1.0)
        for key in ("loss", "clip_fraction", "behav_weight_mean", "approx_kl", "entropy", "grad_norm"):
            assert fast[key] == pytest.approx(slow[key], rel=1e-5, abs=1e-7), key
    assert fast["microbatches"] > minibatches  # several micro-batches share the first minibatch's prox
    for (name, a), (_, b) in zip(shortcut.model.named_parameters(), separate.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_a_model_with_dropout_recomputes_prox_in_eval_mode(model_dir, tmp_path):
    config = json.loads((model_dir / "config.json").read_text())
    config["attention_dropout"] = 0.1
    (tmp_path / "config.json").write_text(json.dumps(config))
    for path in model_dir.iterdir():
        if path.name != "config.json":
            (tmp_path / path.name).write_bytes(path.read_bytes())
    assert not LocalTrainer(tmp_path, TrainerConfig(), 10).learner.prox_from_first_forward


def test_any_train_mode_randomness_recomputes_prox_in_eval_mode(model_dir):
    """Train-mode randomness the config does not name (router jitter, stochastic depth, a plugin's noise) makes
    the training forward another policy than the eval one: the shortcut must be off for it too."""
    trainer = LocalTrainer(model_dir, TrainerConfig(), 10)
    assert trainer.learner.prox_from_first_forward

    def jitter(module, args, output):  # noise in train mode only, as MoE router jitter
        return output + 0.01 * torch.randn_like(output) if module.training else output

    trainer.model.model.layers[0].mlp.register_forward_hook(jitter)
    for training in (True, False):  # the probe leaves the model's mode and the random state as they were
        trainer.model.train(training)
        state = torch.get_rng_state()
        assert trains_differently(trainer.model)
        assert trainer.model.training is training and torch.equal(torch.get_rng_state(), state)
