"""`areal plan profile`: a cost profile measured on this machine with the real engine, trainer and reward service of
a run's config, each started as `areal train` starts it (the embedded model, the local engine by default).

The process is set up as `areal train` sets up its own (engine.torch_threads). Generation: batches of B requests
(prompt P tokens, L new tokens, EOS ignored; B up to the run's concurrency) on one engine; the decode-step model of
plan/engine.py is fitted to their times by least squares (each run: L steps of B sequences over a growing context, one
prefill of B * P tokens). Weight load: the engine loads a weights directory; with engine.weight_sync = distributed |
delta, the run's weight streamer also sends the trainer's weights to the engine (seconds a byte, the bytes of a whole
update and of a delta). Training: the trainer's pi_prox and update phases on synthetic batches of long and of short
sequences (groups sharing a prompt, as a run's do), and on what the run would train of a batch through its rollout
path (timed in the shared-hardware measurement); costs per token, per sequence and per optimizer step fitted by
non-negative least squares of each batch's relative error. Request cost: a batch through the real rollout controller
(the median of every one timed alone) against the same requests on the cost model's engine. Shared hardware: engine
and trainer run on this one machine, so a batch through the controller is timed again while the trainer works in a
thread (and its requests on the engine alone, alone and alongside: decode steps and a request's work on the path slow
apart), and a training step on what the run would train of that batch while such batches run (plan/colocation.py). How
much they slow each other depends on the responses' lengths (short ones are mostly per-request work in the
interpreter, which the trainer's thread waits on; long ones mostly decode steps, which run beside it): with `lengths`
(a run's, as `areal plan --lengths` takes them) every response of these batches is as long as the workload draws it,
else as long as the model writes it.
Rewards: the task's reward on its own samples through the reward service, one request at a time (latency), then all
at once: requests the service completes per second times the latency is how many it works on at once (`workers` of
the model).
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.plan.colocation import SharedCosts
from areal_core.plan.engine import GenerationCosts
from areal_core.plan.profile import Profile
from areal_core.plan.trainer import RewardCosts, TrainingCosts
from areal_core.rl.config import TrainConfig
from areal_core.rl.memory import setup_objects_frozen
from areal_core.rl.rollout import Group, sequence_tokens, skips_uniform_groups, trained_groups
from areal_core.types import RewardRequest, RewardResult, Trajectory
from areal_core.workflows.builtin import _Z99

# (requests, prompt tokens, new tokens) of each timed generation; L = 1 isolates the prefill
GENERATION_GRID = [(b, p, n) for b in (1, 4, 16) for p, n in ((16, 48), (96, 48), (96, 1))]
# (tokens, response tokens a sequence), 16-token prompts: long and short answers; then long sequences (multi-turn
# episodes, reasoning), whose tokens cost more than short ones packed behind their prompt, in more than one
# micro-batch a minibatch, so that a pass's own cost is told from an optimizer step's (training_batches)
TRAINING_BATCHES = ((512, 48), (2048, 48), (2048, 8), (1024, 8))
LONG_RESPONSE = 176


def training_batches(config: TrainConfig, ranks: int = 1) -> tuple[tuple[int, int], ...]:
    """The profile's synthetic training batches: TRAINING_BATCHES and a batch of long sequences of ranks + 1/2
    micro-batches a minibatch (trainer.micro_batch_tokens, or micro_batch_size sequences when micro-batches are
    fixed), so that each of the trainer's `ranks` runs two passes a minibatch; whole groups of the run's size."""
    trainer, sequence = config.trainer, 16 + LONG_RESPONSE
    per_micro = trainer.micro_batch_tokens if trainer.microbatching == "packed" else trainer.micro_batch_size * sequence
    wanted = (2 * ranks + 1) * per_micro * max(1, trainer.ppo_minibatches) // 2
    group = max(1, config.rollout.group_size)
    sequences = -(-max(1, -(-wanted // sequence)) // group) * group   # rounded up to whole groups
    return (*TRAINING_BATCHES, (sequences * sequence, LONG_RESPONSE))
# The batch-level timings (a request's cost beyond the engine, the shared hardware): each taken this many times by
# default (`areal plan profile --repeats`); on a busy machine more repeats steady them.
REPEATS = 3
LOGNORMAL_P99_LIMIT = 0.99 * math.exp(_Z99 ** 2 / 2)   # the largest p99 / mean a log-normal has, less 1%


def decode_terms(requests: int, prompt: int, new: int) -> list[float]:
    """The coefficients of (step_s, sequence_s, context_token_s, prefill_token_s) in a run's seconds."""
    context = new * requests * prompt + requests * new * (new - 1) // 2   # summed over its steps
    return [float(new), float(new * requests), float(context), float(requests * prompt)]


def fit_generation(samples: list[tuple[int, int, int, float]]) -> dict[str, float]:
    """Least-squares (non-negative: a cost never helps) fit of the decode-step model to (B, P, L, seconds)."""
    names = ["step_s", "sequence_s", "context_token_s", "prefill_token_s"]
    return fit_nonnegative(names, [decode_terms(b, p, n) for b, p, n, _ in samples], [s for *_, s in samples])


