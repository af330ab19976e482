"""A pool of killable reward worker processes with a hard timeout per request.

Reward functions are arbitrary plugin code: they may hang (SymPy on a pathological expression), crash
the interpreter (a segfault in a C extension) or leak. Python threads and signal alarms cannot stop
them, so each call runs in a worker process that the pool kills -- with its whole process group, so
children the reward started die too -- when the deadline passes, and then replaces. Every request gets
exactly one RewardResult: the reward's own, or one with ``error`` set saying what happened.

Workers find rewards by name in their own registry (plugins load in each worker, honouring
``AREAL_PLUGINS``), so requests carry only JSON-friendly data. A worker whose parent dies (the pool's
process was killed) kills its own process group instead of living on as an orphan.

Concurrent rewards: an `async def` reward, or a plain one registered ``io_bound=True``, runs side by side
with others in its worker -- on the worker's event loop, or in threads -- up to its ``concurrency`` calls
per worker at once, each with its own deadline (enforced in the worker by cancelling it; past a grace, by
killing the worker). So a slow or hung call never delays the others. One-at-a-time (CPU-bound) rewards run
in the worker's main thread, meanwhile. A worker that dies, or stops answering (an async reward that blocks
its event loop), while running several calls does not say which one did it: each of those runs again
alone, so only the culprit fails and the others are late by one run.

Threads: ``submit`` and ``wakeup`` may be called from any thread; ``poll``/``map``/``score`` from one
thread at a time (the async reward service drives the pool from one dedicated thread).
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import multiprocessing
import multiprocessing.connection
from multiprocessing.reduction import ForkingPickler
import os
import queue
import signal
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from areal_core.errors import ArealError
from areal_core.rewards.contract import IO_THREAD_NAME
from areal_core.types import RewardRequest, RewardResult

# A worker that dies this many times in a row without finishing a request means something is broken
# in its start-up (e.g. a plugin that kills the interpreter on import); fail loudly instead of looping.
MAX_START_FAILURES = 3
# Work sent to one worker at once, by the running average cost of each reward: small enough that a request
# queued behind others in a chunk waits about as long as the round trip it saves.
CHUNK_SECONDS = 0.005
# A concurrent call is cancelled in its worker at its timeout; a worker that has not answered this long
# after that (its event loop is blocked) is killed.
def _grace(timeout: float) -> float:
    return max(1.0, 0.1 * timeout)
# Threads of timed-out io_bound calls cannot be stopped; a worker left with more of them than this is
# retired (replaced once its other calls finish), so stuck threads never pile up.
MAX_STUCK_THREADS = 64
# A call running on a worker that is killed for another call's timeout (the blame may be wrong: a call that
# holds the GIL makes its neighbours late) runs alone after this many, so the culprit cannot go on forever.
REPLACED_ALONE = 2


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
        # Each thread's stack counts against the limit (8 MiB by default): io_bound calls run in threads.
        threading.stack_size(2 * 1024 * 1024)
    # Rewards are single-threaded CPU work; many workers with many BLAS/torch threads fight over cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from areal_core.errors import ArealError as _ArealError
    from areal_core.rewards.registry import reward_registry

    # Load the plugins before reporting ready, so their import time never counts against a request's timeout.
    # A registry that cannot be built (e.g. duplicate names) is reported per request below.
    try:
        concurrency = {name: spec.concurrency for name, spec in reward_registry().items() if spec.concurrent}
    except _ArealError:
        concurrency = {}
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            conn.send(message)

    sequential: queue.SimpleQueue[tuple[int, dict[str, Any]] | None] = queue.SimpleQueue()
    loops: list[_WorkerLoop] = []  # the event loop, once a concurrent call has come

    def read() -> None:
        try:
            _read_requests(conn, send, sequential, loops, memory_limit_mb)
        except BaseException:  # noqa: BLE001 - a deaf worker would only time its requests out: die, be replaced
            os._exit(70)

    # The pipe is read in a thread of its own: concurrent calls start while a CPU-bound one runs here.
    # Started before "ready": a worker that cannot start threads fails at start-up, not on a request.
    threading.Thread(target=read, name="areal-reward-reader", daemon=True).start()
    send(("ready", {"concurrency": concurrency}, 0.0, 0))
    _run_one_at_a_time(sequential, send, loops, memory_limit_mb)


def _read_requests(conn: multiprocessing.connection.Connection, send: Callable[[tuple[Any, ...]], None],
                   sequential: queue.SimpleQueue[Any], loops: list[_WorkerLoop], memory_limit_mb: int | None) -> None:
    """The worker's reader thread: concurrent calls start on the event loop, the others queue for the main thread."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = None
        if message is None:
            sequential.put(None)
            return
        for ticket, request, timeout, concurrently in message:
            if not concurrently:
                sequential.put((ticket, request))
                continue
            try:
                if not loops:
                    loops.append(_WorkerLoop(send, memory_limit_mb))
                loops[0].start(ticket, request, timeout)
            except RuntimeError as exc:  # no thread for the event loop (the memory limit)
                failed = RewardResult.failure(f"reward {request['reward']!r}: its worker could not run "
                                              f"concurrent calls: {exc}")
                send((ticket, failed.to_dict(), 0.0, 0))


