"""The Celery app of the reward service: one task, `areal.score_batch`, served by `areal worker`.

A task carries a batch of reward requests (JSON) and returns their results in order. Batching hides
the broker round trip (about 2 ms per task on loopback Redis), which is a large part of a ~10 ms
verifier call.

Inside a worker (Celery's thread pool), each running task scores its batch through a RewardPool of
one killable process, so a reward that hangs or kills its process becomes an error result and the
Celery worker itself stays healthy; results equal those of the local backend, which runs the same
pool.

Delivery guarantees (Redis broker):
- late acknowledgement: a task is acknowledged only after its result is stored. A worker killed
  mid-task (`kill -9`, a lost machine) leaves the message unacknowledged; Redis makes it visible again
  after the worker's visibility timeout, and another worker runs it.
- idempotent redelivery: the finished requests of a running batch are saved under the task id (within
  PARTIAL_SAVE_EVERY_S of finishing), and a redelivered task scores only the requests not saved yet; a
  task whose result is already stored returns that result. The client reads one result per task id (and
  the saved partial results of a running one; the reward service takes the first answer of a request and
  drops any later one), so a request is never answered twice however often its batch is delivered.
- no waiting on batch-mates: the client reads the saved results of a batch while it runs and hands each
  out at once, so one slow request delays only itself. Async and io_bound rewards of a batch run side by
  side in its reward process (up to their `concurrency`).

`celery -A areal_core.rewards.celery_app worker --pool threads` also works; it reads the
broker URL from $AREAL_BROKER_URL (and $AREAL_RESULT_BACKEND). Use the thread pool: prefork pool
processes are daemonic and cannot start reward processes.
"""
from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
import time
from typing import Any, Iterator, Sequence

from celery import Celery, Task, signals

from areal_core.rewards.pool import RewardPool
from areal_core.rewards.config import (
    DEFAULT_BROKER_URL,
    DEFAULT_QUEUE,
    RewardServiceError,
    default_result_backend,
    safe_url,
)
from areal_core.types import RewardRequest

TASK_NAME = "areal.score_batch"
BROKER_ENV = "AREAL_BROKER_URL"
RESULT_BACKEND_ENV = "AREAL_RESULT_BACKEND"
DEFAULT_VISIBILITY_TIMEOUT = 300.0
# Finished requests of a running batch are saved this often, and kept this long: the client hands them
# out before the batch ends, and a redelivered batch (its worker died) skips them.
PARTIAL_SAVE_EVERY_S = 0.05
PARTIAL_TTL_S = 6 * 3600
# Task results are read once by the client, which then deletes them; unread ones expire.
RESULT_EXPIRES_S = 6 * 3600


