"""The rollout controller: streams prompts to the generation engine, scores the responses on the reward
service and fills the replay buffer (`ReplayBuffer`) the trainer takes its batches from.

    task samples ──► [staleness gate] ──► workflow episodes ×n ──► reward service ──► replay buffer ──► trainer
                          ▲                      ▲                                                    │
                          └──── policy version ──┴────────── pause / update weights / continue ◄──────┘

An episode is what the task's workflow makes of one sample (`areal_core.workflows`): one generation by default,
or several turns with tool results or feedback between them (one token sequence with a loss mask). Prompts
(groups of episodes) are admitted one at a time under the staleness rule (`algorithms.may_submit`): with policy
version i, batch size B and bound eta, prompt N may start only while floor((N-1)/B) <= i + eta. Each
prompt is sampled n times (a group); a finished group enters the buffer. Responses whose reward errored
(verifier crash or timeout) are dropped from their group and counted; the rest of the group stays.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Sequence

from areal_core.engine.protocol import InferenceEngine, SamplingParams
from areal_core.errors import ArealError
from areal_core.rl.algorithms import may_submit
from areal_core.rl.config import RolloutConfig
from areal_core.tasks import Task
from areal_core.types import Trajectory
from areal_core.workflows import EpisodeRunner, choose_workflow, episode_trajectory

log = logging.getLogger(__name__)


class RolloutInterrupted(ArealError):
    """A rollout task was ended by a BaseException that is not an Exception (an interrupt, a test's timeout)."""


@dataclass
class Group:
    group_id: str
    sample_id: str
    trajectories: list[Trajectory]
    dropped: int = 0
    submitted_at_version: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "sample_id": self.sample_id, "dropped": self.dropped,
                "submitted_at_version": self.submitted_at_version,
                "trajectories": [t.to_dict() for t in self.trajectories]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Group":
        return cls(data["group_id"], data["sample_id"], [Trajectory.from_dict(t) for t in data["trajectories"]],
                   data["dropped"], data["submitted_at_version"])


class ReplayBuffer:
    """Finished groups by prompt number, until the trainer takes them as a batch.

    Batch k is prompts [kB, (k+1)B): consuming batches in admission order is what makes the staleness bound
    strict (a prompt of batch k started at version >= k - eta), while later batches keep generating during
    the wait for a straggler."""

    def __init__(self, groups: dict[int, Group] | None = None) -> None:
        self.groups: dict[int, Group] = dict(groups or {})
        self._changed = asyncio.Condition()

    async def put(self, number: int, group: Group) -> None:
        async with self._changed:
            self.groups[number] = group
            self._changed.notify_all()

    async def take(self, numbers: Sequence[int]) -> list[Group]:
        """The groups of prompts `numbers`, removed from the buffer, once all of them have finished."""
        async with self._changed:
            await self._changed.wait_for(lambda: all(n in self.groups for n in numbers))
            return [self.groups.pop(n) for n in numbers]

    def __contains__(self, number: object) -> bool:
        return number in self.groups

    def __len__(self) -> int:
        return len(self.groups)


class RolloutController:
    def __init__(self, task: Task, engine: InferenceEngine, reward_service: Any, tokenizer: Any,
                 config: RolloutConfig, on_trajectory: Callable[[Trajectory], None] | None = None,
                 start_prompt: int = 0, reward_options: dict[str, Any] | None = None) -> None:
        self.task = task
        self.engine = engine
        self.rewards = reward_service
        self.tokenizer = tokenizer
        self.config = config
        self.on_trajectory = on_trajectory
        from areal_core.rewards.registry import graded_options

        # Training grades in the task's train mode (strict unless the spec says otherwise): what the
        # prompt asked for, or nothing; rewarding the format is part of the task.
        self.reward_options, self.reward_mode = graded_options(
            task.spec.reward.name, task.spec.reward.options, task.spec.reward.mode_for("train"), reward_options)
        self.workflow = choose_workflow(task, config.workflow_options, config.workflow)
        self.episodes = EpisodeRunner(task, engine, tokenizer, reward_service, workflow=self.workflow,
                                      reward_options=self.reward_options, max_new_tokens=config.max_new_tokens)
        self.version = 0
        self.submitted = start_prompt
        self.replay_buffer = ReplayBuffer()
        self.batches_taken = start_prompt // config.batch_size
        self.consumed = start_prompt  # the next prompt number a batch takes (or, dynamic sampling, looks at)
        self.discarded = 0            # dynamic sampling: uniform groups dropped (their slots freed for others)
        self.last_batch_prompts = 0   # how many prompts the last batch used up
        self.in_flight: set[asyncio.Task] = set()
        self.dropped = Counter()
        self._version_changed = asyncio.Condition()
        self._hold = asyncio.Event()
        self._hold.set()  # set = admission open
        self._runner: asyncio.Task | None = None
        self._stopping = False
        self.fatal: str | None = None  # what ended a rollout task abnormally (not an Exception): the run stops
        self._samples = task.samples()
        self._order: list[int] = []
        self._order_epoch = -1
        self._redo: list[int] = []  # admitted before a restart but never finished: generated again first
        self.last_failure: str | None = None  # the newest rollout that failed, for the error that stops a run

    def use_tools(self, tools: dict[str, Any]) -> None:
        """Run the workflow's tools on other backends (`areal plan`'s simulated tools: plan/tools.py): the same
        workflow, its calls and limits, each tool's function replaced; every tool the workflow calls is given."""
        missing = sorted(set(self.workflow.tools) - set(tools))
        if missing:
            raise ValueError(f"use_tools: no backend for {', '.join(missing)}")
        self.workflow = dataclasses.replace(self.workflow, tools={n: tools[n] for n in self.workflow.tools})
        self.episodes.workflow = self.workflow

    # -- checkpointing ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs: the data position, the finished groups not yet trained on, and
        which admitted prompts were still generating (they are generated again after a restart).
        Taken between two awaits, so it is consistent."""
        first = self.consumed
        return {"version": self.version, "submitted": self.submitted, "batches_taken": self.batches_taken,
                "consumed": self.consumed, "discarded": self.discarded,
                "finished": {str(n): g.to_dict() for n, g in self.replay_buffer.groups.items()},
                "unfinished": sorted(set(range(first, self.submitted)) - set(self.replay_buffer.groups)
                                     | set(self._redo)),
                "dropped": dict(self.dropped)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._runner is not None:
            raise RuntimeError("load_state_dict must be called before start()")
        self.version = state["version"]
        self.submitted = state["submitted"]
        self.batches_taken = state["batches_taken"]
        self.consumed = state.get("consumed", self.batches_taken * self.config.batch_size)
        self.discarded = state.get("discarded", 0)
        self.replay_buffer = ReplayBuffer({int(n): Group.from_dict(g) for n, g in state["finished"].items()})
        self._redo = list(state["unfinished"])
        self.dropped = Counter(state["dropped"])

    # -- policy version / weight updates -------------------------------------------------------
    async def set_version(self, version: int) -> None:
        async with self._version_changed:
            self.version = version
            self._version_changed.notify_all()

    async def update_weights(self, path: str, version: int) -> float:
        """Load new weights from the directory `path` into the engine and move to `version`; returns seconds
        generation was held."""
        return await self.hold_for_update(lambda: self.engine.update_weights(path, version), version)

    async def hold_for_update(self, load: Callable[[], Awaitable[None]], version: int) -> float:
        """Hold generation (interrupting it, or waiting for what is in flight: `weight_update`), run `load`, which
        moves the engine to new weights, continue at `version`; returns the seconds generation was held."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self.config.weight_update == "interrupt":
            await self.engine.pause("retract")
            try:
                await load()
            finally:
                await self.engine.resume()
        else:
            self._hold.clear()
            try:
                while self.in_flight:
                    await asyncio.wait(set(self.in_flight))
                await load()
            finally:
                self._hold.set()
        await self.set_version(version)
        return loop.time() - started

    # -- running -------------------------------------------------------------------------------
    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="rollout-controller")

    async def stop(self) -> None:
        self._stopping = True
        if self._runner is not None:
            self._runner.cancel()
        for task in list(self.in_flight):
            task.cancel()
        await asyncio.gather(*([self._runner] if self._runner else []), *self.in_flight, return_exceptions=True)

    def _sample_order(self, epoch: int) -> list[int]:
        if self._order_epoch != epoch:
            order = list(range(len(self._samples)))
            random.Random(f"{self.config.seed}:{epoch}").shuffle(order)
            self._order, self._order_epoch = order, epoch
        return self._order

    def sample_for(self, prompt_number: int) -> dict[str, Any]:
        """The sample of the n-th prompt (0-based): a fixed shuffled order, epoch after epoch."""
        epoch, position = divmod(prompt_number, len(self._samples))
        return self._samples[self._sample_order(epoch)[position]]

    async def _run(self) -> None:
        slots = asyncio.Semaphore(self.config.max_concurrent_prompts)
        while True:
            async with self._version_changed:
                await self._version_changed.wait_for(  # prompts to redo were admitted before: no gate
                    lambda: self._redo or may_submit(self.submitted - self.discarded, self.config.batch_size,
                                                     self.version, self.config.max_staleness))
            await self._hold.wait()
            await slots.acquire()
            if self._redo:
                number = self._redo.pop(0)
            else:
                number = self.submitted
                self.submitted += 1
            task = asyncio.create_task(self._rollout_group_or_failure(number, self.version))
            self.in_flight.add(task)

            def done(t: asyncio.Task) -> None:
                self.in_flight.discard(t)
                slots.release()

            task.add_done_callback(done)

    async def _rollout_group_or_failure(self, number: int, version: int) -> None:
        """Roll out prompt `number`; when that fails (a malformed row, a request every server rejects, no server
        left), its group still finishes, empty, with the reason counted: the batch waiting for it must not
        wait forever, and the run sees the failure in its metrics (a batch that is all failures stops it)."""
        try:
            await self._rollout_group(number, version)
        except Exception as exc:  # noqa: BLE001 - any failure of one prompt
            await self._failed(number, version, exc)
        except BaseException as exc:
            if self._stopping:
                raise
            # Only stop() cancels rollouts. Anything else that ends this task (a cancellation from elsewhere, an
            # interrupt, a test's timeout) would leave its batch waiting forever: the group finishes empty, and
            # anything but a cancellation stops the run where it waits for its next batch.
            await self._failed(number, version, exc)
            if not isinstance(exc, asyncio.CancelledError):
                self.fatal = f"prompt {number}: {type(exc).__name__}: {exc}"

    async def _failed(self, number: int, version: int, exc: BaseException) -> None:
        """Finish prompt `number`'s group empty, the reason counted and logged."""
        log.error("rollout of prompt %d failed", number, exc_info=exc)
        self.last_failure = f"prompt {number}: {type(exc).__name__}: {exc}"
        self.dropped[f"rollout failed: {type(exc).__name__}"] += self.config.group_size
        try:
            sample_id = str(self.sample_for(number)["id"])
        except Exception:  # noqa: BLE001 - what failed may be this very lookup
            sample_id = ""
        await self._finished(number, Group(f"p{number}", sample_id, [], self.config.group_size, version))

    async def _rollout_group(self, number: int, version: int) -> None:
        """The group of prompt `number`: `group_size` episodes of the task's workflow, each scored as it ends;
        an episode whose reward errored (verifier or workflow failure) or whose generation was aborted is dropped
        and its reason counted."""
        sample = self.sample_for(number)
        group_id = f"p{number}"
        episodes = await asyncio.gather(*(self.episodes.run(sample, self._sampling(number, i), f"{group_id}.{i}")
                                          for i in range(self.config.group_size)))
        trajectories, dropped = [], 0
        for i, episode in enumerate(episodes):
            error = episode.reward.error if episode.reward is not None else None
            if error is not None or episode.finish_reason == "abort":
                dropped += 1
                self.dropped[error or "aborted"] += 1
                continue
            trajectory = episode_trajectory(episode, trajectory_id=f"{group_id}.{i}", task=self.task.name,
                                            sample_id=str(sample["id"]), group_id=group_id, workflow=self.workflow.name)
            trajectories.append(trajectory)
            if self.on_trajectory:
                self.on_trajectory(trajectory)
        await self._finished(number, Group(group_id, str(sample["id"]), trajectories, dropped, version))

    async def _finished(self, number: int, group: Group) -> None:
        """Put a finished group in the buffer; with dynamic sampling a group without signal (uniform, or empty:
        every rollout failed) frees its slot under the staleness gate at once, for another prompt."""
        if self.config.dynamic_sampling and is_uniform(group):
            await self._free_slot()
        await self.replay_buffer.put(number, group)

    async def _free_slot(self) -> None:
        async with self._version_changed:  # the gate re-checks
            self.discarded += 1
            self._version_changed.notify_all()

    def _sampling(self, number: int, index: int) -> SamplingParams:
        return SamplingParams(max_new_tokens=self.config.max_new_tokens, temperature=self.config.temperature,
                              top_p=self.config.top_p, top_k=self.config.top_k, seed=self.config.seed * 1_000_003 + number * 1009 + index)

    async def next_batch(self) -> list[Group]:
        """The next batch: the B groups of the next B prompts in admission order, once all have finished; with
        dynamic sampling, the next B groups with a signal (see RolloutConfig.dynamic_sampling)."""
        size = self.config.batch_size
        self._check_fatal()
        if self.config.dynamic_sampling:
            batch = await self._informative_batch()
        else:
            batch = await self.replay_buffer.take(range(self.consumed, self.consumed + size))
            self.consumed += size
            self.last_batch_prompts = size
        self.batches_taken += 1
        self._check_fatal()
        return batch

    def _check_fatal(self) -> None:
        if self.fatal is not None:
            raise RolloutInterrupted(f"a rollout was ended by something other than an error of its own ({self.fatal}); "
                                     "the run stops")

    async def _informative_batch(self) -> list[Group]:
        """Groups in admission order, uniform ones set aside, until B have a signal or the batch has used up
        dynamic_sampling_max_prompts prompts (then topped up with the uniform ones). A group older than the
        staleness bound allows (possible once a batch ended short) is dropped and counted."""
        size = self.config.batch_size
        limit = self.config.dynamic_sampling_max_prompts or 4 * size
        informative: list[Group] = []
        uniform: list[Group] = []
        looked = 0
        while len(informative) < size and looked < limit:
            [group] = await self.replay_buffer.take([self.consumed])
            self.consumed += 1
            looked += 1
            if self.version - group.submitted_at_version > self.config.max_staleness:
                self.dropped["older than max_staleness (dynamic sampling)"] += len(group.trajectories)
                if not is_uniform(group):  # (a uniform one freed its slot when it finished)
                    await self._free_slot()
            elif is_uniform(group):
                uniform.append(group)
            else:
                informative.append(group)
        self.last_batch_prompts = looked
        return informative + uniform[: size - len(informative)]


