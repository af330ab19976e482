"""`FSDPTrainer`: the FSDP2 trainer backend, seen from the controller process.

It starts `torchrun --nproc-per-node N -m areal_core.rl.fsdp_worker` and sends each request (train a batch,
publish weights, save or load a checkpoint) to rank 0 over an authenticated localhost socket; the ranks run
it together (see fsdp_worker.py). A rank that dies, or a group that does not answer within
`fsdp_timeout_s`, is reported as a TrainerError quoting the end of the workers' log, never as a hang:
the controller waits in short polls and checks torchrun between them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any, Sequence

from areal_core.rl.checkpoint import WEIGHTS_FILE, check_model_keys, verify_checkpoint
from areal_core.rl.trainer import TrainerConfig, TrainerError
from areal_core.types import Trajectory

POLL_S = 0.2
LOG_TAIL_LINES = 40
# After a failure torchrun needs a moment to notice the dead rank, stop the others and write its report.
GRACE_S = 10.0


def _stop_workers(process: subprocess.Popen, pids: list[int], grace_s: float) -> None:
    """Stop torchrun (on SIGTERM it stops its ranks); if it does not exit in time, kill it and the ranks.
    Also runs at garbage collection and interpreter exit, so ranks never outlive a controller that forgot
    close()."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(grace_s)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    for pid in pids:  # their parent is gone: nobody else will stop them
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class FSDPTrainer:
    """Decoupled PPO on `config.fsdp_processes` FSDP2 ranks (gloo on CPU, NCCL on GPU) started with torchrun.

    Implements TrainerBackend: the same config trains to the same weights as LocalTrainer. Rank 0 writes
    the published weights and checkpoints, in the same layouts as LocalTrainer. Call close() (or use it as a
    context manager) to stop the ranks; they also exit on their own when this process dies."""

    def __init__(self, model_path: str | Path, config: TrainerConfig, total_steps: int, version: int = 0,
                 scratch_dir: str | Path | None = None) -> None:
        """Start the ranks and wait until they are ready. The ranks' spec and log go in a new directory
        inside `scratch_dir` (default: the system's temporary directory); it is removed by close() unless
        the group failed, since the error message points to the log."""
        from areal_core.engine.model import check_model_dir, load_tokenizer

        if config.fsdp_processes < 1:
            raise TrainerError(f"trainer.fsdp_processes must be at least 1, got {config.fsdp_processes}")
        self.config = config
        self.version = version
        model_path = check_model_dir(Path(model_path).resolve())
        self.tokenizer = load_tokenizer(model_path)
        self.worker_pids: list[int] = []
        self.world_size = 0
        self._failure: str | None = None
        self._connection: Connection | None = None
        self.work_dir = Path(tempfile.mkdtemp(prefix="areal-fsdp-", dir=scratch_dir))
        self.log_path = self.work_dir / "workers.log"
        address_file = self.work_dir / "rank0.address"
        spec = {"model_path": str(model_path), "config": dataclasses.asdict(config), "total_steps": total_steps,
                "version": version, "controller_pid": os.getpid(), "address_file": str(address_file),
                "timeout_s": config.fsdp_timeout_s}
        spec_path = self.work_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        authkey = secrets.token_bytes(32)
        env = {**os.environ, "AREAL_FSDP_AUTHKEY": authkey.hex(),
               "OMP_NUM_THREADS": str(config.fsdp_threads_per_process)}
        # Our defaults come first so that the same option in torchrun_args overrides them.
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(config.fsdp_processes),
                   "--max-restarts", "0", "--monitor-interval", "0.5",
                   *(config.torchrun_args or ["--standalone"]),
                   "-m", "areal_core.rl.fsdp_worker", str(spec_path)]
        with open(self.log_path, "ab") as log:
            # A session of its own: a Ctrl-C in the terminal reaches the controller, which stops the ranks.
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)
        self._finalizer = weakref.finalize(self, _stop_workers, self._process, self.worker_pids, GRACE_S)
        try:
            deadline = time.monotonic() + config.fsdp_timeout_s
            while not address_file.exists():
                self._check_alive("starting", deadline)
                time.sleep(POLL_S)
            address = json.loads(address_file.read_text())
            self._connection = Client((address["host"], address["port"]), authkey=authkey)
            ready = self._receive("starting", deadline)
        except BaseException:
            self.close()
            raise
        self.worker_pids.extend(ready["pids"])
        self.world_size = ready["world_size"]
        self._parameter_names: set[str] = set(ready["parameters"])
        self._tied_embeddings: bool = ready["tied_embeddings"]

    @property
    def torchrun_pid(self) -> int:
        return self._process.pid

    # -- TrainerBackend -----------------------------------------------------------------------------------------
    def train_step(self, trajectories: Sequence[Trajectory], temperature: float) -> dict[str, float]:
        if not trajectories:
            raise ValueError("train_step needs at least one trajectory")
        started = time.perf_counter()
        reply = self._request("train", list(trajectories), temperature)
        self.version = reply["version"]
        # The controller's view: the ranks' compute plus sending the batch and the reply.
        return {**reply["metrics"], "train_seconds": time.perf_counter() - started}

    def publish(self, directory: str | Path) -> Path:
        """Rank 0 gathers the full weights and writes them atomically in LocalTrainer.publish's layout."""
        directory = Path(directory).resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
        return Path(self._request("publish", str(directory)))

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Rank 0 writes full (unsharded) states, so LocalTrainer can load the checkpoint as well."""
        directory = Path(directory).resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
        return Path(self._request("save", str(directory)))

    def load_checkpoint(self, directory: str | Path) -> int:
        from safetensors import safe_open

        # Vetted here, so that a bad checkpoint is an error in this process and not a dead worker group.
        directory = Path(directory).resolve()
        verify_checkpoint(directory)
        with safe_open(str(directory / WEIGHTS_FILE), framework="pt") as weights:
            names = set(weights.keys())
        check_model_keys(directory, names, self._parameter_names, self._tied_embeddings)
        self.version = self._request("load", str(directory))
        return self.version

    def close(self) -> None:
        """Ask the ranks to finish, wait for torchrun to exit, and stop whatever is left."""
        if self._connection is not None and self._failure is None and self._process.poll() is None:
            try:
                self._connection.send(("close",))
                self._process.wait(GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._finalizer()
        if self._failure is None:
            shutil.rmtree(self.work_dir, ignore_errors=True)  # after a failure its log is quoted: keep it

    def __enter__(self) -> "FSDPTrainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- talking to rank 0 ----------------------------------------------------------------------------------------
    def _request(self, command: str, *args: Any) -> Any:
        if self._failure is not None:
            raise TrainerError(f"the FSDP trainer cannot run {command!r}: it already failed ({self._failure})")
        if self._connection is None:
            raise TrainerError(f"the FSDP trainer cannot run {command!r}: it is closed")
        try:
            self._connection.send((command, *args))
        except OSError as exc:
            raise self._fail(command, f"rank 0 is unreachable ({exc})") from None
        return self._receive(command, time.monotonic() + self.config.fsdp_timeout_s)

    def _receive(self, command: str, deadline: float) -> Any:
        assert self._connection is not None
        while True:
            if self._connection.poll(POLL_S):
                try:
                    status, payload = self._connection.recv()
                except (EOFError, OSError):
                    raise self._fail(command, "rank 0 closed its connection (the process died)") from None
                if status == "ok":
                    return payload
                raise self._fail(command, f"rank 0 raised an error:\n{payload.rstrip()}")
            self._check_alive(command, deadline)

    def _check_alive(self, command: str, deadline: float) -> None:
        code = self._process.poll()
        if code is not None:
            raise self._fail(command, f"the worker group (torchrun) exited with code {code}")
        if time.monotonic() > deadline:
            raise self._fail(command, f"no answer within trainer.fsdp_timeout_s={self.config.fsdp_timeout_s:g}s")

    def _fail(self, command: str, reason: str) -> TrainerError:
        """Stop the group for good and describe what happened, with the end of the workers' log."""
        try:
            self._process.wait(GRACE_S)  # let torchrun report which rank failed and why
        except subprocess.TimeoutExpired:
            pass
        self._finalizer()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        try:
            log = self.log_path.read_text(errors="replace")
        except OSError:
            log = ""
        root_cause, tail = summarise_worker_log(log)
        first_line = reason.splitlines()[0]
        if root_cause:
            first_line = f"{root_cause}; {first_line}"
        self._failure = f"{first_line} while running {command!r}"
        lines = [*reason.splitlines()[1:]]
        if tail:
            lines += [f"--- last lines of the workers' log {self.log_path}:", *tail]
        details = "\n" + "\n".join(lines) if lines else ""
        return TrainerError(f"FSDP trainer failed while running {command!r}: {first_line}{details}")


