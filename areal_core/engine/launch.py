"""Starting generation engines: the `engine` config section, the backend it names (found in the plugin
registry), and the server processes the built-in backends launch (`areal serve`, SGLang's launch_server).

    async with start_engines(config, EngineTarget(model=model_dir), run_dir) as engine:   # an InferenceEngine
        ...

Server processes run in their own process group (SGLang starts scheduler and detokenizer subprocesses), so
stopping one ends all of it; a training run's servers die with it, even when it is killed with SIGKILL.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Literal, Mapping, Sequence

import httpx

from areal_core.engine.protocol import SERVER_KEEP_ALIVE_SECONDS, EngineError, EngineTarget, InferenceEngine
from areal_core.errors import PluginError

PROTOCOL_METHODS = sorted(name for name, member in vars(InferenceEngine).items()
                          if callable(member) and not name.startswith("_"))


@dataclass
class EngineConfig:
    """Generation: which backend, and how many servers of what size.

    backend: a registered engine backend: "local" (in this process), "server" (`areal serve` processes),
    "sglang" (SGLang servers), or one a plugin adds (`areal plugins` lists them)."""

    backend: str = "local"
    servers: int = 1                  # server, sglang: number of server processes to start
    urls: list[str] = field(default_factory=list)   # server, sglang: servers already running (else launched)
    launch_args: list[str] = field(default_factory=list)  # sglang: extra launch_server arguments
    torch_threads: int | None = 1     # of each engine (None: torch's default); 1 when sharing a small CPU
    max_running_requests: int = 256
    # local, server: a finished request's keys/values stay in its idle slot for a next turn that extends them
    # (a multi-turn episode prefills only its new text); this adds slots beyond max_running_requests for them
    prefix_cache_slots: int = 0
    # local, server: the dtype of the engine's weights and arithmetic. bfloat16 samples from another policy than a
    # float32 trainer learns, the engine/trainer mismatch GPU engines have (bench/bench_mismatch.py); sglang: --dtype
    # in launch_args. float8 / float4 / int4 / int3: weights rounded to float8 e4m3 / 4-bit e2m1 / 4- or 3-bit
    # integers, arithmetic in bfloat16 (FP8, FP4, W4 and W3 rollout engines, engine/model.py WEIGHT_DTYPES).
    dtype: Literal["float32", "bfloat16", "float16", "float8", "float4", "int4", "int3"] = "float32"
    # local, server: the torch device the engine generates on (cuda, cuda:1, ...); sglang: its own (launch_args)
    device: str = "cpu"
    startup_timeout: float = 300.0
    # How new weights reach the engines after a step (rl/weight_updates.py): disk (weights/vN, loaded by every
    # server), distributed (streamed in buckets of at most weight_bucket_mb: broadcast over a process group the
    # trainer shares with the servers, NCCL on GPUs and gloo on CPUs; copied in memory into an engine in the
    # trainer's process), delta (as distributed, but after the first update only the parameters the optimizer
    # changes: requires_grad). weight_group_host: the address the servers reach the trainer's rank 0 at (default:
    # 127.0.0.1 for servers on this machine, else this machine's address on the route to the first server).
    weight_sync: Literal["disk", "distributed", "delta"] = "disk"
    weight_bucket_mb: float = 256.0
    weight_group_host: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # settings of a plugin backend (built-ins take none)

    def validate(self) -> None:
        from areal_core.plugins import check_backend

        check_backend("engine", self.backend)
        if self.servers < 1:
            raise ValueError(f"servers must be >= 1, got {self.servers}")
        if self.prefix_cache_slots < 0:
            raise ValueError(f"prefix_cache_slots must be >= 0, got {self.prefix_cache_slots}")
        if self.weight_bucket_mb <= 0:
            raise ValueError(f"weight_bucket_mb must be > 0, got {self.weight_bucket_mb}")


@contextlib.asynccontextmanager
async def start_engines(config: EngineConfig, target: EngineTarget, run_dir: Path | None = None
                        ) -> AsyncIterator[InferenceEngine]:
    """The engines of backend `config.backend` serving `target`: entering starts them, leaving stops them.
    What a plugin's backend yields is checked against the protocol at once, not when a missing method is
    first called (at the end of a run)."""
    from areal_core.plugins import backends

    spec = backends("engine").get(config.backend)
    async with spec.factory(target, config, run_dir) as engine:
        missing = [name for name in PROTOCOL_METHODS if not callable(getattr(engine, name, None))]
        if missing:
            raise PluginError(f"engine backend {config.backend!r} (plugin {spec.plugin!r}) gave a "
                              f"{type(engine).__name__} without {', '.join(missing)}: not an InferenceEngine")
        yield engine


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def running_servers(processes: Sequence["ServerProcess"], timeout: float):
    """Start `processes` (they die with this process), wait until every one answers /health, yield their
    URLs; stop them all on the way out, or when one fails to start."""
    try:
        for process in processes:
            process.start(die_with_parent=True)
        for process in processes:
            await asyncio.to_thread(process.wait_ready, timeout)
        yield [p.url for p in processes]
    finally:
        for process in processes:
            process.stop()


def _kill_me_with_parent() -> None:
    """In the forked child, before exec: ask Linux for SIGKILL when the parent dies (PR_SET_PDEATHSIG)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass  # not glibc Linux: the server outlives a killed parent, as without this option


