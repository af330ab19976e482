"""`FSDPTrainer`: the FSDP2 trainer backend, seen from the controller process.

It starts `torchrun --nproc-per-node N -m areal_core.rl.fsdp_worker --spec SPEC` on its own machine and
sends each request (the phases of a step, publish weights, save or load a checkpoint) to rank 0 over an
authenticated localhost socket; the ranks run it together (see fsdp_worker.py). A rank that dies, or a
group that does not answer within `fsdp_timeout_s`, is reported as a TrainerError quoting the end of the
workers' log, never as a hang: the controller waits in short polls and checks torchrun between them.

Across nodes (`trainer.torchrun_args` with `--nnodes` above 1), this machine is node 0 and global rank 0
lives here; the user starts the other nodes' torchrun with the same worker module and the spec, which
this trainer writes to `scratch_dir` (a directory every trainer node mounts at the same path), together
with a copy of the initial model when that lies outside it. `other_nodes_command` prints the command.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any, Sequence

from areal_core.engine.weight_sync import Bucket
from areal_core.files import atomic_directory
from areal_core.rl.checkpoint import check_model_keys, stored_shapes, verify_checkpoint
from areal_core.rl.fsdp_worker import AUTHKEY_ENV, CONTROLLER_PID_ENV, START_ID_ENV
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import TrainerError
from areal_core.types import Trajectory

log = logging.getLogger(__name__)

POLL_S = 0.2
LOG_TAIL_LINES = 40
# After a failure torchrun needs a moment to notice the dead rank, stop the others and write its report.
GRACE_S = 10.0
# While the controller sends nothing, rank 0 tells the other ranks every HEARTBEAT_S that it is alive; a
# rank on another node that hears nothing for HEARTBEAT_TIMEOUT_S takes the controller's node for lost.
HEARTBEAT_S = 5.0
HEARTBEAT_TIMEOUT_S = 60.0
# What the trainer writes to its scratch directory.
SPEC_FILE = "spec.json"
ADDRESS_FILE = "rank0.address"
LOG_FILE = "workers.log"
LOCK_FILE = "trainer.lock"
SHARED_MODEL_DIR = "initial-model"
WORKER_MODULE = "areal_core.rl.fsdp_worker"


def torchrun_option(args: Sequence[str], *names: str) -> str | None:
    """The value of torchrun option `names` (any spelling) in `args`, as `--name V` or `--name=V`; None when
    absent. The last one wins, as in torchrun."""
    value = None
    for i, word in enumerate(args):
        name, eq, inline = word.partition("=")
        if name in names:
            if eq:
                value = inline
            elif i + 1 < len(args):
                value = args[i + 1]
            else:
                raise TrainerError(f"trainer.torchrun_args: {word} needs a value")
    return value


def trainer_nodes(torchrun_args: Sequence[str]) -> int:
    """The most nodes the trainer's torchrun may span (`--nnodes N` or `--nnodes MIN:MAX`; 1 when absent)."""
    value = torchrun_option(torchrun_args, "--nnodes")
    if value is None:
        return 1
    try:
        return max(int(part) for part in value.split(":"))
    except ValueError:
        raise TrainerError(f"trainer.torchrun_args: --nnodes {value!r} is not a number of nodes "
                           "(expected N or MIN:MAX)") from None


def check_torchrun_args(torchrun_args: Sequence[str]) -> None:
    """The controller's node must be node 0: global rank 0 takes its requests on 127.0.0.1."""
    node_rank = torchrun_option(torchrun_args, "--node-rank", "--node_rank")
    if node_rank is not None and node_rank.strip() != "0":
        raise TrainerError(f"trainer.torchrun_args sets --node-rank {node_rank}, but the controller's node must be "
                           "node 0 (global rank 0 takes the controller's requests on 127.0.0.1); give the other "
                           "nodes' torchrun --node-rank 1, 2, ...")


def other_nodes_command(torchrun_args: Sequence[str], spec_path: str | Path) -> str:
    """The command for each other trainer node, with R (its node rank: 1, 2, ...) and K (its number of
    ranks) left to fill in: the controller's torchrun options without its own node rank, and the same
    worker module and spec."""
    kept: list[str] = []
    words = iter(torchrun_args)
    for word in words:
        name, eq, _ = word.partition("=")
        if name in ("--node-rank", "--node_rank", "--nproc-per-node", "--nproc_per_node"):
            if not eq:
                next(words, None)  # its value
            continue
        kept.append(shlex.quote(word))
    return " ".join(["torchrun", *kept, "--node-rank R --nproc-per-node K -m", WORKER_MODULE,
                     "--spec", shlex.quote(str(spec_path))])


