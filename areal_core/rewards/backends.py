"""The reward backends that come with areal-core, registered as a default plugin (see plugins/manager.py):
`local` (a killable process pool on this machine) and `celery` (workers on a Celery broker)."""
from __future__ import annotations

from typing import Any

from areal_core.plugins import check_no_options, hookimpl


def local_backend(config: Any) -> Any:
    from areal_core.rewards.local import LocalBackend

    check_no_options("reward", config.backend, config.options)
    return LocalBackend(workers=config.workers, timeout=config.timeout, memory_limit_mb=config.memory_limit_mb,
                        concurrency=config.concurrency)


def celery_backend(config: Any) -> Any:
    from areal_core.rewards.celery_backend import CeleryBackend

    check_no_options("reward", config.backend, config.options)
    return CeleryBackend(config)


@hookimpl
def register_reward_backends(register) -> None:
    register("local", local_backend, description="a process pool on this machine, a hard timeout per request")
    register("celery", celery_backend, description="Celery workers (`areal worker`) through a broker (Redis)")
