"""Running a task's workflow: one scored episode per call, for training (the rollout controller) and evals alike.

A workflow that raises ends only its own episode: the episode comes back with a failure reward naming the
workflow and the exception (counted and dropped like a verifier failure), never an exception that ends the
group, the batch or the run. The engine's own errors (a request no server can serve) pass
through: the rollout controller fails the prompt's group with them, as it always has. A prompt that cannot be
built (a malformed row) fails before the workflow starts, the same way.
"""
from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from areal_core.engine.protocol import EngineError, GenerateRequest, InferenceEngine, SamplingParams
from areal_core.errors import ConfigError
from areal_core.tasks import Task
from areal_core.types import RewardRequest, RewardResult, Trajectory
from areal_core.workflows.builtin import single_turn
from areal_core.workflows.episode import Episode, EpisodeContext, EpisodeLimits, decode_response, json_safe
from areal_core.workflows.registry import WorkflowSpec, tool_registry, workflow_registry
from areal_core.workflows.tools import ToolResult, ToolSpec, run_tool

log = logging.getLogger(__name__)
DEFAULT_WORKFLOW = "single_turn"
# The request id of the episode running in this task: a tool may read it (`areal plan`'s simulated tools draw
# each call's seconds from it, so the same episode's calls take the same seconds in every scenario)
current_episode: contextvars.ContextVar[str | None] = contextvars.ContextVar("areal_current_episode", default=None)
PROMPT_CACHE_SIZE = 4096


@dataclass(frozen=True)
class WorkflowChoice:
    """The workflow a task runs, with its options and the tools it may call, all checked."""

    spec: WorkflowSpec
    options: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, ToolSpec] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def manifest(self) -> dict[str, Any]:
        """What an eval records about the workflow: its name, options, and each tool's plugin and version."""
        return {"name": self.name, "plugin": self.spec.plugin, "options": dict(self.options),
                "tools": {n: {"plugin": t.plugin, "version": t.version} for n, t in sorted(self.tools.items())}}


def choose_workflow(task: Task, overrides: dict[str, Any] | None = None, name: str | None = None) -> WorkflowChoice:
    """The task's workflow (its spec's `workflow`, default single_turn; `name` picks another) with `overrides`
    merged over its options (the spec's own only when the workflow is the spec's); an unknown workflow or tool,
    or options the workflow rejects, is a ConfigError naming the task."""
    ref = task.spec.workflow
    spec_name = ref.name if ref is not None else DEFAULT_WORKFLOW
    name = name or spec_name
    options = {**(ref.options if ref is not None and name == spec_name else {}), **dict(overrides or {})}
    where = f"task {task.name!r}, workflow {name!r}"
    try:
        spec = workflow_registry().get(name)
    except Exception as exc:  # noqa: BLE001 - UnknownNameError, said with the task
        raise ConfigError(f"task {task.name!r}: {exc}") from None
    if spec.check is not None:
        spec.check(options, where)
    EpisodeLimits.from_options(options, 1, where)
    tools: dict[str, ToolSpec] = {}
    if spec.uses_tools:
        registry = tool_registry()
        for tool in options.get("tools", ["calculator"]):
            if tool not in registry:
                raise ConfigError(f"{where}: no tool named {tool!r} is registered (known: "
                                  f"{', '.join(registry.names()) or 'none'}); is the plugin that provides it installed?")
            tools[tool] = registry.get(tool)
        check_tool_options(options.get("tool_options", {}), tools, where)
    return WorkflowChoice(spec, options, tools)


def check_tool_options(tool_options: dict[str, Any], tools: dict[str, ToolSpec], where: str) -> None:
    """Options for tools the workflow does not call, or options a tool's own check rejects: a ConfigError now,
    not an error result on every call of the run."""
    for name, options in tool_options.items():
        if name not in tools:
            raise ConfigError(f"{where}: tool_options.{name}: the workflow calls no tool {name!r} "
                              f"(tools: {', '.join(sorted(tools))})")
        if tools[name].check is not None:
            try:
                tools[name].check(dict(options))
            except Exception as exc:  # noqa: BLE001 - a plugin's check says what is wrong in its own words
                raise ConfigError(f"{where}: tool_options.{name}: {exc}") from None


