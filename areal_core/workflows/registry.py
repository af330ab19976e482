"""The workflow and tool registries, filled by the plugins' `register_workflows` and `register_tools` hooks."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from areal_core.errors import PluginError
from areal_core.plugins import Registry, get_plugin_manager
from areal_core.workflows.tools import ToolSpec


@dataclass(frozen=True)
class WorkflowSpec:
    """A registered workflow: `run(ctx: EpisodeContext) -> Episode` (async), the plugin that provides it, and
    `check(options, where)`, called once before a run to reject bad options with a message naming them."""

    name: str
    run: Callable[..., Any]
    plugin: str
    description: str = ""
    check: Callable[[dict[str, Any], str], None] | None = None
    uses_tools: bool = False


def _runner(plugin: str, name: str, workflow: Any) -> Callable[..., Any]:
    """The async function of a workflow given as one, or as an object (or class) with `async arun_episode(ctx)`."""
    if inspect.isclass(workflow):
        try:
            workflow = workflow()
        except Exception as exc:  # noqa: BLE001 - a plugin's class
            raise PluginError(f"plugin {plugin!r}: workflow {name!r}: {workflow.__name__}() raised "
                              f"{type(exc).__name__}: {exc}") from None
    run = getattr(workflow, "arun_episode", workflow)
    if not inspect.iscoroutinefunction(run):
        raise PluginError(f"plugin {plugin!r}: workflow {name!r} must be an async function of the episode context "
                          "(or have `async def arun_episode(self, ctx)`)")
    return run


def make_workflow_spec(plugin: str, name: str, workflow: Any, *, description: str = "",
                       check: Callable[[dict[str, Any], str], None] | None = None,
                       uses_tools: bool = False) -> tuple[str, WorkflowSpec]:
    if check is not None and not callable(check):
        raise PluginError(f"plugin {plugin!r}: workflow {name!r}: check must be callable")
    return name, WorkflowSpec(name, _runner(plugin, name, workflow), plugin, description, check, bool(uses_tools))


def make_tool_spec(plugin: str, name: str, fn: Callable[..., Any], *, description: str = "",
                   version: str = "", check: Callable[[dict[str, Any]], Any] | None = None) -> tuple[str, ToolSpec]:
    if not callable(fn) or (check is not None and not callable(check)):
        raise PluginError(f"plugin {plugin!r}: tool {name!r} (or its check) is not callable")
    if not name.replace("_", "").replace("-", "").isalnum():
        raise PluginError(f"plugin {plugin!r}: tool name {name!r} must be letters, digits, '_' or '-'")
    return name, ToolSpec(name, fn, plugin, description, str(version), check)


def workflow_registry() -> Registry[WorkflowSpec]:
    return get_plugin_manager().registry("register_workflows", "workflow", make_workflow_spec)


def tool_registry() -> Registry[ToolSpec]:
    return get_plugin_manager().registry("register_tools", "tool", make_tool_spec)
