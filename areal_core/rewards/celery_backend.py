"""The `celery` reward backend: batches of requests sent as Celery tasks to `areal worker` processes.

Requests are grouped by queue (config.routes) and timeout into batches of `batch_size`, or fewer when
`batch_wait` passes first. Each batch is one `areal.score_batch` task, published and then awaited in
a thread of the pool named "areal-celery-batch" (Celery's client API blocks); its results come back
to the event loop, each as soon as the worker has saved it (Redis result backend), not when the whole
batch is done. Whatever goes wrong on the way -- the broker is down, no worker answers within
`result_timeout`, the worker fails the task -- each request of the batch gets an error result that
says so, and the caller never hangs.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any, Callable

from areal_core.rewards.celery_app import (
    TASK_NAME,
    partial_results,
    check_broker,
    make_celery_app,
    workers_by_queue,
)
from areal_core.rewards.config import (
    RewardServiceConfig,
    RewardServiceError,
    safe_url,
)
from areal_core.rewards.service import Deliver
from areal_core.types import RewardRequest, RewardResult

# A waiting thread looks at the close flag this often, and at the results saved so far of its batch
# (Redis result backend) this often.
_WAIT_SLICE_S = 1.0
_STREAM_SLICE_S = 0.05


class CeleryBackend:
    """Scores requests on Celery workers (`areal worker`) through a broker."""

    name = "celery"

    def __init__(self, config: RewardServiceConfig) -> None:
        self.config = config
        self.app: Any = None
        self.batches_sent = 0
        self._pending: dict[tuple[str, float], list[tuple[int, RewardRequest]]] = {}
        self._timers: dict[tuple[str, float], asyncio.TimerHandle] = {}
        self._running: set[asyncio.Future[list[RewardResult]]] = set()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: Deliver | None = None

    @property
    def where(self) -> str:
        return safe_url(self.config.broker_url)

    async def start(self, deliver: Deliver) -> None:
        """Connect, and check that the broker answers and (require_workers) a worker serves each queue."""
        self._loop = asyncio.get_running_loop()
        self._deliver = deliver
        config = self.config
        self.app = make_celery_app(config.broker_url, config.resolved_result_backend(),
                                   connect_timeout=config.connect_timeout)
        limit = 3 * config.connect_timeout + 5
        try:
            await asyncio.wait_for(asyncio.to_thread(check_broker, self.app, config.connect_timeout), limit)
        except asyncio.TimeoutError:
            raise RewardServiceError(f"the Celery broker at {self.where} did not answer within {limit:g}s") from None
        if config.require_workers:
            served = await asyncio.wait_for(asyncio.to_thread(workers_by_queue, self.app, 1.0), limit)
            missing = [queue for queue in config.queues() if queue not in served]
            if missing:
                raise RewardServiceError(
                    f"no Celery worker serves queue {', '.join(map(repr, missing))} at {self.where}; start one "
                    f"with `areal worker --broker {self.where} --queues {','.join(missing)}`")
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.max_batches_in_flight, thread_name_prefix="areal-celery-batch")

    # -- batching (event loop thread) -------------------------------------------------------
    def submit(self, key: int, request: RewardRequest, timeout: float) -> None:
        if self._closing or self._executor is None:
            raise RewardServiceError("the Celery reward backend is closed")
        group = (self.config.queue_for(request.reward), timeout)
        batch = self._pending.setdefault(group, [])
        batch.append((key, request))
        if len(batch) >= self.config.batch_size:
            self._flush(group)
        elif group not in self._timers:
            assert self._loop is not None
            self._timers[group] = self._loop.call_later(self.config.batch_wait, self._flush, group)

    def _flush(self, group: tuple[str, float]) -> None:
        timer = self._timers.pop(group, None)
        if timer is not None:
            timer.cancel()
        batch = self._pending.pop(group, [])
        if not batch or self._executor is None:
            return
        assert self._loop is not None
        queue, timeout = group
        keys = [key for key, _ in batch]
        loop, deliver = self._loop, self._deliver

        def early(index: int, result: RewardResult) -> None:  # an "areal-celery-batch" thread
            try:
                loop.call_soon_threadsafe(deliver, keys[index], result)
            except RuntimeError:
                pass  # the event loop is closed: nobody is waiting any more

        future = self._loop.run_in_executor(self._executor, self._run_batch, queue, timeout,
                                            [request for _, request in batch], early)
        self._running.add(future)
        future.add_done_callback(lambda f: self._finish(f, keys))
        self.batches_sent += 1

    def _finish(self, future: asyncio.Future[list[RewardResult]], keys: list[int]) -> None:
        self._running.discard(future)
        if future.cancelled():
            return  # closing: the service has cancelled these requests already
        error = future.exception()
        if error is not None:
            results = [RewardResult.failure(f"the Celery reward backend failed: {type(error).__name__}: {error}")] * len(keys)
        else:
            results = future.result()
        assert self._deliver is not None
        for key, result in zip(keys, results):
            self._deliver(key, result)

    # -- one batch (an "areal-celery-batch" thread) ------------------------------------------
    def _run_batch(self, queue: str, timeout: float, requests: list[RewardRequest],
                   early: Callable[[int, RewardResult], None] | None = None) -> list[RewardResult]:
        """Send one batch and wait for its results; meanwhile hand out (`early`) those the worker has saved."""
        from celery.exceptions import TimeoutError as CeleryTimeout

        def failed(message: str) -> list[RewardResult]:
            return [RewardResult.failure(message)] * len(requests)

        where = f"queue {queue!r} at {self.where}"
        payload = [request.to_dict() for request in requests]
        try:
            async_result = self.app.send_task(TASK_NAME, args=[payload, timeout], queue=queue,
                                              expires=self.config.result_timeout)
        except Exception as exc:
            return failed(f"could not send rewards to the Celery broker ({where}): {_reason(exc)}")
        # Time to be picked up, plus the longest the worker may take: every request up to its timeout.
        wait = self.config.result_timeout + len(requests) * timeout
        deadline = time.monotonic() + wait
        partials = partial_results(self.app) if early is not None else None
        streaming = partials is not None and partials.client is not None
        handed_out: set[int] = set()
        try:
            while True:
                if self._closing:
                    return failed("the reward service closed before the Celery worker answered")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return failed(f"no result from a Celery worker within {wait:g}s ({where}); "
                                  "is `areal worker` serving that queue?")
                try:
                    value = async_result.get(timeout=min(_STREAM_SLICE_S if streaming else _WAIT_SLICE_S, remaining),
                                             propagate=False)
                    break
                except CeleryTimeout:
                    if streaming:
                        self._hand_out(partials, async_result.id, requests, handed_out, early)
                    continue
            succeeded = async_result.successful()
        except Exception as exc:
            return failed(f"lost the Celery result backend while waiting for rewards ({where}): {_reason(exc)}")
        finally:
            try:
                async_result.forget()  # read once: free the result backend now
            except Exception:
                pass
        if isinstance(value, BaseException) or not succeeded:
            return failed(f"the Celery worker failed the reward batch ({where}): {type(value).__name__}: {value}")
        if not isinstance(value, list) or len(value) != len(requests):
            return failed(f"the Celery worker returned {type(value).__name__} for a batch of {len(requests)} "
                          "requests; expected a list of results (are client and worker the same version?)")
        return [RewardResult.from_dict(item) for item in value]

    @staticmethod
    def _hand_out(partials: Any, task_id: str, requests: list[RewardRequest], handed_out: set[int],
                  early: Callable[[int, RewardResult], None]) -> None:
        """Deliver the results the worker saved for this batch so far (each once; the final delivery of the
        whole batch finds them delivered already)."""
        try:
            saved = {index: RewardResult.from_dict(payload)
                     for index, payload in partials.load(task_id, len(requests)).items() if index not in handed_out}
        except Exception:
            return  # the result backend hiccupped, or a result is unreadable: the batch's own result still comes
        for index, result in saved.items():
            handed_out.add(index)
            early(index, result)

    # -- shutdown ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Drop unsent batches, stop waiting for sent ones (their threads end within a second)."""
        self._closing = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._pending.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._running:
            await asyncio.wait(set(self._running), timeout=_WAIT_SLICE_S + self.config.connect_timeout + 5)
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
            self._executor = None
        if self.app is not None:
            await asyncio.to_thread(self.app.close)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
