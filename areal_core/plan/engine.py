"""Simulated generation servers on the virtual clock (plan/clock.py): the engine protocol, time from a cost model.

Each `SimulatedServer` batches continuously as SGLang's scheduler does: every decode step adds one token to every
running request and takes

    step seconds = step_s + sequence_s * running + context_token_s * (tokens in their KV caches)
                   + prefill_token_s * (tokens prefilled in this step: new prompts, retracted requests' context)
                   + request_s * (requests that join for the first time: what a request costs beyond its tokens,
                                  its way through the serving stack and the controller)

Requests wait while the server runs `max_running` of them or their context would not fit the KV cache
(`kv_tokens`); a step that would overflow it retracts the newest request (its cache dropped, recomputed when it
runs again). A pause lets the step in progress end; "retract" drops every cache, "in_place" keeps them, "abort"
ends every request. Loading new weights takes `weight_load_s` (from a disk), or `stream_byte_s` a byte when the trainer
broadcasts them over a process group (engine.weight_sync = distributed | delta); each token carries the version it
was made under.
A response is as long as `lengths` draws for it (at most max_new_tokens), exactly max_new_tokens with ignore_eos.
With `calls` (a tool-using workflow: plan/tools.py), a turn it names a call for ends with that call's ids and
finishes "stop", as a real engine stops on the call format's stop string.
The steps between two events (a request arrives or ends, the cache fills, a pause) are computed at once.

`SimulatedEngine` is a cluster of them behind the routing the SGLang client uses (the server with the fewest
requests in flight).
"""
from __future__ import annotations

import asyncio
import functools
import heapq
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from areal_core.engine.protocol import EngineError, GenerateOutput, GenerateRequest, PauseMode, validate_request
from areal_core.engine.weight_sync import Bucket
from areal_core.plan.colocation import SharedHardware

LengthModel = Callable[[str, int, int], int]   # (request id, prompt tokens, max_new_tokens) -> response tokens
CallModel = Callable[[GenerateRequest], "list[int] | None"]   # the ids a turn ends with (a tool call), or None
SIMULATED_TOKEN = 0   # what a simulated response is made of; only its length matters


@dataclass(frozen=True)
class GenerationCosts:
    """A generation server's cost model, in seconds and tokens (see the module docstring)."""

    step_s: float
    sequence_s: float = 0.0
    context_token_s: float = 0.0
    prefill_token_s: float = 0.0
    request_s: float = 0.0
    kv_tokens: int = 1 << 20
    max_running: int = 256
    weight_load_s: float = 0.0
    stream_byte_s: float = 0.0      # a byte of weights broadcast over the weight group to every server, and loaded

    def __post_init__(self) -> None:
        for name in ("step_s", "sequence_s", "context_token_s", "prefill_token_s", "request_s", "weight_load_s",
                     "stream_byte_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"generation cost {name} must be >= 0, got {getattr(self, name)}")
        if self.step_s + self.sequence_s + self.context_token_s <= 0:
            raise ValueError("a decode step must cost something: step_s, sequence_s or context_token_s > 0")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (self.kv_tokens, self.max_running)):
            raise ValueError(f"kv_tokens and max_running must be whole numbers, got {self.kv_tokens!r}, "
                             f"{self.max_running!r}")
        if self.kv_tokens < 1 or self.max_running < 1:
            raise ValueError(f"kv_tokens and max_running must be >= 1, got {self.kv_tokens}, {self.max_running}")

    def step_seconds(self, running: int, context_tokens: int, prefill_tokens: int, new_requests: int = 0) -> float:
        return (self.step_s + self.sequence_s * running + self.context_token_s * context_tokens
                + self.prefill_token_s * prefill_tokens + self.request_s * new_requests)


