"""Weights from the trainer to the engines without the disk: `engine.weight_sync = distributed | delta`.

After each step the trainer's weights reach every engine in buckets of at most `engine.weight_bucket_mb`, while
generation is held (interrupted or drained, `rollout.weight_update`), and the last bucket moves the engines to
the new version:

    servers (areal serve, SGLang)   the trainer (rank 0; an FSDP trainer's rank 0, after every rank gathered the
                                    bucket from its shards) broadcasts each bucket over a process group it shares
                                    with the servers (/init_weights_update_group once; per update
                                    /begin_weight_update, one /update_weights_from_distributed per bucket,
                                    /end_weight_update: engine/weight_sync.py); NCCL
                                    when the trainer is on a GPU, gloo on CPUs
    an engine in this process       with a trainer in this process too, the tensors are copied in memory

`delta` sends, after the first update, only the parameters the optimizer changes (requires_grad: with frozen
weights, e.g. LoRA's base model, far fewer bytes). The disk path (`disk`, the default) stays in run.py: the
trainer writes weights/vN and every server loads it.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import uuid
from typing import Any, Awaitable, Callable
from urllib.parse import urlparse

from areal_core.engine.launch import EngineConfig, free_port
from areal_core.engine.protocol import InferenceEngine, TensorWeightEngine, WeightGroupEngine
from areal_core.engine.weight_sync import Bucket
from areal_core.errors import ConfigError
from areal_core.rl.trainer import TrainerBackend, WeightStreamingTrainer

JOIN_TIMEOUT_S = 120.0   # for every rank to reach the group's rendezvous
Hold = Callable[[Callable[[], Awaitable[None]], int], Awaitable[float]]


class WeightStreamer:
    """Streams the trainer's weights to the engines (see the module docstring); `open` before the first update."""

    def __init__(self, trainer: TrainerBackend, engine: InferenceEngine, config: EngineConfig,
                 trainer_device: str) -> None:
        if not isinstance(trainer, WeightStreamingTrainer):
            raise ConfigError(f"engine.weight_sync={config.weight_sync}: the trainer ({type(trainer).__name__}) "
                              "cannot stream its weights; use engine.weight_sync=disk")
        # An engine in this process takes the tensors of a trainer in this process directly.
        self.in_memory = isinstance(engine, TensorWeightEngine) and callable(getattr(trainer, "weight_bucket", None))
        if not self.in_memory and not isinstance(engine, WeightGroupEngine):
            raise ConfigError(f"engine.weight_sync={config.weight_sync}: engine backend {config.backend!r} "
                              f"({type(engine).__name__}) cannot receive weights over a process group; use "
                              "engine.weight_sync=disk")
        self.trainer: WeightStreamingTrainer = trainer
        self.engine: Any = engine   # a TensorWeightEngine (in_memory) or a WeightGroupEngine
        self.config = config
        self.cap_bytes = int(config.weight_bucket_mb * (1 << 20))
        self.backend = "nccl" if trainer_device.startswith("cuda") else "gloo"
        self.group_name = f"areal-weights-{uuid.uuid4().hex[:8]}"   # servers already running may hold older ones
        self.joined = False
        self.updates = 0

    async def open(self) -> None:
        """Make the process group: the trainer and every engine rank meet at a rendezvous the trainer hosts."""
        if self.in_memory or self.joined:
            return
        ranks = await self.engine.weight_group_ranks()
        host = self.config.weight_group_host or group_host(self.config.urls)
        port = free_port("0.0.0.0")
        await asyncio.gather(
            self.engine.init_weight_group(host, port, 1, 1 + ranks, self.group_name, self.backend, JOIN_TIMEOUT_S),
            asyncio.to_thread(self.trainer.join_weight_group, f"tcp://{host}:{port}", 1 + ranks, self.group_name,
                              self.backend, JOIN_TIMEOUT_S))
        self.joined = True

    async def update(self, version: int, hold: Hold | None = None) -> tuple[float, dict[str, Any]]:
        """Move every engine to the trainer's weights as `version`, inside `hold` (the rollout controller's
        `hold_for_update`, which holds generation around it); (seconds generation was held, metrics)."""
        await self.open()
        changed_only = self.config.weight_sync == "delta" and self.updates > 0
        buckets = await asyncio.to_thread(self.trainer.stage_weights, self.cap_bytes, changed_only)
        if not buckets:
            raise ConfigError("the trainer has no parameters to send (every one is frozen)")
        started = asyncio.get_running_loop().time()

        async def load() -> None:
            if not self.in_memory:
                await self.engine.begin_weight_update()   # SGLang's session around an update's buckets
            try:
                for index, bucket in enumerate(buckets):
                    last = index == len(buckets) - 1      # the last bucket drops the caches and moves the version
                    await self._load(index, bucket, version if last else None)
            finally:
                if not self.in_memory:
                    await self.engine.end_weight_update()

        if hold is None:
            await load()
            held = asyncio.get_running_loop().time() - started
        else:
            held = await hold(load, version)
        self.updates += 1
        return held, {"weight_sync_seconds": asyncio.get_running_loop().time() - started,
                      "weight_sync_bytes": sum(b.nbytes for b in buckets), "weight_sync_buckets": len(buckets),
                      "weight_sync_tensors": sum(len(b.names) for b in buckets)}

    async def _load(self, index: int, bucket: Bucket, version: int | None) -> None:
        if self.in_memory:
            named = await asyncio.to_thread(getattr(self.trainer, "weight_bucket"), index)
            await self.engine.update_weights_from_tensors(named, version, flush_cache=version is not None)
        else:   # the engines receive while the trainer broadcasts
            await asyncio.gather(
                self.engine.update_weights_from_distributed(bucket, version, self.group_name,
                                                            flush_cache=version is not None),
                asyncio.to_thread(self.trainer.send_weight_bucket, index))

    async def close(self) -> None:
        if not self.joined:
            return
        self.joined = False
        try:
            await self.engine.destroy_weight_group(self.group_name)
        finally:
            await asyncio.to_thread(self.trainer.leave_weight_group)


def group_host(urls: list[str]) -> str:
    """The address servers reach this machine at: 127.0.0.1 when they run here (started by this run, or URLs
    on the loopback), else this machine's address on the route to the first server."""
    hosts = [urlparse(url).hostname or "" for url in urls]
    if all(_loopback(host) for host in hosts):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((next(h for h in hosts if not _loopback(h)), 9))  # a UDP "connect" sends nothing
        return probe.getsockname()[0]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
