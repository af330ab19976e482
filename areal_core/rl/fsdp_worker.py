"""One rank of the FSDP trainer. `FSDPTrainer` (areal_core/rl/fsdp.py) starts the ranks of its own node:

    torchrun --nproc-per-node N -m areal_core.rl.fsdp_worker --spec SCRATCH/spec.json

and, for a trainer across nodes, the user starts the other nodes' ranks with the same module and the same
spec (which the controller writes to its `scratch_dir`, on a filesystem every trainer node shares):

    torchrun --nnodes M --node-rank R --nproc-per-node K --master-addr CONTROLLER_HOST --master-port PORT \
        -m areal_core.rl.fsdp_worker --spec RUN_DIR/trainer/spec.json

Every rank loads the model, shards it with FSDP2 (`fully_shard` per decoder layer, then the root) and
builds the same `PPOLearner` as the local trainer. Rank 0 listens on a localhost socket (address written to
the spec's `address_file`, authenticated with the key in $AREAL_FSDP_AUTHKEY) and takes requests from the
controller: the phases of a step, ("prepare", trajectories, temperature, top_p, top_k) -> batch number, ("proximal", number),
("update", number, advantages) -> metrics, and ("publish", dir), ("save", dir), ("load", dir), ("close",);
weights streamed to the engines: ("stage_weights", cap, changed_only) -> buckets, ("join_weights", ...) (rank 0
joins the engines' group), ("send_weights", index) (every rank gathers, rank 0 broadcasts), ("leave_weights",).
It broadcasts each request to the other ranks, all ranks run it, and rank 0 sends back ("ok", result) or
("error", traceback). An error is fatal to the whole group: the rank exits, torchrun stops the others, and
the controller reports it.

How ranks end when something else dies:
- every rank exits as soon as its torchrun is gone; the ranks the controller started (they find
  $AREAL_FSDP_CONTROLLER_PID) also exit as soon as the controller process is gone;
- ranks on other nodes cannot see that process. While no request comes, rank 0 broadcasts a heartbeat
  every `heartbeat_s`; a rank that hears nothing for `heartbeat_timeout_s`, or whose connection to rank 0
  breaks, logs why and exits, and its torchrun then ends.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, fields
from datetime import timedelta
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from areal_core.engine.weight_sync import WeightSender
from areal_core.files import atomic_directory, atomic_write
from areal_core.rl.checkpoint import (
    CheckpointTensors,
    is_format_1,
    read_checkpoint,
    read_meta,
    verify_checkpoint,
    write_checkpoint,
    write_model_files,
)
from areal_core.rl.config import TrainerConfig
from areal_core.rl.memory import return_freed_memory, setup_objects_frozen
from areal_core.rl.output_head import uses_hidden_state_head
from areal_core.rl.trainer import (DataParallel, PPOLearner, PreparedBatch, TrainerError, frozen_model, rng_state,
                                   served_state, trainable_model, trains_differently, with_adapters)

# What FSDPTrainer puts in the environment of the torchrun it starts. Ranks started by hand on other nodes
# lack them, which is how a rank knows whether it shares the controller's machine.
AUTHKEY_ENV = "AREAL_FSDP_AUTHKEY"
CONTROLLER_PID_ENV = "AREAL_FSDP_CONTROLLER_PID"
START_ID_ENV = "AREAL_FSDP_START_ID"

EXIT_CONTROLLER_GONE = 3    # the controller process (ranks on its machine), or this rank's torchrun, died
EXIT_GROUP_LOST = 4         # rank 0, or another rank, went away while the group waited for a request
EXIT_BAD_GROUP = 5          # the group cannot serve this controller: stale spec, or rank 0 on another node


@dataclass(frozen=True)
class WorkerSpec:
    """What FSDPTrainer tells its ranks (a JSON file in its scratch directory, given with --spec)."""

    model_path: str
    config: dict[str, Any]
    total_steps: int
    version: int
    start_id: str               # new for every FSDPTrainer: a rank that read an older spec is refused
    controller_host: str
    controller_pid: int
    address_file: str
    timeout_s: float
    heartbeat_s: float
    heartbeat_timeout_s: float


def read_spec(path: Path) -> WorkerSpec:
    """The spec at `path`, or a TrainerError that says what is wrong with it."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise TrainerError(f"no trainer spec at {path}: start the controller (areal train) first; the spec is "
                           "RUN_DIR/trainer/spec.json, on the filesystem every trainer node shares") from None
    except (OSError, ValueError) as exc:
        raise TrainerError(f"cannot read the trainer spec {path}: {exc}") from None
    expected = {f.name for f in fields(WorkerSpec)}
    if not isinstance(data, dict) or set(data) != expected:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise TrainerError(f"{path} is not a trainer spec of this areal version: expected the keys "
                           f"{sorted(expected)}, found {found}")
    return WorkerSpec(**data)


