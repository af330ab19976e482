"""`areal score` and the reward pool under it: validation, hard timeouts, dead workers, atomic output."""
import json
import time

import pytest

from areal_core.rewards import RewardPool
from areal_core.types import RewardRequest
from support import process_is_running


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_score_adds_result_fields_and_prints_summary(areal, tmp_path):
    rows = [{"reference": "975", "response": "975"}, {"reference": "005", "response": "500"},
            {"reference": "37", "response": " 37\n"}]
    source = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = areal("score", "--reward", "arithmetic", "--input", str(source), "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "scored 3 rows with reward 'arithmetic': mean score 0.6667, correct 2/3, errors 0" in result.stdout
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["correct"] for r in scored] == [True, False, True]
    assert [r["response"] for r in scored] == ["975", "500", " 37\n"]  # input fields kept, order kept
    assert scored[1]["details"] == {"extracted": "500", "reference": "005"}
    assert all(r["error"] is None for r in scored)


@pytest.mark.parametrize("line, message", [
    ('{"reference": "1", "response": "1"', "in.jsonl:2: not valid JSON"),
    ('["a list"]', "in.jsonl:2: expected a JSON object, got list"),
    ('{"reference": "1"}', "in.jsonl:2: missing field 'response'"),
    ('{"response": "1"}', "in.jsonl:2: missing field 'reference' required by reward 'arithmetic'"),
    ('{"reference": "1", "response": 7}', "in.jsonl:2: field 'response' must be a string"),
])
def test_malformed_input_names_the_line_and_leaves_no_output(areal, tmp_path, line, message):
    source = tmp_path / "in.jsonl"
    source.write_text('{"reference": "1", "response": "1"}\n' + line + "\n")
    out = tmp_path / "out.jsonl"
    result = areal("score", "--reward", "arithmetic", "--input", str(source), "--output", str(out))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [source]


def test_unknown_reward_is_a_clear_error(areal, tmp_path):
    source = write_rows(tmp_path / "in.jsonl", [{"response": "x"}])
    result = areal("score", "--reward", "nope", "--input", str(source))
    assert result.returncode == 2
    assert "no reward named 'nope' is registered (known: arithmetic" in result.stderr


def test_hanging_and_crashing_rewards_get_error_results_without_stalling_the_run(areal, with_plugins, tmp_path):
    env = with_plugins("testkit")
    source = write_rows(tmp_path / "in.jsonl", [{"response": "x"}] * 3)
    out = tmp_path / "out.jsonl"
    start = time.monotonic()
    result = areal("score", "--reward", "hang", "--input", str(source), "--output", str(out),
                   "--timeout", "1", "--workers", "2", env=env)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert "errors 3" in result.stdout and "timed out after 1s" in result.stdout
    assert elapsed < 60
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["error"] for r in scored] == ["reward 'hang' timed out after 1s"] * 3
    assert all(r["score"] == 0.0 and r["correct"] is None for r in scored)


def test_reward_options_from_the_command_line_reach_the_reward(areal, with_plugins, tmp_path):
    env = with_plugins("testkit")
    source = write_rows(tmp_path / "in.jsonl", [{"response": "x"}])
    slow = areal("score", "--reward", "sleepy", "--input", str(source), "--timeout", "1",
                 "--option", "seconds=3", env=env)
    assert "timed out" in slow.stdout
    fast = areal("score", "--reward", "sleepy", "--input", str(source), "--timeout", "5",
                 "--option", "seconds=0.01", env=env)
    assert "mean score 1.0000" in fast.stdout and "errors 0" in fast.stdout


def test_pool_turns_each_kind_of_failure_into_one_error_result_and_keeps_going(testkit_in_process):
    names = ["shout", "raises", "segfault", "exits", "returns_junk", "unserialisable", "hang", "shout"]
    requests = [RewardRequest(reward=n, sample={"reference": "A"}, response="a") for n in names]
    with RewardPool(workers=2, timeout=2) as pool:
        results = pool.score(requests)
        assert pool.restarts == 3  # segfault, exit, hang
    assert results[0].correct is True and results[0].error is None
    assert results[-1].correct is True
    errors = [r.error for r in results[1:-1]]
    assert "raised ValueError: the verifier tripped over its own feet" in errors[0]
    assert "killed its worker process (killed by SIGSEGV)" in errors[1]
    assert "killed its worker process (exit code 3)" in errors[2]
    assert "returned dict; expected RewardResult, bool or float" in errors[3]
    assert "not JSON-serialisable" in errors[4]
    assert errors[5] == "reward 'hang' timed out after 2s"
    assert all(r.score == 0.0 for r in results[1:-1])


def test_pool_timeout_kills_processes_the_reward_started(testkit_in_process, tmp_path):
    pidfile = tmp_path / "child.pid"
    request = RewardRequest(reward="spawn_and_hang", sample={"pidfile": str(pidfile)}, response="")
    with RewardPool(workers=1, timeout=2) as pool:
        [result] = pool.score([request])
    assert "timed out" in result.error
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_is_running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_is_running(child)



def test_pool_runs_requests_in_parallel_and_returns_them_in_order(testkit_in_process):
    requests = [RewardRequest(reward="sleepy", sample={}, response=str(i), options={"seconds": 0.5})
                for i in range(4)]
    requests.append(RewardRequest(reward="shout", sample={"reference": "Z"}, response="z"))
    with RewardPool(workers=2, timeout=10) as pool:
        pool.score([requests[-1]])  # warm up the workers
        start = time.monotonic()
        results = pool.score(requests)
        elapsed = time.monotonic() - start
    assert [r.score for r in results] == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert elapsed < 4 * 0.5  # two workers overlap the sleeps


@pytest.mark.timeout(90)  # a request lost from a chunk would leave score() waiting for it
@pytest.mark.parametrize("misbehaving, error", [({"hang": True}, "reward 'shout' timed out after 2s"),
                                                ({"exit_code": 3}, "reward 'shout' killed its worker process (exit code 3)")])
def test_cheap_requests_travel_in_chunks_and_a_failure_inside_a_chunk_loses_none_of_the_others(
        testkit_in_process, misbehaving, error):
    def request(i, **options):
        return RewardRequest(reward="shout", sample={"reference": f"R{i}"}, response=f"r{i}", options=options)

    with RewardPool(workers=1, timeout=2) as pool:
        assert [r.correct for r in pool.score([request(i) for i in range(20)])] == [True] * 20
        sent = pool.messages_sent
        # shout is now measured as cheap: 60 requests go in a few messages, not 60
        requests = [request(i) for i in range(30)] + [request(30, **misbehaving)] + [request(i) for i in range(31, 60)]
        results = pool.score(requests)
        assert pool.restarts == 1
        assert pool.messages_sent - sent < 10
    assert results[30].error == error and results[30].score == 0.0
    others = results[:30] + results[31:]
    assert all(r.error is None and r.correct for r in others), [r.error for r in others if r.error]