def is_uniform(group: Group) -> bool:
    """All responses of the group scored the same (or fewer than two survived): no learning signal."""
    return len({t.reward.score for t in group.trajectories}) <= 1


def skips_uniform_groups(config: Any) -> bool:
    """Whether the step loop of `config` (a TrainConfig) trains only a batch's mixed groups: rollout.skip_uniform_groups
    and no KL term (the KL term has a gradient on every group)."""
    return bool(config.rollout.skip_uniform_groups and config.trainer.kl_coef == 0)


def sequence_tokens(trajectories: Iterable[Trajectory]) -> int:
    """Prompt and response tokens of the trajectories: what a trainer's forward pass reads of them, before padding."""
    return sum(len(t.prompt_token_ids) + len(t.output_token_ids) for t in trajectories)


def trained_groups(groups: Sequence[Group], skip_uniform: bool) -> list[Group]:
    """The groups a step trains on: with skip_uniform (rollout.skip_uniform_groups and no KL term) those with a
    learning signal, unless none has one; else all of them."""
    informative = [g for g in groups if not is_uniform(g)] if skip_uniform else []
    return informative or list(groups)


def staleness_histogram(trajectories: Sequence[Trajectory], version: int) -> dict[int, int]:
    """How many versions behind the trainer each trajectory's oldest token is."""
    counts = Counter(version - min(t.policy_versions) if t.policy_versions else 0 for t in trajectories)
    return dict(sorted(counts.items()))