def log(message: str) -> None:
    print(f"fsdp worker {os.environ.get('RANK', '?')} (pid {os.getpid()}, {socket.gethostname()}): {message}",
          file=sys.stderr, flush=True)


def watch_processes(controller_pid: int | None, interval_s: float = 1.0) -> None:
    """Exit this rank as soon as its torchrun, or the controller process (on the controller's machine), is
    gone, so no rank outlives them (torchrun, or rank 0's heartbeat, then ends the rest of the group)."""
    torchrun_pid = os.getppid()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # exists, owned by someone else: alive
        return False

    def watch() -> None:
        while True:
            if controller_pid is not None and gone(controller_pid):
                log(f"the controller process {controller_pid} is gone; exiting")
                os._exit(EXIT_CONTROLLER_GONE)
            if os.getppid() != torchrun_pid:
                log(f"this rank's torchrun (pid {torchrun_pid}) is gone; exiting")
                os._exit(EXIT_CONTROLLER_GONE)
            time.sleep(interval_s)

    threading.Thread(target=watch, name="process-watchdog", daemon=True).start()


def group_problem(members: list[dict[str, Any]], spec: WorkerSpec, spec_path: str) -> str | None:
    """Why this group of ranks cannot serve the controller, or None. `members[r]` describes rank r: its
    host, the start id of the spec it read, and the start id of the controller that started it (None for
    a rank started by hand on another node). Every rank computes the same answer from the same list."""
    started = [m["controller_start_id"] for m in members if m["controller_start_id"] is not None]
    if not started:
        return ("no rank of this group was started by an areal controller (FSDPTrainer): start `areal train` "
                "first; it starts the ranks of its own node")
    current = started[0]
    stale = [r for r, m in enumerate(members) if m["spec_start_id"] != current]
    if stale:
        hosts = sorted({members[r]["host"] for r in stale})
        return (f"ranks {stale} (on {', '.join(hosts)}) read the spec {spec_path} of another trainer start, not "
                f"the controller's current one: start the other nodes' torchrun after the controller has "
                f"written the spec, and check that every node sees the same shared directory")
    if members[0]["controller_start_id"] is None:
        return (f"global rank 0 is not one of the ranks the controller started (it runs on "
                f"{members[0]['host']}, the controller on {spec.controller_host}): rank 0 takes the controller's "
                f"requests on 127.0.0.1, so the controller's torchrun must be node 0. Use torchrun's static "
                f"rendezvous (--master-addr "
                f"CONTROLLER_HOST --master-port PORT; --node-rank 0 for the controller, 1, 2, ... on the other "
                f"nodes); the c10d backend numbers the nodes by host name and ignores --node-rank")
    return None


class InPlaceReduceScatter:
    """FSDP2's gradient reduce-scatter over gloo, without gloo's copy of the whole input.

    Gloo reduce-scatters by all-reducing a clone of its input (ProcessGroupGloo::reduce_scatter_tensor_coalesced),
    so the root's buffer, the tied embedding and head's whole gradient (545 MB at 0.5B), existed twice at the peak
    of an update. The input here is FSDP's own scratch copy of the gradients, never read again, so it is
    all-reduced in place and this rank's part copied out: the same sum and traffic without the clone. NCCL
    reduce-scatters natively (this is used on CPU meshes only)."""

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, op: Any,
                 async_op: bool = False) -> None:
        dist.all_reduce(input_tensor, op=op, group=group)
        output_tensor.copy_(input_tensor.view(dist.get_world_size(group), -1)[dist.get_rank(group)])