class ServerProcess:
    """A generation server in a child process (SGLang's launch_server, or `areal serve`), with readiness wait.

    The child runs in its own process group (SGLang starts scheduler and detokenizer subprocesses), so
    `stop()` ends all of it. Usable as a context manager: `with ServerProcess.areal(m, port) as server:`.
    """

    def __init__(self, command: list[str], url: str, env: Mapping[str, str] | None = None,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        self.command = command
        self.url = url
        self.env = {**os.environ, **(env or {})}
        self.log_path = str(log_path) if log_path else None
        self.process: subprocess.Popen | None = None
        self._group_ended = False

    @classmethod
    def sglang(cls, model_path: str | os.PathLike[str], port: int, host: str = "127.0.0.1",
               extra_args: Sequence[str] = (), python: str | None = None, env: Mapping[str, str] | None = None,
               log_path: str | os.PathLike[str] | None = None, weight_version: int | None = 0) -> "ServerProcess":
        """`python -m sglang.launch_server --model-path M --host H --port P [--weight-version V] EXTRA...`.

        python: the interpreter that has SGLang (default $AREAL_SGLANG_PYTHON, else this one);
        weight_version: the version tag of the initial weights (None: SGLang's "default", read as 0)."""
        python = python or os.environ.get("AREAL_SGLANG_PYTHON") or sys.executable
        command = [python, "-m", "sglang.launch_server", "--model-path", str(model_path), "--host", host,
                   "--port", str(port)]
        if weight_version is not None and "--weight-version" not in extra_args:
            command += ["--weight-version", str(int(weight_version))]
        keep_alive = {} if "SGLANG_TIMEOUT_KEEP_ALIVE" in os.environ else \
            {"SGLANG_TIMEOUT_KEEP_ALIVE": str(SERVER_KEEP_ALIVE_SECONDS)}   # the user's own setting wins
        return cls(command + list(extra_args), f"http://{host}:{port}", {**keep_alive, **(env or {})}, log_path)

    @classmethod
    def areal(cls, model_path: str | os.PathLike[str], port: int, host: str = "127.0.0.1",
              extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
              log_path: str | os.PathLike[str] | None = None) -> "ServerProcess":
        """`areal serve M --host H --port P EXTRA...` with this interpreter."""
        command = [sys.executable, "-m", "areal_core.cli", "serve", str(model_path), "--host", host,
                   "--port", str(port), *extra_args]
        return cls(command, f"http://{host}:{port}", env, log_path)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, die_with_parent: bool = False) -> "ServerProcess":
        """die_with_parent: the server gets SIGKILL when the process that started it dies, even by kill -9
        (Linux; tied to the calling thread, so call it from a thread that lives as long as the server)."""
        if self.alive:
            return self
        self._group_ended = False
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=_kill_me_with_parent if die_with_parent else None)
        except OSError as exc:
            raise EngineError(f"cannot start {self.command[0]!r} for {self.url}: {exc}") from None
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        return self

    def wait_ready(self, timeout: float = 300.0) -> "ServerProcess":
        """Block until GET /health answers 200; EngineError (with the log's tail) if the process exits or
        the timeout passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise EngineError(f"server {self.url} exited with code {self.process.returncode} while starting"
                                  + self._log_tail())
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise EngineError(f"server {self.url} did not become healthy within {timeout:.0f}s" + self._log_tail())

    def _log_tail(self, lines: int = 15) -> str:
        if not self.log_path or not Path(self.log_path).is_file():
            return ""
        tail = Path(self.log_path).read_text(errors="replace").splitlines()[-lines:]
        return f"; last lines of {self.log_path}:\n" + "\n".join(tail)

    def stop(self, sig: int = 15, timeout: float = 20.0) -> None:
        """Send `sig` to the server's process group and wait; SIGKILL if it is still there after `timeout`."""
        if self.process is None or self._group_ended:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)
        try:  # children (SGLang's scheduler, detokenizer) may outlive the leader
            os.killpg(self.process.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self._group_ended = True

    def kill(self) -> None:
        """SIGKILL the whole server at once, as a crash would."""
        self.stop(9)

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def sglang_servers(model_path: str | os.PathLike[str], count: int = 1, *, host: str = "127.0.0.1",
                   base_port: int = 30000, gpus_per_server: int = 1, gpu_ids: Sequence[int] | None = None,
                   extra_args: Sequence[str] = (), python: str | None = None, env: Mapping[str, str] | None = None,
                   log_dir: str | os.PathLike[str] | None = None, weight_version: int | None = 0) -> list[ServerProcess]:
    """The SGLang servers to run on one GPU machine (not started): server i listens on base_port + i and sees
    GPUs gpu_ids[i*g:(i+1)*g] (g = gpus_per_server; gpu_ids defaults to 0..count*g-1) through
    CUDA_VISIBLE_DEVICES (g = 0 leaves it alone, e.g. for a CPU server); with g > 1 pass `--tp-size g` in
    extra_args. Logs go to log_dir/sglang-i.log."""
    if count < 1 or gpus_per_server < 0:
        raise EngineError(f"count must be >= 1 and gpus_per_server >= 0, got {count} and {gpus_per_server}")
    gpu_ids = list(gpu_ids) if gpu_ids is not None else list(range(count * gpus_per_server))
    if len(gpu_ids) < count * gpus_per_server:
        raise EngineError(f"{count} servers x {gpus_per_server} GPUs need {count * gpus_per_server} GPU ids, "
                          f"got {len(gpu_ids)}: {gpu_ids}")
    servers = []
    for i in range(count):
        server_env = dict(env or {})
        if gpus_per_server:
            server_env["CUDA_VISIBLE_DEVICES"] = ",".join(
                str(g) for g in gpu_ids[i * gpus_per_server:(i + 1) * gpus_per_server])
        log_path = Path(log_dir) / f"sglang-{i}.log" if log_dir else None
        if log_path:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        servers.append(ServerProcess.sglang(model_path, base_port + i, host=host, extra_args=extra_args,
                                            python=python, env=server_env, log_path=log_path,
                                            weight_version=weight_version))
    return servers


def launch_sglang_servers(model_path: str | os.PathLike[str], count: int = 1, *, startup_timeout: float = 900.0,
                          **options: Any) -> list[ServerProcess]:
    """Start `sglang_servers(model_path, count, **options)` together and wait until all are healthy; if any
    fails to start, stop them all and raise EngineError saying which and why (with its log's tail)."""
    servers = sglang_servers(model_path, count, **options)
    try:
        for server in servers:
            server.start()
        deadline = time.monotonic() + startup_timeout
        for server in servers:
            server.wait_ready(max(1.0, deadline - time.monotonic()))
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers
