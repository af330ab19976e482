"""The task and dataset-generator registries: tasks registered by plugins plus the YAML specs of the task
directories (`tasks/` shipped with areal-core, ``$AREAL_TASKS_PATH``, ``--tasks-dir``), and the generators
that specs name. Built once per process on first use; a duplicate name is an error naming both sources.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from areal_core.errors import PluginError
from areal_core.plugins import Registry, get_plugin_manager
from areal_core.tasks.spec import TaskSpec, load_task_yaml, task_spec_from_dict

TASKS_PATH_ENV = "AREAL_TASKS_PATH"
# The specs shipped with areal-core: the repository's top-level `tasks/` directory, linked here as `specs` so
# that it installs inside the package.
BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "specs"


@dataclass(frozen=True)
class GeneratorSpec:
    name: str
    fn: Callable[..., Iterable[dict[str, Any]]]
    plugin: str


def generator_registry() -> Registry[GeneratorSpec]:
    def make(plugin: str, name: str, fn: Callable[..., Iterable[dict[str, Any]]]) -> tuple[str, GeneratorSpec]:
        if not callable(fn):
            raise PluginError(f"plugin {plugin!r}: generator {name!r} is not callable")
        return name, GeneratorSpec(name, fn, plugin)

    return get_plugin_manager().registry("register_generators", "dataset generator", make)


def task_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Where task YAML files are read from: the specs shipped with areal-core, then
    ``$AREAL_TASKS_PATH`` (os.pathsep-separated), then directories given on the command line."""
    env = os.environ.get(TASKS_PATH_ENV, "")
    return [BUILTIN_TASKS_DIR, *(Path(p) for p in env.split(os.pathsep) if p), *(Path(p) for p in extra)]


def plugin_task_registry() -> Registry[TaskSpec]:
    """The tasks the plugins' `register_tasks` hooks registered."""
    def make(plugin: str, spec: TaskSpec | dict[str, Any]) -> tuple[str, TaskSpec]:
        if isinstance(spec, dict):
            spec = task_spec_from_dict(spec, f"plugin {plugin!r}")
        if not isinstance(spec, TaskSpec):
            raise PluginError(f"plugin {plugin!r}: register_tasks expects a TaskSpec or dict, "
                              f"got {type(spec).__name__}")
        return spec.name, spec if spec.source else spec.with_source(f"plugin {plugin!r}")

    return get_plugin_manager().registry("register_tasks", "task", make)


def task_registry(extra_dirs: Iterable[str | Path] = ()) -> Registry[TaskSpec]:
    """Tasks registered by plugins plus the YAML specs found in `task_dirs()`."""
    dirs = task_dirs(extra_dirs)
    manager = get_plugin_manager()

    def build() -> Registry[TaskSpec]:
        registry: Registry[TaskSpec] = Registry("task")

        registered = plugin_task_registry()
        for name, spec in registered.items():
            registry.add(name, spec, registered.source(name), registered.plugin(name))
        for directory in dirs:
            if not directory.is_dir():
                if directory != dirs[0]:
                    raise PluginError(f"task directory {directory} does not exist")
                continue
            for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
                spec = load_task_yaml(path)
                registry.add(spec.name, spec, f"file {path}")
        return registry

    return manager.cached(("tasks", tuple(str(d) for d in dirs)), build)


def unavailable_reason(spec: TaskSpec) -> str | None:
    """Why a task cannot run here (its reward is not installed, and which plugin provides it), or None."""
    from areal_core.rewards.registry import reward_registry

    if spec.reward.name in reward_registry():
        return None
    install = f"; install it with `pip install {spec.reward.plugin}`" if spec.reward.plugin else ""
    return f"its reward {spec.reward.name!r} is not installed{install}"
