"""Trainer checkpoints (local backend; the FSDP backend's are in test_fsdp.py): resume is exact, and a
partial or corrupt checkpoint is refused with an error that names the problem."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from areal_core.engine.model import init_model
from areal_core.rl.checkpoint import MANIFEST, CheckpointError, verify_checkpoint
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, train_step
from trainer_support import TEST_MODEL, load_weights, make_batch

# warm-up then cosine decay: the LR differs at every step, so a lost scheduler state shows
CONFIG = TrainerConfig(ppo_minibatches=2, micro_batch_tokens=128, lr_schedule="cosine", warmup_steps=1, lr=1e-3)
TOTAL_STEPS = 5


def same_metrics(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k != "train_seconds"} == {k: v for k, v in b.items() if k != "train_seconds"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=5, **TEST_MODEL)


@pytest.fixture(scope="module")
def batches(model_dir):
    return [make_batch(model_dir, seed) for seed in range(3)]


@pytest.fixture(scope="module")
def checkpoint(model_dir, batches, tmp_path_factory):
    """A checkpoint after two steps, and what the uninterrupted trainer then did: step 3's metrics and
    weights, and the first random numbers it drew after saving."""
    out = tmp_path_factory.mktemp("run")
    trainer = LocalTrainer(model_dir, CONFIG, TOTAL_STEPS)
    for batch in batches[:2]:
        train_step(trainer, batch, 1.0)
    torch.manual_seed(1234)
    trainer.save_checkpoint(out / "checkpoint")
    random_after_save = torch.rand(4)
    metrics = train_step(trainer, batches[2], 1.0)
    trainer.publish(out / "weights")
    return {"path": out / "checkpoint", "metrics": metrics, "weights": out / "weights", "random": random_after_save}


def test_resumed_trainer_repeats_the_uninterrupted_step_exactly(checkpoint, model_dir, batches, tmp_path):
    resumed = LocalTrainer(model_dir, CONFIG, TOTAL_STEPS)
    torch.manual_seed(999)
    assert resumed.load_checkpoint(checkpoint["path"]) == 2 == resumed.version
    assert torch.equal(torch.rand(4), checkpoint["random"])  # RNG state restored
    metrics = train_step(resumed, batches[2], 1.0)
    assert same_metrics(metrics, checkpoint["metrics"]), (metrics, checkpoint["metrics"])
    assert resumed.version == 3
    weights, expected = load_weights(resumed.publish(tmp_path / "weights")), load_weights(checkpoint["weights"])
    assert all(torch.equal(weights[name], expected[name]) for name in expected)


def test_checkpoint_is_a_loadable_model_directory_with_a_manifest(checkpoint):
    manifest = verify_checkpoint(checkpoint["path"])
    assert manifest["version"] == 2 and manifest["backend"] == "local" and manifest["processes"] == 1
    listed = set(manifest["files"])
    assert {"model.safetensors", "optimizer.pt", "rng.pt", "config.json", "tokenizer.json"} <= listed
    assert listed == {p.name for p in checkpoint["path"].iterdir()} - {MANIFEST}
    from areal_core.engine.model import load_model

    load_model(checkpoint["path"])  # the weights alone serve as an HF model directory


def test_saving_before_the_first_step_does_not_change_training(model_dir, batches, tmp_path):
    # torch initialises optimizer state for a state dict with a zero-LR step; AdamW would count it
    saved = LocalTrainer(model_dir, CONFIG, TOTAL_STEPS)
    saved.save_checkpoint(tmp_path / "v0")
    plain = LocalTrainer(model_dir, CONFIG, TOTAL_STEPS)
    resumed = LocalTrainer(model_dir, CONFIG, TOTAL_STEPS)
    assert resumed.load_checkpoint(tmp_path / "v0") == 0
    expected = train_step(plain, batches[0], 1.0)
    assert same_metrics(train_step(saved, batches[0], 1.0), expected)
    assert same_metrics(train_step(resumed, batches[0], 1.0), expected)


def corrupt_copy(checkpoint, tmp_path, name):
    copy = tmp_path / name
    shutil.copytree(checkpoint["path"], copy)
    return copy


def test_partial_or_corrupt_checkpoints_are_refused(checkpoint, model_dir, tmp_path):
    trainer = LocalTrainer(model_dir, CONFIG, TOTAL_STEPS)

    truncated = corrupt_copy(checkpoint, tmp_path, "truncated")
    data = (truncated / "optimizer.pt").read_bytes()
    (truncated / "optimizer.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"optimizer\.pt has \d+ bytes, the manifest says \d+ \(truncated"):
        trainer.load_checkpoint(truncated)

    flipped = corrupt_copy(checkpoint, tmp_path, "flipped")
    weights = bytearray((flipped / "model.safetensors").read_bytes())
    weights[-10] ^= 0xFF
    (flipped / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not match its sha256.*\(corrupt\)"):
        trainer.load_checkpoint(flipped)

    unfinished = corrupt_copy(checkpoint, tmp_path, "unfinished")
    (unfinished / MANIFEST).unlink()
    with pytest.raises(CheckpointError, match="incomplete: it has no trainer_state.json"):
        trainer.load_checkpoint(unfinished)

    missing = corrupt_copy(checkpoint, tmp_path, "missing")
    (missing / "rng.pt").unlink()
    with pytest.raises(CheckpointError, match="is missing rng.pt"):
        trainer.load_checkpoint(missing)

    with pytest.raises(CheckpointError, match="does not exist"):
        trainer.load_checkpoint(tmp_path / "nowhere")
    assert trainer.version == 0  # nothing was loaded


def test_checkpoint_of_a_different_model_is_refused(checkpoint, tmp_path):
    deeper = init_model(tmp_path / "deeper", **{**TEST_MODEL, "num_hidden_layers": 3})
    with pytest.raises(CheckpointError, match=r"does not fit this model: missing \['model\.layers\.2\."):
        LocalTrainer(deeper, CONFIG, TOTAL_STEPS).load_checkpoint(checkpoint["path"])
    # the same names, another width: refused by shape before any tensor is copied
    wider = init_model(tmp_path / "wider", **{**TEST_MODEL, "intermediate_size": 2 * TEST_MODEL["intermediate_size"]})
    trainer = LocalTrainer(wider, CONFIG, TOTAL_STEPS)
    with pytest.raises(CheckpointError, match=r"another size of it\?\): model\.layers\.0\.mlp\.down_proj\.weight is "
                                              r"\[96, 288\], the model's \[96, 576\].*and 3 more"):
        trainer.load_checkpoint(checkpoint["path"])
    assert trainer.version == 0


WRITER = textwrap.dedent("""
    import itertools, sys, time
    from areal_core.rl import checkpoint
    from areal_core.rl.config import TrainerConfig
    from areal_core.rl.trainer import LocalTrainer
    trainer = LocalTrainer(sys.argv[1], TrainerConfig(), total_steps=1)
    write, written = checkpoint.StreamedSafetensors.write, itertools.count(1)
    def write_then_wait(self, name, tensor):  # the third save stops halfway, for the kill to land there
        write(self, name, tensor)
        if trainer.version == 3 and next(written) == 5:
            print("halfway", flush=True)
            time.sleep(600)
    checkpoint.StreamedSafetensors.write = write_then_wait
    for version in itertools.count(1):
        trainer.version = version
        print(f"saving {version}", flush=True)
        trainer.save_checkpoint(sys.argv[2])
""")


def test_kill_during_a_save_never_leaves_a_checkpoint_that_looks_complete(tmp_path):
    model_dir = init_model(tmp_path / "model")
    target = tmp_path / "checkpoints" / "latest"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(model_dir), str(target)], stdout=subprocess.PIPE,
                              text=True)
    try:
        while writer.stdout.readline().strip() != "halfway":   # the third save has written some of its weights
            assert writer.poll() is None, "the checkpoint writer exited"
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    assert verify_checkpoint(target)["version"] == 2  # the last complete save is intact
    leftovers = list(target.parent.glob(".latest.*"))
    assert leftovers  # the kill did interrupt a save
    for partial in leftovers:
        with pytest.raises(CheckpointError):
            verify_checkpoint(partial)
    # the next save clears what the killed writer left
    trainer = LocalTrainer(model_dir, TrainerConfig(), total_steps=1)
    trainer.save_checkpoint(target)
    assert json.loads((target / MANIFEST).read_text())["version"] == 0
    assert [p.name for p in target.parent.iterdir()] == ["latest"]
