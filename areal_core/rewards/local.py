"""The `local` reward backend: a RewardPool on this machine, driven by one dedicated thread.

The pool's blocking wait (for results, deadlines and dead workers) runs in the thread named
"areal-reward-pool"; the event loop only queues requests (`RewardPool.submit` + `wakeup`) and
receives results through `call_soon_threadsafe`. Hard timeouts, killed-and-replaced workers and
error results all come from the pool (areal_core.rewards.pool).
"""
from __future__ import annotations

import asyncio
import threading

from areal_core.rewards.pool import RewardPool
from areal_core.rewards.config import RewardServiceError
from areal_core.rewards.service import Deliver
from areal_core.types import RewardRequest, RewardResult

# How often the pool thread looks at its stop flag when nothing wakes it.
_POLL_S = 0.5


class LocalBackend:
    """Runs rewards in `workers` killable processes on this machine."""

    name = "local"

    def __init__(self, workers: int = 2, timeout: float = 30.0, memory_limit_mb: int | None = None,
                 start_method: str = "spawn", concurrency: dict[str, int] | None = None) -> None:
        self.pool = RewardPool(workers=workers, timeout=timeout, memory_limit_mb=memory_limit_mb,
                               start_method=start_method, concurrency=concurrency)
        self._keys: dict[int, int] = {}  # pool ticket -> service key
        self._lock = threading.Lock()
        self._stopping = False
        self._broken: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: Deliver | None = None

    async def start(self, deliver: Deliver) -> None:
        self._loop = asyncio.get_running_loop()
        self._deliver = deliver
        self._thread = threading.Thread(target=self._run, name="areal-reward-pool", daemon=True)
        self._thread.start()

    def submit(self, key: int, request: RewardRequest, timeout: float) -> None:
        if self._broken is not None:
            raise RewardServiceError(self._broken)
        with self._lock:
            ticket = self.pool.submit(request, timeout=timeout)
            self._keys[ticket] = key
        self.pool.wakeup()

    def _run(self) -> None:
        try:
            self.pool.start()
            while not self._stopping:
                finished = self.pool.poll(timeout=_POLL_S)
                if finished:
                    with self._lock:
                        pairs = [(self._keys.pop(ticket), result) for ticket, result in finished
                                 if ticket in self._keys]
                    self._hand_over(pairs)
        except Exception as exc:  # the pool cannot run rewards at all (e.g. workers die at start-up)
            self._broken = f"the local reward pool stopped: {exc}"
            with self._lock:
                pairs = [(key, RewardResult.failure(self._broken)) for key in self._keys.values()]
                self._keys.clear()
            self._hand_over(pairs)
        finally:
            self.pool.close()

    def _hand_over(self, pairs: list[tuple[int, RewardResult]]) -> None:
        if not pairs:
            return
        assert self._loop is not None and self._deliver is not None
        deliver = self._deliver

        def deliver_all() -> None:
            for key, result in pairs:
                deliver(key, result)

        try:
            self._loop.call_soon_threadsafe(deliver_all)
        except RuntimeError:
            pass  # the event loop is closed: nobody is waiting any more

    async def close(self) -> None:
        """Stop the pool thread and its worker processes (running requests are killed)."""
        self._stopping = True
        self.pool.wakeup()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
