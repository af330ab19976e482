"""Fixtures for the SGLang client tests: real `areal serve` processes, and a real SGLang server on this CPU.

Loaded with `pytest_plugins = ["conftest_sglang"]` by test_sglang_client.py and test_sglang_real.py.
"""
from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from areal_core.engine.protocol import GenerateRequest
from areal_core.engine.launch import ServerProcess
from engine_checks import reference_logprobs  # noqa: F401  (re-exported for the test modules)

REPO = Path(__file__).resolve().parents[2]
SHIM = Path(__file__).resolve().parent / "sglang_cpu_shim"
SGLANG_CPU_ARGS = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
                   "--dtype", "float32", "--disable-cuda-graph", "--sleep-on-idle", "--max-total-tokens", "8192"]


def _free_port() -> int:
    """tests/engine/conftest.py's free_port (loaded by path: two conftest modules share the name)."""
    spec = importlib.util.spec_from_file_location("_engine_conftest", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.free_port()


class ArealServers:
    """`count` real `areal serve` processes on free ports; `ensure()` restarts any that died (a test kills one)
    and un-pauses them all, so every test starts from servers that answer."""

    def __init__(self, model_dir: Path, count: int, log_dir: Path) -> None:
        self.model_dir = model_dir
        self.log_dir = log_dir
        self.processes: list[ServerProcess | None] = [None] * count

    def _new(self, i: int) -> ServerProcess:
        return ServerProcess.areal(self.model_dir, _free_port(), log_path=self.log_dir / f"areal-{i}.log",
                                   env={"OMP_NUM_THREADS": "1"},
                                   extra_args=["--torch-threads", "1", "--max-running-requests", "16"])

    def ensure(self) -> list[ServerProcess]:
        restarted = []
        for i, process in enumerate(self.processes):
            if process is None or not process.alive:
                if process is not None:
                    process.stop()
                self.processes[i] = self._new(i).start()
                restarted.append(self.processes[i])
        with ThreadPoolExecutor(len(self.processes)) as pool:
            list(pool.map(lambda p: p.wait_ready(180), self.processes))
        for process in self.processes:
            httpx.post(f"{process.url}/continue_generation", json={}, timeout=30).raise_for_status()
        survivors = [p for p in self.processes if p not in restarted]
        if survivors and restarted:   # a restarted server loads the weights the others serve now
            info = httpx.get(f"{survivors[0].url}/model_info", timeout=30).json()
            for process in restarted:
                httpx.post(f"{process.url}/update_weights_from_disk", timeout=60, json={
                    "model_path": info["model_path"], "weight_version": info["weight_version"]}).raise_for_status()
        return list(self.processes)

    def stop(self) -> None:
        for process in self.processes:
            if process is not None:
                process.stop()


@pytest.fixture(scope="module")
def areal_pool(tiny_model, tmp_path_factory):
    pool = ArealServers(tiny_model, 2, tmp_path_factory.mktemp("areal-logs"))
    yield pool
    pool.stop()


@pytest.fixture
def areal_pair(areal_pool) -> list[ServerProcess]:
    """Two live, un-paused `areal serve` servers (shared by the module's tests; weights may have been updated)."""
    return areal_pool.ensure()


def sglang_python() -> Path | None:
    """The interpreter of the SGLang virtualenv: $AREAL_SGLANG_PYTHON, else .venv-sglang in the checkout."""
    env = os.environ.get("AREAL_SGLANG_PYTHON")
    path = Path(env) if env else REPO / ".venv-sglang" / "bin" / "python"
    return path if path.exists() else None


@pytest.fixture(scope="module")
def sglang_server(tiny_model, tmp_path_factory):
    """A real SGLang server (launch_server) on this CPU serving the tiny model, with initial weight version 0.

    SGLANG_USE_CPU_ENGINE=1 selects SGLang's CPU platform; the test-only shim in sglang_cpu_shim/ stands
    in for the CUDA-only sgl-kernel package (see its docstring)."""
    python = sglang_python()
    if python is None:
        where = (f"AREAL_SGLANG_PYTHON={os.environ['AREAL_SGLANG_PYTHON']} does not exist"
                 if os.environ.get("AREAL_SGLANG_PYTHON") else f"{REPO / '.venv-sglang'} does not exist")
        pytest.skip(f"no SGLang virtualenv ({where}): run `bash scripts/setup-sglang.sh`")
    log = tmp_path_factory.mktemp("sglang-logs") / "sglang.log"
    env = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(SHIM), *filter(None, [os.environ.get("PYTHONPATH")])])}
    server = ServerProcess.sglang(tiny_model, _free_port(), python=str(python), env=env, log_path=log,
                                  extra_args=SGLANG_CPU_ARGS, weight_version=0)
    server.start()
    try:
        server.wait_ready(600)
        yield server
    finally:
        server.stop()


async def pause_mid_generation(engine, prompts, params, running_count, mode: str = "retract", attempts: int = 3):
    """Submit one request per prompt, pause the engine (with `mode`) once the servers report them all generating,
    and return their tasks: every request is then paused mid-generation. `running_count()` (async) reads the
    servers' own count. On a loaded machine a request can finish before the pause lands (seen as its task
    done once the pause returned); the batch is then run out and submitted again."""
    for _ in range(attempts):
        tasks = [asyncio.create_task(engine.generate(GenerateRequest(p, params))) for p in prompts]
        deadline = time.monotonic() + 120
        while not any(t.done() for t in tasks) and await running_count() < len(prompts):
            assert time.monotonic() < deadline, f"the servers did not start {len(prompts)} requests in 120s"
            await asyncio.sleep(0.02)
        # every request past its first token, and far from its last: at 0.3 s the tiny model had finished all
        # 200 tokens on a quiet machine before the pause landed
        await asyncio.sleep(0.1)
        if not any(t.done() for t in tasks):
            await engine.pause(mode)
            await asyncio.sleep(0.2)  # a response sent just before the pause reaches its task
            if not any(t.done() for t in tasks):
                return tasks
            await engine.resume()
        await asyncio.gather(*tasks)
    raise AssertionError(f"requests finished before a pause could land in {attempts} tries; make them longer")


def health_on_one_connection_after_idling(url: str, idle: float) -> list[int | str]:
    """GET /health twice on one keep-alive connection, idle for `idle` seconds in between: the two statuses, or
    the error that came instead of the second (the server closed the connection meanwhile)."""
    import http.client

    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    statuses: list[int | str] = []
    try:
        for wait in (0.0, idle):
            time.sleep(wait)
            try:
                connection.request("GET", "/health")
                response = connection.getresponse()
                response.read()
                statuses.append(response.status)
            except (http.client.HTTPException, ConnectionError) as exc:
                statuses.append(type(exc).__name__)
    finally:
        connection.close()
    return statuses
