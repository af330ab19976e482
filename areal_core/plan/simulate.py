"""A training run on a simulated cluster: the production `TrainingRun` step loop, rollout controller, staleness gate,
weight-update sequence and reward service, with simulated engines, trainer and reward workers (plan/engine.py,
plan/trainer.py) on the virtual clock (plan/clock.py). What the run's files say (metrics.jsonl, summary.json) is in
virtual seconds: what the cluster the costs describe would take.
"""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from areal_core.config import load_config
from areal_core.errors import ConfigError
from areal_core.plan.clock import run_virtual
from areal_core.plan.colocation import SharedCosts, SharedHardware
from areal_core.plan.engine import GenerationCosts, LengthModel, SimulatedEngine
from areal_core.plan.tools import TOOL_SOURCES, CallWriter, SimulatedTools, ToolUse, result_overhead, tools_of
from areal_core.plan.trainer import RewardCosts, SimulatedRewards, SimulatedTrainer, TrainingCosts
from areal_core.plan.workload import trained_lengths_of
from areal_core.rewards import RewardService
from areal_core.rl.config import TrainConfig
from areal_core.rl.report import RunLogger
from areal_core.rl.run import TrainingRun
from areal_core.tasks import get_task
from areal_core.workflows import choose_workflow
from areal_core.workflows.builtin import tool_calls
from areal_core.workflows.episode import EpisodeLimits


@dataclass(frozen=True)
class ClusterCosts:
    """What a simulated cluster's parts cost: `servers` generation servers, one trainer, the reward workers; with
    `shared`, the servers and the trainer share their hardware and slow each other while both work."""

    generation: GenerationCosts
    training: TrainingCosts
    rewards: RewardCosts = field(default_factory=RewardCosts)
    servers: int = 1
    shared: SharedCosts | None = None    # generation and training on the same hardware (plan/colocation.py)
    trainer_ranks: int = 1               # the trainer's data-parallel ranks (a GPU each)


def simulation_config(config: TrainConfig, costs: ClusterCosts) -> TrainConfig:
    """The run's config as a simulation runs it: no evals, no store, no TensorBoard; a config naming servers, or
    streaming weights (engine.weight_sync = distributed | delta) with `costs` that say nothing of what a stream
    costs, is refused rather than ignored."""
    if config.engine.urls:
        raise ConfigError("a simulated run starts its own simulated servers: engine.urls must be empty")
    if config.engine.weight_sync != "disk" and (costs.training.weight_bytes <= 0
                                                 or costs.generation.stream_byte_s <= 0):
        raise ConfigError(f"engine.weight_sync={config.engine.weight_sync}: the profile has no cost of streaming the "
                          "weights (training.weight_bytes and generation.stream_byte_s); `areal plan profile` "
                          "measures them with engine.weight_sync=distributed, or plan with engine.weight_sync=disk")
    if config.engine.weight_sync == "delta" and costs.training.streamed_bytes(changed_only=True) <= 0:
        raise ConfigError("engine.weight_sync=delta: the profile's training.trainable_bytes is 0, so a delta "
                          "update would send nothing; plan with engine.weight_sync=distributed")
    return dataclasses.replace(config, eval_task=None, tensorboard=False, checkpoint_every=0,
                               eval=dataclasses.replace(config.eval, db=None))


async def simulated_run(config: TrainConfig, costs: ClusterCosts, tokenizer: Any, run_dir: Path,
                        lengths: LengthModel | None = None, echo: Callable[[str], None] = lambda line: None,
                        tools: ToolUse | None = None) -> dict[str, Any]:
    """Run `config`'s steps on the simulated cluster (on the running VirtualClockLoop); returns the summary. A
    workflow that calls tools needs `tools`, or `lengths` drawn from a run that called them (plan/tools.py's
    tools_of); `tools` for a workflow that calls none is refused."""
    config = simulation_config(config, costs)
    task = get_task(config.task, config.data_dir)
    workflow = choose_workflow(task, config.rollout.workflow_options, config.rollout.workflow)
    calls = simulated_tools = None
    if tools is not None and not workflow.spec.uses_tools:
        raise ConfigError(f"a tool model was given, but workflow {workflow.name!r} of task {task.name!r} calls no "
                          "tools: set rollout.workflow (e.g. tool_calls), or leave --tools out")
    if workflow.spec.uses_tools:   # the workflow runs; the policy's calls and the tools are drawn (plan/tools.py)
        tools = tools or tools_of(lengths)
        if tools is None:
            raise ConfigError(f"workflow {workflow.name!r} calls tools: a simulated run needs a tool model, "
                              f"`areal plan --tools` {TOOL_SOURCES} (or --lengths of a run that called tools)")
        names = list(workflow.tools)
        calls = CallWriter(tools, workflow.options.get("call_format", "xml"), names, tokenizer)
        if calls.any_turn_calls:
            echo(f"note: workflow {workflow.name!r}'s call format reads any turn as a call: its limits, not the tool "
                 "model's calls per episode, decide how many an episode makes (as in a real run)")
        turn_tokens = EpisodeLimits.from_options(workflow.options, config.rollout.max_new_tokens, "workflow").max_new_tokens
        writes_calls = workflow.spec.run is tool_calls or "call_format" in workflow.options   # the policy calls
        if writes_calls and tools.calls.max > 0 and calls.longest > turn_tokens:
            raise ConfigError(f"a tool call takes {calls.longest} tokens with this tokenizer, more than a turn may "
                              f"generate ({turn_tokens}: rollout.max_new_tokens or the workflow's max_new_tokens): "
                              "no simulated turn could call a tool; raise it")
        overhead = result_overhead(tokenizer, workflow.options, task.spec.prompt.messages is not None)
        simulated_tools = SimulatedTools(tools, names, tokenizer, overhead)
    run_dir.mkdir(parents=True, exist_ok=True)
    hardware = SharedHardware(costs.shared) if costs.shared is not None else None
    trainer = SimulatedTrainer(costs.training, tokenizer, config.trainer, hardware=hardware,
                               trained_lengths=trained_lengths_of(lengths, config), ranks=costs.trainer_ranks)
    engine = SimulatedEngine(costs.servers, costs.generation, lengths, hardware=hardware, calls=calls).start()
    logger = RunLogger(run_dir, tensorboard=False, total_steps=config.steps)
    try:
        async with RewardService(config.reward, backend=SimulatedRewards(costs.rewards)) as rewards:
            run = TrainingRun(config, run_dir, task, None, trainer, engine, rewards, logger,
                              {"step": 0, "elapsed_seconds": 0.0, "trajectories": 0}, run_dir / "weights", echo,
                              resumed=False, started=asyncio.get_running_loop().time(), eval_workflow=None)
            if simulated_tools is not None:
                run.rollout.use_tools(simulated_tools.specs)
            try:
                return await run.train()
            finally:
                await run.close()
    finally:
        logger.close()
        await engine.close()


def simulate(config: TrainConfig | list[str], costs: ClusterCosts, tokenizer: Any, run_dir: Path,
             lengths: LengthModel | None = None, echo: Callable[[str], None] = lambda line: None,
             tools: ToolUse | None = None) -> dict[str, Any]:
    """`simulated_run` on a fresh virtual clock; `config` a TrainConfig or `areal train` overrides (KEY=VALUE)."""
    if not isinstance(config, TrainConfig):
        config = load_config(TrainConfig, None, list(config))
    return run_virtual(simulated_run(config, costs, tokenizer, run_dir, lengths, echo, tools))
