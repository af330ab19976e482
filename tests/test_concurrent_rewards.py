"""Async and io_bound rewards in the reward pool: side by side in one worker, each with its own deadline, and
a slow, hung, crashing or loop-blocking call never delays or takes down its batch-mates."""
import asyncio
import json
import os

import pytest

from areal_core.errors import PluginError
from areal_core.rewards import RewardPool, RewardService, RewardServiceConfig, call_reward
from areal_core.rewards.registry import make_reward_spec, reward_registry
from areal_core.types import RewardRequest


def judge(**options):
    return RewardRequest(reward="async_sleepy", sample={}, response="", options=options)


def waiter(**options):
    return RewardRequest(reward="io_sleepy", sample={}, response="", options=options)


def most_at_once(results):
    """The largest number of calls that were running at the same instant, from the calls' own timestamps."""
    events = sorted([(r.details["started"], 1) for r in results] + [(r.details["ended"], -1) for r in results])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def test_async_calls_run_side_by_side_in_one_worker_and_io_bound_ones_up_to_their_concurrency(testkit_in_process):
    with RewardPool(workers=1, timeout=30) as pool:
        judged = pool.score([judge(seconds=0.5) for _ in range(40)])
        waited = pool.score([waiter(seconds=0.3) for _ in range(24)])
    assert all(r.correct and r.error is None for r in judged + waited)
    assert len({r.details["pid"] for r in judged + waited}) == 1  # one worker process ran them all
    assert most_at_once(judged) == 40  # concurrency 64: all of them at once
    assert most_at_once(waited) == 8  # io_sleepy is registered with concurrency=8
    assert pool.restarts == 0


def test_the_configured_concurrency_overrides_the_declared_one_and_runs_a_plain_reward_in_threads(testkit_in_process):
    plain = [RewardRequest(reward="sleepy", sample={}, response="", options={"seconds": 0.3}) for _ in range(6)]
    with RewardPool(workers=1, timeout=30, concurrency={"io_sleepy": 3, "sleepy": 6}) as pool:
        waited = pool.score([waiter(seconds=0.3) for _ in range(9)])
        threaded = list(pool.map(plain))
    assert most_at_once(waited) == 3
    assert [r.score for _, r in threaded] == [1.0] * 6
    with pytest.raises(ValueError, match="concurrency of reward 'judge' must be an integer >= 1, got 0"):
        RewardPool(concurrency={"judge": 0})


def test_a_slow_call_never_delays_its_batch_mates(testkit_in_process):
    requests = [judge(seconds=3), waiter(seconds=3)] + [judge(seconds=0.05) for _ in range(10)] + \
        [waiter(seconds=0.05) for _ in range(6)] + [RewardRequest(reward="shout", sample={"reference": "A"}, response="a")]
    with RewardPool(workers=1, timeout=30) as pool:
        order = [index for index, _ in pool.map(requests)]
    assert sorted(order[-2:]) == [0, 1]  # the two slow ones come last, every fast one before them
    assert sorted(order[:-2]) == list(range(2, len(requests)))


@pytest.mark.parametrize("slow, restarts", [
    (judge(hang=True), 0),    # awaits forever: cancelled at its timeout, the worker keeps serving
    (waiter(hang=True), 0),   # blocks its thread forever: abandoned at its timeout, the worker keeps serving
    # blocks the event loop: the worker is killed past the grace; which call blocked is unknown, so each
    # call that was running runs again alone, and the culprit, blocking alone, is killed and fails
    (judge(block=True), 2),
])
def test_a_call_past_its_timeout_fails_alone(testkit_in_process, slow, restarts):
    others = [judge(seconds=0.2) for _ in range(6)] + [waiter(seconds=0.2) for _ in range(3)]
    with RewardPool(workers=1, timeout=1.5) as pool:
        results = pool.score([slow, *others])
        assert pool.restarts == restarts
        after = pool.score([judge(seconds=0.01)])
    assert results[0].error == f"reward {slow.reward!r} timed out after 1.5s" and results[0].details["timed_out"]
    assert all(r.correct and r.error is None for r in results[1:]), [r.error for r in results[1:]]
    assert after[0].correct


def test_a_call_that_kills_its_worker_among_concurrent_ones_is_found_and_fails_alone(testkit_in_process):
    requests = [judge(seconds=0.3) for _ in range(4)] + [judge(seconds=0.1, exit_code=3)] + \
        [judge(seconds=0.3) for _ in range(4)]
    with RewardPool(workers=2, timeout=10) as pool:
        results = pool.score(requests)
    assert results[4].error == "reward 'async_sleepy' killed its worker process (exit code 3)"
    others = results[:4] + results[5:]
    assert all(r.correct and r.error is None for r in others), [r.error for r in others]


