"""The `celery` reward backend against a real Redis server and real `areal worker` processes:
same results as the local backend, no request lost or answered twice when a worker is killed with
SIGKILL mid-batch, crashing and hanging rewards, queue routing, and clear errors when the broker is
unreachable."""
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from areal_core.plugins import reset_plugin_manager
from areal_core.rewards import (
    RewardService,
    RewardServiceConfig,
    RewardServiceError,
)
from areal_core.rewards.celery_app import TASK_NAME, make_celery_app
from areal_core.types import RewardRequest

pytestmark = pytest.mark.timeout(240)

AREAL = Path(sys.executable).parent / "areal"
TEST_PLUGINS = ("testkit", "servicekit")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A real redis-server on a free port, as `scripts/start-redis.sh` starts it (no persistence)."""

    def __init__(self, directory):
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed; scripts/start-redis.sh installs it")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        import redis

        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.05)

    def stop(self):
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


class Worker:
    def __init__(self, process, name, log):
        self.process, self.name, self.log = process, name, log

    def descendants(self):
        """Pids of every process below the worker (its reward processes)."""
        children = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [self.process.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def kill(self):
        """SIGKILL the worker's whole process group, as a lost machine would end it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


@pytest.fixture(scope="module")
def worker_factory(plugin_dirs, tmp_path_factory):
    started = []
    logs = tmp_path_factory.mktemp("worker-logs")

    def start(broker, *, queues="rewards", concurrency=2, visibility_timeout=300, label="main",
              plugins=TEST_PLUGINS):
        name = f"{label}-{uuid.uuid4().hex[:8]}@test"
        paths = [str(plugin_dirs[p]) for p in plugins]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "AREAL_PLUGINS": ",".join((*plugins, "arithmetic")),
               "OMP_NUM_THREADS": "1", "AREAL_TEST_WORKER": label}
        log = logs / f"{name}.log"
        process = subprocess.Popen(
            [str(AREAL), "worker", "--broker", broker, "--queues", queues, "--concurrency", str(concurrency),
             "--visibility-timeout", str(visibility_timeout), "--loglevel", "warning", "--hostname", name],
            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(process, name, log)
        started.append(worker)
        app = make_celery_app(broker)
        deadline = time.monotonic() + 90
        while not app.control.ping(destination=[name], timeout=0.5):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start:\n{log.read_text()}")
        app.close()
        return worker

    yield start
    for worker in started:
        worker.kill()


@pytest.fixture(scope="module")
def main_worker(redis_server, worker_factory):
    """One worker with the test plugins, serving queue `rewards`, shared by the tests that leave it running."""
    return worker_factory(redis_server.url)


@pytest.fixture
def test_plugins(plugin_dirs, monkeypatch):
    """The same plugins in this process, for the local backend to compare with."""
    for name in TEST_PLUGINS:
        monkeypatch.syspath_prepend(str(plugin_dirs[name]))
    monkeypatch.setenv("AREAL_PLUGINS", ",".join((*TEST_PLUGINS, "arithmetic")))
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def celery(broker, **overrides):
    return RewardServiceConfig(**{"backend": "celery", "broker_url": broker, "timeout": 10.0, "batch_size": 4,
                                  "connect_timeout": 2.0, **overrides})


async def score(config, requests, **kwargs):
    async with RewardService(config) as service:
        return await service.score(requests, **kwargs)


def logged(log, i, seconds=0.0):
    return RewardRequest(reward="logged", sample={"id": i, "log": str(log)}, response="x" * i,
                         options={"seconds": seconds}, request_id=f"r{i}")


def runs(log):
    return [int(line) for line in log.read_text().split()] if log.exists() else []


def mixed_requests():
    requests = [RewardRequest(reward="arithmetic", sample={"reference": str(n)}, response=str(n + (n % 4 == 0)))
                for n in range(21)]
    for name in ("shout", "raises", "segfault", "exits", "hang", "returns_junk", "unserialisable",
                 "no-such-reward"):
        requests.append(RewardRequest(reward=name, sample={"reference": "A"}, response="a"))
    requests.append(RewardRequest(reward="sleepy", sample={}, response="", options={"seconds": 0.2}))
    return requests


def test_celery_results_equal_local_results_on_the_same_inputs(redis_server, main_worker, test_plugins):
    requests = mixed_requests()
    on_celery = asyncio.run(score(celery(redis_server.url, timeout=1.5), requests))
    on_local = asyncio.run(score(RewardServiceConfig(backend="local", workers=2, timeout=1.5), requests))
    assert [r.to_dict() for r in on_celery] == [r.to_dict() for r in on_local]
    errors = [r.error for r in on_celery[21:]]
    assert errors[0] is None and on_celery[21].correct is True
    assert errors[2] == "reward 'segfault' killed its worker process (killed by SIGSEGV)"
    assert errors[3] == "reward 'exits' killed its worker process (exit code 3)"
    assert errors[4] == "reward 'hang' timed out after 1.5s"
    assert sum(r.correct is True for r in on_celery[:21]) == 15


def test_areal_score_with_the_celery_backend_writes_what_the_local_backend_writes(redis_server, main_worker,
                                                                                with_plugins, areal, tmp_path):
    rows = [{"reference": str(n), "response": str(n if n % 3 else n + 1)} for n in range(30)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = with_plugins(*TEST_PLUGINS)
    outputs = {}
    for backend in ("local", "celery"):
        out = tmp_path / f"{backend}.jsonl"
        result = areal("score", "--reward", "arithmetic", "--input", str(source), "--output", str(out),
                       "--backend", backend, "--broker", redis_server.url, "--batch-size", "8", env=env)
        assert result.returncode == 0, result.stderr
        assert "scored 30 rows with reward 'arithmetic': mean score 0.6667, correct 20/30, errors 0" in result.stdout
        outputs[backend] = out.read_text()
    assert outputs["celery"] == outputs["local"]


def test_areal_audit_on_celery_workers_reports_what_the_local_pool_reports(redis_server, main_worker, with_plugins,
                                                                           areal, tmp_path):
    env = with_plugins(*TEST_PLUGINS)
    reports = {}
    for backend in ("local", "celery"):
        out = tmp_path / f"audit-{backend}.json"
        result = areal("audit", "--task", "arithmetic-test", "--n", "10", "--backend", backend, "--broker",
                       redis_server.url, "--batch-size", "16", "--output", str(out), env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        reports[backend] = json.loads(out.read_text())
    assert reports["celery"]["backend"] == "celery" and reports["celery"]["passed"]
    assert reports["celery"]["families"] == reports["local"]["families"]
    assert reports["celery"]["variants"] == reports["local"]["variants"] > 300


VISIBILITY_S = 20


def test_a_worker_killed_with_sigkill_mid_batch_loses_no_request_and_answers_each_once(
        redis_server, worker_factory, tmp_path):
    """Two batches of four 0.5 s rewards run on worker A; A's process group is SIGKILLed mid-batch.
    Redis redelivers both unacknowledged batches to worker B after the visibility timeout; B skips the
    requests A had finished (saved as it went) and every request is answered exactly once.

    The visibility timeout (20 s) must outlast a batch on a loaded machine: a worker restores every
    unacknowledged message older than it, its own running batches too, and a copy redelivered after the
    client has read and deleted the batch's result runs it all again (with 4 s, under parallel tests, B ran
    request 4 a third time)."""
    log = tmp_path / "runs.log"
    first = worker_factory(redis_server.url, queues="kill-test", visibility_timeout=VISIBILITY_S, label="first")
    requests = [logged(log, i, seconds=0.5) for i in range(8)]
    config = celery(redis_server.url, queue="kill-test", batch_size=4, result_timeout=120)

    async def main():
        streamed = []
        async with RewardService(config) as service:
            async def consume():
                async for index, result in service.stream(requests):
                    streamed.append((index, result))

            consumer = asyncio.create_task(consume())
            deadline = time.monotonic() + 60
            while len(runs(log)) < 5 and time.monotonic() < deadline:  # both batches are under way
                await asyncio.sleep(0.05)
            reward_processes = first.descendants()
            first.kill()
            ran_before_kill = runs(log)
            second = await asyncio.to_thread(worker_factory, redis_server.url, queues="kill-test",
                                             visibility_timeout=VISIBILITY_S, label="second")
            try:
                await asyncio.wait_for(consumer, 90)
            finally:
                second.kill()  # its short visibility timeout would redeliver other tests' long batches
        return streamed, ran_before_kill, reward_processes

    streamed, ran_before_kill, reward_processes = asyncio.run(main())
    assert len(ran_before_kill) >= 5
    indices = [index for index, _ in streamed]
    assert sorted(indices) == list(range(8))  # every request answered, none twice
    for index, result in streamed:
        assert result.error is None, result.error
        assert result.details == {"id": index, "response": "x" * index}
    ran = runs(log)
    assert sorted(set(ran)) == list(range(8))
    reruns = len(ran) - 8
    assert 1 <= reruns <= 2  # only what was running when A died ran again: finished requests were skipped
    assert reward_processes and not any(_alive(pid) for pid in reward_processes)  # none outlived A


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_duplicate_delivery_of_a_finished_batch_is_answered_without_running_it_again(
        redis_server, worker_factory, tmp_path):
    log = tmp_path / "runs.log"
    worker_factory(redis_server.url, queues="dup-test", concurrency=1, label="dup")
    app = make_celery_app(redis_server.url)
    batch = [logged(log, i).to_dict() for i in range(3)]
    task_id = str(uuid.uuid4())
    first = app.send_task(TASK_NAME, args=[batch, 5.0], queue="dup-test", task_id=task_id).get(timeout=60)
    app.send_task(TASK_NAME, args=[batch, 5.0], queue="dup-test", task_id=task_id)  # delivered again
    # One task at a time, in order: once this later one is answered, the duplicate has been handled.
    app.send_task(TASK_NAME, args=[[logged(log, 9).to_dict()], 5.0], queue="dup-test").get(timeout=60)
    again = app.AsyncResult(task_id).get(timeout=10)
    app.close()
    assert again == first
    assert [r["details"]["id"] for r in first] == [0, 1, 2]
    assert sorted(runs(log)) == [0, 1, 2, 9]  # the batch ran once


def test_rewards_that_kill_their_process_leave_the_celery_worker_serving(redis_server, main_worker):
    crashing = [RewardRequest(reward=name, sample={}, response="") for name in ("segfault", "exits", "segfault")]
    results = asyncio.run(score(celery(redis_server.url, batch_size=3), crashing))
    assert [r.error for r in results] == [
        "reward 'segfault' killed its worker process (killed by SIGSEGV)",
        "reward 'exits' killed its worker process (exit code 3)",
        "reward 'segfault' killed its worker process (killed by SIGSEGV)",
    ]
    assert main_worker.process.poll() is None
    [after] = asyncio.run(score(celery(redis_server.url), [RewardRequest(reward="shout", sample={"reference": "Q"},
                                                                          response="q")]))
    assert after.correct is True


def test_a_reward_that_sleeps_past_the_timeout_gets_a_timeout_error_promptly(redis_server, main_worker):
    requests = [RewardRequest(reward="sleepy", sample={}, response="", options={"seconds": 60}),
                RewardRequest(reward="hang", sample={}, response=""),
                RewardRequest(reward="sleepy", sample={}, response="", options={"seconds": 0.1})]
    start = time.monotonic()
    results = asyncio.run(score(celery(redis_server.url, timeout=1.0, batch_size=3), requests))
    elapsed = time.monotonic() - start
    assert [r.error for r in results] == ["reward 'sleepy' timed out after 1s", "reward 'hang' timed out after 1s",
                                          None]
    assert elapsed < 30


def test_rewards_routed_to_a_queue_run_only_on_the_workers_serving_it(redis_server, main_worker, worker_factory):
    worker_factory(redis_server.url, queues="code", concurrency=1, label="code")
    requests = [RewardRequest(reward="whoami", sample={}, response="") for _ in range(3)]
    routed = asyncio.run(score(celery(redis_server.url, routes={"whoami": "code"}), requests))
    default = asyncio.run(score(celery(redis_server.url), requests))
    assert [r.details["worker"] for r in routed] == ["code"] * 3
    assert [r.details["worker"] for r in default] == ["main"] * 3


def test_an_unreachable_broker_is_a_clear_error_not_a_hang(areal, tmp_path):
    closed = f"redis://127.0.0.1:{free_port()}/0"
    start = time.monotonic()
    with pytest.raises(RewardServiceError) as info:
        asyncio.run(score(celery(closed), [RewardRequest(reward="arithmetic", sample={}, response="")]))
    assert time.monotonic() - start < 30
    assert str(info.value).startswith(f"cannot reach the Celery broker at {closed} (")
    assert "scripts/start-redis.sh" in str(info.value)

    source = tmp_path / "in.jsonl"
    source.write_text('{"reference": "1", "response": "1"}\n')
    scored = areal("score", "--reward", "arithmetic", "--input", str(source), "--backend", "celery",
                   "--broker", closed, timeout=60)
    assert scored.returncode == 2
    assert scored.stderr.startswith(f"error: cannot reach the Celery broker at {closed}")
    assert "Traceback" not in scored.stderr
    worker = areal("worker", "--broker", closed, timeout=60)
    assert worker.returncode == 2
    assert worker.stderr.startswith(f"error: cannot reach the Celery broker at {closed}")


def test_no_worker_serving_the_queue_is_a_clear_error_at_start(redis_server):
    with pytest.raises(RewardServiceError) as info:
        asyncio.run(score(celery(redis_server.url, queue="nobody-serves-this"), []))
    assert str(info.value) == (
        f"no Celery worker serves queue 'nobody-serves-this' at {redis_server.url}; start one with "
        f"`areal worker --broker {redis_server.url} --queues nobody-serves-this`")


def test_a_batch_no_worker_picks_up_gets_error_results_after_the_result_timeout(redis_server):
    config = celery(redis_server.url, queue="abandoned", require_workers=False, result_timeout=1.0, timeout=0.5)
    requests = [RewardRequest(reward="shout", sample={}, response="") for _ in range(2)]
    start = time.monotonic()
    results = asyncio.run(score(config, requests))
    assert time.monotonic() - start < 15
    expected = (f"no result from a Celery worker within 2s (queue 'abandoned' at {redis_server.url}); "
                "is `areal worker` serving that queue?")
    assert [r.error for r in results] == [expected] * 2


def test_the_broker_going_down_mid_run_gives_error_results_not_a_hang(worker_factory, tmp_path):
    server = RedisServer(tmp_path)
    try:
        worker_factory(server.url, label="doomed")
        log = tmp_path / "runs.log"
        requests = [logged(log, i, seconds=1.0) for i in range(4)]

        async def main():
            async with RewardService(celery(server.url, batch_size=2, result_timeout=60)) as service:
                task = asyncio.create_task(service.score(requests))
                while len(runs(log)) < 2:
                    await asyncio.sleep(0.05)
                server.stop()
                start = time.monotonic()
                results = await asyncio.wait_for(task, 60)
                return results, time.monotonic() - start

        results, elapsed = asyncio.run(main())
    finally:
        server.stop()
    assert all(r.error is not None for r in results)
    assert all("Celery result backend" in r.error or "Celery broker" in r.error for r in results), results
    assert elapsed < 30


# -- async and io_bound rewards on Celery workers ----------------------------------------------------------
def judge(seconds, **options):
    return RewardRequest(reward="async_sleepy", sample={}, response="", options={"seconds": seconds, **options})


def test_a_slow_request_does_not_hold_back_its_batch_mates_on_celery(redis_server, main_worker):
    """One batch of eight: a 3 s judge call and seven quick ones. The quick results are handed out as the
    worker saves them, while the slow one still runs, not when the whole batch is done."""
    requests = [judge(3.0)] + [judge(0.05) for _ in range(7)]

    async def main():
        async with RewardService(celery(redis_server.url, batch_size=8)) as service:
            return [(index, result) async for index, result in service.stream(requests)]

    streamed = asyncio.run(main())
    assert [index for index, _ in streamed][-1] == 0
    assert all(result.correct for _, result in streamed)
    slow = dict(streamed)[0].details
    quick_ended = max(result.details["ended"] for index, result in streamed if index)
    assert quick_ended < slow["ended"] - 2  # the quick ones had all finished long before


def test_async_requests_of_one_celery_batch_run_side_by_side(redis_server, main_worker):
    from test_concurrent_rewards import most_at_once

    results = asyncio.run(score(celery(redis_server.url, batch_size=16), [judge(0.5) for _ in range(16)]))
    assert all(r.correct for r in results)
    assert len({r.details["pid"] for r in results}) == 1 and most_at_once(results) == 16


def test_a_hung_async_request_on_celery_times_out_alone(redis_server, main_worker):
    requests = [judge(0.0, hang=True)] + [judge(0.1) for _ in range(5)]
    results = asyncio.run(score(celery(redis_server.url, timeout=1.0, batch_size=6), requests))
    assert results[0].error == "reward 'async_sleepy' timed out after 1s"
    assert all(r.correct for r in results[1:])


def test_areal_score_and_areal_eval_grade_an_async_reward_on_celery_as_on_the_local_pool(
        redis_server, main_worker, with_plugins, areal, tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "eval"))
    from eval_support import read_details, read_metrics, write_replay

    env = with_plugins(*TEST_PLUGINS)
    replay = write_replay(tmp_path / "bot.jsonl", "arithmetic-latency", 40, 1, lambda i, j: i % 5 != 0)
    rows = [json.loads(line) for line in replay.read_text().splitlines()]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({**row, "reference": row["response"] if i % 5 else "0"}) + "\n"
                              for i, row in enumerate(rows)))
    scored, evals = {}, {}
    for backend in ("local", "celery"):
        out = tmp_path / f"{backend}.jsonl"
        result = areal("score", "--reward", "arithmetic_latency", "--input", str(source), "--output", str(out),
                       "--backend", backend, "--broker", redis_server.url, "--batch-size", "8",
                       "--option", "median_s=0.2", env=env)
        assert result.returncode == 0, result.stderr
        assert "scored 40 rows with reward 'arithmetic_latency': mean score 0.8000, correct 32/40, errors 0" in result.stdout
        scored[backend] = out.read_text()
        run = areal("eval", "--model", f"replay:{replay}", "--tasks", "arithmetic-latency", "--limit", "40",
                    "--reward-backend", backend, "--broker", redis_server.url, "--output-dir", str(tmp_path / backend),
                    "--reward-option", "median_s=0.2", env={**env, "AREAL_EVAL_DB": str(tmp_path / f"{backend}.db")})
        assert run.returncode == 0, run.stderr
        metrics = read_metrics(tmp_path / backend, "bot", "arithmetic-latency")["metrics"]
        assert (metrics["problems"], metrics["correct"], metrics["errors"]) == (40, 32, 0)
        evals[backend] = [(d["prompt_id"], d["verdict"]) for d in read_details(tmp_path / backend, "bot",
                                                                               "arithmetic-latency")]
    assert scored["celery"] == scored["local"] and evals["celery"] == evals["local"]


def test_training_with_an_async_reward_on_celery_workers(redis_server, main_worker, tmp_path, monkeypatch):
    from areal_core.config import load_config
    from areal_core.rl.config import SYNC_OVERRIDES, TrainConfig
    from areal_core.rl.run import run_training

    monkeypatch.setenv("AREAL_CACHE_DIR", str(tmp_path / "cache"))
    config = load_config(TrainConfig, None, [
        f"output_dir={tmp_path}", "task=arithmetic-latency", "eval_task=null", "steps=3", "tensorboard=false",
        "rollout.batch_size=8", "rollout.group_size=8", "reward.backend=celery", f"reward.broker_url={redis_server.url}",
        "reward_options.median_s=0.05", *SYNC_OVERRIDES])
    summary = asyncio.run(run_training(config, echo=lambda *a: None))
    run_dir = tmp_path / summary["run_dir"].split("/")[-1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["dropped_responses"] == 0 and m["staleness_hist"] == {"0": 64} for m in metrics)
