"""The reward registry: reward functions by name, as the plugins' `register_rewards` hooks registered them.

Built once per process on first use, in every process that scores (the CLI, each reward worker, each Celery
worker), so a reward is found by name wherever it runs.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

from areal_core.errors import ConfigError, PluginError
from areal_core.plugins import Registry, get_plugin_manager
from areal_core.rewards.contract import DEFAULT_ASYNC_CONCURRENCY, DEFAULT_IO_CONCURRENCY, RewardSpec


GRADING_USES = ("train", "eval")
DEFAULT_MODES = {"train": "strict", "eval": "lenient"}


def make_reward_spec(plugin: str, name: str, fn: Callable[..., Any], *, required_fields: Iterable[str] = (),
                     description: str = "", modes: Mapping[str, Mapping[str, Any]] | None = None,
                     io_bound: bool = False, concurrency: int | None = None) -> tuple[str, RewardSpec]:
    """What a plugin's `register(name, fn, ...)` in `register_rewards` makes, checked: a PluginError names
    the plugin, the reward and what is wrong."""
    if not callable(fn):
        raise PluginError(f"plugin {plugin!r}: reward {name!r} is not callable")
    modes = dict(modes or {})
    if not all(isinstance(k, str) and isinstance(v, Mapping) for k, v in modes.items()):
        raise PluginError(f"plugin {plugin!r}: reward {name!r}: modes must map a mode name to its options")
    if not isinstance(io_bound, bool):
        raise PluginError(f"plugin {plugin!r}: reward {name!r}: io_bound must be True or False, got {io_bound!r}")
    spec = RewardSpec(name, fn, plugin, tuple(required_fields), description,
                      {k: dict(v) for k, v in modes.items()}, io_bound=io_bound)
    if concurrency is not None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise PluginError(f"plugin {plugin!r}: reward {name!r}: concurrency must be an integer >= 1, "
                              f"got {concurrency!r}")
        if concurrency > 1 and not spec.concurrent:
            raise PluginError(
                f"plugin {plugin!r}: reward {name!r}: concurrency={concurrency} needs an `async def` reward or "
                "io_bound=True (a CPU-bound reward runs one call per worker process; add workers instead)")
    else:
        concurrency = (DEFAULT_ASYNC_CONCURRENCY if spec.is_async else
                       DEFAULT_IO_CONCURRENCY if io_bound else 1)
    return name, dataclasses.replace(spec, concurrency=concurrency)


def reward_registry() -> Registry[RewardSpec]:
    return get_plugin_manager().registry("register_rewards", "reward", make_reward_spec)


def graded_options(name: str, options: Mapping[str, Any], mode: str | None,
                   overrides: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], str | None]:
    """The options a reward is called with in a grading `mode`, and the mode that applied (None for a
    reward without modes): the mode's options, then the task spec's, then `overrides` (the command
    line). A mode the reward does not have is a ConfigError naming the ones it has."""
    spec = reward_registry().get(name)
    merged = {**dict(options), **dict(overrides or {})}
    if not spec.modes or mode is None:
        return merged, None
    if mode not in spec.modes:
        raise ConfigError(f"reward {name!r} has no grading mode {mode!r} (it has: {', '.join(spec.modes)})")
    graded = {**spec.modes[mode], **merged}
    # The mode recorded is the one whose options are in effect: options that override the requested
    # mode's (extract=strict in an eval) make it that mode's grading, or "custom" (extract=none).
    in_effect = [m for m in [mode, *spec.modes] if all(graded.get(k) == v for k, v in spec.modes[m].items())]
    return graded, in_effect[0] if in_effect else "custom"


def check_modes(name: str, modes: Mapping[str, str]) -> str | None:
    """Why a task's `reward.modes` cannot apply to reward `name` (a mode it does not have), or None."""
    spec = reward_registry().get(name)
    for use, mode in modes.items():
        if not spec.modes:
            return f"reward.modes.{use}={mode!r}: reward {name!r} has no grading modes"
        if mode not in spec.modes:
            return f"reward.modes.{use}={mode!r}: reward {name!r} has modes {', '.join(spec.modes)}"
    return None
