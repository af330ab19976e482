"""The FSDP trainer across two "nodes" on one machine, under real torchrun (gloo, CPU).

Node 0 is the controller's torchrun (one rank), started by FSDPTrainer with `--nnodes 2 --node-rank 0` and a
static rendezvous in `trainer.torchrun_args`. Node 1 is a second torchrun (one rank) that the test starts
itself with the command docs/deployment.md gives for the other nodes. The two share only what two machines
would: the scratch directory (standing in for the shared filesystem) and the rendezvous address. Node 1
does not inherit the controller's environment, so it takes no part in the controller-PID watch.

Losses must match the local trainer's to 1e-4 relative, as in test_fsdp.py (same reason: the same sums in
another order).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from areal_core.engine.model import init_model
from areal_core.rl.checkpoint import verify_checkpoint
from areal_core.rl.fsdp import FSDPTrainer
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, TrainerError, train_step
from support import process_is_running
from trainer_support import COMPARED, SETTINGS, TEST_MODEL, TOTAL_STEPS, load_weights, make_batch

pytestmark = pytest.mark.timeout(300)

TORCHRUN = Path(sys.executable).parent / "torchrun"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_node_config(port: int, rendezvous: list | None = None) -> TrainerConfig:
    # Numbers unquoted, as YAML gives them: the config turns them into words for torchrun.
    rendezvous = rendezvous or ["--master-addr", "127.0.0.1", "--master-port", port]
    return TrainerConfig(backend="fsdp", fsdp_processes=1, torchrun_args=["--nnodes", 2, "--node-rank", 0, *rendezvous],
                         **SETTINGS)


def start_other_node(spec: Path, port: int, log: Path, rendezvous: list[str] | None = None) -> subprocess.Popen:
    """Node 1, as docs/deployment.md says to start it. Its own session, like a process on another machine;
    the environment carries none of the controller's AREAL_FSDP_* variables (the test process never has
    them: FSDPTrainer gives them to its own torchrun only)."""
    rendezvous = rendezvous or ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    command = [str(TORCHRUN), "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "1", *rendezvous,
               "-m", "areal_core.rl.fsdp_worker", "--spec", str(spec)]
    assert not any(name.startswith("AREAL_FSDP_") for name in os.environ)
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop(process: subprocess.Popen, *pids: int) -> None:
    for pid in [process.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def wait_until_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(process_is_running(pid) for pid in pids):
        time.sleep(0.2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=3, **TEST_MODEL)


@pytest.fixture(scope="module")
def batches(model_dir):
    return [make_batch(model_dir, 0), make_batch(model_dir, 1, groups=1, group_size=3)]


def test_two_nodes_train_like_the_local_trainer_and_stop_together(model_dir, batches, tmp_path):
    scratch = tmp_path / "run" / "trainer"
    port = free_port()
    other = start_other_node(scratch / "spec.json", port, tmp_path / "node1.log")
    try:
        trainer = FSDPTrainer(model_dir, two_node_config(port), TOTAL_STEPS, scratch_dir=scratch)
    except BaseException:
        stop(other)
        raise
    try:
        assert trainer.world_size == 2
        node0, node1 = trainer.members
        assert node0["controller_start_id"] is not None and node1["controller_start_id"] is None
        assert trainer.worker_pids == [node0["pid"]]  # only this node's ranks are the controller's to kill
        # the other node read the initial model from the scratch directory, not from the controller's path
        spec = json.loads(trainer.spec_path.read_text())
        assert Path(spec["model_path"]) == scratch / "initial-model"
        assert (scratch / "initial-model" / "config.json").is_file()
        metrics = [train_step(trainer, batch, 1.0) for batch in batches]
        checkpoint = trainer.save_checkpoint(tmp_path / "checkpoint")
        assert trainer.load_checkpoint(checkpoint) == 2  # rank 0 reads it and hands the other node its share
        weights = trainer.publish(tmp_path / "weights")
    finally:
        trainer.close()
    try:
        assert other.wait(timeout=30) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    finally:
        stop(other)
    assert not any(process_is_running(pid) for pid in [trainer.torchrun_pid, other.pid, node0["pid"], node1["pid"]])
    # the run keeps node 0's log; what only the ranks needed is gone
    assert (scratch / "workers.log").is_file()
    assert not (scratch / "spec.json").exists() and not (scratch / "initial-model").exists()

    local = LocalTrainer(model_dir, TrainerConfig(backend="local", **SETTINGS), TOTAL_STEPS)
    expected = [train_step(local, batch, 1.0) for batch in batches]
    for got, want in zip(metrics, expected):
        for key in COMPARED:
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-7), key
    verify_checkpoint(checkpoint)  # raises when damaged
    resumed = LocalTrainer(model_dir, TrainerConfig(backend="local", **SETTINGS), TOTAL_STEPS)
    assert resumed.load_checkpoint(checkpoint) == 2
    local_weights = load_weights(local.publish(tmp_path / "local-weights"))
    for name, tensor in load_weights(weights).items():
        torch.testing.assert_close(tensor, local_weights[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_lost_node_ends_the_other_side_with_a_clear_message(model_dir, batches, tmp_path):
    """Node 0 falls silent (SIGSTOP on its torchrun and rank 0, as when the machine hangs or drops off the
    network): no connection closes, so only the missing heartbeats tell node 1 that rank 0 is gone, and it
    exits. Then node 0 comes back to a group whose other node has vanished, as after a kill: the
    controller's next request is a clear error, not a hang."""
    port = free_port()
    other = start_other_node(tmp_path / "trainer" / "spec.json", port, tmp_path / "node1.log")
    try:
        trainer = FSDPTrainer(model_dir, two_node_config(port), TOTAL_STEPS, scratch_dir=tmp_path / "trainer",
                              heartbeat_timeout_s=6)
    except BaseException:
        stop(other)
        raise
    node0 = [trainer.torchrun_pid, *trainer.worker_pids]
    try:
        for pid in node0:
            os.kill(pid, signal.SIGSTOP)
        # node 1's rank gives up after 6 s without a heartbeat, then its torchrun ends
        wait_until_gone([other.pid, trainer.members[1]["pid"]], timeout=30)
        assert other.poll() is not None and other.returncode != 0, "node 1 did not exit"
        assert not process_is_running(trainer.members[1]["pid"])
        log = (tmp_path / "node1.log").read_text()
        assert "lost rank 0 (on the controller's node" in log and "Timed out" in log, log[-3000:]

        for pid in node0:
            os.kill(pid, signal.SIGCONT)
        started = time.monotonic()
        with pytest.raises(TrainerError, match="FSDP trainer failed while running 'prepare'") as failure:
            train_step(trainer, batches[0], 1.0)
        assert time.monotonic() - started < 30
        first_line = str(failure.value).splitlines()[0]
        assert "the trainer group lost a rank" in first_line, first_line
        assert "another rank or node went away" in first_line, first_line
        assert not any(process_is_running(pid) for pid in node0)
    finally:
        for pid in node0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        trainer.close()
        stop(other)


