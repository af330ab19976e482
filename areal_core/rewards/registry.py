"""The reward registry: reward functions by name, as the plugins' `register_rewards` hooks registered them.

Built once per process on first use, in every process that scores (the CLI, each reward worker, each Celery
worker), so a reward is found by name wherever it runs.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from areal_core.errors import PluginError
from areal_core.plugins import Registry, get_plugin_manager
from areal_core.rewards.contract import RewardSpec


def reward_registry() -> Registry[RewardSpec]:
    def make(plugin: str, name: str, fn: Callable[..., Any], *, required_fields: Iterable[str] = (),
             description: str = "") -> tuple[str, RewardSpec]:
        if not callable(fn):
            raise PluginError(f"plugin {plugin!r}: reward {name!r} is not callable")
        return name, RewardSpec(name, fn, plugin, tuple(required_fields), description)

    return get_plugin_manager().registry("register_rewards", "reward", make)