def _run_one_at_a_time(sequential: queue.SimpleQueue[Any], send: Callable[[tuple[Any, ...]], None],
                       loops: list[_WorkerLoop], memory_limit_mb: int | None) -> None:
    """The worker's main thread: one-at-a-time (CPU-bound) calls, in the order they came."""
    from areal_core.errors import ArealError as _ArealError
    from areal_core.rewards.contract import call_reward
    from areal_core.rewards.registry import reward_registry

    while True:
        try:
            item = sequential.get()
        except KeyboardInterrupt:
            return
        if item is None:
            return
        # Requests of a chunk run in order; each result goes back as soon as it is ready, so the pool
        # knows which request is running (its deadline) and nothing finished is lost if a later one kills us.
        ticket, request = item
        started = time.perf_counter()
        try:
            spec = reward_registry().get(request["reward"])
            result = call_reward(spec, request["sample"], request["response"], request.get("options") or {})
        except _ArealError as exc:
            result = RewardResult.failure(str(exc))
        except MemoryError:
            result = RewardResult.failure(f"reward {request['reward']!r} exceeded the worker memory limit ({memory_limit_mb} MB)")
        send((ticket, result.to_dict(), time.perf_counter() - started, loops[0].stuck_threads() if loops else 0))


class _WorkerLoop:
    """The event loop of a worker process, in a thread of its own: it runs the concurrent calls (async
    rewards awaited, io_bound ones in threads), each cancelled at its own timeout."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None], memory_limit_mb: int | None) -> None:
        self.send = send
        self.memory_limit_mb = memory_limit_mb
        self.loop = asyncio.new_event_loop()
        self.tasks: set[asyncio.Task[None]] = set()
        self.io_running = 0
        threading.Thread(target=self._serve, name="areal-reward-loop", daemon=True).start()

    def _serve(self) -> None:
        try:
            self.loop.run_forever()
        finally:  # a reward stopped the loop: calls sent here would never run, so die and be replaced
            os._exit(71)

    def start(self, ticket: int, request: dict[str, Any], timeout: float) -> None:
        def create() -> None:
            task = self.loop.create_task(self.run(ticket, request, timeout))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        self.loop.call_soon_threadsafe(create)

    async def run(self, ticket: int, request: dict[str, Any], timeout: float) -> None:
        from areal_core.errors import ArealError
        from areal_core.rewards.contract import acall_reward
        from areal_core.rewards.registry import reward_registry

        started = time.perf_counter()
        name = request["reward"]
        try:
            spec = reward_registry().get(name)
            threaded = not spec.is_async
            self.io_running += threaded
            try:
                result = await asyncio.wait_for(
                    acall_reward(spec, request["sample"], request["response"], request.get("options") or {}), timeout)
            except asyncio.TimeoutError:
                result = RewardResult.failure(f"reward {name!r} timed out after {timeout:g}s", timed_out=True)
            finally:
                self.io_running -= threaded
        except ArealError as exc:
            result = RewardResult.failure(str(exc))
        except MemoryError:
            result = RewardResult.failure(f"reward {name!r} exceeded the worker memory limit ({self.memory_limit_mb} MB)")
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a reward must not end the event loop;
            # nothing cancels these tasks (wait_for's own timeout is TimeoutError), so a CancelledError is the reward's
            result = RewardResult.failure(f"reward {name!r} raised {type(exc).__name__}: {exc}")
        self.send((ticket, result.to_dict(), time.perf_counter() - started, self.stuck_threads()))

    def stuck_threads(self) -> int:
        """Threads of io_bound calls that timed out and still run."""
        alive = sum(thread.name == IO_THREAD_NAME for thread in threading.enumerate())
        return max(0, alive - self.io_running)


@dataclass
class _Job:
    ticket: int
    request: RewardRequest
    timeout: float
    alone: bool = False  # run it with nothing else on its worker: it was running when a worker died
    replaced: int = 0  # workers replaced while it ran there; at REPLACED_ALONE it runs alone


_STOP = object()


def _send_all(conn: multiprocessing.connection.Connection, outbox: queue.SimpleQueue[Any]) -> None:
    """A worker's sender thread: a send that blocks (a worker too busy to read its pipe) never blocks the
    pool's thread, which must go on enforcing deadlines."""
    while True:
        message = outbox.get()
        if message is _STOP:
            return
        try:
            conn.send_bytes(message) if isinstance(message, bytes) else conn.send(message)
        except (OSError, ValueError, TypeError):
            return  # the worker is gone (or its pipe closed): the pool sees its death and re-queues what it had


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    outbox: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    sender: threading.Thread | None = None
    ready: bool = False
    # One-at-a-time requests sent and not yet answered, in the order the worker runs them: the first one is
    # running, and its deadline counts from when the one before it was answered.
    assigned: deque[_Job] = field(default_factory=deque)
    deadline: float = 0.0
    # Concurrent requests running: ticket -> job (their deadlines are in the pool's heap).
    concurrent: dict[int, _Job] = field(default_factory=dict)
    by_reward: Counter[str] = field(default_factory=Counter)
    alone: bool = False  # running a job that must run alone
    retiring: bool = False  # too many stuck threads: gets no more work, replaced once idle

    @property
    def busy(self) -> bool:
        return bool(self.assigned or self.concurrent)

    def running(self) -> list[_Job]:
        """The jobs the worker is running now: the first one-at-a-time job and every concurrent one."""
        return ([self.assigned[0]] if self.assigned else []) + list(self.concurrent.values())


