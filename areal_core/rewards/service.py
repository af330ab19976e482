"""The async reward service: the one way rewards are executed, in training, evals and `areal score`.

An async API over interchangeable backends, chosen by name in the config and found in the plugin registry:
`local` (a process pool on this machine with a hard timeout per request, `local.py`), `celery` (Celery
workers on any number of machines, `celery_backend.py`), or one a plugin registers (`register_reward_backends`).

    async with RewardService(RewardServiceConfig(backend="celery")) as service:
        results = await service.score(requests)              # RewardResults, in request order
        async for index, result in service.stream(requests): # as they complete
            ...
        future = await service.submit(request)               # waits for room, returns a Future
        result = await future

Every request gets exactly one RewardResult. A reward that raises, hangs past its timeout or kills
its process gets one with `error` set, so the caller never hangs and never crashes on a reward.

Bounded concurrency: at most `max_in_flight` requests are accepted and unfinished; `submit` waits
for room beyond that (back-pressure for the rollout controller). Request ids are idempotent: a
request whose non-empty `request_id` is already in flight is not run again; its submit returns the
same future. Shutdown: `close()` waits for requests in flight (each is bounded by its timeout),
`close(cancel_pending=True)` cancels their futures and stops the workers at once.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import AsyncIterator, Callable, Iterable, Protocol, runtime_checkable

from areal_core.errors import InputError
from areal_core.rewards.config import RewardServiceConfig, RewardServiceError
from areal_core.types import RewardRequest, RewardResult

Deliver = Callable[[int, RewardResult], None]


@runtime_checkable
class RewardBackend(Protocol):
    """Executes reward requests; the service owns futures, back-pressure and ids.

    `start` receives `deliver(key, result)`, which the backend calls in the event loop's thread exactly
    once per submitted key (a second call for a key is ignored). `submit` must not block.
    """

    name: str

    async def start(self, deliver: Deliver) -> None: ...

    def submit(self, key: int, request: RewardRequest, timeout: float) -> None: ...

    async def close(self) -> None: ...


def make_backend(config: RewardServiceConfig) -> RewardBackend:
    """The backend named by `config.backend`, from the plugin registry."""
    from areal_core.plugins import backends

    return backends("reward").get(config.backend).factory(config)


class RewardService:
    """Async front of a reward backend. Create it, then `await start()` (or `async with`)."""

    def __init__(self, config: RewardServiceConfig | None = None, backend: RewardBackend | None = None) -> None:
        self.config = config or RewardServiceConfig()
        self.backend = backend or make_backend(self.config)
        self._futures: dict[int, tuple[asyncio.Future[RewardResult], str]] = {}
        self._by_request_id: dict[str, int] = {}
        self._keys = itertools.count()
        self._slots: asyncio.Semaphore | None = None
        self._state = "new"

    async def __aenter__(self) -> "RewardService":
        await self.start()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close(cancel_pending=exc_type is not None)

    async def start(self) -> None:
        if self._state != "new":
            raise RewardServiceError(f"the reward service was already started (state: {self._state})")
        self._slots = asyncio.Semaphore(self.config.max_in_flight)
        self._state = "starting"
        try:
            await self.backend.start(self._deliver)
        except BaseException:
            self._state = "closed"
            try:
                await self.backend.close()
            except Exception:
                pass  # the start error is the one to report
            raise
        self._state = "running"

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet finished."""
        return len(self._futures)

    # -- requests -----------------------------------------------------------------------------
    async def submit(self, request: RewardRequest, *, timeout: float | None = None) -> asyncio.Future[RewardResult]:
        """Accept one request, waiting while `max_in_flight` requests are unfinished.

        Returns a future that resolves to its RewardResult. timeout: seconds this request may run
        (default: the configured timeout)."""
        if not isinstance(request, RewardRequest):
            raise InputError(f"reward service: submit expects a RewardRequest, got {type(request).__name__}")
        if timeout is None:
            timeout = self.config.timeout
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InputError(f"reward service: timeout must be a number of seconds > 0, got {timeout!r}")
        self._check_running()
        same = self._same_request(request)
        if same is not None:
            return same
        assert self._slots is not None
        await self._slots.acquire()
        key: int | None = None
        try:
            self._check_running()
            same = self._same_request(request)  # it may have been accepted while we waited
            if same is not None:
                self._slots.release()
                return same
            key = next(self._keys)
            future: asyncio.Future[RewardResult] = asyncio.get_running_loop().create_future()
            self._futures[key] = (future, request.request_id)
            if request.request_id:
                self._by_request_id[request.request_id] = key
            self.backend.submit(key, request, float(timeout))
        except BaseException:
            if key is not None and key in self._futures:
                self._forget(key)
            else:
                self._slots.release()
            raise
        return future

    async def score(self, requests: Iterable[RewardRequest], *, timeout: float | None = None) -> list[RewardResult]:
        """Score every request; results in request order."""
        requests = list(requests)
        results: list[RewardResult | None] = [None] * len(requests)
        async for index, result in self.stream(requests, timeout=timeout):
            results[index] = result
        return results  # type: ignore[return-value]

    async def stream(self, requests: Iterable[RewardRequest], *,
                     timeout: float | None = None) -> AsyncIterator[tuple[int, RewardResult]]:
        """Yield (index in `requests`, result) as results complete, each index exactly once.

        Requests are submitted as room frees up, so any number may be streamed."""
        requests = list(requests)
        finished: asyncio.Queue[tuple[int, asyncio.Future[RewardResult]]] = asyncio.Queue()

        async def feed() -> None:
            for index, request in enumerate(requests):
                future = await self.submit(request, timeout=timeout)
                future.add_done_callback(lambda f, i=index: finished.put_nowait((i, f)))

        feeder = asyncio.create_task(feed(), name="areal-reward-stream-feed")
        try:
            for _ in range(len(requests)):
                getter = asyncio.ensure_future(finished.get())
                waiting = {getter} if feeder.done() else {getter, feeder}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    feeder.result()  # submit failed: raise its error here
                    getter = asyncio.ensure_future(finished.get())
                index, future = await getter
                if future.cancelled():
                    raise RewardServiceError(
                        f"the reward service was closed before request {index} "
                        f"(reward {requests[index].reward!r}) was scored")
                yield index, future.result()
        finally:
            if not feeder.done():
                feeder.cancel()
                try:
                    await feeder
                except (asyncio.CancelledError, Exception):
                    pass

    # -- results ------------------------------------------------------------------------------
    def _deliver(self, key: int, result: RewardResult) -> None:
        entry = self._forget(key)
        if entry is not None and not entry.done():
            entry.set_result(result)

    def _forget(self, key: int) -> asyncio.Future[RewardResult] | None:
        entry = self._futures.pop(key, None)
        if entry is None:
            return None  # delivered already, or cancelled at close: exactly one result per key
        future, request_id = entry
        if request_id and self._by_request_id.get(request_id) == key:
            del self._by_request_id[request_id]
        assert self._slots is not None
        self._slots.release()
        return future

    def _same_request(self, request: RewardRequest) -> asyncio.Future[RewardResult] | None:
        if not request.request_id:
            return None
        key = self._by_request_id.get(request.request_id)
        return None if key is None else self._futures[key][0]

    def _check_running(self) -> None:
        if self._state != "running":
            what = {"new": "not started (use `async with RewardService(...)` or `await start()`)",
                    "starting": "still starting"}.get(self._state, "closed")
            raise RewardServiceError(f"the reward service is {what}")

    # -- shutdown -----------------------------------------------------------------------------
    async def close(self, *, cancel_pending: bool = False, timeout: float | None = None) -> None:
        """Stop accepting requests, then wait for those in flight (at most `timeout` seconds), or cancel
        them at once with cancel_pending=True; then stop the backend's workers."""
        if self._state in ("closing", "closed", "new"):
            self._state = "closed"
            return
        self._state = "closing"
        try:
            pending = [future for future, _ in self._futures.values()]
            if pending and not cancel_pending:
                await asyncio.wait(pending, timeout=timeout)
            for key in list(self._futures):
                future = self._forget(key)
                if future is not None:
                    future.cancel()
        finally:
            self._state = "closed"
            await self.backend.close()