def test_rank_0_on_another_node_is_refused_with_a_clear_error(model_dir, tmp_path):
    """The c10d rendezvous ignores --node-rank and numbers the nodes by address: node 1, with the lower
    address, gets global rank 0, which cannot take the controller's requests."""
    port = free_port()
    endpoint = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    other = start_other_node(tmp_path / "trainer" / "spec.json", port, tmp_path / "node1.log",
                             rendezvous=[*endpoint, "--local-addr", "127.0.0.1"])
    try:
        with pytest.raises(TrainerError, match="FSDP trainer cannot start: global rank 0 is not one of the ranks "
                                               "the controller started") as failure:
            FSDPTrainer(model_dir, two_node_config(port, rendezvous=[*endpoint, "--local-addr", "localhost"]),
                        TOTAL_STEPS, scratch_dir=tmp_path / "trainer")
        assert "static rendezvous" in str(failure.value)
        assert other.wait(timeout=30) != 0
        assert "cannot start: global rank 0" in (tmp_path / "node1.log").read_text()
    finally:
        stop(other)


def test_a_trainer_across_nodes_needs_a_shared_scratch_dir_and_node_rank_0(model_dir, tmp_path):
    with pytest.raises(TrainerError, match="no scratch_dir"):
        FSDPTrainer(model_dir, two_node_config(free_port()), TOTAL_STEPS)
    config = TrainerConfig(backend="fsdp", torchrun_args=["--nnodes", 2, "--node-rank", 1])
    with pytest.raises(TrainerError, match="--node-rank 1, but the controller's node must be node 0"):
        FSDPTrainer(model_dir, config, TOTAL_STEPS, scratch_dir=tmp_path)


def test_torchrun_args_take_unquoted_numbers_and_reject_other_values():
    from areal_core.config import load_config
    from areal_core.errors import ConfigError
    from areal_core.rl.config import TrainConfig

    config = load_config(TrainConfig, None, ["trainer.torchrun_args=[--nnodes, 2, --monitor-interval, 0.5]"])
    assert config.trainer.torchrun_args == ["--nnodes", "2", "--monitor-interval", "0.5"]
    with pytest.raises(ConfigError, match=r"trainer.torchrun_args\[1\]: expected str \| int \| float, got bool True"):
        load_config(TrainConfig, None, ["trainer.torchrun_args=[--standalone, true]"])
