"""The trainer backends that come with areal-core, registered as a default plugin (see plugins/manager.py):
`local` (decoupled PPO in this process) and `fsdp` (FSDP2 ranks under torchrun: gloo on CPU, NCCL on GPU)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from areal_core.errors import ConfigError
from areal_core.plugins import hookimpl


def _no_options(config: Any) -> None:
    if config.options:
        raise ConfigError(f"trainer backend {config.backend!r} takes no trainer.options, got {sorted(config.options)}")


def local_trainer(model_path: Path, config: Any, *, total_steps: int, version: int, scratch_dir: Path | None) -> Any:
    from areal_core.rl.trainer import LocalTrainer

    _no_options(config)
    return LocalTrainer(model_path, config, total_steps, version)


def fsdp_trainer(model_path: Path, config: Any, *, total_steps: int, version: int, scratch_dir: Path | None) -> Any:
    from areal_core.rl.fsdp import FSDPTrainer

    _no_options(config)
    return FSDPTrainer(model_path, config, total_steps, version, scratch_dir=scratch_dir)


@hookimpl
def register_trainer_backends(register) -> None:
    register("local", local_trainer, description="decoupled PPO in this process")
    register("fsdp", fsdp_trainer, description="FSDP2 ranks under torchrun (trainer.fsdp_processes; gloo / NCCL)")
