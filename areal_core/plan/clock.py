"""A virtual clock for asyncio: the production controller's coroutines run unchanged, time advances by cost models.

`VirtualClockLoop` is a selector event loop whose `time()` is a number it keeps: when no callback is ready, instead
of waiting for the next timer it jumps to it (a discrete-event simulation), so `asyncio.sleep(3600)` returns at once
with `loop.time()` an hour later. Everything asyncio schedules by time (sleep, wait_for, timeouts, call_later) runs
in virtual seconds, in the order a real loop would run it.

Work handed to a thread (`asyncio.to_thread`, `run_in_executor`; the run loop calls its trainer that way) runs
inline in the loop instead, and its future resolves `charge`d seconds later: a simulated trainer says what a step
costs by calling `charge(seconds)` while it runs (its side effects happen at the start of that time, its result
reaches the caller at the end). Work whose time depends on what else runs meanwhile (a trainer sharing its
hardware with generation, plan/colocation.py) calls `charge_until(coroutine)` instead: its future resolves when
the coroutine, run on the loop, returns. Real I/O with no timer behind it cannot be simulated: when every
task waits and no timer is set, the loop raises `SimulationStalled` rather than wait forever.
"""
from __future__ import annotations

import asyncio
import selectors
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


class SimulationStalled(RuntimeError):
    """Every task waits and no timer is set: nothing in a simulation can ever happen again."""


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real file descriptors (the loop's self-pipe) without waiting; a wait for a timer moves the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise SimulationStalled("the simulation stalled: every task waits and no timer is set (a task waits "
                                    "for something only real I/O or another thread could bring)")
        self.loop._advance(timeout)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock (see the module docstring); `charge` from work it runs inline."""

    def __init__(self, start: float = 0.0) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = float(start)
        self._charged = 0.0
        self._until: Any = None

    def time(self) -> float:
        return self._now

    def _advance(self, seconds: float) -> None:
        # the loop asked to wait `seconds` for its earliest timer: that timer is due now
        self._now += max(seconds, 0.0)

    def charge(self, seconds: float) -> None:
        """The inline work now running takes `seconds` of virtual time (its future resolves that much later)."""
        if seconds < 0:
            raise ValueError(f"a cost must be >= 0 seconds, got {seconds}")
        self._charged += seconds

    def charge_until(self, work: Awaitable[Any]) -> None:
        """The inline work now running ends when the coroutine `work` (run on this loop) returns, after any
        seconds charged; its side effects happen at the start."""
        if self._until is not None:
            raise RuntimeError("charge_until() was already called for this work")
        self._until = work

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        self._charged, self._until = 0.0, None
        try:
            result = func(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, as a thread's would be
            settle, value = future.set_exception, exc
        else:
            settle, value = future.set_result, result
        charged, self._charged = self._charged, 0.0
        until, self._until = self._until, None
        if until is None:
            self.call_later(charged, _settle, future, settle, value)
        else:
            self.create_task(_settle_after(charged, until, future, settle, value), name="simulated work")
        return future


def _settle(future: asyncio.Future, settle: Callable[[Any], None], value: Any) -> None:
    if not future.cancelled():
        settle(value)


async def _settle_after(seconds: float, work: Awaitable[Any], future: asyncio.Future,
                        settle: Callable[[Any], None], value: Any) -> None:
    await asyncio.sleep(seconds)
    await work
    _settle(future, settle, value)


def charge(seconds: float) -> None:
    """Charge `seconds` of virtual time to the work now running inline in a `VirtualClockLoop`."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, VirtualClockLoop):
        raise RuntimeError("charge() is for work run by a VirtualClockLoop (a simulated backend on the virtual clock)")
    loop.charge(seconds)


def charge_until(work: Awaitable[Any]) -> None:
    """The work now running inline in a `VirtualClockLoop` ends when the coroutine `work` returns."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, VirtualClockLoop):
        raise RuntimeError("charge_until() is for work run by a VirtualClockLoop (a simulated backend on the virtual "
                           "clock)")
    loop.charge_until(work)


def run_virtual(main: Any, start: float = 0.0) -> Any:
    """Run the coroutine `main` to completion on a fresh `VirtualClockLoop` (as asyncio.run does on a real one)."""
    loop = VirtualClockLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
