"""A pool of killable reward worker processes with a hard timeout per request.

Reward functions are arbitrary plugin code: they may hang (SymPy on a pathological expression), crash
the interpreter (a segfault in a C extension) or leak. Python threads and signal alarms cannot stop
them, so each call runs in a worker process that the pool kills -- with its whole process group, so
children the reward started die too -- when the deadline passes, and then replaces. Every request gets
exactly one RewardResult: the reward's own, or one with ``error`` set saying what happened.

Workers find rewards by name in their own registry (plugins load in each worker, honouring
``AREAL_PLUGINS``), so requests carry only JSON-friendly data. A worker whose parent dies (the pool's
process was killed) kills its own process group instead of living on as an orphan.

Threads: ``submit`` and ``wakeup`` may be called from any thread; ``poll``/``map``/``score`` from one
thread at a time (the async reward service drives the pool from one dedicated thread).
"""
from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from areal_core.errors import ArealError
from areal_core.types import RewardRequest, RewardResult

# A worker that dies this many times in a row without finishing a request means something is broken
# in its start-up (e.g. a plugin that kills the interpreter on import); fail loudly instead of looping.
MAX_START_FAILURES = 3
# Work sent to one worker at once, by the running average cost of each reward: small enough that a request
# queued behind others in a chunk waits about as long as the round trip it saves.
CHUNK_SECONDS = 0.005


class RewardPoolError(ArealError):
    """The pool cannot run rewards at all (its worker processes cannot start)."""


def _die_with_parent(parent_pid: int) -> None:
    """Kill this worker's process group once its parent is gone (checked twice a second).

    A daemon thread, so it works whatever the reward does with the main thread; pure-Python loops
    release the GIL often enough for it to run."""
    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="areal-reward-orphan-watch", daemon=True).start()


def _worker_main(conn: multiprocessing.connection.Connection, memory_limit_mb: int | None,
                 parent_pid: int | None = None) -> None:
    # Own process group: on timeout the pool kills the group, taking any children of the reward along.
    os.setsid()
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    if memory_limit_mb:
        import resource

        limit = memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # Rewards are single-threaded CPU work; many workers with many BLAS/torch threads fight over cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from areal_core.errors import ArealError as _ArealError
    from areal_core.rewards.registry import reward_registry
    from areal_core.rewards.contract import call_reward

    # Load the plugins before reporting ready, so their import time never counts against a request's timeout.
    # A registry that cannot be built (e.g. duplicate names) is reported per request below.
    try:
        reward_registry()
    except _ArealError:
        pass
    conn.send(("ready", None, 0.0))
    while True:
        try:
            message = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if message is None:
            return
        # A chunk of requests, run in order; each result goes back as soon as it is ready, so the pool
        # knows which request is running (its deadline) and nothing finished is lost if a later one kills us.
        for ticket, request in message:
            started = time.perf_counter()
            try:
                spec = reward_registry().get(request["reward"])
                result = call_reward(spec, request["sample"], request["response"], request.get("options") or {})
            except _ArealError as exc:
                result = RewardResult.failure(str(exc))
            except MemoryError:
                result = RewardResult.failure(f"reward {request['reward']!r} exceeded the worker memory limit ({memory_limit_mb} MB)")
            conn.send((ticket, result.to_dict(), time.perf_counter() - started))


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    ready: bool = False
    # Sent and not yet answered, in the order the worker runs them: the first one is running, and its
    # deadline counts from when the one before it was answered.
    assigned: deque[tuple[int, RewardRequest, float]] = field(default_factory=deque)
    deadline: float = 0.0


