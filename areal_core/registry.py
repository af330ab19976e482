"""The registries built from the plugins: rewards, dataset generators and tasks.

Each is built once per process on first use, by calling the registration hooks plugin by plugin, so
every name knows the plugin that registered it and a duplicate is an error naming both.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from areal_core.errors import PluginError
from areal_core.plugins import Registry, get_plugin_manager
from areal_core.rewards import RewardSpec

TASKS_PATH_ENV = "AREAL_TASKS_PATH"


@dataclass(frozen=True)
class GeneratorSpec:
    name: str
    fn: Callable[..., Iterable[dict[str, Any]]]
    plugin: str


_lock = threading.RLock()
_rewards: Registry[RewardSpec] | None = None
_generators: Registry[GeneratorSpec] | None = None
_tasks: dict[tuple[str, ...], Registry[Any]] = {}


def reset_registries() -> None:
    global _rewards, _generators
    with _lock:
        _rewards = None
        _generators = None
        _tasks.clear()


def reward_registry() -> Registry[RewardSpec]:
    global _rewards
    with _lock:
        if _rewards is None:
            registry: Registry[RewardSpec] = Registry("reward")

            def make_register(plugin: str) -> Callable[..., None]:
                def register(name: str, fn: Callable[..., Any], *, required_fields: Iterable[str] = (),
                             description: str = "") -> None:
                    if not callable(fn):
                        raise PluginError(f"plugin {plugin!r}: reward {name!r} is not callable")
                    registry.add(name, RewardSpec(name, fn, plugin, tuple(required_fields), description),
                                 f"plugin {plugin!r}")
                return register

            get_plugin_manager().call_each("register_rewards", register=make_register)
            _rewards = registry
        return _rewards


def generator_registry() -> Registry[GeneratorSpec]:
    global _generators
    with _lock:
        if _generators is None:
            registry: Registry[GeneratorSpec] = Registry("dataset generator")

            def make_register(plugin: str) -> Callable[..., None]:
                def register(name: str, fn: Callable[..., Iterable[dict[str, Any]]]) -> None:
                    if not callable(fn):
                        raise PluginError(f"plugin {plugin!r}: generator {name!r} is not callable")
                    registry.add(name, GeneratorSpec(name, fn, plugin), f"plugin {plugin!r}")
                return register

            get_plugin_manager().call_each("register_generators", register=make_register)
            _generators = registry
        return _generators


def task_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Where task YAML files are read from: the specs shipped with areal-core, then
    ``$AREAL_TASKS_PATH`` (os.pathsep-separated), then directories given on the command line."""
    from areal_core import builtin_tasks

    dirs = [Path(builtin_tasks.__file__).parent]
    env = os.environ.get(TASKS_PATH_ENV, "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += [Path(p) for p in extra]
    return dirs


def task_registry(extra_dirs: Iterable[str | Path] = ()) -> Registry[Any]:
    """Tasks registered by plugins plus the YAML specs found in `task_dirs()`."""
    from areal_core.tasks import TaskSpec, load_task_yaml, task_spec_from_dict

    dirs = task_dirs(extra_dirs)
    cache_key = tuple(str(d) for d in dirs)
    with _lock:
        if cache_key in _tasks:
            return _tasks[cache_key]
        registry: Registry[TaskSpec] = Registry("task")

        def make_register(plugin: str) -> Callable[..., None]:
            def register(spec: TaskSpec | dict[str, Any]) -> None:
                if isinstance(spec, dict):
                    spec = task_spec_from_dict(spec, f"plugin {plugin!r}")
                if not isinstance(spec, TaskSpec):
                    raise PluginError(f"plugin {plugin!r}: register_tasks expects a TaskSpec or dict, got {type(spec).__name__}")
                if not spec.source:
                    spec = spec.with_source(f"plugin {plugin!r}")
                registry.add(spec.name, spec, f"plugin {plugin!r}")
            return register

        get_plugin_manager().call_each("register_tasks", register=make_register)
        for directory in dirs:
            if not directory.is_dir():
                if directory != dirs[0]:
                    raise PluginError(f"task directory {directory} does not exist")
                continue
            for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
                spec = load_task_yaml(path)
                registry.add(spec.name, spec, f"file {path}")
        _tasks[cache_key] = registry
        return registry