@dataclass(eq=False)   # identity: a request is itself, whatever it holds
class _Request:
    request: GenerateRequest
    target: int                        # response tokens it will have
    future: asyncio.Future
    generated: int = 0
    versions: list[list[int]] = field(default_factory=list)   # [version, tokens] runs, in order
    cached: bool = False               # its context is in the KV cache
    joined: bool = False               # it has been in a step (request_s paid)
    interruptions: int = 0
    call: list[int] | None = None      # the tool call its last tokens are

    @property
    def context(self) -> int:
        return len(self.request.input_ids) + self.generated

    def add(self, tokens: int, version: int) -> None:
        if self.versions and self.versions[-1][0] == version:
            self.versions[-1][1] += tokens
        else:
            self.versions.append([version, tokens])
        self.generated += tokens


@dataclass
class ServerStats:
    steps: int = 0
    busy_s: float = 0.0               # seconds spent in decode steps
    tokens: int = 0
    prefill_tokens: int = 0
    retractions: int = 0            # requests set back because the KV cache was full
    interruptions: int = 0          # requests whose cache a pause dropped


class SimulatedServer:
    """One generation server on the virtual clock (see the module docstring)."""

    def __init__(self, costs: GenerationCosts, lengths: LengthModel | None = None, version: int = 0,
                 name: str = "sim-0", hardware: SharedHardware | None = None, calls: CallModel | None = None) -> None:
        self.costs, self.lengths, self.version, self.name, self.calls = costs, lengths, version, name, calls
        self.hardware = hardware        # shared with the trainer (plan/colocation.py): steps slow while it works
        if hardware is not None:
            hardware.servers.append(self)
        self._factor = 1.0              # the slowdown the steps in progress were planned at
        self.on_leave: Callable[[], None] | None = None   # told when a request leaves (the engine's routing)
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.paused = False
        self.stats = ServerStats()
        self._wake = asyncio.Event()
        self._stepping = False
        self._step_done = asyncio.Event()
        self._event = asyncio.Event()   # set: the steps planned in bulk end at the step in progress
        self._bulk = (0.0, 0.0)         # (start, planned seconds) of the steps in progress
        self._loop: asyncio.Task | None = None

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.running)

    def start(self) -> "SimulatedServer":
        self._loop = asyncio.get_running_loop().create_task(self._run(), name=f"simulated server {self.name}")
        return self

    async def generate(self, request: GenerateRequest) -> GenerateOutput:
        validate_request(request)
        params = request.sampling_params
        limit = params.max_new_tokens
        target = limit if params.ignore_eos or self.lengths is None else \
            max(1, min(limit, self.lengths(request.rid, len(request.input_ids), limit)))
        call = self.calls(request) if self.calls is not None else None
        if call is not None and len(call) <= limit:
            target = max(target, len(call))   # the turn holds its call whole
        else:
            call = None
        item = _Request(request, target, asyncio.get_running_loop().create_future(), call=call)
        self.waiting.append(item)
        self._wake.set()
        if len(self.running) < self.costs.max_running:   # it may join the batch at the next step
            self._event.set()
        try:
            return await item.future
        except asyncio.CancelledError:   # the caller gave up: the request leaves the server
            self._drop(item)
            raise

    def _drop(self, item: _Request) -> None:
        if item in self.running:
            self.running.remove(item)
            self._event.set()
        elif item in self.waiting:
            self.waiting.remove(item)
        if self.on_leave is not None:
            self.on_leave()

    async def pause(self, mode: PauseMode = "retract") -> None:
        self.paused = True
        await self.end_steps()   # the step in progress ends first, as a real scheduler's does
        if mode == "abort":
            for item in [*self.running, *self.waiting]:
                self._finish(item, "abort")
        elif mode == "retract":
            for item in reversed(self.running):
                self._retract(item, interrupted=True)

    async def resume(self) -> None:
        self.paused = False
        self._wake.set()

    async def update_weights(self, version: int) -> None:
        await self.end_steps()
        await asyncio.sleep(self.costs.weight_load_s)
        self.version = version

    async def end_steps(self) -> None:
        """The steps in progress end: tokens of the steps so far were made with the old weights."""
        if self._stepping:
            self._step_done.clear()
            self._event.set()
            await self._step_done.wait()

    def speed_changed(self) -> None:
        """The hardware's speed changed (the trainer began or ended): steps planned in bulk end at the step in
        progress, the next are planned at the new speed."""
        if self._stepping:
            self._event.set()

    def _decoding(self, busy: bool) -> None:
        if self.hardware is not None:
            self.hardware.decoding(self, busy)

    def in_progress_s(self) -> float:
        """Seconds spent so far in the steps now in progress (not yet in stats.busy_s)."""
        if not self._stepping:
            return 0.0
        started, planned = self._bulk
        return min(asyncio.get_running_loop().time() - started, planned)

    def _retract(self, item: _Request, interrupted: bool = False) -> None:
        self.running.remove(item)
        item.cached = False
        item.interruptions += interrupted
        self.waiting.appendleft(item)
        self.stats.retractions += not interrupted
        self.stats.interruptions += interrupted

    def _finish(self, item: _Request, reason: str) -> None:
        self._drop(item)
        ids = [SIMULATED_TOKEN] * item.generated
        if item.call is not None and item.generated == item.target:
            ids[len(ids) - len(item.call):] = item.call
            reason = "stop"   # on the call format's stop string
        if not item.future.done():
            item.future.set_result(GenerateOutput(
                rid=item.request.rid, output_ids=ids,
                output_logprobs=[-1.0] * item.generated,
                output_versions=_expand(item.versions),
                finish_reason=reason,  # type: ignore[arg-type]
                prompt_tokens=len(item.request.input_ids), num_interruptions=item.interruptions))

    def _admit(self) -> None:
        """Waiting requests join the batch, in order, while the batch and the KV cache have room."""
        used = sum(item.context + 1 for item in self.running)   # each running request's next token too
        while self.waiting and len(self.running) < self.costs.max_running:
            item = self.waiting[0]
            if item.context + 1 > self.costs.kv_tokens:
                self.waiting.popleft()
                item.future.set_exception(EngineError(
                    f"a request of {item.context + 1} tokens does not fit the KV cache of {self.costs.kv_tokens}"))
                continue
            if used + item.context + 1 > self.costs.kv_tokens:
                break
            self.running.append(self.waiting.popleft())
            used += item.context + 1

    async def _run(self) -> None:
        while True:
            if self.paused or not self.in_flight:
                self._decoding(False)
                self._wake.clear()
                await self._wake.wait()
                continue
            self._admit()
            while sum(item.context + 1 for item in self.running) > self.costs.kv_tokens and len(self.running) > 1:
                self._retract(self.running[-1])   # the cache is full: the newest request waits
            if len(self.running) == 1 and self.running[0].context + 1 > self.costs.kv_tokens:
                item = self.running.pop()
                item.future.set_exception(EngineError(
                    f"a request outgrew the KV cache of {self.costs.kv_tokens} tokens on its own"))
            if not self.running:
                self._decoding(False)
                continue
            self._decoding(True)
            await self._step()

    def _seconds(self, steps: int, running: int, context: int, first: float) -> float:
        """Seconds of `steps` decode steps of `running` requests from `context` KV tokens (each step adds one token
        to each), the first also taking `first` seconds more (its prefill and the requests that join, already
        slowed by the shared hardware: `_first_seconds`)."""
        if steps <= 0:
            return 0.0
        costs = self.costs
        return first + self._factor * (steps * (costs.step_s + costs.sequence_s * running)
                                       + costs.context_token_s * (steps * context + running * steps * (steps - 1) // 2))

    def _first_seconds(self, prefill: int, joining: int) -> float:
        """What the first step takes beyond a decode step now: its prefill (slowed as decode steps are) and the work
        of the requests that join (slowed as the rollout path's work is, plan/colocation.py)."""
        hardware = self.hardware
        generation, request = (1.0, 1.0) if hardware is None else (hardware.generation_factor(),
                                                                    hardware.request_factor())
        return generation * self.costs.prefill_token_s * prefill + request * self.costs.request_s * joining

    async def _step(self) -> None:
        """Decode steps until the next event: a request finishes or the KV cache fills (planned), or a request
        arrives, leaves, a pause or a weight load comes (the step in progress ends first). Steps between events are
        computed in bulk: a long generation is a few events, not a sleep per token."""
        batch = list(self.running)
        running, context = len(batch), sum(item.context for item in batch)
        prefill = sum(item.context for item in batch if not item.cached)
        horizon = min(item.target - item.generated for item in batch)
        room = (self.costs.kv_tokens - context) // running   # steps until the cache is full
        horizon = max(1, min(horizon, room))
        self._factor = self.hardware.generation_factor() if self.hardware is not None else 1.0
        first = self._first_seconds(prefill, sum(not item.joined for item in batch))
        started, planned = asyncio.get_running_loop().time(), self._seconds(horizon, running, context, first)
        self._bulk = (started, planned)
        self._stepping = True
        self._event.clear()
        try:
            try:
                await asyncio.wait_for(self._event.wait(), planned)
                elapsed = asyncio.get_running_loop().time() - started
                steps = self._steps_begun(elapsed, horizon, running, context, first)
                await asyncio.sleep(max(0.0, started + self._seconds(steps, running, context, first)
                                        - asyncio.get_running_loop().time()))
            except asyncio.TimeoutError:
                steps = horizon
        finally:
            self._stepping = False
            self._step_done.set()
        self._apply(batch, steps, self._seconds(steps, running, context, first), prefill)

    def _steps_begun(self, elapsed: float, horizon: int, running: int, context: int, first: float) -> int:
        """How many steps had begun `elapsed` seconds in (the one in progress included; at least one)."""
        low, high = 1, horizon
        while low < high:   # the smallest count whose end is at or after `elapsed`
            middle = (low + high) // 2
            if self._seconds(middle, running, context, first) >= elapsed:
                high = middle
            else:
                low = middle + 1
        return low

    def _apply(self, batch: list[_Request], steps: int, seconds: float, prefill: int) -> None:
        self.stats.steps += steps
        self.stats.busy_s += seconds
        self.stats.prefill_tokens += prefill
        still = {id(item) for item in self.running}
        for item in batch:
            if id(item) not in still:   # cancelled by its caller meanwhile
                continue
            item.cached = item.joined = True
            item.add(steps, self.version)
            self.stats.tokens += steps
            if item.generated >= item.target:
                self._finish(item, "length" if item.target == item.request.sampling_params.max_new_tokens
                             else "stop")

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        for item in [*self.running, *self.waiting]:
            if not item.future.done():
                item.future.set_exception(EngineError(f"simulated server {self.name} closed"))


def _expand(runs: list[list[int]]) -> list[int]:
    out: list[int] = []
    for version, count in runs:
        out += [version] * count
    return out


class FewestInFlight:
    """Which of `servers` has the fewest requests in flight, the first of equals: what `min(servers, key=in_flight)`
    picks, found in O(log servers) instead of by looking at every server for every request (at 4,096 servers that
    scan was most of a simulation's time: bench/bench_plan_scale.py).

    A heap of (count, index) holds one live entry per server, `listed[index]`, never above the server's count: a
    server whose count grew is listed again when its entry comes to the top; one whose count fell says so (`left`),
    and its lower entry supersedes the old one (dropped when it comes to the top). So the first live entry whose
    count is the server's own is the least (count, index) of all."""

    def __init__(self, servers: list[SimulatedServer]) -> None:
        self.servers = servers
        self.listed = [server.in_flight for server in servers]
        self.heap = [(count, index) for index, count in enumerate(self.listed)]
        heapq.heapify(self.heap)

    def left(self, index: int) -> None:
        count = self.servers[index].in_flight
        if count < self.listed[index]:
            self.listed[index] = count
            heapq.heappush(self.heap, (count, index))
            if len(self.heap) > 2 * len(self.servers) + 64:   # superseded entries: drop them all at once
                self.heap = [(listed, server) for server, listed in enumerate(self.listed)]
                heapq.heapify(self.heap)

    def pick(self) -> int:
        heap, listed, servers = self.heap, self.listed, self.servers
        while True:
            count, index = heap[0]
            if count != listed[index]:      # superseded by a lower count
                heapq.heappop(heap)
                continue
            now = servers[index].in_flight
            if now == count:
                return index
            listed[index] = now             # grew since it was listed
            heapq.heapreplace(heap, (now, index))


class SimulatedEngine:
    """Simulated generation servers behind one InferenceEngine: each request to the server with the fewest in
    flight, the first of equals (the SGLang client's routing; `FewestInFlight`); pause, resume and weight loads
    reach every server."""

    def __init__(self, servers: int, costs: GenerationCosts, lengths: LengthModel | None = None,
                 model_path: str = "simulated", hardware: SharedHardware | None = None,
                 calls: CallModel | None = None) -> None:
        if servers < 1:
            raise ValueError(f"a simulated engine needs at least one server, got {servers}")
        self.servers = [SimulatedServer(costs, lengths, name=f"sim-{i}", hardware=hardware, calls=calls)
                        for i in range(servers)]
        self.routing = FewestInFlight(self.servers)
        for index, server in enumerate(self.servers):   # a request left it: its count of requests in flight fell
            server.on_leave = functools.partial(self.routing.left, index)
        self.model_path = model_path
        self.version = 0

    def start(self) -> "SimulatedEngine":
        for server in self.servers:
            server.start()
        return self

    def route(self) -> SimulatedServer:
        """The server the next request goes to."""
        return self.servers[self.routing.pick()]

    async def generate(self, request: GenerateRequest) -> GenerateOutput:
        if not request.rid:
            request = GenerateRequest(request.input_ids, request.sampling_params, uuid.uuid4().hex)
        index = self.routing.pick()
        try:
            return await self.servers[index].generate(request)
        finally:   # a request that failed in the server's own checks left it without a word
            self.routing.left(index)

    async def pause(self, mode: PauseMode = "retract") -> None:
        await asyncio.gather(*(server.pause(mode) for server in self.servers))

    async def resume(self) -> None:
        await asyncio.gather(*(server.resume() for server in self.servers))

    async def update_weights(self, path: str, version: int) -> None:
        await asyncio.gather(*(server.update_weights(version) for server in self.servers))
        self.version = version

    # -- WeightGroupEngine (engine/protocol.py): one rank per server; a bucket reaches them all at once, in
    # bytes x stream_byte_s (a broadcast), and the last one moves them to the new version
    async def weight_group_ranks(self) -> int:
        return len(self.servers)

    async def init_weight_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                group_name: str, backend: str, timeout: float) -> None:
        pass

    async def begin_weight_update(self) -> None:
        await asyncio.gather(*(server.end_steps() for server in self.servers))

    async def update_weights_from_distributed(self, bucket: Bucket, version: int | None, group_name: str,
                                              flush_cache: bool = True) -> None:
        await asyncio.sleep(bucket.nbytes * self.servers[0].costs.stream_byte_s)
        if version is not None:
            for server in self.servers:
                server.version = version
            self.version = version

    async def end_weight_update(self) -> None:
        pass

    async def destroy_weight_group(self, group_name: str) -> None:
        pass

    async def health(self) -> bool:
        return True

    async def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "weight_version": self.version}

    def server_stats(self) -> list[dict[str, Any]]:
        """Per server; busy_s counts the steps in progress too (a run's summary is taken while servers still work)."""
        return [{"url": server.name, "in_flight": server.in_flight, "segments": server.stats.steps, "failures": 0,
                 "state": "up", **vars(server.stats), "busy_s": server.stats.busy_s + server.in_progress_s()}
                for server in self.servers]

    async def close(self) -> None:
        await asyncio.gather(*(server.close() for server in self.servers))
