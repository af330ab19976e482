"""Workflows: how one episode of a task runs (one generation, tool calls, retries on feedback), as plugins.

A workflow is `async def run(ctx: EpisodeContext) -> Episode` (or an object with `async arun_episode(ctx)`),
registered by a plugin's `register_workflows` hook; a task spec names it (`workflow: {name: tool_calls,
options: {...}}`; default `single_turn`). Tools come from `register_tools`. Episodes are token in, token out
(episode.py); the runtime (runtime.py) scores them and turns them into trajectories with a loss mask.
"""
from areal_core.workflows.episode import Episode, EpisodeContext, EpisodeLimits, chat_suffix
from areal_core.workflows.registry import WorkflowSpec, tool_registry, workflow_registry
from areal_core.workflows.runtime import (
    DEFAULT_WORKFLOW,
    EpisodeRunner,
    WorkflowChoice,
    choose_workflow,
    episode_trajectory,
)
from areal_core.workflows.tools import CallFormat, ToolCall, ToolResult, ToolSpec, calculator, call_format, run_tool

__all__ = ["CallFormat", "DEFAULT_WORKFLOW", "Episode", "EpisodeContext", "EpisodeLimits", "EpisodeRunner", "ToolCall",
           "ToolResult", "ToolSpec", "WorkflowChoice", "WorkflowSpec", "calculator", "call_format", "chat_suffix",
           "choose_workflow", "episode_trajectory", "run_tool", "tool_registry", "workflow_registry"]
