"""One rank of the FSDP trainer. `FSDPTrainer` (areal_core/rl/fsdp.py) starts these with torchrun:

    torchrun --nproc-per-node N -m areal_core.rl.fsdp_worker SPEC.json

Every rank loads the model, shards it with FSDP2 (`fully_shard` per decoder layer, then the root) and
builds the same `PPOLearner` as the local trainer. Rank 0 listens on a localhost socket (address written to
the spec's `address_file`, authenticated with the key in $AREAL_FSDP_AUTHKEY) and takes requests from the
controller: ("train", trajectories, temperature), ("publish", dir), ("save", dir), ("load", dir), ("close",).
It broadcasts each request to the other ranks, all ranks run it, and rank 0 sends back ("ok", result) or
("error", traceback). An error is fatal to the whole group: the rank exits, torchrun stops the others, and
the controller reports it. Every rank exits when the controller process disappears.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from areal_core.rl.checkpoint import (
    atomic_directory,
    check_model_keys,
    read_checkpoint,
    write_checkpoint,
    write_model_files,
)
from areal_core.rl.trainer import DataParallel, PPOLearner, TrainerConfig, TrainerError, rng_state

# Requests arrive whenever the controller gets round to them (after a rollout batch fills, say), so the
# ranks wait on the control group for as long as the controller lives; the watchdog covers its death.
IDLE_TIMEOUT = timedelta(days=30)
EXIT_CONTROLLER_GONE = 3


@dataclass(frozen=True)
class WorkerSpec:
    """What FSDPTrainer tells its ranks (a JSON file; the path is the worker's one argument)."""

    model_path: str
    config: dict[str, Any]
    total_steps: int
    version: int
    controller_pid: int
    address_file: str
    timeout_s: float


def watch_controller(pid: int, interval_s: float = 1.0) -> None:
    """Exit this rank as soon as the controller process is gone, so no rank outlives it (torchrun then
    sees the failed rank and stops the rest)."""

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"fsdp worker {os.getpid()}: controller process {pid} is gone; exiting", file=sys.stderr, flush=True)
                os._exit(EXIT_CONTROLLER_GONE)
            except PermissionError:
                pass  # exists, owned by someone else: alive
            time.sleep(interval_s)

    threading.Thread(target=watch, name="controller-watchdog", daemon=True).start()


