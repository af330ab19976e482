"""Generation and training on the same hardware: each slows the other while both work.

On a cluster the planner splits the GPUs, so generation servers and the trainer never share a device. On one CPU
machine (the local engine in the trainer's process, two cores for an engine thread, a trainer thread and the
controller) or a GPU shared by both, they do: measured by `areal plan profile` (each phase timed alone and while
the other runs), a decode step takes `generation_slowdown` times its cost while the trainer works, a request's work on
the rollout path (request_s: rendering, tokenizing, scoring, in the interpreter) `request_slowdown` times its own, and
the trainer `training_slowdown` times its own while generation runs. Processor sharing, piecewise:

    trainer progress per second = 1 / training_slowdown   while any server decodes, else 1
    decode step seconds         = cost × generation_slowdown while the trainer works, else cost
    a joining request's seconds = request_s × request_slowdown while the trainer works, else request_s

The two generation factors differ on one CPU: a decode step is mostly torch, which runs beside the trainer's thread,
while a request's work is Python that waits for the interpreter lock the trainer's thread holds between its kernels
(measured on the CPU demo's batch: decode steps 1.21x, the rest of the rollout path 1.52-1.59x). A profile without
request_slowdown (before it was measured) slows both by generation_slowdown.

A synchronous run never overlaps the two (its engine idles while the trainer works), so it pays neither; an
asynchronous one pays both whenever they overlap, which is what the CPU demo's async/sync ratio depends on.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SharedCosts:
    """How much generation and training slow each other when they share hardware (1.0: not at all)."""

    generation_slowdown: float = 1.0
    training_slowdown: float = 1.0
    request_slowdown: float | None = None   # None (a profile measured before it): as generation_slowdown

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if name == "request_slowdown" and value is None:   # a profile measured before it
                continue
            if not isinstance(value, (int, float)) or not value >= 1.0:
                raise ValueError(f"{name} must be >= 1 (a share of the hardware is never faster), got {value}")

    @property
    def effective_request_slowdown(self) -> float:
        """A request's work's slowdown on the rollout path: request_slowdown, or in a profile measured before it,
        generation_slowdown."""
        return self.generation_slowdown if self.request_slowdown is None else self.request_slowdown


class SharedHardware:
    """What the servers and the trainer of a colocated simulation share: who works now, and the slowdowns."""

    def __init__(self, costs: SharedCosts) -> None:
        self.costs = costs
        self.training = False
        self.servers: list[Any] = []            # SimulatedServers: each says when it starts and stops decoding
        self._decoding: set[int] = set()
        self._generation_changed = asyncio.Event()

    @property
    def generating(self) -> bool:
        return bool(self._decoding)

    def generation_factor(self) -> float:
        """A decode step's slowdown now."""
        return self.costs.generation_slowdown if self.training else 1.0

    def request_factor(self) -> float:
        """The slowdown of a request's work on the rollout path now."""
        return self.costs.effective_request_slowdown if self.training else 1.0

    def decoding(self, server: Any, busy: bool) -> None:
        """A server began (busy) or ended its decode steps."""
        before = self.generating
        (self._decoding.add if busy else self._decoding.discard)(id(server))
        if self.generating != before:
            self._generation_changed.set()

    async def train(self, seconds: float) -> None:
        """`seconds` of the trainer's work alone, stretched by training_slowdown while generation runs."""
        loop = asyncio.get_running_loop()
        self._set_training(True)
        try:
            remaining = seconds
            while remaining > 0:
                rate = 1 / self.costs.training_slowdown if self.generating else 1.0
                started = loop.time()
                self._generation_changed.clear()
                try:
                    await asyncio.wait_for(self._generation_changed.wait(), remaining / rate)
                except asyncio.TimeoutError:
                    return
                remaining -= (loop.time() - started) * rate
        finally:
            self._set_training(False)

    def _set_training(self, training: bool) -> None:
        self.training = training
        for server in self.servers:   # the steps planned at the old speed end; the next are planned at the new
            server.speed_changed()