def shard_model(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """FSDP2: each decoder layer its own unit (gathered for its forward/backward only), then the root
    (embeddings, final norm, output head)."""
    from torch.distributed.fsdp import fully_shard

    from areal_core.engine.model import decoder_layers

    layers = decoder_layers(model)
    if not layers:
        raise TrainerError(f"cannot shard {type(model).__name__} with FSDP: it declares no decoder layer "
                           "type (_no_split_modules)")
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if mesh.device_type == "cpu":   # gloo
        for unit in (*layers, model):
            unit.set_custom_reduce_scatter(InPlaceReduceScatter())
    return model


class GroupLost(Exception):
    """A collective on the request channel failed: some rank (rank 0 included) went away or fell silent."""


class Rank:
    """This process's part of the FSDP trainer: the sharded learner, and on rank 0 the controller link.

    `started_by_controller` is the start id of the controller that started this rank's torchrun (None on
    other nodes, where the user started it)."""

    def __init__(self, spec: WorkerSpec, spec_path: str, started_by_controller: str | None) -> None:
        self.spec = spec
        self.config = config = TrainerConfig(**spec.config)
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.started_by_controller = started_by_controller
        local_rank = int(os.environ["LOCAL_RANK"])
        if config.device.startswith("cuda"):
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
            backend = "nccl"
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=spec.timeout_s))
        # Objects that a request exchanges (RNG states, checkpoint metadata), and the barrier that ends each
        # request, travel on a gloo group with the request timeout.
        self.control = dist.new_group(backend="gloo", timeout=timedelta(seconds=spec.timeout_s))
        # Requests and heartbeats travel on their own gloo group. Rank 0 sends something at least every
        # heartbeat_s while the group waits, so a wait longer than heartbeat_timeout_s means rank 0 is gone.
        self.requests = dist.new_group(backend="gloo", timeout=timedelta(seconds=spec.heartbeat_timeout_s))
        self.me = {"rank": self.rank, "host": socket.gethostname(), "pid": os.getpid(),
                   "spec_start_id": spec.start_id, "controller_start_id": started_by_controller}
        self.batch: PreparedBatch | None = None  # the batch between its prepare and update requests
        self.batches = 0
        self.members: list[dict[str, Any]] = [{}] * self.world
        dist.all_gather_object(self.members, self.me, group=self.control)
        self.problem = group_problem(self.members, spec, spec_path)

    def build_learner(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        from areal_core.engine.model import load_model, load_tokenizer

        spec, config = self.spec, self.config
        mesh = init_device_mesh(self.device.type, (self.world,))
        self.tokenizer = load_tokenizer(spec.model_path)
        model = trainable_model(load_model(spec.model_path, dtype=config.dtype, device=str(self.device)), config)
        train_mode_differs = trains_differently(model)
        model = shard_model(model, mesh)
        def frozen_copy(adapters: bool) -> torch.nn.Module:  # another model of the same weights, sharded the same way
            loaded = load_model(spec.model_path, dtype=config.dtype, device=str(self.device))
            return shard_model(frozen_model(with_adapters(loaded, config) if adapters else loaded), mesh)

        reference = frozen_copy(adapters=False) if config.kl_coef > 0 else None   # LoRA's adapters start at zero
        # the same structure as the model: its parameters are copied one by one
        previous = frozen_copy(adapters=True) if config.measure_stale_mismatch else None
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.learner = PPOLearner(model, reference, config, spec.total_steps, spec.version, pad_id,
                                  DataParallel(self.rank, self.world, self.device), train_mode_differs, previous)
        self.sender = WeightSender(self.learner.model, config.lora.scale if config.lora else None)
        # Nodes load at their own pace; the request channel's short timeout starts only once all are done.
        dist.barrier(group=self.control)

    def refuse(self, problem: str) -> int:
        """Tell the controller why this group cannot serve it (the first rank on its machine writes the
        reason where the controller looks for rank 0's address), and exit."""
        on_controller_node = [m["rank"] for m in self.members if m["controller_start_id"] is not None]
        if on_controller_node and self.rank == on_controller_node[0]:
            write_atomically(Path(self.spec.address_file), {"error": problem})
        log(f"cannot start: {problem}")
        return EXIT_BAD_GROUP

    # -- requests: every rank runs each one ----------------------------------------------------------------
    def prepare(self, trajectories: list, temperature: float, top_p: float = 1.0, top_k: int = -1) -> int:
        self.batch = self.learner.prepare(trajectories, temperature, top_p, top_k)
        self.batches += 1
        return self.batches

    def _prepared(self, number: int) -> PreparedBatch:
        if self.batch is None or number != self.batches:
            raise TrainerError(f"batch {number} is not the prepared batch (the last one prepared is {self.batches})")
        return self.batch

    def proximal(self, number: int) -> None:
        self.learner.recompute_proximal(self._prepared(number))

    def update(self, number: int, advantages: list[float]) -> dict[str, Any]:
        metrics = self.learner.ppo_update(self._prepared(number), torch.tensor(advantages, dtype=torch.float32))
        self.batch = None
        return {"metrics": metrics, "version": self.learner.version}

    def publish(self, directory: str) -> str:
        state = self.learner.full_model_state()
        if self.rank == 0:
            with atomic_directory(directory, durable=False) as tmp:
                write_model_files(tmp, served_state(state, self.config), self.learner.model.config, self.tokenizer)
        return directory

    def save(self, directory: str) -> str:
        """Rank 0 writes the checkpoint while every rank gathers its tensors with it, one at a time."""
        learner = self.learner
        rng_states: list[Any] = [None] * self.world
        dist.all_gather_object(rng_states, rng_state(self.device), group=self.control)
        layout, tensors = learner.state_layout(), learner.full_tensors()
        if self.rank == 0:
            write_checkpoint(directory, version=learner.version, layout=layout, tensors=tensors,
                             scheduler_state=learner.scheduler.state_dict(), rng_states=rng_states,
                             model_config=learner.model.config, tokenizer=self.tokenizer, backend="fsdp")
        else:
            for _ in tensors:   # the same gathers as rank 0's
                pass
        return directory

    def load(self, directory: str) -> int:
        """Rank 0 reads the checkpoint a tensor at a time; every rank takes its shard of each."""
        learner = self.learner
        box: list[Any] = [None]
        if self.rank == 0:   # the controller verified it and its names just before (FSDPTrainer.load_checkpoint)
            box = [verify_checkpoint(directory, digests=False)]
        dist.broadcast_object_list(box, src=0, group=self.control)
        manifest = box[0]
        if is_format_1(manifest):
            return self._load_format_1(directory, manifest)
        meta = [read_meta(directory, manifest) if self.rank == 0 else None]
        dist.broadcast_object_list(meta, src=0, group=self.control)
        learner.load_tensors(CheckpointTensors(directory, manifest) if self.rank == 0 else None, meta[0])
        return learner.version

    def _load_format_1(self, directory: str, manifest: dict[str, Any]) -> int:
        """A checkpoint of format 1: rank 0 reads it whole and broadcasts it."""
        learner = self.learner
        checkpoint, small = None, [None]
        if self.rank == 0:
            checkpoint = read_checkpoint(directory, manifest)
            small = [(bool(checkpoint.optimizer_state), checkpoint.scheduler_state, checkpoint.rng_states,
                      checkpoint.version)]
        dist.broadcast_object_list(small, src=0, group=self.control)
        optimizer_stepped, scheduler_state, rng_states, version = small[0]
        learner.load_full_state(checkpoint.model_state if checkpoint else {},
                                checkpoint.optimizer_state if checkpoint else {},
                                optimizer_stepped, scheduler_state, rng_states, version)
        return learner.version

    # -- weights streamed to the engines: every rank plans and gathers each bucket, rank 0 broadcasts it ------
    def stage_weights(self, cap_bytes: int, changed_only: bool) -> list:
        return self.sender.stage(cap_bytes, changed_only)

    def join_weights(self, init_method: str, world_size: int, group_name: str, backend: str, timeout: float) -> None:
        if self.rank == 0:
            self.sender.join(init_method, world_size, group_name, backend, timeout)

    def send_weights(self, index: int) -> None:
        self.sender.send(index)

    def leave_weights(self) -> None:
        self.sender.leave()

    # -- the request loop ------------------------------------------------------------------------------------
    def connect(self) -> Connection:
        """Rank 0: listen on localhost, tell the controller where (atomically written file), accept it."""
        listener = Listener(("127.0.0.1", 0), authkey=bytes.fromhex(os.environ[AUTHKEY_ENV]))
        write_atomically(Path(self.spec.address_file), {"host": listener.address[0], "port": listener.address[1]})
        connection = listener.accept()
        listener.close()
        return connection

    def next_request(self, connection: Connection | None) -> tuple:
        """Every rank: the controller's next request, or ("heartbeat",) when none came within heartbeat_s.
        Rank 0 reads it from the controller and broadcasts it; raises GroupLost when that fails."""
        box: list[Any] = [None]
        if connection is not None:
            if connection.poll(self.spec.heartbeat_s):
                try:
                    box[0] = connection.recv()
                except (EOFError, OSError):
                    box[0] = ("abort",)
            else:
                box[0] = ("heartbeat",)
        try:
            dist.broadcast_object_list(box, src=0, group=self.requests)
        except RuntimeError as exc:  # gloo: a closed connection, or no message within the group's timeout
            raise GroupLost(gloo_reason(exc)) from None
        return box[0]

    def group_lost(self, reason: str, connection: Connection | None) -> int:
        if self.rank == 0:
            message = (f"the trainer group lost a rank between requests: another rank or node "
                       f"went away ({reason})")
            other_hosts = sorted({m["host"] for m in self.members if m["controller_start_id"] is None})
            if other_hosts:
                message += f"; see the torchrun log of the other nodes ({', '.join(other_hosts)})"
            if connection is not None:
                try:  # the controller reads it with its next request
                    connection.send(("error", message))
                except OSError:
                    pass
        else:
            message = (f"lost rank 0 (on the controller's node, {self.spec.controller_host}): no request or "
                       f"heartbeat came ({reason}); the controller or its trainer ranks are gone; exiting")
        log(message)
        return EXIT_GROUP_LOST

    def serve(self) -> int:
        """Run requests until the controller says close (returns 0), disappears (returns 1), or the group
        loses a rank (returns EXIT_GROUP_LOST)."""
        connection = None
        if self.rank == 0:
            connection = self.connect()
            local_pids = [m["pid"] for m in self.members if m["controller_start_id"] is not None]
            connection.send(("ok", {"pids": local_pids, "members": self.members, "world_size": self.world,
                                    "version": self.learner.version,
                                    "parameters": self.learner.parameter_shapes(),
                                    "tied_embeddings": self.learner.tied_embeddings,
                                    "hidden_state_head": uses_hidden_state_head(self.learner.model)}))
        handlers = {"prepare": self.prepare, "proximal": self.proximal, "update": self.update,
                    "publish": self.publish, "save": self.save, "load": self.load,
                    "stage_weights": self.stage_weights, "join_weights": self.join_weights,
                    "send_weights": self.send_weights, "leave_weights": self.leave_weights}
        while True:
            try:
                command, *args = self.next_request(connection)
            except GroupLost as exc:
                return self.group_lost(str(exc), connection)
            if command == "heartbeat":
                continue
            if command in ("close", "abort"):
                if command == "abort":
                    log("the controller's connection to rank 0 closed (the controller died); exiting")
                dist.barrier(group=self.control)
                dist.destroy_process_group()
                return 0 if command == "close" else 1
            try:
                result = handlers[command](*args)
                # Rank 0 may still be writing files alone: the others wait here, under the request timeout,
                # rather than on the request channel, whose timeout is only heartbeat_timeout_s.
                dist.barrier(group=self.control)
            except BaseException:
                if connection is not None:
                    try:
                        connection.send(("error", traceback.format_exc()))
                    except OSError:
                        pass
                raise
            if connection is not None:
                connection.send(("ok", result))


def gloo_reason(exc: BaseException) -> str:
    """`[.../pair.cc:553] Connection closed by peer [10.0.0.2]:4321. This is typically ...` -> its first
    sentence, without the source location."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
    return text.split(". ", 1)[0].rstrip(".")


def write_atomically(path: Path, content: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(content))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="torchrun [torchrun options] -m areal_core.rl.fsdp_worker",
        description="One rank of areal's FSDP trainer. The controller (areal train) starts the ranks of its own "
                    "node; on the other trainer nodes, start them with torchrun and the same --spec (see the "
                    "trainer-across-nodes section of docs/deployment.md).")
    parser.add_argument("--spec", required=True, type=Path, metavar="SPEC.json",
                        help="the spec the controller wrote: RUN_DIR/trainer/spec.json on the shared filesystem")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error("run this module under torchrun (RANK and WORLD_SIZE are not set)")
    try:
        spec = read_spec(args.spec)
    except TrainerError as exc:
        log(str(exc))
        return 2
    started_by_controller = os.environ.get(START_ID_ENV)
    # Only the controller's machine can see its process; elsewhere the heartbeat stands in for it.
    watch_processes(int(os.environ[CONTROLLER_PID_ENV]) if started_by_controller is not None else None)
    torch.set_num_threads(TrainerConfig(**spec.config).fsdp_threads_per_process)
    return_freed_memory()
    rank = Rank(spec, str(args.spec), started_by_controller)
    if rank.problem is not None:
        return rank.refuse(rank.problem)
    rank.build_learner()
    with setup_objects_frozen():   # the model, optimizer and process group: out of the collector's full passes
        return rank.serve()


if __name__ == "__main__":
    sys.exit(main())