def shard_model(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """FSDP2: each decoder layer its own unit (gathered for its forward/backward only), then the root
    (embeddings, final norm, output head)."""
    from torch.distributed.fsdp import fully_shard

    layer_types = set(getattr(model, "_no_split_modules", None) or ())
    layers = [module for module in model.modules() if type(module).__name__ in layer_types]
    if not layers:
        raise TrainerError(f"cannot shard {type(model).__name__} with FSDP: it declares no decoder layer "
                           "type (_no_split_modules)")
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


class Rank:
    """This process's part of the FSDP trainer: the sharded learner, and on rank 0 the controller link."""

    def __init__(self, spec: WorkerSpec) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        from areal_core.engine.model import load_model, load_tokenizer

        self.spec = spec
        self.config = config = TrainerConfig(**spec.config)
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        if config.device.startswith("cuda"):
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
            backend = "nccl"
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        timeout = timedelta(seconds=spec.timeout_s)
        dist.init_process_group(backend, timeout=timeout)
        # Requests travel on their own gloo group, which may wait idle far longer than a collective should.
        self.control = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)
        mesh = init_device_mesh(self.device.type, (self.world,))

        self.tokenizer = load_tokenizer(spec.model_path)
        model = shard_model(load_model(spec.model_path, dtype=config.dtype, device=str(self.device)).train(), mesh)
        reference = None
        if config.kl_coef > 0:
            reference = load_model(spec.model_path, dtype=config.dtype, device=str(self.device))
            reference.requires_grad_(False)
            reference = shard_model(reference, mesh)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.learner = PPOLearner(model, reference, config, spec.total_steps, spec.version, pad_id,
                                  DataParallel(self.rank, self.world, self.device))
        self.pids: list[int] = [0] * self.world
        dist.all_gather_object(self.pids, os.getpid(), group=self.control)

    # -- requests: every rank runs each one ----------------------------------------------------------------
    def train(self, trajectories: list, temperature: float) -> dict[str, Any]:
        metrics = self.learner.train_step(trajectories, temperature)
        return {"metrics": metrics, "version": self.learner.version}

    def publish(self, directory: str) -> str:
        state = self.learner.full_model_state()
        if self.rank == 0:
            with atomic_directory(directory, durable=False) as tmp:
                write_model_files(tmp, state, self.learner.model.config, self.tokenizer)
        return directory

    def save(self, directory: str) -> str:
        learner = self.learner
        model_state, optimizer_state = learner.full_model_state(), learner.full_optimizer_state()
        rng_states: list[Any] = [None] * self.world
        dist.all_gather_object(rng_states, rng_state(self.device), group=self.control)
        if self.rank == 0:
            write_checkpoint(directory, version=learner.version, model_state=model_state,
                             optimizer_state=optimizer_state, scheduler_state=learner.scheduler.state_dict(),
                             rng_states=rng_states, model_config=learner.model.config, tokenizer=self.tokenizer,
                             backend="fsdp")
        return directory

    def load(self, directory: str) -> int:
        learner = self.learner
        checkpoint, small = None, [None]
        if self.rank == 0:
            checkpoint = read_checkpoint(directory)
            check_model_keys(directory, set(checkpoint.model_state), learner.parameter_names(), learner.tied_embeddings)
            small = [(bool(checkpoint.optimizer_state), checkpoint.scheduler_state, checkpoint.rng_states,
                      checkpoint.version)]
        dist.broadcast_object_list(small, src=0, group=self.control)
        optimizer_stepped, scheduler_state, rng_states, version = small[0]
        learner.load_full_state(checkpoint.model_state if checkpoint else {},
                                checkpoint.optimizer_state if checkpoint else {},
                                optimizer_stepped, scheduler_state, rng_states, version)
        return learner.version

    # -- the request loop ------------------------------------------------------------------------------------
    def connect(self) -> Connection:
        """Rank 0: listen on localhost, tell the controller where (atomically written file), accept it."""
        listener = Listener(("127.0.0.1", 0), authkey=bytes.fromhex(os.environ["AREAL_FSDP_AUTHKEY"]))
        address = Path(self.spec.address_file)
        tmp = address.with_suffix(".tmp")
        tmp.write_text(json.dumps({"host": listener.address[0], "port": listener.address[1]}))
        os.replace(tmp, address)
        connection = listener.accept()
        listener.close()
        return connection

    def serve(self) -> int:
        """Run requests until the controller says close (returns 0) or disappears (returns 1)."""
        connection = None
        if self.rank == 0:
            connection = self.connect()
            connection.send(("ok", {"pids": self.pids, "world_size": self.world, "version": self.learner.version,
                                    "parameters": sorted(self.learner.parameter_names()),
                                    "tied_embeddings": self.learner.tied_embeddings}))
        handlers = {"train": self.train, "publish": self.publish, "save": self.save, "load": self.load}
        while True:
            box: list[Any] = [None]
            if connection is not None:
                try:
                    box[0] = connection.recv()
                except (EOFError, OSError):
                    box[0] = ("abort",)
            dist.broadcast_object_list(box, src=0, group=self.control)
            command, *args = box[0]
            if command in ("close", "abort"):
                dist.barrier(group=self.control)
                dist.destroy_process_group()
                return 0 if command == "close" else 1
            try:
                result = handlers[command](*args)
            except BaseException:
                if connection is not None:
                    try:
                        connection.send(("error", traceback.format_exc()))
                    except OSError:
                        pass
                raise
            if connection is not None:
                connection.send(("ok", result))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: torchrun ... -m areal_core.rl.fsdp_worker SPEC.json (started by FSDPTrainer)", file=sys.stderr)
        return 2
    spec = WorkerSpec(**json.loads(Path(argv[0]).read_text()))
    watch_controller(spec.controller_pid)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    return Rank(spec).serve()


if __name__ == "__main__":
    sys.exit(main())
