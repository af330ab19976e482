"""A simulated trainer and reward backend on the virtual clock (plan/clock.py): the production step loop and reward
service drive them; their time comes from cost models.

The trainer implements the TrainerBackend and WeightStreamingTrainer protocols (rl/trainer.py): each phase charges
the seconds its cost model gives for the batch: its tokens (prompt and response of every trained sequence), or for
a measured profile the positions and passes of the real step's plan (rl/trainer.py's step_shape), and the version
goes up by one per update; on hardware shared with generation (plan/colocation.py) a phase stretches while
generation runs. The reward backend implements RewardBackend (rewards/service.py): `workers` score at once, each
request takes a latency drawn from a log-normal (mean, p99), and a share `correct_rate` of responses score 1, all
of a group alike in a share `uniform_groups` of the groups (which carry no gradient: the step loop skips them, so
they change what is trained).
"""
from __future__ import annotations

import asyncio
import random
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from areal_core.engine.weight_sync import Bucket
from areal_core.plan.clock import charge, charge_until
from areal_core.plan.colocation import SharedHardware
from areal_core.rl.config import TrainerConfig
from areal_core.rl.rollout import sequence_tokens
from areal_core.rl.trainer import step_shape
from areal_core.types import RewardRequest, RewardResult, Trajectory
from areal_core.workflows.builtin import lognormal_parameters

if TYPE_CHECKING:
    from areal_core.plan.workload import TrainedLengths


@dataclass(frozen=True)
class TrainingCosts:
    """A trainer's cost model: seconds per token of the batch (prompt + response), per sequence (what a sequence
    costs beyond its tokens) and per micro-batch (a forward/backward pass's own work) for pi_prox's forward pass and
    for the update (forward, backward, optimizer, over every PPO minibatch), per optimizer step and pi_prox's once a
    step, and for writing the weights (`publish`, disk weight sync) and a checkpoint. With `per_position` (a profile
    measured by `areal plan profile`) a token is a position the step's micro-batches compute: the real step's plan,
    padding included, and a prompt's responses packed behind it once when the profiled trainer does so
    (`shared_prompts`: trainer.share_prompts on an sdpa or eager model), as that changes the work as much as the
    tokens do. Streamed over a process group (engine.weight_sync = distributed | delta), an update sends
    `weight_bytes`, a delta after the first `trainable_bytes` (the parameters the optimizer changes: all of them,
    unless frozen as LoRA freezes its base model); what a byte costs is the engine's
    (GenerationCosts.stream_byte_s)."""

    proximal_token_s: float
    update_token_s: float
    optimizer_step_s: float = 0.0
    proximal_sequence_s: float = 0.0
    update_sequence_s: float = 0.0
    publish_s: float = 0.0
    checkpoint_s: float = 0.0
    weight_bytes: int = 0
    trainable_bytes: int | None = None   # None: weight_bytes
    proximal_microbatch_s: float = 0.0
    update_microbatch_s: float = 0.0
    proximal_step_s: float = 0.0          # pi_prox's own work once a step (as optimizer_step_s is the update's)
    per_position: bool = False
    shared_prompts: bool = False

    def __post_init__(self) -> None:
        for name in ("per_position", "shared_prompts"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"training cost {name} must be true or false, got {getattr(self, name)!r}")
        for name, value in vars(self).items():
            if value is not None and value < 0:
                raise ValueError(f"training cost {name} must be >= 0, got {value}")
        if self.trainable_bytes is not None and self.trainable_bytes > self.weight_bytes:
            raise ValueError(f"trainable_bytes ({self.trainable_bytes}) cannot exceed weight_bytes "
                             f"({self.weight_bytes})")

    def streamed_bytes(self, changed_only: bool) -> int:
        """What one update streams: every weight, or after the first delta update the trainable ones."""
        if changed_only and self.trainable_bytes is not None:
            return int(self.trainable_bytes)
        return int(self.weight_bytes)