def test_an_exception_in_an_async_reward_is_an_error_result(testkit_in_process):
    with RewardPool(workers=1, timeout=10) as pool:
        failed, fine = pool.score([judge(fail=True), judge(seconds=0.01)])
        exited = pool.score([judge(seconds=0.01, system_exit=True), waiter(seconds=0.01, system_exit=True),
                             judge(seconds=0.01, cancel=True), judge(seconds=0.01)])
        # SystemExit or a CancelledError of the reward's own ends neither the event loop nor the worker
        assert pool.restarts == 0
    assert failed.error == "reward 'async_sleepy' raised ConnectionError: the judge hung up"
    assert "ConnectionError" in failed.details["traceback"] and fine.correct
    assert [r.error for r in exited] == ["reward 'async_sleepy' raised SystemExit: 4",
                                         "reward 'io_sleepy' raised SystemExit: 4",
                                         "reward 'async_sleepy' raised CancelledError: ", None]


def test_a_request_that_cannot_be_sent_to_a_worker_fails_alone(testkit_in_process):
    unsendable = RewardRequest(reward="shout", sample={"reference": "A", "helper": lambda: 0}, response="a")
    fine = RewardRequest(reward="shout", sample={"reference": "A"}, response="a")
    with RewardPool(workers=1, timeout=10) as pool:
        results = pool.score([fine, unsendable, fine, judge(seconds=0.01, helper=lambda: 0), judge(seconds=0.01)])
    assert results[1].error.startswith("reward 'shout': the request cannot be sent to a reward worker (")
    assert results[3].error.startswith("reward 'async_sleepy': the request cannot be sent to a reward worker (")
    assert [r.correct for r in results] == [True, None, True, None, True]


def test_a_worker_left_with_too_many_stuck_threads_is_replaced_once_its_calls_finish(testkit_in_process):
    with RewardPool(workers=1, timeout=0.5) as pool:
        pool.max_stuck_threads = 2
        first = pool.score([judge(seconds=0.01)])[0].details["pid"]
        stuck = pool.score([waiter(hang=True) for _ in range(3)])
        assert all(r.details.get("timed_out") for r in stuck)
        later = pool.score([judge(seconds=0.01)])[0]
        assert pool.restarts == 1
    assert later.correct and later.details["pid"] != first


def test_async_rewards_through_the_reward_service_stream_fast_results_first(testkit_in_process):
    async def main():
        async with RewardService(RewardServiceConfig(workers=1, timeout=20)) as service:
            return [index async for index, _ in service.stream([judge(seconds=2)] + [judge(seconds=0.05)] * 8)]

    order = asyncio.run(main())
    assert order[-1] == 0 and sorted(order) == list(range(9))


def test_call_reward_runs_an_async_reward_in_process(testkit_in_process):
    spec = reward_registry().get("async_sleepy")
    assert spec.is_async and spec.concurrent and spec.concurrency == 64
    result = call_reward(spec, {}, "", {"seconds": 0.01})
    assert result.correct and result.details["pid"] == os.getpid()


def test_the_registration_of_concurrency_is_checked():
    async def judge_fn(sample, response):
        return True

    def plain(sample, response):
        return True

    assert make_reward_spec("p", "judge", judge_fn)[1].concurrency == 64  # async: 64 at once unless it says
    assert make_reward_spec("p", "wait", plain, io_bound=True)[1].concurrency == 16
    assert make_reward_spec("p", "cpu", plain)[1].concurrency == 1
    with pytest.raises(PluginError, match="plugin 'p': reward 'cpu': concurrency=8 needs an `async def` reward "
                                          r"or io_bound=True \(a CPU-bound reward runs one call per worker"):
        make_reward_spec("p", "cpu", plain, concurrency=8)
    with pytest.raises(PluginError, match="reward 'judge': concurrency must be an integer >= 1, got 0"):
        make_reward_spec("p", "judge", judge_fn, concurrency=0)
    with pytest.raises(PluginError, match="reward 'wait': io_bound must be True or False, got 'yes'"):
        make_reward_spec("p", "wait", plain, io_bound="yes")


def test_areal_score_scores_an_async_reward_with_a_concurrency_override(areal, tmp_path):
    rows = [{"id": str(i), "reference": str(i), "response": str(i if i % 4 else i + 1)} for i in range(64)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    result = areal("score", "--reward", "arithmetic_latency", "--input", str(source), "--output", str(out),
                   "--workers", "1", "--option", "median_s=0.05", "--reward-concurrency", "arithmetic_latency=16",
                   env={"AREAL_PLUGINS": "arithmetic"})
    assert result.returncode == 0, result.stderr
    assert "scored 64 rows with reward 'arithmetic_latency': mean score 0.7500, correct 48/64, errors 0" in result.stdout
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(0 < r["details"]["latency_s"] <= 3.0 for r in scored)
    bad = areal("score", "--reward", "arithmetic_latency", "--input", str(source), "--reward-concurrency", "judge",
                env={"AREAL_PLUGINS": "arithmetic"})
    assert bad.returncode != 0 and "--reward-concurrency 'judge': expected NAME=N" in bad.stderr