def fit_nonnegative(names: list[str], terms: list[list[float]], measured: list[float], relative: bool = False
                    ) -> dict[str, float]:
    """The non-negative least-squares fit of measured = sum(cost * term), by name; `relative`: of each sample's
    error as a share of it, so that small samples count as much as large ones."""
    rows = torch.tensor(terms, dtype=torch.float64)
    seconds = torch.tensor(measured, dtype=torch.float64)
    if relative:
        rows, seconds = rows / seconds[:, None], torch.ones_like(seconds)
    active = list(range(len(names)))
    while True:   # drop the most negative coefficient and fit again (an active-set NNLS, small enough here)
        scale = rows[:, active].abs().max(dim=0).values
        solution = torch.linalg.lstsq(rows[:, active] / scale, seconds[:, None]).solution[:, 0] / scale
        if (solution >= 0).all() or len(active) == 1:
            break
        active.pop(int(solution.argmin()))
    fitted = dict.fromkeys(names, 0.0)
    fitted.update({names[i]: max(float(v), 0.0) for i, v in zip(active, solution)})
    return fitted


def generation_grid(config: TrainConfig) -> list[tuple[int, int, int]]:
    """GENERATION_GRID, and batches as large as the run keeps running (up to 256: the cost is linear beyond)."""
    concurrency = min(256, config.engine.max_running_requests,
                      config.rollout.batch_size * config.rollout.group_size * (config.rollout.max_staleness + 1))
    extra = [b for b in (64, concurrency) if b > 16 and b <= concurrency]
    return GENERATION_GRID + [(b, 16, 48) for b in sorted(set(extra))]


async def _time_generation(engine: Any, model_dir: Path, config: TrainConfig) -> tuple[dict[str, float], dict[str, Any]]:
    engine_config = config.engine
    rng = random.Random(0)

    async def timed(requests: int, prompt: int, new: int) -> float:
        started = time.perf_counter()   # any ids of the vocabulary: only the lengths matter
        await asyncio.gather(*(engine.generate(GenerateRequest(
            [rng.randrange(1, 32) for _ in range(prompt)], SamplingParams(max_new_tokens=new, ignore_eos=True),
            rid=f"profile-{requests}-{prompt}-{new}-{i}-{rng.random()}")) for i in range(requests)))
        return time.perf_counter() - started

    await timed(1, 16, 8)   # warm-up: the first forward passes pay for lazy initialisation
    samples = [(b, p, n, min([await timed(b, p, n) for _ in range(2)])) for b, p, n in generation_grid(config)]
    started = time.perf_counter()
    await engine.update_weights(str(model_dir), 1)
    weight_load_s = time.perf_counter() - started
    fitted = fit_generation(samples)
    return {**fitted, "weight_load_s": weight_load_s, "max_running": engine_config.max_running_requests}, {
        "samples": [{"requests": b, "prompt": p, "new_tokens": n, "seconds": s} for b, p, n, s in samples]}


async def measure_stream(trainer: Any, engine: Any, config: TrainConfig, updates: int = 2
                         ) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """What streaming the weights costs (engine.weight_sync = distributed | delta): whole updates through the
    run's own WeightStreamer (a process group to the servers, or in memory to an engine in this process), the
    fastest of `updates` per byte; and the bytes a delta update sends (the parameters the optimizer changes).
    (generation costs, training costs, raw timings)."""
    from areal_core.rl.weight_updates import WeightStreamer

    streamer = WeightStreamer(trainer, engine, dataclasses.replace(config.engine, weight_sync="distributed"),
                              config.trainer.device)
    timings: list[dict[str, Any]] = []
    try:
        for version in range(1, updates + 1):
            timings.append((await streamer.update(version))[1])
    finally:
        await streamer.close()
    fastest = min(timings, key=lambda t: t["weight_sync_seconds"])
    buckets = await asyncio.to_thread(trainer.stage_weights, streamer.cap_bytes, True)
    return ({"stream_byte_s": fastest["weight_sync_seconds"] / fastest["weight_sync_bytes"]},
            {"weight_bytes": fastest["weight_sync_bytes"], "trainable_bytes": sum(b.nbytes for b in buckets)},
            {"updates": timings})