class SimulatedTrainer:
    """TrainerBackend on the virtual clock: the phases take what `costs` says; weights are empty directories."""

    def __init__(self, costs: TrainingCosts, tokenizer: Any, config: TrainerConfig | None = None,
                 version: int = 0, hardware: SharedHardware | None = None,
                 trained_lengths: TrainedLengths | None = None, ranks: int = 1) -> None:
        if ranks < 1:
            raise ValueError(f"the trainer's ranks must be >= 1, got {ranks}")
        self.costs, self.tokenizer, self.config, self.version = costs, tokenizer, config or TrainerConfig(), version
        self.hardware = hardware   # shared with generation: the phases stretch while it runs
        # a run's trained sequences' lengths (plan/workload.py's TrainedLengths): which groups carry a gradient follows
        # their prompts, which the simulated rewards do not know, so the trained sequences take the run's lengths
        self.trained_lengths = trained_lengths
        self.ranks = ranks   # data-parallel ranks: each runs its share of a minibatch's micro-batches

    def _work(self, seconds: float) -> None:
        if self.hardware is None:
            charge(seconds)
        else:
            charge_until(self.hardware.train(seconds))

    def prepare(self, trajectories: Sequence[Trajectory], temperature: float, top_p: float = 1.0,
                top_k: int = -1) -> tuple[int, int, int]:
        """(tokens, sequences, passes) of the batch: what its phases cost. Tokens are the positions the real step's
        micro-batches compute where the costs count those (per_position; a prompt packed once before its answers
        where both the profiled trainer and the planned config pack them), else its prompt and response tokens.
        Passes: the micro-batches each rank runs. With a run's trained lengths the sequences have those (trained_like)."""
        costs = self.costs
        if self.trained_lengths is not None:
            trajectories = trained_like(trajectories, self.trained_lengths)
        if costs.per_position or costs.proximal_microbatch_s or costs.update_microbatch_s:
            positions, microbatches = step_shape(trajectories, self.config,
                                                 costs.shared_prompts and self.config.share_prompts, self.version,
                                                 self.ranks)
        else:
            positions, microbatches = 0, 0
        tokens = positions if costs.per_position else sequence_tokens(trajectories)
        return tokens, len(trajectories), microbatches

    def recompute_proximal(self, batch: tuple[int, int, int]) -> None:
        tokens, sequences, microbatches = batch
        self._work(tokens * self.costs.proximal_token_s + sequences * self.costs.proximal_sequence_s
                   + microbatches * self.costs.proximal_microbatch_s + self.costs.proximal_step_s)

    def ppo_update(self, batch: tuple[int, int, int], advantages: Any) -> dict[str, float]:
        tokens, sequences, microbatches = batch
        minibatches = self.config.ppo_minibatches
        self._work(tokens * self.costs.update_token_s + sequences * self.costs.update_sequence_s
                   + microbatches * self.costs.update_microbatch_s + minibatches * self.costs.optimizer_step_s)
        self.version += 1
        # what a real step reports of its shape: the positions its micro-batches computed (per_position costs)
        return {"loss": 0.0, **({"positions": tokens} if self.costs.per_position else {})}

    # -- WeightStreamingTrainer (rl/trainer.py): the bytes are the profile's; the engine charges their time -------
    def stage_weights(self, cap_bytes: int, changed_only: bool = False) -> list[Bucket]:
        """The update's bytes in buckets of at most `cap_bytes`, as a real trainer stages its tensors."""
        total, cap = self.costs.streamed_bytes(changed_only), max(1, cap_bytes)
        sizes = [min(cap, total - start) for start in range(0, total, cap)]
        return [Bucket([f"simulated.{index}"], ["uint8"], [[size]]) for index, size in enumerate(sizes)]

    def join_weight_group(self, init_method: str, world_size: int, group_name: str, backend: str,
                          timeout: float) -> None:
        pass

    def send_weight_bucket(self, index: int) -> None:
        pass   # the broadcast's time is the receiving engine's (SimulatedEngine.update_weights_from_distributed)

    def leave_weight_group(self) -> None:
        pass

    def publish(self, directory: str | Path) -> Path:
        charge(self.costs.publish_s)
        Path(directory).mkdir(parents=True, exist_ok=True)
        return Path(directory)

    def save_checkpoint(self, directory: str | Path) -> Path:
        charge(self.costs.checkpoint_s)
        Path(directory).mkdir(parents=True, exist_ok=True)
        return Path(directory)

    def load_checkpoint(self, directory: str | Path) -> int:
        return self.version

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class SequenceShape:
    """What a trainer's plan reads of a trajectory: its prompt's and response's tokens."""

    prompt_token_ids: list[int]
    output_token_ids: list[int]


