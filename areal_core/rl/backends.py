"""The trainer backends that come with areal-core, registered as a default plugin (see plugins/manager.py):
`local` (decoupled PPO in this process) and `fsdp` (FSDP2 ranks under torchrun: gloo on CPU, NCCL on GPU)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from areal_core.plugins import check_no_options, hookimpl


def local_trainer(model_path: Path, config: Any, *, total_steps: int, version: int, scratch_dir: Path | None) -> Any:
    from areal_core.rl.trainer import LocalTrainer

    check_no_options("trainer", config.backend, config.options)
    return LocalTrainer(model_path, config, total_steps, version)


def fsdp_trainer(model_path: Path, config: Any, *, total_steps: int, version: int, scratch_dir: Path | None) -> Any:
    from areal_core.rl.fsdp import FSDPTrainer

    check_no_options("trainer", config.backend, config.options)
    return FSDPTrainer(model_path, config, total_steps, version, scratch_dir=scratch_dir)


@hookimpl
def register_trainer_backends(register) -> None:
    register("local", local_trainer, description="decoupled PPO in this process")
    register("fsdp", fsdp_trainer, description="FSDP2 ranks under torchrun (trainer.fsdp_processes; gloo / NCCL)")
