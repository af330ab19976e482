"""The Docker backends: a warm pool of reused containers, and one fresh container per execution.

Each container runs the harness supervisor as PID 1 (see harness/supervisor.py) with:
no network, an unprivileged user, all capabilities dropped and no-new-privileges, a read-only root
filesystem with small tmpfs mounts (/work, /tmp, /dev/shm), a memory cgroup without swap, a pids
limit, a CPU quota, no logging, no host mount and none of the host's environment. The host talks to
the supervisor over the container's attached stdin/stdout. The container is created with
``StdinOnce`` and ``AutoRemove``: when the process holding the attachment dies (even by SIGKILL),
Docker closes the container's stdin, the supervisor exits and Docker removes the container, so no
container outlives its owner.
"""
from __future__ import annotations

import atexit
import itertools
import os
import socket
import struct
import threading
import time
import uuid
from typing import Any

from areal_sandbox.errors import DockerUnavailableError, ImageMissingError, SandboxError
from areal_sandbox.image import SANDBOX_UID, SUPERVISOR_CMD, WORK_DIR, harness_hash, image_harness
from areal_sandbox.types import Execution, ExecutionResult, SandboxConfig, TestVerdict

LABEL = "areal.sandbox"
START_HINT = ("start it with `bash sandbox/scripts/start-docker.sh` (installs docker.io with apt-get if needed "
              "and starts dockerd; needs root), or point DOCKER_HOST at a running engine")


class ContainerLost(SandboxError):
    """The container stopped answering (it died, or overran the host-side deadline)."""


def docker_client(timeout: float = 120.0):
    """A Docker SDK client for the engine in the environment (DOCKER_HOST or the local socket)."""
    try:
        import docker
    except ImportError:  # pragma: no cover - a dependency of this distribution
        raise DockerUnavailableError("the Docker SDK for Python is not installed; pip install docker") from None
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise DockerUnavailableError(f"cannot reach the Docker engine at {where} ({type(exc).__name__}); "
                                     f"{START_HINT}") from None
    return client


def check_image(client, image: str) -> None:
    """Raise ImageMissingError unless `image` exists and carries the installed harness."""
    recorded = image_harness(client, image)
    if recorded is None:
        raise ImageMissingError(f"the sandbox image {image!r} does not exist; build it with "
                                f"`areal sandbox build-image --tag {image}`")
    if recorded != harness_hash():
        raise ImageMissingError(f"the sandbox image {image!r} holds another version of the harness "
                                f"({recorded or 'none'}, installed {harness_hash()}); rebuild it with "
                                f"`areal sandbox build-image --tag {image}`")


