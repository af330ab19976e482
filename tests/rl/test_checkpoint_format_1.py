"""Checkpoints of format 1 (written before checkpoints streamed a tensor at a time: the whole optimizer state in
optimizer.pt) still resume, in both backends. The fixtures were written by that version of areal-core (commit
3915943^) after two steps on the model `init_model(seed=11)` builds with 1 layer of width 32; one with LoRA adapters
on q_proj and v_proj."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from areal_core.engine.model import init_model
from areal_core.rl.checkpoint import CHECKPOINT_FORMAT, FORMAT_1, join_adapters, verify_checkpoint
from areal_core.rl.config import LoraSettings, TrainerConfig
from areal_core.rl.trainer import LocalTrainer, create_trainer, train_step
from trainer_support import make_batch

pytestmark = pytest.mark.timeout(300)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
SETTINGS = {"ppo_minibatches": 2, "micro_batch_tokens": 128, "lr_schedule": "cosine", "warmup_steps": 1, "lr": 1e-3}
LORA = {"format-1": None, "format-1-lora": LoraSettings(rank=2, alpha=4, target_modules=["q_proj", "v_proj"])}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=11, num_hidden_layers=1, hidden_size=32,
                      intermediate_size=64)


def assert_holds_the_fixture(trainer: LocalTrainer, fixture: Path) -> None:
    """Every stored weight, and Adam's moments and step count of every trained parameter, as the old version
    wrote them; the LR where the schedule had it."""
    stored = load_file(fixture / "model.safetensors")
    if (fixture / "adapters.safetensors").is_file():
        stored = join_adapters(stored, load_file(fixture / "adapters.safetensors"))
    state = trainer.model.state_dict()
    for name, tensor in stored.items():
        torch.testing.assert_close(state[name], tensor, rtol=0, atol=0, msg=name)
    old = torch.load(fixture / "optimizer.pt", weights_only=True)["optimizer"]
    learner = trainer.learner
    trained = {name: param for name, param in trainer.model.named_parameters() if param.requires_grad}
    assert sorted(old["state"]) == sorted(trained)
    for name, saved in old["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(learner.optimizer.state[trained[name]][key], saved[key], rtol=0, atol=0,
                                       msg=f"{key}/{name}")
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(old["param_groups"][0]["lr"], rel=1e-12)


@pytest.mark.parametrize("name", sorted(LORA))
def test_a_format_1_checkpoint_resumes_in_both_backends_and_is_saved_again_as_format_2(name, model_dir, tmp_path):
    fixture = FIXTURES / name
    assert verify_checkpoint(fixture)["format"] == FORMAT_1
    config = TrainerConfig(lora=LORA[name], **SETTINGS)
    batch = make_batch(model_dir, 2, groups=2, group_size=2)
    local = LocalTrainer(model_dir, config, 5)
    assert local.load_checkpoint(fixture) == 2
    assert_holds_the_fixture(local, fixture)
    local.save_checkpoint(tmp_path / "again")
    assert verify_checkpoint(tmp_path / "again")["format"] == CHECKPOINT_FORMAT
    expected = train_step(local, batch, 1.0)
    assert expected["grad_norm"] > 0

    again = LocalTrainer(model_dir, config, 5)
    assert again.load_checkpoint(tmp_path / "again") == 2
    assert_holds_the_fixture(again, fixture)
    sharded = create_trainer(model_dir, TrainerConfig(backend="fsdp", lora=LORA[name], **SETTINGS), 5)
    try:
        assert sharded.load_checkpoint(fixture) == 2
        results = [train_step(again, batch, 1.0), train_step(sharded, batch, 1.0)]
    finally:
        sharded.close()
    for got in results:
        for key in ("loss", "grad_norm", "lr", "entropy", "clip_fraction"):
            assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-7), key