class RewardPool:
    """Process pool for reward calls. Use as a context manager::

        with RewardPool(workers=2, timeout=10) as pool:
            for index, result in pool.map(requests):
                ...

    timeout:         seconds one request may run (wall clock) before its worker is killed; `submit`
                     may give one request its own.
    memory_limit_mb: address-space limit of each worker (None: unlimited).
    start_method:    multiprocessing start method; "spawn" is safe with threads and torch.
    batch_size:      at most this many queued requests are sent to a worker in one message. One round
                     trip costs 1-5 ms (more when the pool's thread competes for the GIL in a busy
                     trainer), far more than a cheap verifier (30 us to check an arithmetic answer,
                     512 answers per step of the CPU demo); requests are still timed
                     and failed one by one. A chunk holds at most ~CHUNK_SECONDS of work by the measured
                     cost of each reward (a reward not measured yet goes alone), and no more than an
                     even share of the queue, so slow rewards and short queues still spread over every worker.
    """

    def __init__(self, workers: int = 2, timeout: float = 30.0, memory_limit_mb: int | None = None,
                 start_method: str = "spawn", batch_size: int = 256) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.size = workers
        self.timeout = timeout
        self.memory_limit_mb = memory_limit_mb
        self.batch_size = batch_size
        self._cost: dict[str, float] = {}  # reward name -> running average seconds per request
        self.messages_sent = 0  # chunks of requests sent to workers (requests / messages: the batching achieved)
        self._ctx = multiprocessing.get_context(start_method)
        self._workers: list[_Worker] = []
        self._pending: deque[tuple[int, RewardRequest, float]] = deque()
        self._lock = threading.Lock()
        self._tickets = itertools.count()
        self._start_failures = 0
        self.restarts = 0
        # Self-pipe: `wakeup` (any thread) makes a `poll` that is waiting look at new requests at once.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_pending = False

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "RewardPool":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        while len(self._workers) < self.size:
            self._workers.append(self._spawn())

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=_worker_main, args=(child, self.memory_limit_mb, os.getpid()),
                                    daemon=True, name="areal-reward-worker")
        process.start()
        child.close()
        return _Worker(process=process, conn=parent)

    def close(self) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones (their results abandoned) are killed."""
        for worker in self._workers:
            if worker.assigned:
                self._kill(worker)
                continue
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                self._kill(worker)
            worker.conn.close()
        self._workers.clear()

    def __del__(self) -> None:
        for fd in (getattr(self, "_wake_r", None), getattr(self, "_wake_w", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _kill(self, worker: _Worker) -> None:
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            worker.process.kill()
        except Exception:
            pass
        worker.process.join(5.0)

    # -- requests -----------------------------------------------------------------------------
    def submit(self, request: RewardRequest, timeout: float | None = None) -> int:
        """Queue a request (from any thread); returns the ticket its result will carry.

        timeout: seconds this request may run (default: the pool's)."""
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        with self._lock:
            ticket = next(self._tickets)
            self._pending.append((ticket, request, self.timeout if timeout is None else timeout))
        return ticket

    def wakeup(self) -> None:
        """Make a `poll` waiting in another thread dispatch newly submitted requests and return now."""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full: a wake-up is pending already

    @property
    def in_flight(self) -> int:
        return len(self._pending) + sum(len(w.assigned) for w in self._workers)

    def _dispatch(self) -> None:
        idle = [w for w in self._workers if w.ready and not w.assigned]
        if not idle:
            return
        with self._lock:
            share = -(-len(self._pending) // len(self._workers))  # an even share over all workers
        size = min(self.batch_size, share)
        for worker in idle:
            chunk: list[tuple[int, RewardRequest, float]] = []
            work = 0.0
            with self._lock:
                while self._pending and len(chunk) < max(1, size):
                    work += self._cost.get(self._pending[0][1].reward, float("inf"))
                    if chunk and work > CHUNK_SECONDS:
                        break
                    chunk.append(self._pending.popleft())
            if not chunk:
                return
            try:
                worker.conn.send([(ticket, request.to_dict()) for ticket, request, _ in chunk])
            except (OSError, ValueError):
                with self._lock:
                    self._pending.extendleft(reversed(chunk))
                continue
            self.messages_sent += 1
            worker.assigned.extend(chunk)
            worker.deadline = time.monotonic() + chunk[0][2]

    def _replace(self, worker: _Worker) -> None:
        """Kill and respawn `worker`; what it was given after the request that failed is queued again, first."""
        with self._lock:
            self._pending.extendleft(reversed(worker.assigned))
        worker.assigned.clear()
        self._kill(worker)
        worker.conn.close()
        index = self._workers.index(worker)
        self._workers[index] = self._spawn()
        self.restarts += 1

    def poll(self, timeout: float | None = None) -> list[tuple[int, RewardResult]]:
        """Wait up to `timeout` seconds and return finished results (possibly none).

        timeout=None waits until something finishes, or returns at once when nothing is in flight;
        with a timeout, an idle pool waits for `submit` + `wakeup` from another thread. A `wakeup`
        makes it return early (after dispatching new requests), possibly with no results."""
        if not self._workers:
            self.start()
        done: list[tuple[int, RewardResult]] = []
        wait_until = None if timeout is None else time.monotonic() + timeout
        while not done:
            self._dispatch()
            now = time.monotonic()
            busy = [w for w in self._workers if w.assigned]
            if not busy and not self._pending and wait_until is None:
                return done
            deadlines = [w.deadline for w in busy]
            if wait_until is not None:
                deadlines.append(wait_until)
            wait_for = max(0.0, min(deadlines) - now) if deadlines else None
            handles: list[Any] = [self._wake_r]
            for worker in self._workers:
                handles += [worker.conn, worker.process.sentinel]
            ready = set(multiprocessing.connection.wait(handles, wait_for))
            woken = self._wake_r in ready
            if woken:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                # Only after draining: a `wakeup` between clearing the flag and draining would have its
                # byte swallowed with the flag left set, and every later `wakeup` skipped -- new requests
                # then waited for the next result or poll timeout (up to 0.5 s in the reward service).
                # Cleared here, a `wakeup` that saw the flag still set queued its request before the
                # `_dispatch` below, which sends it.
                self._wake_pending = False
            for worker in list(self._workers):
                dead = worker.process.sentinel in ready
                if worker.conn in ready or dead:  # results sent before a death are taken first
                    dead = self._receive(worker, done) or dead
                if dead:
                    worker.process.join(1.0)
                    code = worker.process.exitcode
                    if worker.assigned:
                        ticket, request, _ = worker.assigned.popleft()
                        done.append((ticket, RewardResult.failure(
                            f"reward {request.reward!r} killed its worker process ({_describe_exit(code)})")))
                    else:
                        self._start_failures += 1
                        if self._start_failures >= MAX_START_FAILURES:
                            raise RewardPoolError(
                                f"reward worker processes exit right after starting ({_describe_exit(code)}); "
                                "check that every plugin imports cleanly (`areal plugins`)"
                            )
                    self._replace(worker)
                elif worker.assigned and time.monotonic() >= worker.deadline:
                    ticket, request, limit = worker.assigned.popleft()
                    done.append((ticket, RewardResult.failure(f"reward {request.reward!r} timed out after {limit:g}s",
                                                              timed_out=True)))
                    self._replace(worker)
            if woken:
                self._dispatch()
                break
            if wait_until is not None and time.monotonic() >= wait_until:
                break
        return done

    def _receive(self, worker: _Worker, done: list[tuple[int, RewardResult]]) -> bool:
        """Take every message the worker has sent; True when its pipe broke (the process is gone)."""
        try:
            while worker.conn.poll():
                ticket, payload, took = worker.conn.recv()
                if ticket == "ready":
                    worker.ready = True
                else:
                    _, request, _ = worker.assigned.popleft()
                    done.append((ticket, RewardResult.from_dict(payload)))
                    self._start_failures = 0
                    cost = self._cost.get(request.reward)  # as the worker timed it: no pipe or GIL waits
                    self._cost[request.reward] = took if cost is None else 0.8 * cost + 0.2 * took
                    if worker.assigned:
                        worker.deadline = time.monotonic() + worker.assigned[0][2]
        except (EOFError, OSError):
            return True
        return False

    def map(self, requests: Iterable[RewardRequest]) -> Iterator[tuple[int, RewardResult]]:
        """Score all requests; yields (index in `requests`, result) as they finish."""
        index_of = {self.submit(request): i for i, request in enumerate(requests)}
        remaining = len(index_of)
        while remaining:
            for ticket, result in self.poll():
                if ticket in index_of:
                    remaining -= 1
                    yield index_of.pop(ticket), result

    def score(self, requests: Iterable[RewardRequest]) -> list[RewardResult]:
        """Score all requests; results in request order."""
        requests = list(requests)
        results: list[RewardResult | None] = [None] * len(requests)
        for index, result in self.map(requests):
            results[index] = result
        return results  # type: ignore[return-value]


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
