"""Weights streamed from the trainer to the engines without the disk (issue 22, part 2; rl/weight_updates.py):
the FSDP trainer's ranks gather each bucket and rank 0 broadcasts it into a real engine, bit-exact with what the
trainer publishes; `areal train` with `engine.weight_sync=distributed | delta` on `areal serve` servers, on the
engine in its own process and with the FSDP trainer; an engine that cannot receive is a clear error."""
from __future__ import annotations

import asyncio
import json
import socket

import pytest
import torch

from areal_core.config import load_config
from areal_core.engine.local import LocalEngine
from areal_core.engine.model import init_model, load_model
from areal_core.rl.config import TrainConfig, TrainerConfig
from areal_core.rl.run import run_training
from areal_core.rl.trainer import create_trainer, train_step
from trainer_support import SETTINGS, TEST_MODEL, TOTAL_STEPS, load_weights, make_batch

pytestmark = pytest.mark.timeout(600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_fsdp_trainer_streams_its_gathered_weights_into_an_engine_bit_exact(tmp_path):
    """Two FSDP ranks: every rank gathers each bucket from the shards, rank 0 broadcasts it to the engine."""
    model_dir = init_model(tmp_path / "model", seed=3, **TEST_MODEL)
    trainer = create_trainer(model_dir, TrainerConfig(backend="fsdp", **SETTINGS), TOTAL_STEPS)
    engine = LocalEngine(model_dir).start()

    async def stream() -> list:
        port = free_port()
        await asyncio.gather(
            engine.init_weight_group("127.0.0.1", port, 1, 2, "fsdp-group", "gloo", 60.0),
            asyncio.to_thread(trainer.join_weight_group, f"tcp://127.0.0.1:{port}", 2, "fsdp-group", "gloo", 60.0))
        buckets = trainer.stage_weights(64 * 1024)
        await engine.begin_weight_update()
        for index, bucket in enumerate(buckets):
            last = index == len(buckets) - 1
            await asyncio.gather(engine.update_weights_from_distributed(bucket, 1 if last else None, "fsdp-group"),
                                 asyncio.to_thread(trainer.send_weight_bucket, index))
        await engine.end_weight_update()
        await engine.destroy_weight_group("fsdp-group")
        trainer.leave_weight_group()
        return buckets

    try:
        train_step(trainer, make_batch(model_dir, 0), 1.0)
        buckets = asyncio.run(stream())
        trainer.publish(tmp_path / "published")
    finally:
        trainer.close()
        asyncio.run(engine.close())
    published, initial = load_weights(tmp_path / "published"), load_weights(model_dir)
    assert len(buckets) > 2 and sum(len(b.names) for b in buckets) == len(published)
    got = engine.model.state_dict()
    assert all(torch.equal(got[name], published[name]) for name in published)
    assert any(not torch.equal(published[name], initial[name]) for name in published)   # the step moved them
    assert engine.version == 1


def run_config(tmp_path, *overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, [
        f"output_dir={tmp_path}", "eval_task=null", "rollout.batch_size=8", "rollout.group_size=4", "steps=3",
        "rollout.max_staleness=1", "tensorboard=false", "checkpoint_every=0", "keep_policy_every=3",
        "engine.weight_bucket_mb=0.25", *overrides])


def metrics_of(summary: dict) -> list[dict]:
    lines = open(f"{summary['run_dir']}/metrics.jsonl").read().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("overrides", [
    ["engine.backend=server", "engine.weight_sync=distributed"],   # over a gloo group into `areal serve`
    ["engine.backend=local", "engine.weight_sync=delta"],          # copied in memory, in this process
    ["engine.backend=server", "trainer.backend=fsdp", "engine.weight_sync=distributed"],
], ids=["server-distributed", "local-delta", "fsdp-server-distributed"])
def test_areal_train_streams_every_version_to_the_engines_and_writes_no_weights_directory(
        tmp_path, overrides, monkeypatch):
    monkeypatch.setenv("AREAL_CACHE_DIR", str(tmp_path / "cache"))
    summary = asyncio.run(run_training(run_config(tmp_path, *overrides), echo=lambda *a: None))
    metrics = metrics_of(summary)
    assert [m["version"] for m in metrics] == [1, 2, 3]
    assert max(m["staleness_max"] for m in metrics) <= 1   # the engines stamped every version they were sent
    run_dir = summary["run_dir"]
    kept = load_weights(f"{run_dir}/policies/step000003")   # keep_policy_every: written by the trainer directly
    model_bytes = sum(t.numel() * t.element_size() for t in kept.values())
    assert all(m["weight_sync_bytes"] == model_bytes and m["weight_sync_buckets"] > 1 for m in metrics)
    assert all(m["weight_sync_tensors"] == len(kept) for m in metrics)   # every parameter is trainable: all sent
    assert not any((tmp_path / run_dir / "weights").glob("v*"))           # nothing went through the disk


def test_an_engine_that_cannot_receive_weights_is_a_clear_error(areal, with_plugins, tmp_path):
    """The plugin engine of tests/fixtures/plugins/enginekit has neither a process group nor in-memory loading."""
    env = with_plugins("enginekit", AREAL_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    trained = areal("train", f"output_dir={tmp_path / 'runs'}", "engine.backend=shortest_first",
                    "engine.weight_sync=distributed", "steps=1", "warmup.enabled=false", "eval_task=null",
                    "tensorboard=false", env=env, timeout=300)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert ("engine.weight_sync=distributed: engine backend 'shortest_first' (ShortestFirstEngine) cannot receive "
            "weights over a process group; use engine.weight_sync=disk") in trained.stderr


def test_a_delta_update_plans_only_the_parameters_the_optimizer_changes(tmp_path):
    from areal_core.engine.weight_sync import WeightSender

    model = load_model(init_model(tmp_path / "model", seed=0, **TEST_MODEL))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".mlp." in name)   # frozen elsewhere, as LoRA freezes the base model
    sender = WeightSender(model)
    full = [n for b in sender.stage(1 << 20) for n in b.names]
    delta = [n for b in sender.stage(1 << 20, changed_only=True) for n in b.names]
    assert full == [n for n, _ in model.named_parameters()]
    assert delta == [n for n in full if ".mlp." in n] and len(delta) == 3 * TEST_MODEL["num_hidden_layers"]