def trained_like(trajectories: Sequence[Trajectory], lengths: TrainedLengths) -> list[SequenceShape]:
    """The trajectories with the lengths of a run's trained sequences, by rank: the groups ordered by prompt length
    take the run's prompt lengths at their quantiles (one prompt a group, its own tokens), the sequences ordered by
    response length the run's response lengths (ties in a fixed order by id), none longer than the longest response
    of these (a planned run with a lower max_new_tokens than the run's cuts them). The order of the simulated lengths,
    so answers to one prompt that ran alike stay alike; the spread of the run's, so padding and packing are the run's.
    Prompt and response lengths are matched apart: how the run's went together is not kept."""
    n = len(trajectories)
    longest = max((len(t.output_token_ids) for t in trajectories), default=1)
    members: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        members.setdefault(t.group_id, []).append(i)
    groups = sorted(members, key=lambda g: (len(trajectories[members[g][0]].prompt_token_ids), zlib.crc32(g.encode())))
    prompts, before = {}, 0
    for index, group in enumerate(groups):
        size = len(members[group])
        prompts[group] = [index] * max(1, lengths.prompts.draw((before + size / 2) / n))
        before += size
    ranked = sorted(range(n), key=lambda i: (len(trajectories[i].output_token_ids),
                                             zlib.crc32(trajectories[i].trajectory_id.encode())))
    responses = [0] * n
    for rank, i in enumerate(ranked):
        responses[i] = max(1, min(longest, lengths.responses.draw((rank + 0.5) / n)))
    return [SequenceShape(prompts[t.group_id], [0] * responses[i]) for i, t in enumerate(trajectories)]


@dataclass(frozen=True)
class RewardCosts:
    """A reward backend's cost model: latency per request, log-normal with this mean and p99 (fixed when p99 is the
    mean), `workers` at once, a share `correct_rate` of responses scored 1; in a share `uniform_groups` of the
    groups every response scores alike (all 1 with probability correct_rate). Draws depend on the request id
    (`<group>.<index>`, as the rollout controller names them) and the seed."""

    mean_s: float = 0.0
    p99_s: float | None = None
    workers: int = 64
    correct_rate: float = 0.5
    uniform_groups: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mean_s < 0 or (self.p99_s is not None and self.p99_s < self.mean_s):
            raise ValueError(f"reward latency needs 0 <= mean_s <= p99_s, got mean_s {self.mean_s}, p99_s {self.p99_s}")
        if self.workers < 1:
            raise ValueError(f"reward workers must be >= 1, got {self.workers}")
        for name in ("correct_rate", "uniform_groups"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.mean_s > 0 and self.p99_s is not None:
            lognormal_parameters(self.mean_s, self.p99_s)   # a p99 no log-normal with this mean has: refused now

    def draw(self, request_id: str) -> tuple[float, bool]:
        """(latency seconds, correct) of the request."""
        rng = random.Random(zlib.crc32(request_id.encode()) ^ self.seed)
        correct = rng.random() < self.correct_rate
        if self.uniform_groups:
            group = random.Random(zlib.crc32(request_id.split(".")[0].encode()) ^ self.seed)
            if group.random() < self.uniform_groups:
                correct = group.random() < self.correct_rate
        if self.mean_s == 0 or self.p99_s is None or self.p99_s == self.mean_s:
            return self.mean_s, correct
        mu, sigma = lognormal_parameters(self.mean_s, self.p99_s)
        return rng.lognormvariate(mu, sigma), correct


class SimulatedRewards:
    """RewardBackend on the virtual clock: requests wait for one of `workers`, then take their drawn latency (a
    latency past the request's timeout is a timeout error, as the process pool reports it)."""

    name = "simulated"

    def __init__(self, costs: RewardCosts) -> None:
        self.costs = costs
        self.queue: deque[tuple[int, RewardRequest, float]] = deque()
        self.busy = 0
        self._deliver: Any = None
        self._timers: dict[int, asyncio.TimerHandle] = {}

    async def start(self, deliver: Any) -> None:
        self._deliver = deliver

    def submit(self, key: int, request: RewardRequest, timeout: float) -> None:
        self.queue.append((key, request, timeout))
        self._dispatch()

    def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while self.queue and self.busy < self.costs.workers:
            key, request, timeout = self.queue.popleft()
            latency, correct = self.costs.draw(request.request_id or str(key))
            if latency > timeout:
                result = RewardResult.failure(f"reward timed out after {timeout:g}s", timed_out=True)
                latency = timeout
            else:
                result = RewardResult(score=float(correct), correct=correct)
            self.busy += 1
            self._timers[key] = loop.call_later(latency, self._done, key, result)

    def _done(self, key: int, result: RewardResult) -> None:
        self._timers.pop(key, None)
        self.busy -= 1
        self._deliver(key, result)
        self._dispatch()

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.queue.clear()
