"""The engine backends that come with areal-core, registered as a default plugin (see plugins/manager.py):

    local    the embedded torch engine in this process (continuous batching, interruptible)
    server   `areal serve` processes (the local engine behind SGLang's HTTP API), reached with the SGLang client
    sglang   SGLang servers (launched on this machine, or `engine.urls` of servers already running)

Each is a factory `(target, config, run_dir) -> async context manager of an InferenceEngine`; a plugin adds
one the same way (`register_engines` in hookspecs.py).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import AsyncIterator, Callable

from areal_core.engine.launch import EngineConfig, ServerProcess, free_port, running_servers
from areal_core.engine.protocol import EngineTarget, InferenceEngine
from areal_core.errors import ConfigError
from areal_core.plugins import check_no_options, hookimpl


def _check(config: EngineConfig, target: EngineTarget, needs_model: bool) -> None:
    check_no_options("engine", config.backend, config.options)
    if needs_model and target.model is None:
        raise ConfigError(f"engine backend {config.backend!r} starts engines on a model directory; none was given")


@contextlib.asynccontextmanager
async def local_engines(target: EngineTarget, config: EngineConfig, run_dir: Path | None) -> AsyncIterator[InferenceEngine]:
    """The embedded engine in this process."""
    from areal_core.engine.local import LocalEngine

    _check(config, target, needs_model=True)
    if target.urls:
        raise ConfigError("the local engine backend generates in this process and connects to no server "
                          f"({', '.join(target.urls)}); use backend server or sglang for servers already running")
    engine = LocalEngine(target.model, max_running_requests=config.max_running_requests,
                         torch_threads=config.torch_threads, prefix_cache_slots=config.prefix_cache_slots,
                         dtype=config.dtype, device=config.device).start()
    try:
        yield engine
    finally:
        await engine.close()


ServerStarter = Callable[[Path, int, str, dict[str, str], EngineConfig], ServerProcess]


def _servers(server_process: ServerStarter, sglang: bool = False):
    """A backend of HTTP servers behind the SGLang client: the target's `urls`, else `config.servers` processes
    made by `server_process(model, port, log_path, env, config)` on this machine, which die with this one.
    sglang: real SGLang servers, which read SGLANG_RETURN_ORIGINAL_LOGPROB from this environment."""
    @contextlib.asynccontextmanager
    async def engines(target: EngineTarget, config: EngineConfig, run_dir: Path | None) -> AsyncIterator[InferenceEngine]:
        from areal_core.engine.sglang_client import SGLangEngine, returns_original_logprobs

        _check(config, target, needs_model=not target.urls)
        if config.device != "cpu" and (sglang or target.urls):
            raise ConfigError(f"engine.device={config.device} sets the device of engines areal starts itself (local, "
                              "server); SGLang chooses its own (--device in engine.launch_args), servers already "
                              "running keep theirs")
        if config.dtype != "float32" and (sglang or target.urls):
            raise ConfigError(f"engine.dtype={config.dtype} sets the dtype of engines areal starts itself (local, "
                              "server); give SGLang its own (--dtype in engine.launch_args), servers already running "
                              "keep theirs")
        async with contextlib.AsyncExitStack() as stack:
            urls = list(target.urls)
            if not urls:
                env = {"AREAL_PARENT_PID": str(os.getpid())}
                if config.torch_threads:
                    env["OMP_NUM_THREADS"] = str(config.torch_threads)
                logs = run_dir or Path.cwd()
                logs.mkdir(parents=True, exist_ok=True)
                processes = [server_process(target.model, free_port(), str(logs / f"engine-{i}.log"), env, config)
                             for i in range(config.servers)]
                urls = await stack.enter_async_context(running_servers(processes, config.startup_timeout))
            original = sglang and returns_original_logprobs(os.environ)
            yield await stack.enter_async_context(SGLangEngine(urls, original_logprobs=original))

    return engines


def _areal_serve(model: Path, port: int, log: str, env: dict[str, str], config: EngineConfig) -> ServerProcess:
    threads = ["--torch-threads", str(config.torch_threads)] if config.torch_threads else []
    kept = ["--prefix-cache-slots", str(config.prefix_cache_slots)] if config.prefix_cache_slots else []
    return ServerProcess.areal(str(model), port, log_path=log, env=env,
                               extra_args=[*threads, *kept, "--dtype", config.dtype, "--device", config.device,
                                           "--max-running-requests", str(config.max_running_requests)])


def _sglang_server(model: Path, port: int, log: str, env: dict[str, str], config: EngineConfig) -> ServerProcess:
    return ServerProcess.sglang(str(model), port, extra_args=config.launch_args, log_path=log, env=env)


server_engines = _servers(_areal_serve)
sglang_engines = _servers(_sglang_server, sglang=True)


@hookimpl
def register_engines(register) -> None:
    register("local", local_engines, description="the embedded torch engine, in this process")
    register("server", server_engines, description="`areal serve` processes behind the SGLang client")
    register("sglang", sglang_engines, description="SGLang servers: launched here, or engine.urls")
