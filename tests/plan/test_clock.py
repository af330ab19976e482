"""The virtual clock (plan/clock.py): asyncio's timers, waits and thread hand-offs in virtual seconds, in the order
a real loop runs them, without waiting for them."""
from __future__ import annotations

import asyncio
import time

import pytest

from areal_core.plan.clock import SimulationStalled, VirtualClockLoop, charge, run_virtual


def test_a_sleep_of_an_hour_returns_at_once_an_hour_later_on_the_clock():
    async def main():
        loop = asyncio.get_running_loop()
        before = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - before

    started = time.perf_counter()
    assert run_virtual(main(), start=100.0) == 3600.0
    assert time.perf_counter() - started < 30


def test_tasks_wake_in_the_order_and_at_the_times_of_their_timers():
    woke = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        woke.append((name, asyncio.get_running_loop().time()))

    async def main():
        await asyncio.gather(sleeper("c", 3.0), sleeper("a", 1.0), sleeper("b", 2.5), sleeper("a2", 1.0))

    run_virtual(main())
    assert woke == [("a", 1.0), ("a2", 1.0), ("b", 2.5), ("c", 3.0)]


def test_wait_for_times_out_in_virtual_seconds_and_a_condition_wakes_its_waiter_when_notified():
    async def main():
        loop = asyncio.get_running_loop()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout=30)
        timed_out_at = loop.time()
        condition, state = asyncio.Condition(), {"ready": False}

        async def producer():
            await asyncio.sleep(7)
            async with condition:
                state["ready"] = True
                condition.notify_all()

        asyncio.ensure_future(producer())
        async with condition:
            await condition.wait_for(lambda: state["ready"])
        return timed_out_at, loop.time()

    assert run_virtual(main()) == (30.0, 37.0)


def test_work_handed_to_a_thread_runs_inline_and_resolves_the_seconds_it_charged_later():
    def train_step(tokens: int) -> str:
        charge(tokens * 0.01)   # what the simulated step costs
        return f"trained {tokens}"

    def failing_step() -> None:
        charge(2.0)
        raise ValueError("a bad batch")

    async def main():
        loop = asyncio.get_running_loop()
        order = []

        async def generation():
            await asyncio.sleep(4)
            order.append(("generation", loop.time()))

        async def training():
            order.append((await asyncio.to_thread(train_step, 1000), loop.time()))

        await asyncio.gather(training(), generation())
        with pytest.raises(ValueError, match="a bad batch"):
            await asyncio.to_thread(failing_step)
        order.append(("failed", loop.time()))
        order.append((await loop.run_in_executor(None, lambda: "free"), loop.time()))
        return order

    assert run_virtual(main()) == [("generation", 4.0), ("trained 1000", 10.0), ("failed", 12.0), ("free", 12.0)]


def test_a_simulation_where_nothing_can_happen_again_stops_with_a_clear_error():
    async def main():
        await asyncio.Event().wait()

    with pytest.raises(SimulationStalled, match="every task waits and no timer is set"):
        run_virtual(main())


def test_charge_outside_a_virtual_loop_and_a_negative_cost_are_refused():
    async def main():
        charge(1.0)

    with pytest.raises(RuntimeError, match="charge\\(\\) is for work run by a VirtualClockLoop"):
        asyncio.run(main())
    loop = VirtualClockLoop()
    try:
        with pytest.raises(ValueError, match="a cost must be >= 0 seconds, got -1"):
            loop.charge(-1)
    finally:
        loop.close()