def container_options(config: SandboxConfig, pool_id: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """(create_container kwargs, host config kwargs) enforcing the config's isolation and limits."""
    mib = 1024 * 1024
    tmpfs_opts = f"nosuid,nodev,noexec,mode=1777,uid={SANDBOX_UID},gid={SANDBOX_UID}"
    memory = (config.memory_mb + config.workdir_mb + config.tmp_mb + config.shm_mb + config.overhead_mb) * mib
    host = dict(
        network_mode="none",
        read_only=True,
        tmpfs={WORK_DIR: f"size={config.workdir_mb}m,{tmpfs_opts}", "/tmp": f"size={config.tmp_mb}m,{tmpfs_opts}"},
        shm_size=config.shm_mb * mib,
        ipc_mode="private",
        mem_limit=memory,
        memswap_limit=memory,
        pids_limit=config.pids_limit,
        nano_cpus=int(config.cpus * 1e9),
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        log_config={"type": "none", "config": {}},
        auto_remove=True,
        oom_score_adj=500,
    )
    create = dict(
        user=f"{SANDBOX_UID}:{SANDBOX_UID}",
        working_dir=WORK_DIR,
        stdin_open=True,  # with detach=False this also sets StdinOnce
        tty=False,
        network_disabled=True,
        environment={},  # nothing of the host's environment goes in
        labels={LABEL: "1", f"{LABEL}.owner": f"{socket.gethostname()}:{os.getpid()}", f"{LABEL}.pool": pool_id},
    )
    return create, host


class _Container:
    """One started container with its supervisor attached."""

    def __init__(self, client, config: SandboxConfig, once: bool = False, pool_id: str = "") -> None:
        import docker.errors

        self.config = config
        self.api = client.api
        self.uses = 0
        self.last_used = time.monotonic()
        self._stdout = bytearray()
        self._stderr = bytearray()
        create, host = container_options(config, pool_id)
        command = list(SUPERVISOR_CMD) + ["--idle-exit", str(config.idle_exit_s)] + (["--once"] if once else [])
        try:
            self.id = self.api.create_container(config.image, command=command,
                                                host_config=self.api.create_host_config(**host), **create)["Id"]
        except docker.errors.ImageNotFound:
            raise ImageMissingError(f"the sandbox image {config.image!r} does not exist; build it with "
                                    f"`areal sandbox build-image --tag {config.image}`") from None
        except docker.errors.DockerException as exc:
            raise SandboxError(f"creating a sandbox container from {config.image!r} failed: {exc}") from None
        try:
            raw = self.api.attach_socket(self.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self.sock = getattr(raw, "_sock", raw)
            self._raw = raw
            self.api.start(self.id)
            hello = self.read_message(time.monotonic() + config.start_timeout_s)
        except BaseException:
            self.destroy()
            raise
        if not hello.get("ready"):
            self.destroy()
            raise SandboxError(f"the sandbox container did not report ready: {hello}")
        if not hello.get("protected") or hello.get("uid") == 0 or hello.get("problems"):
            self.destroy()
            raise SandboxError(f"the sandbox supervisor in {config.image!r} is not protected from the programs it "
                               f"runs (uid {hello.get('uid')}, undumpable {hello.get('protected')}, "
                               f"problems {hello.get('problems')}); rebuild the image with `areal sandbox build-image`")
        if hello.get("harness") != harness_hash():
            self.destroy()
            raise ImageMissingError(f"the sandbox image {config.image!r} runs another version of the harness; "
                                    f"rebuild it with `areal sandbox build-image --tag {config.image}`")
        self.hello = hello

    # -- the attached stream: Docker multiplexes stdout/stderr in frames of an 8-byte header --------
    def _recv_exact(self, size: int, deadline: float) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ContainerLost("the sandbox container did not answer in time")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(size - len(chunks))
            except socket.timeout:
                raise ContainerLost("the sandbox container did not answer in time") from None
            except OSError as exc:
                raise ContainerLost(f"the connection to the sandbox container broke ({exc})") from None
            if not chunk:
                tail = bytes(self._stderr[-500:]).decode("utf-8", "replace").strip()
                raise ContainerLost("the sandbox container exited" + (f": {tail}" if tail else ""))
            chunks += chunk
        return bytes(chunks)

    def read_message(self, deadline: float) -> dict[str, Any]:
        import json

        while b"\n" not in self._stdout:
            header = self._recv_exact(8, deadline)
            stream, size = header[0], struct.unpack(">I", header[4:8])[0]
            payload = self._recv_exact(size, deadline)
            if stream == 1:
                self._stdout += payload
            else:
                self._stderr = (self._stderr + payload)[-8192:]
        line, _, rest = bytes(self._stdout).partition(b"\n")
        self._stdout = bytearray(rest)
        try:
            return json.loads(line)
        except ValueError:
            raise ContainerLost(f"the sandbox container sent a malformed message: {line[:200]!r}") from None

    def request(self, job: dict[str, Any], deadline: float) -> dict[str, Any]:
        import json

        self.uses += 1
        self.last_used = time.monotonic()
        data = (json.dumps(job) + "\n").encode()
        try:
            self.sock.settimeout(max(0.1, deadline - time.monotonic()))
            self.sock.sendall(data)
        except OSError as exc:
            raise ContainerLost(f"sending the job to the sandbox container failed ({exc})") from None
        return self.read_message(deadline)

    def destroy(self) -> None:
        import docker.errors

        for closer in (getattr(self, "sock", None), getattr(self, "_raw", None)):
            try:
                if closer is not None:
                    closer.close()
            except Exception:
                pass
        try:
            self.api.remove_container(self.id, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # "removal already in progress" (auto-remove) is fine
            if "in progress" not in str(exc) and "No such container" not in str(exc):
                raise SandboxError(f"removing sandbox container {self.id[:12]} failed: {exc}") from None


def _lost_result(execution: Execution, message: str) -> ExecutionResult:
    """Verdicts for a program that brought its container down twice in a row."""
    if execution.mode == "stdio":
        count = len(execution.cases or ())
    else:
        count = len(execution.tests) if execution.tests is not None else 1
    names = list(execution.test_names) + [f"test {i}" for i in range(len(execution.test_names), count)]
    return ExecutionResult(tests=tuple(TestVerdict(name=names[i], verdict="runtime_error", message=message)
                                       for i in range(count)), harmed=True)


class _DockerBackend:
    """What both backends share: the client, the image check, and the run-with-one-retry logic."""

    def __init__(self, config: SandboxConfig, client=None) -> None:
        try:
            config.validate()
        except ValueError as exc:
            raise SandboxError(f"sandbox config: {exc}") from None
        self.config = config
        self.client = client or docker_client()
        check_image(self.client, config.image)
        self._ids = itertools.count()
        self._closed = False
        self.pool_id = uuid.uuid4().hex[:12]  # label of this sandbox's containers

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _deadline(self, execution: Execution) -> float:
        return time.monotonic() + self.config.total_timeout_s * self.config.wall_factor + 15.0

    def _execute(self, execution: Execution) -> tuple[ExecutionResult, bool]:
        """Run once; (result, the container died) — implemented by each backend."""
        raise NotImplementedError

    def run(self, execution: Execution) -> ExecutionResult:
        if self._closed:
            raise SandboxError("this sandbox is closed")
        result, lost = self._execute(execution)
        if lost:
            # Docker hiccup or a program that kills its container? Try once more on a new one.
            second, lost_again = self._execute(execution)
            if lost_again:
                return _lost_result(execution, f"the program brought down its sandbox container twice ({second.error})")
            return second
        return result

    def close(self) -> None:
        self._closed = True


class DockerPoolSandbox(_DockerBackend):
    """A warm pool of `pool_size` containers, each reused for many executions.

    After every execution the supervisor kills what the program left, empties the work directories
    and reports anything it could not clean; such a container (or one that died, timed out or served
    `max_uses` executions) is removed and a fresh one is started in the background.
    """

    def __init__(self, config: SandboxConfig, client=None, prewarm: bool = False) -> None:
        super().__init__(config, client)
        self._idle: list[_Container] = []
        self._total = 0
        self._cond = threading.Condition()
        self._start_errors: list[str] = []
        self.replaced = 0
        atexit.register(self.close)
        if prewarm:
            self.warm()

    def warm(self) -> None:
        """Start containers until `pool_size` are up (in parallel); returns when they are ready."""
        threads = []
        with self._cond:
            missing = self.config.pool_size - self._total
            self._total += missing
        for _ in range(missing):
            thread = threading.Thread(target=self._start_into_pool, daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        if self._start_errors and not self._idle:
            raise SandboxError(self._start_errors[-1])

    def _start_into_pool(self) -> None:
        try:
            container = _Container(self.client, self.config, pool_id=self.pool_id)
        except Exception as exc:
            with self._cond:
                self._total -= 1
                self._start_errors.append(str(exc))
                self._cond.notify_all()
            return
        with self._cond:
            if self._closed:
                self._total -= 1
                container_to_destroy = container
            else:
                self._idle.append(container)
                container_to_destroy = None
            self._cond.notify_all()
        if container_to_destroy is not None:
            container_to_destroy.destroy()

    def _acquire(self) -> _Container:
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("this sandbox is closed")
                stale = time.monotonic() - 0.9 * self.config.idle_exit_s
                while self._idle and self._idle[-1].last_used < stale:
                    # Its supervisor is about to exit (or has) for want of work: replace it.
                    expired = self._idle.pop()
                    self._total -= 1
                    threading.Thread(target=expired.destroy, daemon=True).start()
                if self._idle:
                    return self._idle.pop()
                if self._total < self.config.pool_size:
                    self._total += 1
                    break
                self._cond.wait()
        try:
            return _Container(self.client, self.config, pool_id=self.pool_id)
        except BaseException:
            with self._cond:
                self._total -= 1
                self._cond.notify_all()
            raise

    def _release(self, container: _Container, healthy: bool) -> None:
        if healthy and container.uses < self.config.max_uses:
            with self._cond:
                if not self._closed:
                    self._idle.append(container)
                    self._cond.notify_all()
                    return
        with self._cond:
            self._total -= 1
            self.replaced += 1
            replace = not self._closed
            if replace:
                self._total += 1
            self._cond.notify_all()
        threading.Thread(target=container.destroy, daemon=True).start()
        if replace:
            threading.Thread(target=self._start_into_pool, daemon=True).start()

    def _execute(self, execution: Execution) -> tuple[ExecutionResult, bool]:
        job = execution.to_job(self.config, str(next(self._ids)))
        container = self._acquire()
        healthy = False
        try:
            data = container.request(job, self._deadline(execution))
            result = ExecutionResult.from_wire(data)
            healthy = not result.harmed
            return result, False
        except ContainerLost as exc:
            return ExecutionResult.failure(str(exc)), True
        finally:
            self._release(container, healthy)

    @property
    def size(self) -> int:
        with self._cond:
            return self._total

    def container_ids(self) -> list[str]:
        with self._cond:
            return [c.id for c in self._idle]

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for container in idle:
            try:
                container.destroy()
            except SandboxError:
                pass
        try:
            atexit.unregister(self.close)
        except Exception:
            pass


class DockerRunSandbox(_DockerBackend):
    """One fresh container per execution, removed afterwards: what ``docker run --rm -i`` costs."""

    def _execute(self, execution: Execution) -> tuple[ExecutionResult, bool]:
        job = execution.to_job(self.config, str(next(self._ids)))
        container = _Container(self.client, self.config, once=True, pool_id=self.pool_id)
        try:
            data = container.request(job, self._deadline(execution))
            return ExecutionResult.from_wire(data), False
        except ContainerLost as exc:
            return ExecutionResult.failure(str(exc)), True
        finally:
            container.destroy()


BACKENDS = {"pool": DockerPoolSandbox, "run": DockerRunSandbox}


def open_sandbox(config: SandboxConfig | None = None, client=None, **kwargs: Any):
    """The sandbox backend the config names (``pool`` or ``run``)."""
    config = config or SandboxConfig()
    try:
        backend = BACKENDS[config.backend]
    except KeyError:
        raise SandboxError(f"sandbox backend {config.backend!r} is unknown; expected one of "
                           f"{', '.join(BACKENDS)}") from None
    return backend(config, client=client, **kwargs)


def list_containers(client, pool_id: str | None = None) -> list[Any]:
    """Every sandbox container on the engine (running or not), or those of one sandbox, by label."""
    label = f"{LABEL}.pool={pool_id}" if pool_id else LABEL
    return client.containers.list(all=True, filters={"label": label})


_shared: dict[SandboxConfig, Any] = {}
_shared_lock = threading.Lock()


def shared_sandbox(config: SandboxConfig):
    """A process-wide sandbox per config (reward functions are plain functions called many times)."""
    with _shared_lock:
        sandbox = _shared.get(config)
        if sandbox is None or getattr(sandbox, "_closed", False):
            sandbox = open_sandbox(config)
            _shared[config] = sandbox
        return sandbox


def close_shared() -> None:
    with _shared_lock:
        for sandbox in _shared.values():
            sandbox.close()
        _shared.clear()


atexit.register(close_shared)