class EpisodeRunner:
    """Runs one task's workflow against an engine and a reward service, one scored episode per `run`."""

    def __init__(self, task: Task, engine: InferenceEngine, tokenizer: Any, rewards: Any, *, workflow: WorkflowChoice,
                 reward_options: dict[str, Any], max_new_tokens: int) -> None:
        self.task, self.engine, self.tokenizer, self.rewards = task, engine, tokenizer, rewards
        self.workflow, self.reward_options = workflow, dict(reward_options)
        self.limits = EpisodeLimits.from_options(workflow.options, max_new_tokens, f"workflow {workflow.name!r}")
        self._engine_limit_known = False
        self._engine_limit_lock = asyncio.Lock()
        self._prompts: dict[str, list[int]] = {}  # sample id -> prompt ids, the newest PROMPT_CACHE_SIZE

    async def _engine_limit(self) -> None:
        """Cap `max_total_tokens` at the engine's own length limit when it says one (the local engine and `areal
        serve` do): an episode that grows to it ends there, rather than with a request the engine refuses. Asked
        once; episodes starting meanwhile wait for the answer."""
        async with self._engine_limit_lock:
            if self._engine_limit_known:
                return
            try:
                info = await self.engine.model_info()
            except Exception:  # noqa: BLE001 - an engine without model_info: the configured limits stand
                info = {}
            self._engine_limit_known = True
        limit = next((info[k] for k in ("max_seq_len", "context_length") if isinstance(info.get(k), int)), None)
        if limit is not None and (self.limits.max_total_tokens is None or limit < self.limits.max_total_tokens):
            self.limits = dataclasses.replace(self.limits, max_total_tokens=limit - 1)

    async def run(self, sample: dict[str, Any], sampling: SamplingParams, rid: str) -> Episode:
        """One episode of `sample`, scored (by the workflow, or here on its final response), with its seconds
        (episode.seconds, and episode.reward_seconds of its reward calls)."""
        started, reward_seconds = asyncio.get_running_loop().time(), [0.0]
        token = current_episode.set(rid)
        try:
            episode = await self._episode(sample, sampling, rid, reward_seconds)
        finally:
            current_episode.reset(token)
        episode.seconds, episode.reward_seconds = asyncio.get_running_loop().time() - started, reward_seconds[0]
        return episode

    async def _episode(self, sample: dict[str, Any], sampling: SamplingParams, rid: str,
                       reward_seconds: list[float]) -> Episode:
        if self.workflow.spec.run is single_turn and not self.workflow.options:
            return await self._single_generation(sample, sampling, rid, reward_seconds)
        await self._engine_limit()
        attempts = [0]

        async def score(response: str, options: dict[str, Any]) -> RewardResult:
            attempts[0] += 1
            return await self._score(sample, response, rid if attempts[0] == 1 else f"{rid}.a{attempts[0]}", options,
                                     reward_seconds)

        ctx = EpisodeContext(sample=sample, task=self.task, engine=self.engine, tokenizer=self.tokenizer,
                             sampling=sampling, rid=rid, options=self.workflow.options, limits=self.limits,
                             tools=self.workflow.tools, score=score, call_tool=self._call_tool,
                             prompt_ids=self._prompt_ids(sample))
        try:
            episode = await self._run_workflow(ctx)
            if not isinstance(episode, Episode):
                raise TypeError(f"returned {type(episode).__name__}, expected an Episode")
        except EngineError:
            raise  # the platform's own failure (no server can serve the request): the group's, as before
        except Exception as exc:  # noqa: BLE001 - a bug in a plugin's workflow; cancellation passes through
            log.warning("workflow %r failed on %s", self.workflow.name, rid, exc_info=exc)
            episode = Episode(prompt_ids=[], ended_by="error", finish_reason="error")
            episode.reward = RewardResult.failure(f"workflow {self.workflow.name!r} failed: {type(exc).__name__}: {exc}")
            return episode
        if episode.ended_by == "budget" and not episode.generations and episode.reward is None:
            episode.reward = RewardResult.failure(f"budget_s={self.limits.budget_s:g} ran out before the episode's "
                                                  "first policy turn ended")
        if episode.reward is None and episode.finish_reason != "abort":
            episode.reward = await score(episode.final_response(), {})
        return episode

    async def _run_workflow(self, ctx: EpisodeContext) -> Any:
        """The workflow's episode. With budget_s, whatever the workflow is still doing at the budget (a generation,
        a tool, a wait of its own) is cancelled, and the episode it was building ends there with what it holds."""
        run = self.workflow.spec.run(ctx)
        if self.limits.budget_s is None:
            return await run
        try:
            return await asyncio.wait_for(run, self.limits.budget_s)
        except asyncio.TimeoutError:
            if asyncio.get_running_loop().time() - ctx.started < self.limits.budget_s:
                raise  # the workflow's own timeout, not the budget: its failure
            if ctx.episode is None:
                raise TimeoutError(f"budget_s={self.limits.budget_s:g} ran out before the workflow began an "
                                   "episode") from None
            # A reward the workflow set scored an earlier turn (feedback: the attempt before the cut): the
            # runner scores the episode's last policy turn instead.
            ctx.episode.ended_by, ctx.episode.reward, ctx.episode.response = "budget", None, None
            return ctx.episode

    async def _single_generation(self, sample: dict[str, Any], sampling: SamplingParams, rid: str,
                                 reward_seconds: list[float]) -> Episode:
        """The built-in single_turn, without options, by the shortest path: one generation, scored; the episode
        `single_turn` makes, without building its context, because every task without a workflow of its own runs
        it (measured against the path before workflows: bench/bench_agentic.py --only overhead)."""
        episode = Episode(prompt_ids=self._prompt_ids(sample))
        output = await self.engine.generate(GenerateRequest(episode.prompt_ids, sampling, rid=rid))
        episode.add_policy_tokens(output, decode_response(self.tokenizer, output.output_ids))
        if output.finish_reason != "abort":
            episode.reward = await self._score(sample, episode.final_response(), rid, None, reward_seconds)
        return episode

    async def _score(self, sample: dict[str, Any], response: str, request_id: str,
                     options: dict[str, Any] | None = None, seconds: list[float] | None = None) -> RewardResult:
        """The task's reward on `response`, through the reward service (options over the run's reward options);
        its seconds are added to seconds[0]."""
        request = RewardRequest(reward=self.task.spec.reward.name, sample=sample, response=response,
                                options={**self.reward_options, **(options or {})}, request_id=request_id)
        started = asyncio.get_running_loop().time()
        try:
            return await (await self.rewards.submit(request))
        finally:
            if seconds is not None:
                seconds[0] += asyncio.get_running_loop().time() - started

    def _prompt_ids(self, sample: dict[str, Any]) -> list[int]:
        """The sample's prompt, rendered and tokenised once for all its episodes (a malformed row raises here,
        failing its group as before workflows)."""
        key = str(sample.get("id"))
        ids = self._prompts.get(key)
        if ids is None:
            ids = self.task.prompt_token_ids(sample, self.tokenizer)
            if len(self._prompts) >= PROMPT_CACHE_SIZE:
                self._prompts.pop(next(iter(self._prompts)))
            self._prompts[key] = ids
        return ids

    async def _call_tool(self, name: str, arguments: str, timeout_s: float) -> ToolResult:
        tool = self.workflow.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.workflow.tools)) or "none"
            return ToolResult(error=f"unknown tool {name!r}; the tools are: {known}")
        return await run_tool(tool, arguments, timeout_s=timeout_s, max_output_chars=self.limits.max_tool_output_chars,
                              options=self.workflow.options.get("tool_options", {}).get(name, {}))


