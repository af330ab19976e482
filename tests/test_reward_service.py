"""The async reward service with its default `local` backend: ordering, streaming, failures,
back-pressure, idempotent request ids, timeouts and shutdown, with real worker processes."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from areal_core.errors import ConfigError, InputError
from areal_core.plugins import reset_plugin_manager
from areal_core.rewards import reward_registry
from areal_core.rewards import (
    RewardService,
    RewardServiceConfig,
    RewardServiceError,
)
from areal_core.rewards import call_reward
from areal_core.types import RewardRequest
from support import process_is_running

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def test_plugins(plugin_dirs, monkeypatch):
    """testkit + servicekit + arithmetic loaded here; spawned reward workers inherit sys.path and env."""
    for name in ("testkit", "servicekit"):
        monkeypatch.syspath_prepend(str(plugin_dirs[name]))
    monkeypatch.setenv("AREAL_PLUGINS", "testkit,servicekit,arithmetic")
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def run(coroutine):
    return asyncio.run(coroutine)


def local(**overrides):
    return RewardServiceConfig(**{"backend": "local", "workers": 2, "timeout": 10.0, **overrides})


def logged(tmp_path, i, seconds=0.0, request_id=""):
    return RewardRequest(reward="logged", sample={"id": i, "log": str(tmp_path / "runs.log")}, response="x" * i,
                         options={"seconds": seconds}, request_id=request_id)


def runs(tmp_path):
    path = tmp_path / "runs.log"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_score_returns_results_in_request_order_equal_to_calling_the_reward_directly(test_plugins):
    requests = [RewardRequest(reward="arithmetic", sample={"reference": str(n)}, response=str(n + (n % 3 == 0)))
                for n in range(40)]
    requests += [RewardRequest(reward="shout", sample={"reference": w.upper()}, response=w) for w in ("a", "b")]

    async def main():
        async with RewardService(local()) as service:
            return await service.score(requests)

    results = run(main())
    registry = reward_registry()
    expected = [call_reward(registry.get(r.reward), r.sample, r.response, r.options) for r in requests]
    assert results == expected
    assert [r.correct for r in results[:6]] == [False, True, True, False, True, True]


def test_stream_yields_each_index_once_as_results_complete(test_plugins, tmp_path):
    # request 0 is slow: with two workers the fast ones finish (and are yielded) before it
    requests = [logged(tmp_path, 0, seconds=1.5)] + [logged(tmp_path, i) for i in range(1, 6)]

    async def main():
        async with RewardService(local()) as service:
            return [(i, r) async for i, r in service.stream(requests)]

    streamed = run(main())
    order = [i for i, _ in streamed]
    assert sorted(order) == list(range(6))
    assert order[-1] == 0
    assert all(r.details["id"] == i and r.score == float(i) for i, r in streamed)


def test_rewards_that_raise_crash_or_hang_get_error_results_and_the_service_keeps_scoring(test_plugins):
    names = ["raises", "segfault", "exits", "hang", "returns_junk", "shout"]
    requests = [RewardRequest(reward=n, sample={"reference": "A"}, response="a") for n in names]
    requests.append(RewardRequest(reward="no-such-reward", sample={}, response=""))

    async def main():
        async with RewardService(local(timeout=1.5)) as service:
            start = time.monotonic()
            results = await service.score(requests)
            elapsed = time.monotonic() - start
            after = await service.score([RewardRequest(reward="shout", sample={"reference": "B"}, response="b")])
            return results, elapsed, after

    results, elapsed, after = run(main())
    errors = [r.error for r in results]
    assert "raised ValueError: the verifier tripped over its own feet" in errors[0]
    assert errors[1] == "reward 'segfault' killed its worker process (killed by SIGSEGV)"
    assert errors[2] == "reward 'exits' killed its worker process (exit code 3)"
    assert errors[3] == "reward 'hang' timed out after 1.5s"
    assert "returned dict; expected RewardResult, bool or float" in errors[4]
    assert errors[5] is None and results[5].correct is True
    assert "no reward named 'no-such-reward' is registered" in errors[6]
    assert all(r.score == 0.0 and r.correct is None for r in results[:5])
    assert elapsed < 15
    assert after[0].correct is True


def test_workers_that_cannot_start_give_error_results_then_a_clear_error_instead_of_a_hang(test_plugins):
    # 20 MB of address space is too little for a Python reward worker to import anything.
    requests = [RewardRequest(reward="shout", sample={"reference": "A"}, response="a")] * 3

    async def main():
        async with RewardService(local(workers=1, memory_limit_mb=20)) as service:
            results = await asyncio.wait_for(service.score(requests), 60)
            with pytest.raises(RewardServiceError, match="the local reward pool stopped: reward worker processes "
                                                         "exit right after starting"):
                await service.submit(requests[0])
            return results

    results = run(main())
    assert all(r.error.startswith("the local reward pool stopped: reward worker processes exit right after starting")
               for r in results)


def test_a_per_call_timeout_overrides_the_configured_one(test_plugins):
    request = RewardRequest(reward="sleepy", sample={}, response="", options={"seconds": 1.0})

    async def main():
        async with RewardService(local(timeout=30)) as service:
            short = await service.score([request], timeout=0.3)
            default = await service.score([request])
            return short[0], default[0]

    short, default = run(main())
    assert short.error == "reward 'sleepy' timed out after 0.3s"
    assert default.error is None and default.score == 1.0


def test_submit_waits_for_room_when_max_in_flight_requests_are_unfinished(test_plugins, tmp_path):
    async def main():
        async with RewardService(local(max_in_flight=2)) as service:
            first = await service.submit(logged(tmp_path, 1, seconds=1.0))
            second = await service.submit(logged(tmp_path, 2, seconds=1.0))
            assert service.in_flight == 2
            third = asyncio.ensure_future(service.submit(logged(tmp_path, 3)))
            await asyncio.sleep(0.3)
            blocked = not third.done()
            result = await (await third)  # room frees up when a slow one finishes
            assert first.done() or second.done()
            return blocked, result, await first, await second

    blocked, third, first, second = run(main())
    assert blocked
    assert (first.details["id"], second.details["id"], third.details["id"]) == (1, 2, 3)


def test_stream_submits_more_requests_than_max_in_flight_as_room_frees_up(test_plugins, tmp_path):
    requests = [logged(tmp_path, i, seconds=0.05) for i in range(12)]

    async def main():
        async with RewardService(local(max_in_flight=3)) as service:
            seen = []
            async for index, result in service.stream(requests):
                assert service.in_flight <= 3
                seen.append((index, result.details["id"]))
            return seen

    seen = run(main())
    assert sorted(seen) == [(i, i) for i in range(12)]
    assert sorted(runs(tmp_path)) == list(range(12))


def test_a_request_id_already_in_flight_is_scored_once(test_plugins, tmp_path):
    async def main():
        async with RewardService(local()) as service:
            a = await service.submit(logged(tmp_path, 7, seconds=0.5, request_id="sample-7"))
            b = await service.submit(logged(tmp_path, 7, seconds=0.5, request_id="sample-7"))
            streamed = [i async for i, _ in service.stream([logged(tmp_path, 8, request_id="s8"),
                                                             logged(tmp_path, 8, request_id="s8")])]
            return a is b, await a, sorted(streamed)

    same, result, streamed = run(main())
    assert same and result.details["id"] == 7
    assert streamed == [0, 1]  # both positions answered, from one run
    assert sorted(runs(tmp_path)) == [7, 8]


def test_close_waits_for_requests_in_flight(test_plugins, tmp_path):
    async def main():
        service = RewardService(local())
        await service.start()
        future = await service.submit(logged(tmp_path, 4, seconds=0.5))
        await service.close()
        return future

    future = run(main())
    assert future.done() and future.result().details["id"] == 4


def test_close_with_cancel_pending_cancels_futures_and_stops_the_worker_processes(test_plugins):
    async def main():
        service = RewardService(local(timeout=60))
        await service.start()
        futures = [await service.submit(RewardRequest(reward="hang", sample={}, response="")) for _ in range(3)]
        await asyncio.sleep(1.0)
        workers = [w.process for w in service.backend.pool._workers]
        start = time.monotonic()
        await service.close(cancel_pending=True)
        return futures, workers, time.monotonic() - start, service

    futures, workers, elapsed, service = run(main())
    assert all(f.cancelled() for f in futures)
    assert elapsed < 5
    assert workers and not any(p.is_alive() for p in workers)
    with pytest.raises(RewardServiceError, match="the reward service is closed"):
        run(service.submit(RewardRequest(reward="shout", sample={}, response="")))


def test_leaving_the_context_on_an_error_cancels_what_is_in_flight(test_plugins):
    async def main():
        futures = []
        with pytest.raises(KeyError):
            async with RewardService(local(timeout=60)) as service:
                futures.append(await service.submit(RewardRequest(reward="hang", sample={}, response="")))
                raise KeyError("caller failed")
        return futures

    [future] = run(main())
    assert future.cancelled()


def test_using_the_service_before_start_is_a_clear_error():
    service = RewardService(local())
    with pytest.raises(RewardServiceError, match=r"not started \(use `async with RewardService"):
        run(service.submit(RewardRequest(reward="shout", sample={}, response="")))


def test_submit_rejects_what_is_not_a_reward_request(test_plugins):
    async def main():
        async with RewardService(local()) as service:
            with pytest.raises(InputError, match="submit expects a RewardRequest, got dict"):
                await service.submit({"reward": "shout"})
            with pytest.raises(InputError, match="timeout must be a number of seconds > 0, got -1"):
                await service.submit(RewardRequest(reward="shout", sample={}, response=""), timeout=-1)

    run(main())


@pytest.mark.parametrize("overrides, message", [
    ({"backend": "ray"}, "reward service: backend 'ray' is not a registered reward backend (registered: celery, "
                         "local; plugins add more"),
    ({"workers": 0}, "reward service workers: expected an integer >= 1, got 0"),
    ({"timeout": 0}, "reward service timeout: expected a number of seconds > 0, got 0"),
    ({"batch_size": 1.5}, "reward service batch_size: expected an integer >= 1, got 1.5"),
    ({"broker_url": "localhost:6379"}, "reward service broker_url: expected a URL like redis://host:6379/0"),
    ({"routes": {"code": ""}}, "reward service routes.code: expected a non-empty queue name"),
])
def test_a_bad_setting_is_one_sentence_naming_it(overrides, message):
    with pytest.raises(ConfigError) as info:
        RewardServiceConfig(**overrides)
    assert message in str(info.value)


def test_a_non_redis_broker_needs_an_explicit_result_backend():
    config = RewardServiceConfig(backend="celery", broker_url="amqp://guest:secret@rabbit:5672//")
    with pytest.raises(ConfigError, match=r"amqp://guest:\*\*\*@rabbit:5672//: a non-Redis broker needs a result backend"):
        config.resolved_result_backend()
    assert RewardServiceConfig(broker_url="amqp://h//", result_backend="redis://h:6379/1").resolved_result_backend() == \
        "redis://h:6379/1"


def test_reward_workers_die_with_the_process_that_started_them(plugin_dirs, tmp_path):
    """A pool whose process is killed with SIGKILL leaves no reward process behind (no orphans)."""
    pidfile = tmp_path / "worker.pid"
    script = textwrap.dedent(f"""
        import os, sys, time
        from areal_core.rewards import RewardPool
        from areal_core.types import RewardRequest
        if __name__ == "__main__":
            with RewardPool(workers=1, timeout=600) as pool:
                pool.submit(RewardRequest(reward="hang", sample={{}}, response=""))
                pool.poll(timeout=3)  # dispatched and running
                open({str(pidfile)!r}, "w").write(str(pool._workers[0].process.pid))
                time.sleep(600)
    """)
    env = {**os.environ, "PYTHONPATH": str(plugin_dirs["testkit"]), "AREAL_PLUGINS": "testkit"}
    owner = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = int(pidfile.read_text())
        assert process_is_running(worker)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 5
        while process_is_running(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not process_is_running(worker)
    finally:
        owner.kill()