def synthetic_batch(tokens: int, seed: int, response: int = 48, group: int = 4) -> list[Trajectory]:
    """Groups of `group` trajectories sharing a prompt of 16 tokens (as a run's groups do), `response` tokens each,
    about `tokens` in all counting each trajectory's prompt (as the simulated trainer counts them), rewards 0 and 1."""
    rng = random.Random(seed)
    batch: list[Trajectory] = []
    prompt: list[int] = []
    for k in range(max(group, tokens // (16 + response) // group * group)):
        if k % group == 0:
            prompt = [rng.randrange(1, 32) for _ in range(16)]
        output = [rng.randrange(1, 32) for _ in range(response)]
        batch.append(Trajectory(trajectory_id=f"{seed}-{k}", task="profile", sample_id=str(k // group),
                                group_id=str(k // group), prompt_token_ids=list(prompt),
                                output_token_ids=output, output_logprobs=[-3.0] * response,
                                output_versions=[0] * response, response="", finish_reason="length",
                                reward=RewardResult(score=float(k % 2))))
    return batch


def training_step(trainer: Any, config: TrainConfig, tokens: int, seed: int, response: int = 48) -> dict[str, Any]:
    """One step of the trainer on a synthetic batch of about `tokens` (train_on's sample)."""
    return train_on(trainer, config, synthetic_batch(tokens, seed, response, config.rollout.group_size))


def shares_prompts(trainer: Any, config: TrainConfig) -> bool:
    """Whether the trainer packs a prompt's responses behind it (its learner's choice: trainer.share_prompts on an
    sdpa or eager model; a sharded trainer's learners, in their processes, as the config asks)."""
    return bool(getattr(getattr(trainer, "learner", None), "share_prompts", config.trainer.share_prompts))


def trainer_ranks(trainer: Any) -> int:
    """A sharded trainer's data-parallel ranks, else one."""
    return max(1, int(getattr(trainer, "world_size", 1)))


def train_on(trainer: Any, config: TrainConfig, batch: list[Trajectory]) -> dict[str, Any]:
    """One step of the trainer on `batch`, as a training sample: its tokens, sequences, the positions and passes
    (micro-batches a rank runs) of the step's plan (rl/trainer.py's step_shape), pi_prox's and the update's
    seconds."""
    from areal_core.rl.algorithms import group_advantages
    from areal_core.rl.trainer import step_shape

    positions, microbatches = step_shape(batch, config.trainer, shares_prompts(trainer, config),
                                         int(getattr(trainer, "version", 0)), trainer_ranks(trainer))
    started = time.perf_counter()
    prepared = trainer.prepare(batch, config.rollout.temperature)
    trainer.recompute_proximal(prepared)
    # a trainer in this process on a GPU (this process's CUDA is in use): its kernels end before the clock reads
    on_gpu = config.trainer.device.startswith("cuda") and torch.cuda.is_initialized()
    if on_gpu:
        torch.cuda.synchronize()
    proximal = time.perf_counter()
    advantages = group_advantages(torch.tensor([t.reward.score for t in batch]), [t.group_id for t in batch],
                                  config.trainer.advantage)
    trainer.ppo_update(prepared, advantages)
    if on_gpu:
        torch.cuda.synchronize()
    return {"tokens": sequence_tokens(batch), "sequences": len(batch), "positions": positions,
            "microbatches": microbatches, "proximal_s": proximal - started, "update_s": time.perf_counter() - proximal}


def measure_training(trainer: Any, config: TrainConfig, scratch: Path, repeats: int = REPEATS
                     ) -> tuple[dict[str, Any], list[dict]]:
    """The trainer's costs (fitted to batches of long and of short sequences: fit_training), and the timings they
    were fitted to: each batch's median step of `repeats` (median_step)."""
    tokens, response = TRAINING_BATCHES[0]
    training_step(trainer, config, tokens, 0, response)   # a warm-up
    samples = [median_step([training_step(trainer, config, tokens, index, response) for _ in range(repeats)])
               for index, (tokens, response) in enumerate(training_batches(config, trainer_ranks(trainer)))]
    started = time.perf_counter()
    trainer.publish(scratch / "published")
    publish_s = time.perf_counter() - started
    started = time.perf_counter()
    trainer.save_checkpoint(scratch / "checkpoint")
    checkpoint_s = time.perf_counter() - started
    return {**fit_training(samples, config, shares_prompts(trainer, config)), "publish_s": publish_s,
            "checkpoint_s": checkpoint_s}, samples


def fit_training(samples: list[dict[str, Any]], config: TrainConfig, shared_prompts: bool = False
                 ) -> dict[str, Any]:
    """pi_prox's and the update's costs fitted to training samples (train_on's), each one's relative error alike:
    the run's own batch, smaller than the synthetic ones, counts as much (fitted to seconds, a 16-sequence batch of
    the GPU check's tiny run was predicted at half its measured update). Per position the step's micro-batches
    compute, per pass (a micro-batch a rank runs) and once a step (the update: per optimizer step): on this
    project's CPU, fitted to the profile's kinds of batch, it put the update of 15 batches of 2- to 240-token
    answers, behind shared prompts or not, within 11%, where per token and per sequence (no cost below zero) missed
    by up to 126%: short answers packed behind their prompt cost less a token, and split into more micro-batches
    more. Samples without positions (timings of an older profile) are fitted per token and per sequence."""
    if all("positions" in s for s in samples):
        proximal = fit_nonnegative(["proximal_token_s", "proximal_microbatch_s", "proximal_step_s"],
                                   [[s["positions"], s["microbatches"], 1] for s in samples],
                                   [s["proximal_s"] for s in samples], relative=True)
        update = fit_nonnegative(["update_token_s", "update_microbatch_s", "optimizer_step_s"],
                                 [[s["positions"], s["microbatches"], config.trainer.ppo_minibatches] for s in samples],
                                 [s["update_s"] for s in samples], relative=True)
        return {**proximal, **update, "proximal_sequence_s": 0.0, "update_sequence_s": 0.0, "per_position": True,
                "shared_prompts": shared_prompts}
    proximal = fit_nonnegative(["proximal_token_s", "proximal_sequence_s"],
                               [[s["tokens"], s["sequences"]] for s in samples], [s["proximal_s"] for s in samples],
                               relative=True)
    update = fit_nonnegative(["update_token_s", "update_sequence_s", "optimizer_step_s"],
                             [[s["tokens"], s["sequences"], config.trainer.ppo_minibatches] for s in samples],
                             [s["update_s"] for s in samples], relative=True)
    return {**proximal, **update, "proximal_microbatch_s": 0.0, "update_microbatch_s": 0.0, "proximal_step_s": 0.0,
            "per_position": False, "shared_prompts": False}


class LengthPinnedEngine:
    """The engine, with each response as long as `lengths` draws it for the request (EOS ignored, the request's
    max_new_tokens still the limit): the rollout path runs unchanged on the lengths of the run being planned. With
    `calls` (a tool-using workflow: plan/tools.py's CallWriter), a turn it names a call for ends with that call's ids,
    as the simulated engine ends it (plan/engine.py): the engine writes the rest of the turn (at least a token; no stop
    string cuts it short), the call's ids follow with log-prob 0, and the turn finishes "stop". So the profile's
    episodes call tools as the planned run's did, whatever the profiled model writes."""

    def __init__(self, engine: Any, lengths: Any, calls: Any = None, tokenizer: Any = None) -> None:
        self.engine, self.lengths, self.calls, self.tokenizer = engine, lengths, calls, tokenizer

    async def generate(self, request: GenerateRequest) -> Any:
        sampling = request.sampling_params
        limit = sampling.max_new_tokens
        call = self.calls(request) if self.calls is not None else None
        if call is not None and len(call) > limit:
            call = None
        if self.lengths is None and call is None:
            return await self.engine.generate(request)
        if self.lengths is None:   # as long as the model writes, less the call
            pinned = dataclasses.replace(sampling, max_new_tokens=max(1, limit - len(call)), stop=())
        else:
            length = max(1, min(limit, self.lengths(request.rid, len(request.input_ids), limit)))
            if call is None:
                pinned = dataclasses.replace(sampling, max_new_tokens=length, ignore_eos=True)
            else:   # the turn as long as drawn, its call whole: what comes before it
                pinned = dataclasses.replace(sampling, max_new_tokens=max(1, max(length, len(call)) - len(call)),
                                             ignore_eos=True, stop=())
        output = await self.engine.generate(dataclasses.replace(request, sampling_params=pinned))
        if call is None or output.finish_reason == "abort":
            return output
        ids = [*output.output_ids, *call]
        version = output.output_versions[-1] if output.output_versions else 0
        return dataclasses.replace(
            output, output_ids=ids, output_logprobs=[*output.output_logprobs, *[0.0] * len(call)],
            output_versions=[*output.output_versions, *[version] * len(call)], finish_reason="stop",
            text=self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer is not None else output.text)

    def __getattr__(self, name: str) -> Any:   # pause, resume, model_info, ...: the engine's own
        return getattr(self.engine, name)


def tool_model(config: TrainConfig, lengths: Any = None, tools: Any = None) -> tuple[Any, Any, Any]:
    """(the run's task, its workflow, the tool model its profile's episodes call tools by: `tools`, else the `lengths` run's;
    None for a workflow that calls none). A tool-using workflow without one, or `tools` for a workflow that calls
    none, is refused (ConfigError)."""
    from areal_core.errors import ConfigError
    from areal_core.plan.tools import TOOL_SOURCES, tools_of
    from areal_core.tasks import get_task
    from areal_core.workflows import choose_workflow

    task = get_task(config.task, config.data_dir)
    workflow = choose_workflow(task, config.rollout.workflow_options, config.rollout.workflow)
    if not workflow.spec.uses_tools:
        if tools is not None:
            raise ConfigError(f"a tool model was given, but workflow {workflow.name!r} of task {task.name!r} calls no "
                              "tools: set rollout.workflow (e.g. tool_calls), or leave --tools out")
        return task, workflow, None
    use = tools or tools_of(lengths)
    if use is None:
        raise ConfigError(f"workflow {workflow.name!r} calls tools: a profile of it needs the calls and the tools' "
                          f"seconds of the run planned, `areal plan profile --tools` {TOOL_SOURCES} (or --lengths of "
                          "a run that called tools), so that what the rollout path costs a turn is measured apart "
                          "from what the tools take")
    return task, workflow, use


class _Batches:
    """Batches of the run through its real rollout path: the rollout controller (max staleness 0, so one batch
    and no more), the task's workflow, the engine (responses as long as `lengths` draws them, when given) and the
    reward service; and the same requests sent to the engine alone (the same prompt tokens, each as long as its
    response was), for what the path costs a request beyond.

    A tool-using workflow runs as it is, its calls and tools as `tools` (plan/tools.py's ToolUse; default: the
    `lengths` run's) say: each turn the tool model names a call for ends with it, and the tools answer after their
    drawn seconds (SimulatedTools, on the real clock here), so that the episodes have the planned run's shape (its
    turns, the tools' waits between them) and what the path costs a turn is told from what the tools take (those are
    the workload's, not the profile's)."""

    def __init__(self, engine: Any, tokenizer: Any, rewards: Any, config: TrainConfig, lengths: Any = None,
                 tools: Any = None) -> None:
        from areal_core.plan.tools import CallWriter, result_overhead

        self.engine, self.tokenizer, self.rewards, self.config = engine, tokenizer, rewards, config
        self.lengths = lengths
        self.rollout = dataclasses.replace(config.rollout, max_staleness=0, dynamic_sampling=False)
        self.task, workflow, self.tool_use = tool_model(config, lengths, tools)
        self.calls, self.tool_names, self.result_overhead = None, list(workflow.tools), 0
        if self.tool_use is not None:
            self.calls = CallWriter(self.tool_use, workflow.options.get("call_format", "xml"), self.tool_names,
                                    tokenizer)
            self.result_overhead = result_overhead(tokenizer, workflow.options,
                                                   self.task.spec.prompt.messages is not None)
        self.rollout_engine = engine if lengths is None and self.calls is None else \
            LengthPinnedEngine(engine, lengths, self.calls, tokenizer)
        self.last_trajectories: list[Trajectory] = []   # of the latest batch through the controller

    def simulated_tools(self, tool_use: Any = None) -> dict[str, Any] | None:
        """The workflow's tools as the tool model draws them (plan/tools.py's SimulatedTools), fresh: an episode's
        k-th call takes the same seconds in every batch."""
        from areal_core.plan.tools import SimulatedTools

        if self.tool_use is None:
            return None
        return SimulatedTools(tool_use or self.tool_use, self.tool_names, self.tokenizer, self.result_overhead).specs

    async def through_controller(self, engine: Any = None, rewards: Any = None, tool_use: Any = None
                                 ) -> tuple[float, list[Group]]:
        """One batch through the controller: on the run's engine and reward service (its trajectories kept), or on
        `engine` and `rewards` (the cost model's, on the virtual clock: `modelled_seconds`)."""
        from areal_core.rl.rollout import RolloutController

        # the first batch each time: at policy version 0 and max staleness 0 the controller admits that one only
        controller = RolloutController(self.task, self.rollout_engine if engine is None else engine,
                                       self.rewards if rewards is None else rewards, self.tokenizer, self.rollout,
                                       reward_options=self.config.reward_options)
        tools = self.simulated_tools(tool_use)
        if tools is not None:
            controller.use_tools(tools)
        clock = asyncio.get_running_loop()
        started = clock.time()
        controller.start()
        try:
            groups = await controller.next_batch()
            seconds = clock.time() - started
        finally:
            await controller.stop()
        if engine is None:
            self.last_trajectories = [t for g in groups for t in g.trajectories]
        return seconds, groups

    async def engine_alone(self, trajectories: list[Trajectory]) -> float:
        started = time.perf_counter()
        await asyncio.gather(*(self.engine.generate(r) for r in replayed_requests(trajectories, "alone")))
        return time.perf_counter() - started

    def modelled_seconds(self, costs: GenerationCosts, trajectories: list[Trajectory], waits: bool = True) -> float:
        """Seconds the cost model's engine (one simulated server, no request cost) takes for this batch: its requests
        sent at once (modelled_engine_seconds); a tool-using workflow's episodes through the controller on the virtual
        clock, the same turns calling the same tools, which take their drawn seconds (none with `waits` False)."""
        if self.tool_use is None:
            return modelled_engine_seconds(costs, trajectories)
        from areal_core.plan.clock import run_virtual
        from areal_core.plan.engine import SimulatedEngine
        from areal_core.plan.trainer import SimulatedRewards
        from areal_core.rewards import RewardService

        tool_use = self.tool_use if waits else dataclasses.replace(self.tool_use, seconds=(), fixed_seconds=0.0)

        async def batch() -> float:
            engine = SimulatedEngine(1, dataclasses.replace(costs, request_s=0.0), self.lengths,
                                     calls=self.calls).start()
            try:
                async with RewardService(self.config.reward, backend=SimulatedRewards(RewardCosts())) as rewards:
                    seconds, _ = await self.through_controller(engine, rewards, tool_use)
                    return seconds
            finally:
                await engine.close()

        return run_virtual(batch())


def replayed_requests(trajectories: list[Trajectory], tag: str) -> list[GenerateRequest]:
    """The requests behind these trajectories: each one's prompt tokens, as long as its response (EOS ignored)."""
    return [GenerateRequest(list(t.prompt_token_ids), SamplingParams(max_new_tokens=max(1, len(t.output_token_ids)),
                                                                     ignore_eos=True),
                            rid=f"{tag}-{t.trajectory_id}-{random.random()}") for t in trajectories]


def modelled_engine_seconds(costs: GenerationCosts, trajectories: list[Trajectory]) -> float:
    """Seconds the cost model's engine (one simulated server, no request cost) takes for these requests sent at once:
    their prompts, each as long as its response."""
    from areal_core.plan.clock import run_virtual
    from areal_core.plan.engine import SimulatedEngine

    async def batch() -> float:
        engine = SimulatedEngine(1, dataclasses.replace(costs, request_s=0.0)).start()
        started = asyncio.get_running_loop().time()
        try:
            await asyncio.gather(*(engine.generate(r) for r in replayed_requests(trajectories, "modelled")))
            return asyncio.get_running_loop().time() - started
        finally:
            await engine.close()

    return run_virtual(batch())


async def measure_requests(batches: _Batches, costs: GenerationCosts, repeats: int = REPEATS) -> dict[str, Any]:
    """Batches through the run's rollout path (after a warm-up batch), the same requests on the engine alone (for the
    record) and on the cost model's engine: what `request_cost` takes. `requests` counts the engine's requests (a
    tool-using episode's every turn is one); with tools, `tool_waits_s` is what the modelled batch spent waiting on
    them alone (its seconds less those of the same batch with instant tools), which the trainer does not slow."""
    from areal_core.rl.run import turn_lengths

    await batches.through_controller()   # the reward workers start, the prompts' first tokenizations
    controller, alone, trajectories = [], [], []
    for _ in range(repeats):
        seconds, groups = await batches.through_controller()
        trajectories = [t for g in groups for t in g.trajectories]
        controller.append(seconds)
        alone.append(await batches.engine_alone(trajectories))
    # in a thread: the virtual clock's loop cannot run inside this one
    modelled = await asyncio.to_thread(batches.modelled_seconds, costs, trajectories)
    timings = {"requests": len(turn_lengths(trajectories)), "controller_s": controller, "engine_alone_s": alone,
               "engine_modelled_s": modelled}
    if batches.tool_use is not None:
        instant = await asyncio.to_thread(batches.modelled_seconds, costs, trajectories, False)
        timings["tool_waits_s"] = max(0.0, modelled - instant)
    return timings


def request_cost(timings: dict[str, Any], more_batches: list[float]) -> float:
    """Seconds a request costs on the run's rollout path beyond its tokens on the engine (prompt rendering and
    tokenizing, detokenizing, scoring, the groups and the buffer): (the median batch through the controller - the
    same requests on the cost model's engine) / requests. The median, as a run's steps average their batches (the
    fastest of them read 5-10% short), of every batch timed alone through the controller (`more_batches`: the
    sharing measurement's, the same prompts and, with `lengths`, the same response lengths), as the same batch timed
    a minute apart read up to 20% apart; the model's engine, not the real one alone, so that a simulated batch through
    the controller takes what the measured ones took, whatever the decode model's error at this batch's shape."""
    return max(0.0, (batch_seconds(timings, more_batches) - timings["engine_modelled_s"]) / max(1, timings["requests"]))


def batch_seconds(timings: dict[str, Any], more_batches: list[float]) -> float:
    """Seconds a batch takes through the rollout path alone: the median of every one timed (`request_cost`)."""
    return statistics.median([*timings["controller_s"], *more_batches])


def trained_share(groups: list[Group], config: TrainConfig, lengths: Any = None) -> list[Trajectory]:
    """What the step loop trains on of this batch (TrainingRun.trajectories): groups that all scored alike carry no
    gradient and are skipped (rollout.skip_uniform_groups, no KL term), which at a low or high reward rate is most of
    the batch. With a run's workload (a run directory) the share of its responses that run trained on (its rewards,
    not this model's; at least one group): the groups whose length comes nearest that run's trained sequences'
    (`nearest_groups`), else the first ones; without one this batch's own mixed groups, all of it when none is mixed
    (as the step loop does)."""
    skip = skips_uniform_groups(config)
    if skip and getattr(lengths, "trained_share", None) is not None:
        count = max(1, round(len(groups) * lengths.trained_share))
        trained = getattr(lengths, "trained_lengths", None)
        kept = nearest_groups(groups, count, trained.mean) if trained is not None else groups[:count]
    else:
        kept = trained_groups(groups, skip)
    return [t for g in kept for t in g.trajectories]


def nearest_groups(groups: list[Group], count: int, target: float) -> list[Group]:
    """`count` of the groups whose mean sequence (prompt and response tokens) comes nearest `target` tokens: of the
    groups ordered by their mean, the run of `count` in a row nearest it (a run that trained its short prompts trains
    short groups here; the profile's responses are as long as the workload draws them, not as its prompts would make
    them), in the batch's order."""
    sizes = [(sequence_tokens(g.trajectories), len(g.trajectories)) for g in groups]
    order = sorted(range(len(groups)), key=lambda k: sizes[k][0] / max(1, sizes[k][1]))
    count = min(count, len(groups))

    def distance(start: int) -> float:
        window = order[start:start + count]
        return abs(sum(sizes[k][0] for k in window) / max(1, sum(sizes[k][1] for k in window)) - target)

    start = min(range(len(groups) - count + 1), key=distance)
    return [groups[k] for k in sorted(order[start:start + count])]


async def measure_sharing(batches: _Batches, trainer: Any, config: TrainConfig, repeats: int = REPEATS
                          ) -> tuple[dict[str, float], dict[str, Any]]:
    """How much generation and training slow each other on this machine: a batch of the run through its rollout path
    timed alone and while training steps run back to back in a thread (as the run loop runs them), a training step alone
    and while generation runs as the run keeps it (max_staleness + 1 batches at once, back to back); the ratios of the
    medians (>= 1); the batch's requests are timed on the engine alone too, alone and beside training, for generation's
    slowdown split into decode steps and a request's work (`split_generation_slowdown`, once a request's cost is known).
    Alone and shared are timed in turn, so that the machine's drift over the minute falls on both. The training steps
    train on what the run would train of a batch the rollout path made (`trained_share`), so that they have the run's
    shape (how many sequences, how long): per-sequence work holds the interpreter lock longer than the per-token work of
    long sequences, and the local engine runs in the trainer's process (a profile that trained on the whole batch where
    the run trained 40% of it read generation less slowed, 1.34-1.41x against 1.43-1.51x)."""
    in_flight = max(1, config.rollout.max_staleness + 1)
    run_batch: list[Trajectory] = []

    async def generation() -> float:
        seconds, groups = await batches.through_controller()
        if not run_batch:   # the training steps train on the first batch, alone and shared alike
            run_batch.extend(trained_share(groups, config, batches.lengths))
        return seconds

    async def generation_as_run() -> float:
        await asyncio.gather(*(batches.through_controller() for _ in range(in_flight)))
        return 0.0

    alone_phases: list[tuple[float, float, int, int]] = []

    async def training(phases: list[tuple[float, float, int, int]] | None = None) -> float:
        sample = await asyncio.to_thread(train_on, trainer, config, run_batch)
        if phases is not None:   # each call's plan is drawn anew (seeded by the version): its shape with its times
            phases.append((sample["proximal_s"], sample["update_s"], sample["positions"], sample["microbatches"]))
        return sample["proximal_s"] + sample["update_s"]

    async def alongside(timed: Any, background: Any) -> float:
        stop = asyncio.Event()

        async def busy() -> None:
            while not stop.is_set():
                await background()

        other = asyncio.create_task(busy())
        try:
            await asyncio.sleep(0.05)   # the other phase is under way
            return await timed()
        finally:
            stop.set()
            await other   # its work in progress ends (a thread cannot be cancelled)

    # every batch through the controller is the same one (its request ids, seeds and pinned lengths are), so the
    # first batch's requests stand for all: on the engine alone they are the path's decode steps
    first_batch: list[Trajectory] = []

    async def engine() -> float:
        return await batches.engine_alone(first_batch)

    alone_g, shared_g, alone_t, shared_t, alone_e, shared_e = [], [], [], [], [], []
    for _ in range(repeats):
        alone_g.append(await generation())
        first_batch = first_batch or batches.last_trajectories
        shared_g.append(await alongside(generation, training))
        alone_e.append(await engine())
        shared_e.append(await alongside(engine, training))
        alone_t.append(await training(alone_phases))
        shared_t.append(await alongside(training, generation_as_run))
    # generation's slowdown is split from these timings once a request's cost is known (shared_generation)
    slowdowns = {"training_slowdown": max(1.0, statistics.median(shared_t) / statistics.median(alone_t))}
    return slowdowns, {"generation_alone_s": alone_g, "generation_alongside_training_s": shared_g,
                       "engine_alone_s": alone_e, "engine_alongside_training_s": shared_e,
                       "training_alone_s": alone_t, "training_alongside_generation_s": shared_t,
                       "training_alone_phases_s": alone_phases,
                       "training_tokens": sequence_tokens(run_batch),
                       "training_sequences": len(run_batch),
                       "response_tokens_mean": statistics.fmean(len(t.output_token_ids) for t in run_batch)}


def split_generation_slowdown(path_ratio: float, engine_ratio: float, batch_s: float, modelled_engine_s: float,
                              waits_s: float = 0.0) -> dict[str, float]:
    """How much the trainer slows decode steps and the rest of the rollout path, apart. A batch through the path slows
    `path_ratio` times beside training, its requests on the engine alone `engine_ratio` times: the decode steps'
    slowdown (each ratio of timings taken in turn, so that the machine's drift falls on both sides). A simulated batch
    takes `batch_s` alone (what `request_cost` calibrates it to), `modelled_engine_s` of it decode steps and the rest a
    request's work (rendering, tokenizing, scoring: Python that waits for the interpreter lock the trainer's thread
    holds), which slows by what is left, so that the simulated batch slows as the measured one did. When one of the two
    would read a speed-up it is 1 and the other takes the rest; when the work beyond the engine is too small to
    measure apart (a sixth of the batch or less), both are the path's ratio (a path ratio under 1 reads 1). `waits_s`
    of the modelled batch are a tool-using workflow's waits on its tools, which nothing slows: taken out of both sides
    first."""
    if waits_s > 0:
        waits_s = min(waits_s, modelled_engine_s, batch_s)
        batch_s, modelled_engine_s = batch_s - waits_s, modelled_engine_s - waits_s
        path_ratio = (path_ratio * (batch_s + waits_s) - waits_s) / batch_s if batch_s > 0 else 1.0
    path = max(1.0, path_ratio)
    beyond = batch_s - modelled_engine_s
    if beyond <= batch_s / 6:
        return {"generation_slowdown": path, "request_slowdown": path}
    generation = max(1.0, engine_ratio)
    request = (path * batch_s - modelled_engine_s * generation) / beyond
    if request < 1.0:   # then modelled_engine_s > 0 (without decode steps, request is the path's ratio)
        request, generation = 1.0, max(1.0, (path * batch_s - beyond) / modelled_engine_s)
    return {"generation_slowdown": generation, "request_slowdown": request}


def shared_generation(requests: dict[str, Any], shared: dict[str, Any]) -> dict[str, float]:
    """Generation's slowdowns beside training from the profile's timings (measure_requests', measure_sharing's)."""
    def ratio(beside: str, alone: str) -> float:
        return statistics.median(shared[beside]) / statistics.median(shared[alone])

    return split_generation_slowdown(ratio("generation_alongside_training_s", "generation_alone_s"),
                                     ratio("engine_alongside_training_s", "engine_alone_s"),
                                     batch_seconds(requests, shared["generation_alone_s"]),
                                     requests["engine_modelled_s"], requests.get("tool_waits_s", 0.0))


def median_step(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Of steps timed on one batch, the one whose pi_prox and update together took the median time, its shape with its
    times (each step's plan is drawn anew). The median, as a run's steps average theirs: this machine runs in fast and
    slow spells, and the fastest of two read the trainer's cost a position 30% below what the runs' steps took
    (41 against 59 us, val19)."""
    return sorted(samples, key=lambda sample: sample["proximal_s"] + sample["update_s"])[(len(samples) - 1) // 2]


def run_sample(shared: dict[str, Any]) -> dict[str, Any]:
    """The run's own batch as a training sample: its tokens and sequences, the median of its steps timed alone (as
    the synthetic samples take theirs), with that step's positions and passes (timings of an older profile: its
    phases without them)."""
    phases = [{"proximal_s": phase[0], "update_s": phase[1],
               **({"positions": phase[2], "microbatches": phase[3]} if len(phase) == 4 else
                  {"positions": shared["training_positions"], "microbatches": shared["training_microbatches"]}
                  if "training_positions" in shared else {})}   # timings of a profile that kept one shape for all calls
              for phase in shared["training_alone_phases_s"]]
    return {"tokens": shared["training_tokens"], "sequences": shared["training_sequences"], **median_step(phases)}


async def measure_rewards(config: TrainConfig, service: Any, requests: int = 32, burst: int = 512
                          ) -> dict[str, float]:
    """The reward service's latency and how many it scores at once, on the task's own samples (its workers are
    already started: the rollout path's batches ran on it)."""
    from areal_core.tasks import get_task

    task = get_task(config.task, config.data_dir)
    samples = task.samples()[:requests]
    latencies: list[float] = []

    def request(index: int) -> RewardRequest:
        sample = samples[index % len(samples)]
        return RewardRequest(task.spec.reward.name, sample, str(sample.get("answer", "")), request_id=f"profile-{index}")

    for index in range(requests):   # one at a time: each one's own latency
        started = time.perf_counter()
        await (await service.submit(request(index)))
        latencies.append(time.perf_counter() - started)
    started = time.perf_counter()
    pending = [await service.submit(request(requests + i)) for i in range(burst)]
    await asyncio.gather(*pending)
    per_second = burst / (time.perf_counter() - started)
    ordered = sorted(latencies)
    mean = statistics.fmean(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    # as many at once as Little's law says the service works on when it is saturated: latency x throughput
    at_once = max(config.reward.workers, round(mean * per_second))
    # of 32 requests the p99 is the slowest: one outlier must not ask for a tail no log-normal has
    return {"mean_s": mean, "p99_s": min(max(p99, mean), LOGNORMAL_P99_LIMIT * mean), "workers": at_once}


async def measure_profile(config: TrainConfig, name: str | None = None, repeats: int = REPEATS,
                          lengths: Any = None, tools: Any = None) -> tuple[Profile, dict[str, Any]]:
    """This machine's profile for `config`'s model, engine, trainer and reward (the batch-level timings taken
    `repeats` times each, their responses as long as `lengths` draws them when given: plan/workload.py's
    Workload; a tool-using workflow's calls and tools' seconds as `tools` draws them, default the `lengths` run's:
    plan/tools.py's ToolUse); and the raw timings."""
    from areal_core.engine import EngineTarget, start_engines
    from areal_core.engine.model import load_tokenizer
    from areal_core.rewards import RewardService
    from areal_core.rl.model_cache import resolve_model
    from areal_core.rl.trainer import create_trainer

    _, _, tool_use = tool_model(config, lengths, tools)   # refused before minutes of timings
    if config.engine.torch_threads:   # as areal train sets up its process
        torch.set_num_threads(config.engine.torch_threads)
    model_dir = resolve_model(config.model)
    with tempfile.TemporaryDirectory(prefix="areal-profile-") as scratch:
        async with start_engines(config.engine, EngineTarget(model=model_dir, urls=tuple(config.engine.urls)),
                                 Path(scratch)) as engine:
            generation, raw = await _time_generation(engine, model_dir, config)
            trainer = create_trainer(model_dir, config.trainer, total_steps=100, scratch_dir=Path(scratch) / "trainer")
            try:
                ranks = trainer_ranks(trainer)
                streamed_generation: dict[str, float] = {}
                streamed_training: dict[str, float] = {}
                if config.engine.weight_sync != "disk":   # the run streams its weights: what that costs
                    streamed_generation, streamed_training, raw["stream"] = await measure_stream(trainer, engine,
                                                                                               config)
                # timed as a run steps: what was set up before its steps out of the collector's full passes
                with setup_objects_frozen():
                    training, raw["training_samples"] = await asyncio.to_thread(measure_training, trainer, config,
                                                                               Path(scratch), repeats)
                    generation.update(streamed_generation)
                    training.update(streamed_training)
                    async with RewardService(config.reward) as service:
                        batches = _Batches(engine, load_tokenizer(model_dir), service, config, lengths, tool_use)
                        raw["requests"] = await measure_requests(batches, GenerationCosts(**generation), repeats)
                        shared, raw["shared"] = await measure_sharing(batches, trainer, config, repeats)
                        generation["request_s"] = request_cost(raw["requests"], raw["shared"]["generation_alone_s"])
                        shared.update(shared_generation(raw["requests"], raw["shared"]))
                        # the training costs fitted again with the run's own batch among the samples
                        training.update(fit_training([*raw["training_samples"], run_sample(raw["shared"])], config,
                                                     shares_prompts(trainer, config)))
                        rewards = await measure_rewards(config, service)
            finally:
                trainer.close()
    where = (f"measured by areal plan profile on {time.strftime('%Y-%m-%d')}, {platform.machine()} "
             f"{platform.processor() or platform.node()}, torch {torch.__version__} with {torch.get_num_threads()} "
             f"threads, model {config.model.path}, task {config.task}"
             + (f", response lengths {lengths.source}" if lengths is not None else "")
             + (f", tool calls as in {tool_use.source}" if tool_use is not None else ""))
    sources = {f"{part}.{key}": where for part, values in (("generation", generation), ("training", training),
                                                           ("rewards", rewards), ("shared", shared)) for key in values}
    profile = Profile(name or f"{Path(str(config.model.path)).name}-{platform.node()}", GenerationCosts(**generation),
                      TrainingCosts(**training), RewardCosts(**rewards), sources=sources, reference_gpus=ranks,
                      shared=SharedCosts(**shared))
    return profile, {**raw, "training": training, "rewards": rewards}
