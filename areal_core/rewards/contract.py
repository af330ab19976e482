"""The reward contract and how one reward call is made.

A reward function is looked up **by name** in the registry, so the same name works in this process,
in a reward worker process or on a Celery worker on another machine:

    fn(sample: dict, response: str, **options) -> RewardResult | bool | float
    async def fn(sample: dict, response: str, **options) -> RewardResult | bool | float

It must not rely on state outside its arguments. `call_reward` and `acall_reward` are the only places a
reward function is invoked: exceptions become `RewardResult.error` (a verifier failure, distinct from a
wrong answer). Hard timeouts cannot be enforced in-process; the reward pool (`areal_core.rewards.pool`)
runs rewards in killable worker processes.

How a reward runs in its worker process follows from how it was registered:
- a plain function (CPU work: parsing, SymPy) runs one call at a time; more workers run more;
- an `async def` reward (an LLM judge, a remote verifier) runs on the worker's event loop, up to
  `concurrency` calls at once;
- a plain function registered `io_bound=True` (it mostly waits: a subprocess, a container, a socket)
  runs in threads, up to `concurrency` calls at once.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from areal_core.errors import InputError
from areal_core.types import RewardResult, coerce_reward_output

RewardFn = Callable[..., Any]


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: its name, function, the plugin that provides it and the sample fields it needs."""

    name: str
    fn: RewardFn
    plugin: str
    required_fields: tuple[str, ...] = ()
    description: str = ""
    # Grading modes: the options each one stands for, e.g. math's {"strict": {"extract": "strict"},
    # "lenient": {"extract": "lenient"}}. Training uses "strict" and evals "lenient" unless the task
    # spec says otherwise (`reward.modes`); a reward without modes is graded one way.
    modes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # A plain function that mostly waits (not CPU work): run it in threads, `concurrency` calls at once.
    io_bound: bool = False
    # Calls one worker process runs at once; only async and io_bound rewards run more than one.
    concurrency: int = 1

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(getattr(self.fn, "__call__", None))

    @property
    def concurrent(self) -> bool:
        """True when calls run side by side in a worker (async or io_bound), not one after another."""
        return self.is_async or self.io_bound

    def missing_fields(self, sample: Mapping[str, Any]) -> list[str]:
        return [f for f in self.required_fields if f not in sample]


def check_sample(spec: RewardSpec, sample: Mapping[str, Any], where: str) -> None:
    """Raise InputError naming `where` when the sample lacks a field the reward requires."""
    missing = spec.missing_fields(sample)
    if missing:
        raise InputError(
            f"{where}: missing field {', '.join(map(repr, missing))} required by reward {spec.name!r} "
            f"(fields present: {', '.join(sorted(sample)) or 'none'})"
        )


# Default `concurrency` of rewards that declare none: an event loop holds many waiting calls cheaply;
# threads cost a stack each.
DEFAULT_ASYNC_CONCURRENCY = 64
DEFAULT_IO_CONCURRENCY = 16
IO_THREAD_NAME = "areal-reward-io"  # the reward pool counts threads of timed-out calls by this name


def call_reward(spec: RewardSpec, sample: Mapping[str, Any], response: str, options: Mapping[str, Any]) -> RewardResult:
    """Run one reward function to its result (an async one on an event loop of its own, so not from inside
    a running event loop: use `acall_reward` there); never raises for anything the function does."""
    try:
        output = spec.fn(dict(sample), response, **dict(options))
        if inspect.isawaitable(output):
            output = asyncio.run(_awaited(output))
    except Exception as exc:
        return _raised(spec, exc)
    return _checked(spec, output)


async def acall_reward(spec: RewardSpec, sample: Mapping[str, Any], response: str,
                       options: Mapping[str, Any]) -> RewardResult:
    """Run one reward function on the running event loop: an async one awaited, a plain one in a thread of
    its own (a call abandoned at its timeout cannot hold a thread the others need). Never raises for
    anything the function does; cancellation (a timeout) passes through."""
    try:
        if spec.is_async:
            output = spec.fn(dict(sample), response, **dict(options))
        else:
            output = await _in_thread(spec.fn, dict(sample), response, dict(options))
        if inspect.isawaitable(output):
            output = await output
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit escaping a task would end the worker's event loop
        return _raised(spec, exc)
    return _checked(spec, output)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _in_thread(fn: RewardFn, sample: dict[str, Any], response: str, options: dict[str, Any]) -> asyncio.Future[Any]:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return  # timed out and cancelled meanwhile
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def run() -> None:
        try:
            value, error = fn(sample, response, **options), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the loop is gone

    threading.Thread(target=run, name=IO_THREAD_NAME, daemon=True).start()
    return future


def _raised(spec: RewardSpec, exc: BaseException) -> RewardResult:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
    return RewardResult.failure(
        f"reward {spec.name!r} raised {type(exc).__name__}: {exc}", traceback="".join(tb)[-2000:]
    )


def _checked(spec: RewardSpec, output: Any) -> RewardResult:
    result = coerce_reward_output(output, spec.name)
    try:
        json.dumps(result.details)
    except (TypeError, ValueError) as exc:
        return RewardResult.failure(f"reward {spec.name!r} returned details that are not JSON-serialisable: {exc}")
    return result