def make_celery_app(broker_url: str | None = None, result_backend: str | None = None, *,
                    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT, connect_timeout: float = 5.0) -> Celery:
    """The Celery app for the reward service, for clients and workers alike.

    visibility_timeout: seconds a task taken by a worker stays invisible before Redis hands it to
    another worker (when the first died without acknowledging it). Must exceed the longest batch a
    worker can take, or a slow batch runs twice (harmless: results are still delivered once).
    """
    broker_url = broker_url or os.environ.get(BROKER_ENV) or DEFAULT_BROKER_URL
    result_backend = result_backend or os.environ.get(RESULT_BACKEND_ENV) or default_result_backend(broker_url)
    app = Celery("areal", broker=broker_url, backend=result_backend, set_as_current=False)
    quick_retries = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_default_queue=DEFAULT_QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_send_task_events=False,
        result_expires=RESULT_EXPIRES_S,
        broker_connection_timeout=connect_timeout,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            # Look for tasks of dead workers every few seconds, not every 100 s (kombu's default).
            "unacked_restore_interval": max(1, min(10, int(visibility_timeout // 4))),
            "unacked_restore_throttle": 1,
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": max(30.0, connect_timeout),
        },
        task_publish_retry_policy=quick_retries,
        redis_socket_connect_timeout=connect_timeout,
        redis_socket_timeout=max(30.0, connect_timeout),
        redis_backend_health_check_interval=10,
        result_backend_transport_options={"retry_policy": quick_retries},
    )
    app.task(name=TASK_NAME, bind=True, base=ScoreBatchTask, acks_late=True, reject_on_worker_lost=True,
             shared=False)(score_batch)
    return app


class ScoreBatchTask(Task):
    """`areal.score_batch`; forgets the batch's saved partial results once its result is stored."""

    def after_return(self, status, retval, task_id, args, kwargs, einfo) -> None:
        if status == "SUCCESS":
            partial_results(self.app).clear(task_id)


def score_batch(self: Task, requests: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """Score a batch of RewardRequest dicts with a hard per-request timeout; RewardResult dicts in order."""
    task_id = self.request.id
    stored = self.app.backend.get_task_meta(task_id)
    if stored.get("status") == "SUCCESS" and isinstance(stored.get("result"), list):
        return stored["result"]  # a duplicate delivery of a finished batch: same answer, no work
    partials = partial_results(self.app)
    results: dict[int, dict[str, Any]] = partials.load(task_id, len(requests))
    todo = [(i, RewardRequest.from_dict(payload)) for i, payload in enumerate(requests) if i not in results]
    unsaved: dict[int, dict[str, Any]] = {}
    saved_at = time.monotonic()
    with pools.checkout() as pool:
        tickets = {pool.submit(request, timeout=timeout): index for index, request in todo}
        while tickets:
            # Nothing finished waits longer than PARTIAL_SAVE_EVERY_S to be saved: the client reads
            # saved results while the batch runs, so a slow request does not hold its batch-mates back.
            wait = None if not unsaved else max(0.0, saved_at + PARTIAL_SAVE_EVERY_S - time.monotonic())
            for ticket, result in pool.poll(timeout=wait):
                index = tickets.pop(ticket)
                results[index] = unsaved[index] = result.to_dict()
            if tickets and unsaved and time.monotonic() - saved_at >= PARTIAL_SAVE_EVERY_S:
                partials.save(task_id, unsaved)
                unsaved, saved_at = {}, time.monotonic()
    return [results[i] for i in range(len(requests))]


class _Partials:
    """Finished requests of running batches, in a Redis hash per task (no-op for other result backends)."""

    def __init__(self, client: Any | None) -> None:
        self.client = client

    @staticmethod
    def key(task_id: str) -> str:
        return f"areal-reward-partial:{task_id}"

    def load(self, task_id: str, size: int) -> dict[int, dict[str, Any]]:
        if self.client is None:
            return {}
        saved = self.client.hgetall(self.key(task_id))
        results = {}
        for field, value in saved.items():
            index = int(field)
            if 0 <= index < size:
                results[index] = json.loads(value)
        return results

    def save(self, task_id: str, results: dict[int, dict[str, Any]]) -> None:
        if self.client is None:
            return
        key = self.key(task_id)
        pipe = self.client.pipeline()
        pipe.hset(key, mapping={str(index): json.dumps(result) for index, result in results.items()})
        pipe.expire(key, PARTIAL_TTL_S)
        pipe.execute()

    def clear(self, task_id: str) -> None:
        if self.client is not None:
            self.client.delete(self.key(task_id))


def partial_results(app: Celery) -> _Partials:
    return _Partials(getattr(app.backend, "client", None) if _is_redis(app.backend) else None)


def _is_redis(backend: Any) -> bool:
    from celery.backends.redis import RedisBackend

    return isinstance(backend, RedisBackend)


# -- reward pools of a worker ----------------------------------------------------------------------
class _Pools:
    """One RewardPool (of one killable process) per task running at once in this worker.

    `areal worker` runs Celery's thread pool: a task's thread only waits on its reward process, so
    threads cost nothing, and the reward processes are children of the worker itself (Celery's prefork
    processes are daemonic and may not have children)."""

    def __init__(self) -> None:
        self._free: queue.SimpleQueue[RewardPool] = queue.SimpleQueue()
        self._all: list[RewardPool] = []
        self._lock = threading.Lock()
        self.concurrency: dict[str, int] = {}  # `areal worker --reward-concurrency`

    def _new(self) -> RewardPool:
        pool = RewardPool(workers=1, timeout=DEFAULT_VISIBILITY_TIMEOUT, concurrency=self.concurrency)
        pool.start()
        with self._lock:
            self._all.append(pool)
        return pool

    def prewarm(self, count: int) -> None:
        for _ in range(count):
            self._free.put(self._new())

    @contextlib.contextmanager
    def checkout(self) -> Iterator[RewardPool]:
        try:
            pool = self._free.get_nowait()
        except queue.Empty:
            pool = self._new()
        try:
            yield pool
        except BaseException:
            # Its process may still run a request of this batch: discard it rather than reuse it.
            with self._lock:
                self._all.remove(pool)
            pool.close()
            raise
        self._free.put(pool)

    def close(self) -> None:
        with self._lock:
            pools, self._all = self._all, []
        for pool in pools:
            pool.close()


pools = _Pools()


@signals.worker_shutdown.connect
def _close_pools(**_: Any) -> None:
    pools.close()


# -- checks and the worker entry point --------------------------------------------------------------
def check_broker(app: Celery, timeout: float) -> None:
    """Raise RewardServiceError (one sentence) unless the broker and the result backend answer."""
    url = safe_url(app.conf.broker_url)
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
    except Exception as exc:
        raise RewardServiceError(
            f"cannot reach the Celery broker at {url} ({_reason(exc)}); start it (for Redis on this "
            "machine: scripts/start-redis.sh) or pass the right broker URL") from None
    if _is_redis(app.backend):
        backend_url = safe_url(app.conf.result_backend)
        try:
            app.backend.client.ping()
        except Exception as exc:
            raise RewardServiceError(
                f"cannot reach the Celery result backend at {backend_url} ({_reason(exc)})") from None


def workers_by_queue(app: Celery, timeout: float = 1.0) -> dict[str, list[str]]:
    """Queue name -> names of the workers that answered and consume it."""
    replies = app.control.inspect(timeout=timeout).active_queues() or {}
    served: dict[str, list[str]] = {}
    for worker, consumed in replies.items():
        for declared in consumed or []:
            served.setdefault(declared["name"], []).append(worker)
    return served


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


def run_worker(*, broker_url: str | None, result_backend: str | None, queues: Sequence[str], concurrency: int,
               visibility_timeout: float, loglevel: str, hostname: str | None, connect_timeout: float = 5.0,
               echo=print, reward_concurrency: dict[str, int] | None = None) -> None:
    """`areal worker`: load every installed plugin, check the broker, then run a Celery worker."""
    from areal_core.plugins import get_plugin_manager
    from areal_core.rewards.registry import reward_registry

    app = make_celery_app(broker_url, result_backend, visibility_timeout=visibility_timeout,
                          connect_timeout=connect_timeout)
    check_broker(app, connect_timeout)
    rewards = reward_registry()
    manager = get_plugin_manager()
    for problem in manager.problems + [f"plugin {i.name!r}: {i.error}" for i in manager.plugins.values() if i.error]:
        echo(f"warning: {problem}")
    name = hostname or f"areal-{os.getpid()}@{socket.gethostname()}"
    echo(f"areal worker {name}: queues {', '.join(queues)} on {safe_url(app.conf.broker_url)}, "
         f"{concurrency} processes, rewards: {', '.join(rewards.names()) or 'none'}")
    pools.concurrency = dict(reward_concurrency or {})
    concurrent = {name: pools.concurrency.get(name, spec.concurrency) for name, spec in rewards.items()
                  if spec.concurrent or name in pools.concurrency}
    if concurrent:
        echo("concurrent rewards (calls at once per batch): "
             + ", ".join(f"{name} {limit}" for name, limit in sorted(concurrent.items())))
    pools.prewarm(concurrency)  # reward processes start now, not on the first task
    app.worker_main([
        "worker", "--queues", ",".join(queues), "--concurrency", str(concurrency), "--pool", "threads",
        "--loglevel", loglevel.upper(), "--hostname", name,
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])


# For `celery -A areal_core.rewards.celery_app worker` (configured from $AREAL_BROKER_URL).
app = make_celery_app()