def _link_or_copy(source: str, target: str) -> None:
    """A hard link when source and target share a filesystem (free, and the weights are never written in
    place), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def share_model(model_path: Path, scratch_dir: Path) -> Path:
    """The initial model where every trainer node can read it: `model_path` when it already lies inside
    `scratch_dir`, else a copy in `scratch_dir/initial-model` (replaced atomically)."""
    inside = model_path.resolve().is_relative_to(scratch_dir.resolve())
    if inside:
        return scratch_dir / model_path.resolve().relative_to(scratch_dir.resolve())
    target = scratch_dir / SHARED_MODEL_DIR
    with atomic_directory(target, durable=False) as tmp:
        shutil.copytree(model_path, tmp, copy_function=_link_or_copy, dirs_exist_ok=True)
    return target


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
    """Decoupled PPO on FSDP2 ranks (gloo on CPU, NCCL on GPU) started with torchrun: `config.fsdp_processes`
    on this machine, plus the ranks of other nodes when `config.torchrun_args` asks for several.

    Implements TrainerBackend: the same config trains to the same weights as LocalTrainer. Rank 0 writes
    the published weights and checkpoints, in the same layouts as LocalTrainer. Call close() (or use it as a
    context manager) to stop the ranks; they also exit on their own when this process dies."""

    def __init__(self, model_path: str | Path, config: TrainerConfig, total_steps: int, version: int = 0,
                 scratch_dir: str | Path | None = None, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        """Start the ranks and wait until they are ready (across nodes: until the other nodes have joined).

        `scratch_dir` holds what the ranks read (spec.json, and across nodes the initial model unless it
        already lies inside) and this node's log, workers.log; for a trainer across nodes it must be on a
        filesystem every trainer node mounts at the same path. Without it, a private temporary directory
        is used, removed by close() unless the group failed (the error message points to its log).
        `heartbeat_timeout_s`: how long ranks wait without a word from rank 0 before they take its node
        for lost and exit."""
        from areal_core.engine.model import check_model_dir, load_tokenizer

        if config.fsdp_processes < 1:
            raise TrainerError(f"trainer.fsdp_processes must be at least 1, got {config.fsdp_processes}")
        if heartbeat_timeout_s <= 0:
            raise TrainerError(f"heartbeat_timeout_s must be positive, got {heartbeat_timeout_s}")
        torchrun_args = list(config.torchrun_args)
        check_torchrun_args(torchrun_args)
        self.nodes = trainer_nodes(torchrun_args)
        if self.nodes > 1 and scratch_dir is None:
            raise TrainerError(f"trainer.torchrun_args asks for up to {self.nodes} nodes, but the FSDP trainer has no "
                               "scratch_dir: the other nodes read the spec and the model from it, so give a "
                               "directory on a filesystem every trainer node shares")
        self.config = config
        self.version = version
        model_path = check_model_dir(Path(model_path).resolve())
        self.tokenizer = load_tokenizer(model_path)
        self.worker_pids: list[int] = []  # the ranks on this machine
        self.members: list[dict[str, Any]] = []  # every rank: rank, host, pid, ...
        self.world_size = 0
        self._failure: str | None = None
        self._connection: Connection | None = None
        self._private_dir = scratch_dir is None
        if scratch_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="areal-fsdp-"))
        else:
            # absolute, not resolved: the other nodes see the directory under the name the user gave it
            self.work_dir = Path(scratch_dir).absolute()
            self.work_dir.mkdir(parents=True, exist_ok=True)
        self._lock = self._lock_work_dir()
        try:
            self._start(model_path, config, total_steps, version, heartbeat_timeout_s, torchrun_args)
        except BaseException:
            self.close()
            raise

    def _start(self, model_path: Path, config: TrainerConfig, total_steps: int, version: int,
               heartbeat_timeout_s: float, torchrun_args: list[str]) -> None:
        self.spec_path = self.work_dir / SPEC_FILE
        self.log_path = self.work_dir / LOG_FILE
        address_file = self.work_dir / ADDRESS_FILE
        address_file.unlink(missing_ok=True)  # an earlier start's
        self.model_path = share_model(model_path, self.work_dir) if self.nodes > 1 else model_path
        start_id = secrets.token_hex(8)
        spec = {"model_path": str(self.model_path), "config": dataclasses.asdict(config),
                "total_steps": total_steps, "version": version, "start_id": start_id,
                "controller_host": socket.gethostname(), "controller_pid": os.getpid(),
                "address_file": str(address_file), "timeout_s": config.fsdp_timeout_s,
                "heartbeat_s": min(HEARTBEAT_S, heartbeat_timeout_s / 4), "heartbeat_timeout_s": heartbeat_timeout_s}
        # Written in place, not renamed: an NFS client revalidates an open file, not always a renamed name.
        self.spec_path.write_text(json.dumps(spec, indent=2))
        authkey = secrets.token_bytes(32)
        env = {**os.environ, AUTHKEY_ENV: authkey.hex(), CONTROLLER_PID_ENV: str(os.getpid()),
               START_ID_ENV: start_id, "OMP_NUM_THREADS": str(config.fsdp_threads_per_process)}
        # Our defaults come first so that the same option in torchrun_args overrides them.
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(config.fsdp_processes),
                   "--max-restarts", "0", "--monitor-interval", "0.5",
                   *(torchrun_args or ["--standalone"]),
                   "-m", WORKER_MODULE, "--spec", str(self.spec_path)]
        with open(self.log_path, "ab") as worker_log:
            self._log_start = worker_log.tell()  # the log may hold earlier starts: quote only this one
            worker_log.write(f"--- FSDP trainer start {start_id} ({time.strftime('%Y-%m-%d %H:%M:%S')}): "
                             f"{shlex.join(command)}\n".encode())
            worker_log.flush()
            # A session of its own: a Ctrl-C in the terminal reaches the controller, which stops the ranks.
            self._process = subprocess.Popen(command, stdout=worker_log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self._finalizer = weakref.finalize(self, _stop_workers, self._process, self.worker_pids, GRACE_S)
        if self.nodes > 1:
            log.warning("FSDP trainer across up to %d nodes: this node is node 0 and waits for the others; "
                        "start on each other node (R = 1, 2, ...; K = its number of ranks): %s",
                        self.nodes, other_nodes_command(torchrun_args, self.spec_path))
        deadline = time.monotonic() + config.fsdp_timeout_s
        while not address_file.exists():
            self._check_alive("starting", deadline)
            time.sleep(POLL_S)
        address = json.loads(address_file.read_text())
        if "error" in address:
            raise self._fail("starting", address["error"], refused=True)
        self._connection = Client((address["host"], address["port"]), authkey=authkey)
        ready = self._receive("starting", deadline)
        self.worker_pids.extend(ready["pids"])
        self.members = ready["members"]
        self.world_size = ready["world_size"]
        self._parameter_shapes = {name: tuple(shape) for name, shape in ready["parameters"].items()}
        self._tied_embeddings: bool = ready["tied_embeddings"]
        # whether the ranks take log-probs from the hidden states, the head a chunk at a time (rl/output_head.py)
        self.hidden_state_head: bool = ready["hidden_state_head"]

    def _lock_work_dir(self) -> Any:
        """Hold a lock on the scratch directory for this trainer's life: two trainers there would overwrite
        each other's spec. The lock goes with the process, so a crashed run leaves none behind."""
        lock = open(self.work_dir / LOCK_FILE, "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise TrainerError(f"another FSDP trainer is using the scratch directory {self.work_dir}") from None
        return lock

    @property
    def torchrun_pid(self) -> int:
        return self._process.pid

    # -- TrainerBackend -----------------------------------------------------------------------------------------
    def prepare(self, trajectories: Sequence[Trajectory], temperature: float, top_p: float = 1.0,
                top_k: int = -1) -> int:
        """Send the batch to the ranks, which plan and build their micro-batches; returns the batch's number."""
        if not trajectories:
            raise ValueError("a training step needs at least one trajectory")
        return self._request("prepare", list(trajectories), temperature, top_p, top_k)

    def recompute_proximal(self, batch: int) -> None:
        self._request("proximal", batch)

    def ppo_update(self, batch: int, advantages: Any) -> dict[str, float]:
        reply = self._request("update", batch, [float(a) for a in advantages])
        self.version = reply["version"]
        return reply["metrics"]

    def publish(self, directory: str | Path) -> Path:
        """Rank 0 gathers the full weights and writes them atomically in LocalTrainer.publish's layout."""
        directory = Path(directory).resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
        return Path(self._request("publish", str(directory)))

    # -- weights streamed to the engines (trainer.WeightStreamingTrainer): every rank plans and gathers --------
    def stage_weights(self, cap_bytes: int, changed_only: bool = False) -> list[Bucket]:
        return self._request("stage_weights", cap_bytes, changed_only)

    def join_weight_group(self, init_method: str, world_size: int, group_name: str, backend: str,
                          timeout: float) -> None:
        """Rank 0 joins the weight group (the engines join at the same time)."""
        self._request("join_weights", init_method, world_size, group_name, backend, timeout)

    def send_weight_bucket(self, index: int) -> None:
        self._request("send_weights", index)

    def leave_weight_group(self) -> None:
        if self._connection is not None and self._failure is None:
            self._request("leave_weights")

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Rank 0 writes full (unsharded) states, so LocalTrainer can load the checkpoint as well."""
        directory = Path(directory).resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
        return Path(self._request("save", str(directory)))

    def load_checkpoint(self, directory: str | Path) -> int:
        # Vetted here, so that a bad checkpoint is an error in this process and not a dead worker group.
        directory = Path(directory).resolve()
        shapes = stored_shapes(directory, verify_checkpoint(directory))
        check_model_keys(directory, shapes, self._parameter_shapes, self._tied_embeddings)
        self.version = self._request("load", str(directory))
        return self.version

    def close(self) -> None:
        """Ask the ranks to finish, wait for torchrun to exit, and stop whatever is left. The ranks of other
        nodes end with rank 0, and their torchrun with them."""
        if self._lock.closed:
            return
        torchrun_started = hasattr(self, "_finalizer")
        if (torchrun_started and self._connection is not None and self._failure is None
                and self._process.poll() is None):
            try:
                self._connection.send(("close",))
                self._process.wait(GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if torchrun_started:
            self._finalizer()
        if self._private_dir:
            if self._failure is None:
                shutil.rmtree(self.work_dir, ignore_errors=True)  # after a failure its log is quoted: keep it
        else:
            # The log stays with the run. Without the spec, a node started late is told there is none,
            # rather than joining a trainer that has gone.
            for name in (SPEC_FILE, ADDRESS_FILE):
                (self.work_dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.work_dir / SHARED_MODEL_DIR, ignore_errors=True)
        self._lock.close()

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
                if payload.startswith("Traceback"):
                    # the exception's own line first (a collective that lost another node says so there)
                    last = payload.rstrip().splitlines()[-1]
                    raise self._fail(command, f"rank 0 raised an error: {last}\n{payload.rstrip()}")
                raise self._fail(command, payload.rstrip(), reported_by_rank0=True)
            self._check_alive(command, deadline)

    def _check_alive(self, command: str, deadline: float) -> None:
        code = self._process.poll()
        if code is not None:
            refusal = self._refusal() if command == "starting" else None
            if refusal is not None:
                raise self._fail(command, refusal, refused=True)
            reason = f"the worker group (torchrun) exited with code {code}"
            raise self._fail(command, reason)
        if time.monotonic() > deadline:
            reason = f"no answer within trainer.fsdp_timeout_s={self.config.fsdp_timeout_s:g}s"
            if command == "starting" and self.nodes > 1:
                reason += (f" (did the other trainer nodes start? each runs "
                           f"`{other_nodes_command(self.config.torchrun_args, self.spec_path)}`)")
            raise self._fail(command, reason)

    def _refusal(self) -> str | None:
        """Why the ranks refused to serve this controller, when they said so (see fsdp_worker.Rank.refuse)."""
        try:
            return json.loads((self.work_dir / ADDRESS_FILE).read_text()).get("error")
        except (OSError, ValueError):
            return None

    def _fail(self, command: str, reason: str, refused: bool = False, reported_by_rank0: bool = False) -> TrainerError:
        """Stop the group for good and describe what happened: the rank that torchrun saw fail first, and
        the end of the workers' log (unless the ranks refused to start, which `reason` says in full)."""
        try:
            self._process.wait(GRACE_S)  # let torchrun report which rank failed and why
        except subprocess.TimeoutExpired:
            pass
        self._finalizer()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if refused:
            self._failure = f"the ranks refused to start: {reason}"
            return TrainerError(f"FSDP trainer cannot start: {reason} (log: {self.log_path})")
        try:
            with open(self.log_path, "rb") as worker_log:
                worker_log.seek(self._log_start)
                text = worker_log.read().decode(errors="replace")
        except OSError:
            text = ""
        root_cause, tail = summarise_worker_log(text)
        first_line = reason.splitlines()[0]
        # When rank 0 exited on purpose after telling us why, torchrun's "rank 0 died first" adds nothing.
        if root_cause and not (reported_by_rank0 and root_cause.startswith("rank 0 ")):
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