class RewardPool:
    """Process pool for reward calls. Use as a context manager::

        with RewardPool(workers=2, timeout=10) as pool:
            for index, result in pool.map(requests):
                ...

    timeout:         seconds one request may run (wall clock); `submit` may give one request its own. A
                     one-at-a-time call past it has its worker killed; a concurrent call is cancelled in its
                     worker, which is killed only when it has not answered max(1 s, 10%) later.
    memory_limit_mb: address-space limit of each worker (None: unlimited).
    start_method:    multiprocessing start method; "spawn" is safe with threads and torch.
    batch_size:      at most this many queued requests are sent to a worker in one message. One round
                     trip costs 1-5 ms (more when the pool's thread competes for the GIL in a busy
                     trainer), far more than a cheap verifier (30 us to check an arithmetic answer,
                     512 answers per step of the CPU demo); requests are still timed
                     and failed one by one. A chunk holds at most ~CHUNK_SECONDS of work by the measured
                     cost of each reward (a reward not measured yet goes alone), and no more than an
                     even share of the queue, so slow rewards and short queues still spread over every worker.
    concurrency:     reward name -> calls one worker runs at once, over what the reward declares (an async
                     or io_bound reward's `concurrency`); naming a plain reward runs it in threads.
    """

    def __init__(self, workers: int = 2, timeout: float = 30.0, memory_limit_mb: int | None = None,
                 start_method: str = "spawn", batch_size: int = 256,
                 concurrency: Mapping[str, int] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        for name, limit in (concurrency or {}).items():
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ValueError(f"concurrency of reward {name!r} must be an integer >= 1, got {limit!r}")
        self.size = workers
        self.timeout = timeout
        self.memory_limit_mb = memory_limit_mb
        self.batch_size = batch_size
        self._overrides = dict(concurrency or {})
        self._concurrency: dict[str, int] | None = None  # reward -> calls per worker, once a worker said
        self._cost: dict[str, float] = {}  # reward name -> running average seconds per request
        self.messages_sent = 0  # chunks of requests sent to workers (requests / messages: the batching achieved)
        self._ctx = multiprocessing.get_context(start_method)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._incoming: deque[_Job] = deque()  # submitted (any thread), not yet sorted into the queues below
        self._sequential: deque[_Job] = deque()
        self._by_reward: dict[str, deque[_Job]] = {}  # concurrent rewards
        self._alone: deque[_Job] = deque()
        self._deadlines: list[tuple[float, int]] = []  # heap of concurrent requests' hard deadlines
        self._running_at: dict[int, tuple[_Worker, float]] = {}  # concurrent ticket -> its worker, deadline
        self._unsendable: list[tuple[int, RewardResult]] = []  # failed in _send, returned by the next poll
        self._tickets = itertools.count()
        self._start_failures = 0
        self.restarts = 0
        self.max_stuck_threads = MAX_STUCK_THREADS
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
        worker = _Worker(process=process, conn=parent)
        worker.sender = threading.Thread(target=_send_all, args=(parent, worker.outbox), daemon=True,
                                         name="areal-reward-send")
        worker.sender.start()
        return worker

    def _retire(self, worker: _Worker) -> None:
        """Stop its sender thread (after the process is gone or asked to exit) and close its pipe."""
        worker.outbox.put(_STOP)
        if worker.sender is not None:
            worker.sender.join(2.0)
        worker.conn.close()

    def close(self) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones (their results abandoned) are killed."""
        for worker in self._workers:
            if worker.busy:
                self._kill(worker)
            else:
                worker.outbox.put(None)  # asks the worker to exit
        deadline = time.monotonic() + 2.0
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                self._kill(worker)
            self._retire(worker)
        self._workers.clear()
        # Nothing of this run is left: a pool started again begins afresh.
        with self._lock:
            self._incoming.clear()
        self._sequential.clear()
        self._by_reward.clear()
        self._alone.clear()
        self._deadlines.clear()
        self._running_at.clear()

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
            self._incoming.append(_Job(ticket, request, self.timeout if timeout is None else timeout))
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
        queued = len(self._incoming) + len(self._sequential) + len(self._alone)
        queued += sum(len(jobs) for jobs in self._by_reward.values())
        return queued + sum(len(w.assigned) + len(w.concurrent) for w in self._workers)

    def _queued(self) -> bool:
        return bool(self._incoming or self._sequential or self._alone or any(self._by_reward.values()))

    def _sort_incoming(self) -> None:
        assert self._concurrency is not None
        with self._lock:
            incoming, self._incoming = self._incoming, deque()
        for job in incoming:
            self._queue_of(job).append(job)

    def _queue_of(self, job: _Job) -> deque[_Job]:
        assert self._concurrency is not None
        if job.alone:
            return self._alone
        if job.request.reward in self._concurrency:
            return self._by_reward.setdefault(job.request.reward, deque())
        return self._sequential

    def _dispatch(self) -> None:
        workers = [w for w in self._workers if w.ready and not w.retiring]
        if not workers or self._concurrency is None:
            return
        self._sort_incoming()
        outgoing: dict[int, list[_Job]] = {}  # id(worker) -> jobs to send it
        # A job that was running when its worker died runs alone, so that it alone fails if it kills again.
        for worker in workers:
            if not self._alone:
                break
            if not worker.busy and not worker.alone:
                job = self._alone.popleft()
                worker.alone = True
                if job.request.reward in self._concurrency:
                    worker.by_reward[job.request.reward] += 1
                outgoing[id(worker)] = [job]
        sharing = [w for w in workers if not w.alone]
        if self._alone and sharing:
            sharing.pop(0)  # no worker is idle: one gets no new work until it is, then takes a job that runs alone
        for reward, jobs in self._by_reward.items():
            limit = self._concurrency[reward]
            while jobs:
                roomy = [w for w in sharing if w.by_reward[reward] < limit]
                if not roomy:
                    break
                worker = min(roomy, key=lambda w: w.by_reward[reward])
                worker.by_reward[reward] += 1
                outgoing.setdefault(id(worker), []).append(jobs.popleft())
        share = -(-len(self._sequential) // len(self._workers))  # an even share over all workers
        size = min(self.batch_size, share)
        for worker in sharing:
            if not self._sequential:
                break
            if worker.assigned:
                continue
            chunk: list[_Job] = []
            work = 0.0
            while self._sequential and len(chunk) < max(1, size):
                work += self._cost.get(self._sequential[0].request.reward, float("inf"))
                if chunk and work > CHUNK_SECONDS:
                    break
                chunk.append(self._sequential.popleft())
            outgoing.setdefault(id(worker), []).extend(chunk)
        for worker in workers:
            jobs = outgoing.get(id(worker))
            if jobs:
                self._send(worker, jobs)

    def _send(self, worker: _Worker, jobs: list[_Job]) -> None:
        assert self._concurrency is not None
        concurrent = [job.request.reward in self._concurrency for job in jobs]
        message = [(job.ticket, job.request.to_dict(), job.timeout, together) for job, together in zip(jobs, concurrent)]
        try:
            data = bytes(ForkingPickler.dumps(message))
        except Exception:  # noqa: BLE001 - one request that cannot travel must not stop the others
            sendable = []
            for job, item in zip(jobs, message):
                try:
                    ForkingPickler.dumps(item)
                    sendable.append(job)
                except Exception as exc:  # noqa: BLE001
                    self._unsendable.append((job.ticket, RewardResult.failure(
                        f"reward {job.request.reward!r}: the request cannot be sent to a reward worker ({exc})")))
            for job in (j for j in jobs if j not in sendable):
                worker.by_reward[job.request.reward] -= job.request.reward in self._concurrency
                worker.alone = worker.alone and not job.alone
            if sendable:
                self._send(worker, sendable)
            return
        # Through the worker's sender thread; a worker that dies before reading it is buried with these jobs.
        worker.outbox.put(data)
        self.messages_sent += 1
        now = time.monotonic()
        for job, together in zip(jobs, concurrent):
            if together:
                deadline = now + job.timeout + _grace(job.timeout)
                worker.concurrent[job.ticket] = job
                self._running_at[job.ticket] = (worker, deadline)
                heapq.heappush(self._deadlines, (deadline, job.ticket))
            else:
                if not worker.assigned:
                    worker.deadline = now + job.timeout
                worker.assigned.append(job)

    def _requeue(self, jobs: Iterable[_Job], alone: bool = False) -> None:
        """Queue jobs again ahead of the others, in their order."""
        for job in reversed(list(jobs)):
            job.alone = job.alone or alone
            self._queue_of(job).appendleft(job)

    def _replace(self, worker: _Worker, suspects: Iterable[_Job] = ()) -> None:
        """Kill and respawn `worker`. What it still had queues again, ahead of the rest: `suspects` (the
        calls that were running when it died, one of which may have killed it) each to run alone."""
        suspect = {job.ticket for job in suspects}
        for job in worker.running():
            job.replaced += 1
            if job.replaced >= REPLACED_ALONE:
                suspect.add(job.ticket)
        for ticket in worker.concurrent:
            self._running_at.pop(ticket, None)
        jobs = list(worker.assigned) + list(worker.concurrent.values())
        self._requeue([job for job in jobs if job.ticket not in suspect])
        self._requeue([job for job in jobs if job.ticket in suspect], alone=True)
        worker.assigned.clear()
        worker.concurrent.clear()
        self._kill(worker)
        self._retire(worker)
        index = self._workers.index(worker)
        self._workers[index] = self._spawn()
        self.restarts += 1

    def _next_deadline(self) -> float | None:
        while self._deadlines:
            deadline, ticket = self._deadlines[0]
            running = self._running_at.get(ticket)
            if running is not None and running[1] == deadline:
                break
            heapq.heappop(self._deadlines)  # answered already, or sent again since
        return self._deadlines[0][0] if self._deadlines else None

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
            if self._unsendable:
                done, self._unsendable = self._unsendable, []
                break
            now = time.monotonic()
            busy = [w for w in self._workers if w.busy]
            if not busy and not self._queued() and wait_until is None:
                return done
            deadlines = [w.deadline for w in busy if w.assigned]
            soonest = self._next_deadline()
            if soonest is not None:
                deadlines.append(soonest)
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
                    self._bury(worker, done)
                elif worker.assigned and time.monotonic() >= worker.deadline:
                    if self._receive(worker, done):  # what it sent meanwhile counts: the head may have answered
                        self._bury(worker, done)
                    elif worker.assigned and time.monotonic() >= worker.deadline:
                        job = worker.assigned.popleft()
                        done.append((job.ticket, _timed_out(job)))
                        self._replace(worker)
                elif worker.retiring and not worker.busy:
                    self._replace(worker)
            now = time.monotonic()
            while (soonest := self._next_deadline()) is not None and soonest <= now:
                _, ticket = heapq.heappop(self._deadlines)
                self._stuck(self._running_at[ticket][0], ticket, done)
            if woken:
                self._dispatch()
                break
            if wait_until is not None and time.monotonic() >= wait_until:
                break
        return done

    def _stuck(self, worker: _Worker, ticket: int, done: list[tuple[int, RewardResult]]) -> None:
        """A concurrent call is past its timeout and grace: its worker did not cancel it, so something blocks
        that worker (its event loop, or the GIL). Results it sent are taken first; the call fails if it ran
        alone, else whichever call blocks is unknown and every call still running there runs again alone."""
        if self._receive(worker, done):
            self._bury(worker, done)
            return
        if ticket not in worker.concurrent:
            return  # it answered just now
        running = worker.running()
        if len(running) == 1:
            job = worker.concurrent.pop(ticket)
            self._running_at.pop(ticket, None)
            done.append((ticket, _timed_out(job)))
            running = []
        self._replace(worker, suspects=running)

    def _bury(self, worker: _Worker, done: list[tuple[int, RewardResult]]) -> None:
        """A worker died: the call that killed it fails; when several were running, which one did is
        unknown, so each runs again alone."""
        worker.process.join(1.0)
        code = worker.process.exitcode
        running = worker.running()
        if len(running) == 1:
            job = running[0]
            if worker.assigned and worker.assigned[0] is job:
                worker.assigned.popleft()
            else:
                worker.concurrent.pop(job.ticket)
                self._running_at.pop(job.ticket, None)
            done.append((job.ticket, RewardResult.failure(
                f"reward {job.request.reward!r} killed its worker process ({_describe_exit(code)})")))
            running = []
        elif not running:
            self._start_failures += 1
            if self._start_failures >= MAX_START_FAILURES:
                raise RewardPoolError(
                    f"reward worker processes exit right after starting ({_describe_exit(code)}); "
                    "check that every plugin imports cleanly (`areal plugins`)"
                )
        self._replace(worker, suspects=running)

    def _receive(self, worker: _Worker, done: list[tuple[int, RewardResult]]) -> bool:
        """Take every message the worker has sent; True when its pipe broke (the process is gone)."""
        try:
            while worker.conn.poll():
                ticket, payload, took, stuck = worker.conn.recv()
                if ticket == "ready":
                    worker.ready = True
                    if self._concurrency is None:
                        self._concurrency = {**payload["concurrency"], **self._overrides}
                    continue
                self._start_failures = 0
                if stuck > self.max_stuck_threads:
                    worker.retiring = True
                job = worker.concurrent.pop(ticket, None)
                if job is not None:
                    self._running_at.pop(ticket, None)
                    worker.by_reward[job.request.reward] -= 1
                else:
                    job = worker.assigned.popleft()
                    cost = self._cost.get(job.request.reward)  # as the worker timed it: no pipe or GIL waits
                    self._cost[job.request.reward] = took if cost is None else 0.8 * cost + 0.2 * took
                    if worker.assigned:
                        worker.deadline = time.monotonic() + worker.assigned[0].timeout
                if job.alone:
                    worker.alone = False
                done.append((ticket, RewardResult.from_dict(payload)))
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


def _timed_out(job: _Job) -> RewardResult:
    return RewardResult.failure(f"reward {job.request.reward!r} timed out after {job.timeout:g}s", timed_out=True)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