def episode_trajectory(episode: Episode, *, trajectory_id: str, task: str, sample_id: str, group_id: str,
                       workflow: str) -> Trajectory:
    """The trajectory the trainer takes from a scored episode. A single generation keeps the plain form (no loss
    mask, no transcript): exactly what a trajectory was before workflows."""
    assert episode.reward is not None
    multi = 0 in episode.mask or len(episode.turns) > 1   # (a scan in C: masks are as long as responses)
    details: dict[str, Any] = {}
    if workflow != DEFAULT_WORKFLOW:
        details = {"workflow": workflow, "ended_by": episode.ended_by, "tool_calls": episode.tool_calls,
                   "generations": episode.generations, **({"scores": json_safe(episode.scores)} if episode.scores else {}),
                   **({"tool_seconds": episode.tool_seconds} if episode.tool_seconds else {}),
                   **({"info": json_safe(episode.info)} if episode.info else {})}
    return Trajectory(
        trajectory_id=trajectory_id, task=task, sample_id=sample_id, group_id=group_id,
        prompt_token_ids=episode.prompt_ids, output_token_ids=episode.tokens, output_logprobs=episode.logprobs,
        output_versions=episode.versions, response=episode.final_response(), finish_reason=episode.finish_reason,
        reward=episode.reward, output_loss_mask=list(episode.mask) if multi else None,
        turns=list(episode.turns) if multi else [], episode=details, seconds=episode.seconds,
        reward_seconds=episode.reward_seconds)
