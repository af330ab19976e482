"""trainer.gradient_checkpointing: the same step (losses, weights) as keeping every activation, with a fraction of
the tensors autograd keeps between the forward and the backward pass."""
from __future__ import annotations

import pytest
import torch

from areal_core.engine.model import init_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, TrainerError, trainable_model, train_step
from trainer_support import make_batch

LAYERS = 6


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=2, num_hidden_layers=LAYERS)


def kept_bytes(trainer: LocalTrainer, batch) -> tuple[dict[str, float], int]:
    """The step's metrics, and the bytes of the tensors autograd saved for the backward pass outside any
    checkpointed region (each storage counted once)."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        metrics = train_step(trainer, batch, 1.0)
    return metrics, sum(storages.values())


def test_the_step_is_the_same_with_a_fraction_of_the_activations_kept(model_dir):
    settings = dict(micro_batch_tokens=512, entropy_coef=0.01, measure_stale_mismatch=False)
    plain = LocalTrainer(model_dir, TrainerConfig(**settings), 4)
    checkpointed = LocalTrainer(model_dir, TrainerConfig(gradient_checkpointing=True, **settings), 4)
    for seed in (0, 1):
        batch = make_batch(model_dir, seed)
        expected, plain_bytes = kept_bytes(plain, batch)
        got, checkpointed_bytes = kept_bytes(checkpointed, batch)
        for key in ("loss", "grad_norm", "entropy", "clip_fraction", "approx_kl"):
            assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
        # each of the 6 layers keeps its input instead of everything its backward pass needs (measured: 1/15)
        assert checkpointed_bytes < plain_bytes / 5, (checkpointed_bytes, plain_bytes)
    for (name, a), b in zip(plain.model.named_parameters(), checkpointed.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert getattr(checkpointed.model, "is_activation_checkpointing", None) or checkpointed.model.is_gradient_checkpointing


def test_a_model_without_gradient_checkpointing_is_refused_by_name():
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    with pytest.raises(TrainerError, match="gradient_checkpointing.*Plain"):
        trainable_model(Plain(), TrainerConfig(gradient_checkpointing=True))
