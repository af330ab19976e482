"""LoRA training (`trainer.lora`, issue 22 part 3; rl/lora.py) with the local and the FSDP trainer: only the
adapters train and are in the optimizer, the engines get W + (alpha / rank) B A as peft computes it (published
or streamed: a delta stream sends only the adapted weights), checkpoints hold the base model as an HF directory
plus the adapters and resume exactly in either backend, and `areal train` runs with it end to end."""
from __future__ import annotations

import asyncio
import json

import pytest
import torch

from areal_core.config import load_config
from areal_core.engine.model import init_model, load_model
from areal_core.errors import ConfigError
from areal_core.rl.config import LoraSettings, TrainConfig, TrainerConfig
from areal_core.rl.run import run_training
from areal_core.rl.trainer import LocalTrainer, create_trainer, train_step
from trainer_support import TEST_MODEL, load_weights, make_batch

pytestmark = pytest.mark.timeout(600)
LORA = LoraSettings(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj"])
ADAPTED = (".q_proj.", ".v_proj.")


def config(backend: str = "local") -> TrainerConfig:
    return TrainerConfig(backend=backend, lora=LORA, lr=1e-2, ppo_minibatches=2, micro_batch_tokens=128)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=3, **TEST_MODEL)


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory):
    """Both backends: two steps, a checkpoint, a third step, the weights published."""
    out, results = tmp_path_factory.mktemp("runs"), {}
    for backend in ("local", "fsdp"):
        trainer = create_trainer(model_dir, config(backend), 6)
        try:
            losses = [train_step(trainer, make_batch(model_dir, i), 1.0)["loss"] for i in range(2)]
            trainer.save_checkpoint(out / f"{backend}-checkpoint")
            losses.append(train_step(trainer, make_batch(model_dir, 2), 1.0)["loss"])
            trainer.publish(out / f"{backend}-weights")
        finally:
            trainer.close()
        results[backend] = {"losses": losses, "checkpoint": out / f"{backend}-checkpoint",
                            "weights": load_weights(out / f"{backend}-weights")}
    return results


def test_only_the_adapters_train_and_the_engines_get_the_weights_merged_as_peft_merges_them(model_dir, tmp_path):
    trainer = LocalTrainer(model_dir, config(), 6)
    trained = {id(p) for group in trainer.learner.optimizer.param_groups for p in group["params"]}
    adapters = {name for name, p in trainer.model.named_parameters() if id(p) in trained}
    assert adapters and all(".lora_A." in n or ".lora_B." in n for n in adapters)
    assert len(adapters) == 2 * len(ADAPTED) * TEST_MODEL["num_hidden_layers"]
    for step in range(2):
        train_step(trainer, make_batch(model_dir, step), 1.0)
    trainer.publish(tmp_path / "published")
    published, initial = load_weights(tmp_path / "published"), load_weights(model_dir)
    assert sorted(published) == sorted(initial)   # the served model's names, no adapter in sight
    changed = {n for n in published if not torch.equal(published[n], initial[n])}
    assert changed and all(any(t in n for t in ADAPTED) and n.endswith(".weight") for n in changed)
    for name, module in trainer.model.named_modules():   # peft's own delta: W + scale x B A
        if hasattr(module, "get_delta_weight"):
            expected = module.base_layer.weight + module.get_delta_weight("default")
            torch.testing.assert_close(published[f"{name}.weight"], expected, rtol=0, atol=1e-6)
            assert torch.equal(module.base_layer.weight, initial[f"{name}.weight"])   # the base stays frozen
    # A delta stream plans exactly the adapted weights, merged as published.
    buckets = trainer.stage_weights(1 << 20, changed_only=True)
    streamed = dict(pair for index in range(len(buckets)) for pair in trainer.weight_bucket(index))
    assert set(streamed) == {n for n in published if any(t in n for t in ADAPTED) and n.endswith(".weight")}
    assert all(torch.equal(streamed[n], published[n]) for n in streamed)


def test_fsdp_lora_matches_the_local_trainer(runs):
    local, fsdp = runs["local"], runs["fsdp"]
    assert fsdp["losses"] == pytest.approx(local["losses"], rel=1e-4, abs=1e-7)
    for name in local["weights"]:
        torch.testing.assert_close(fsdp["weights"][name], local["weights"][name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("saved_by, resumed_in", [("local", "local"), ("fsdp", "local"), ("local", "fsdp")])
def test_a_lora_checkpoint_is_the_base_model_plus_adapters_and_resumes_the_next_step(runs, model_dir, saved_by,
                                                                                       resumed_in):
    checkpoint = runs[saved_by]["checkpoint"]
    assert (checkpoint / "adapters.safetensors").is_file()
    base, initial = load_weights(checkpoint), load_weights(model_dir)
    assert sorted(base) == sorted(initial) and all(torch.equal(base[n], initial[n]) for n in base)
    load_model(checkpoint)   # an HF model directory as it is: a resumed run's engines start from it
    trainer = create_trainer(checkpoint, config(resumed_in), 6)   # as `areal train --resume` builds it
    try:
        assert trainer.load_checkpoint(checkpoint) == 2
        loss = train_step(trainer, make_batch(model_dir, 2), 1.0)["loss"]
    finally:
        trainer.close()
    tolerance = 1e-6 if saved_by == resumed_in else 1e-4
    assert loss == pytest.approx(runs[saved_by]["losses"][2], rel=tolerance, abs=1e-7)


def test_bad_lora_settings_are_errors_naming_the_problem(model_dir):
    with pytest.raises(ConfigError, match="lora.rank must be >= 1"):
        load_config(TrainConfig, None, ["trainer.lora={rank: 0}"])
    with pytest.raises(ConfigError, match="trainer.lora: .*no_such_proj"):
        LocalTrainer(model_dir, TrainerConfig(lora=LoraSettings(target_modules=["no_such_proj"])), 1)


def test_areal_train_with_lora_streams_only_the_adapted_weights_after_the_first_update(tmp_path, monkeypatch):
    monkeypatch.setenv("AREAL_CACHE_DIR", str(tmp_path / "cache"))
    run = load_config(TrainConfig, None, [
        f"output_dir={tmp_path}", "eval_task=null", "rollout.batch_size=8", "rollout.group_size=4", "steps=3",
        "tensorboard=false", "checkpoint_every=3", "keep_policy_every=3", "engine.backend=server",
        "engine.weight_sync=delta", "trainer.lora={rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}"])
    summary = asyncio.run(run_training(run, echo=lambda *a: None))
    lines = open(f"{summary['run_dir']}/metrics.jsonl").read().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["version"] for m in metrics] == [1, 2, 3] and max(m["staleness_max"] for m in metrics) <= 1
    kept = load_weights(f"{summary['run_dir']}/policies/step000003")
    adapted = [t for n, t in kept.items() if any(a in n for a in ADAPTED) and n.endswith(".weight")]
    assert metrics[0]["weight_sync_bytes"] == sum(t.numel() * t.element_size() for t in kept.values())
    assert [m["weight_sync_bytes"] for m in metrics[1:]] == [sum(t.numel() * t.element_size() for t in adapted)] * 2
    assert (tmp_path / summary["run_dir"] / "checkpoints" / "step000003" / "trainer" / "adapters.safetensors").is_file()