def summarise_worker_log(log: str) -> tuple[str | None, list[str]]:
    """(which rank failed first and how, from torchrun's report; the log's last lines without torchrun's
    own traceback, so that a rank's traceback stays in view)."""
    root_cause = None
    report = log.rsplit("Root Cause (first observed failure):", 1)
    if len(report) == 2:
        rank = re.search(r"rank\s*:\s*(\d+)", report[1])
        code = re.search(r"exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG\w+)\))?\s*$", report[1], re.MULTILINE)
        if rank and code:
            signal_name = f", {code.group(2)}" if code.group(2) else ""
            root_cause = f"rank {rank.group(1)} died first (exit code {code.group(1)}{signal_name})"
    lines: list[str] = []
    traceback_start: int | None = None
    in_launcher_traceback = False
    for line in log.splitlines():
        if in_launcher_traceback:
            in_launcher_traceback = not line.startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")
            continue
        if line.startswith("Traceback (most recent call last):"):
            traceback_start = len(lines)
        elif "torch/distributed/run.py" in line and traceback_start is not None:
            del lines[traceback_start:]  # torchrun's own traceback: it only says "a child failed"
            in_launcher_traceback, traceback_start = True, None
            continue
        lines.append(line)
    return root_cause, lines[-LOG_TAIL_LINES:]
