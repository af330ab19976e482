"""The FSDP2 trainer backend under real torchrun (2 ranks, gloo, CPU) against the local trainer.

Tolerance: the two backends compute the same sums in a different order (micro-batches are split and dealt
to ranks; gradients are reduce-scattered), so float32 results agree to rounding, not bit for bit. Losses and
other metrics must agree to 1e-4 relative and published weights to rtol 1e-4 / atol 1e-5 after three
optimizer-step batches (measured: about 1e-7 relative on losses and 5e-6 absolute on weights). A trainer
resumed from its own backend's checkpoint must repeat the uninterrupted step to 1e-6.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_core.engine.model import init_model
from areal_core.rl.fsdp import FSDPTrainer
from areal_core.rl.config import TrainerConfig
from areal_core.rl.output_head import uses_hidden_state_head
from areal_core.rl.trainer import LocalTrainer, TrainerError, create_trainer, rank_share, train_step
from support import peak_rss_growth, process_is_running
from trainer_support import COMPARED, SETTINGS, TEST_MODEL, TOTAL_STEPS, load_weights, make_batch

pytestmark = pytest.mark.timeout(300)



def config(backend: str) -> TrainerConfig:
    return TrainerConfig(backend=backend, **SETTINGS)


def assert_same_metrics(got: dict, expected: dict, rel: float) -> None:
    for key in COMPARED:
        assert got[key] == pytest.approx(expected[key], rel=rel, abs=1e-7), key


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=3, **TEST_MODEL)


@pytest.fixture(scope="module")
def batches(model_dir):
    # The middle batch has 3 sequences: its one-sequence minibatch cannot be split, so one rank must run an
    # empty micro-batch to keep the collectives in step.
    return [make_batch(model_dir, 0), make_batch(model_dir, 1, groups=1, group_size=3), make_batch(model_dir, 2)]


@pytest.fixture(scope="module")
def runs(model_dir, batches, tmp_path_factory):
    """Both backends from the same weights on the same three batches, with a checkpoint after the second
    step and the weights published after the third."""
    out = tmp_path_factory.mktemp("runs")
    results = {}
    trainers = {"local": LocalTrainer(model_dir, config("local"), TOTAL_STEPS)}
    trainers["fsdp"] = create_trainer(model_dir, config("fsdp"), TOTAL_STEPS)
    try:
        # both take the log-probs from the hidden states, the output head a chunk at a time (test_output_head.py)
        assert trainers["fsdp"].hidden_state_head and uses_hidden_state_head(trainers["local"].model)
        for name, trainer in trainers.items():
            metrics = [train_step(trainer, batch, 1.0) for batch in batches[:2]]
            trainer.save_checkpoint(out / f"{name}-checkpoint")
            metrics.append(train_step(trainer, batches[2], 1.0))
            trainer.publish(out / f"{name}-weights")
            results[name] = {"metrics": metrics, "version": trainer.version,
                             "checkpoint": out / f"{name}-checkpoint", "weights": out / f"{name}-weights"}
    finally:
        for trainer in trainers.values():
            trainer.close()
    return results


def test_fsdp_losses_match_the_local_trainer_step_by_step(runs):
    local, fsdp = runs["local"]["metrics"], runs["fsdp"]["metrics"]
    assert runs["fsdp"]["version"] == runs["local"]["version"] == 3
    for step, (expected, got) in enumerate(zip(local, fsdp)):
        assert_same_metrics(got, expected, rel=1e-4)
    # the steps did real work: losses differ from step to step, and clipping and the KL term are active
    assert len({round(m["loss"], 6) for m in local}) == 3
    assert all(m["kl_ref"] >= 0 for m in fsdp) and any(m["kl_ref"] > 0 for m in fsdp)
    # The batches' tokens are of version 0. Step 1 (the trainer at 0): the engine/trainer gap against pi_prox on
    # every token, the same on both backends; step 2 (at 1): one version old, measured with the kept weights of
    # version 0 on each rank's first micro-batch (a sample: its size differs with the ranks); step 3: none left.
    for key in ("mismatch_kl", "mismatch_abs_mean", "mismatch_abs_max", "mismatch_tokens"):
        assert fsdp[0][key] == pytest.approx(local[0][key], rel=1e-3, abs=1e-7), key
    assert local[0]["mismatch_abs_mean"] > 0.01  # make_batch's behaviour noise
    assert fsdp[1]["mismatch_tokens"] > 0 and local[1]["mismatch_tokens"] > 0
    assert fsdp[1]["mismatch_abs_mean"] == pytest.approx(local[1]["mismatch_abs_mean"], rel=0.5)
    assert fsdp[2]["mismatch_tokens"] == local[2]["mismatch_tokens"] == 0


def test_fsdp_publishes_the_same_weights_as_the_local_trainer(runs, model_dir):
    local, fsdp = load_weights(runs["local"]["weights"]), load_weights(runs["fsdp"]["weights"])
    initial = load_weights(model_dir)
    assert sorted(fsdp) == sorted(local) == sorted(initial)
    for name in local:
        torch.testing.assert_close(fsdp[name], local[name], rtol=1e-4, atol=1e-5, msg=name)
    assert max(float((local[n] - initial[n]).abs().max()) for n in local) > 1e-3  # training moved the weights
    # a complete model directory: config and tokenizer beside the weights
    for published in (runs["local"]["weights"], runs["fsdp"]["weights"]):
        assert (published / "config.json").is_file() and (published / "tokenizer.json").is_file()


def test_fsdp_with_gradient_checkpointing_takes_the_same_steps(runs, model_dir, batches):
    """Each sharded layer recomputed in the backward pass (FSDP2 gathers its shard again for the recompute): the
    local trainer's first two steps, which kept every activation."""
    trainer = create_trainer(model_dir, TrainerConfig(backend="fsdp", gradient_checkpointing=True, **SETTINGS),
                             TOTAL_STEPS)
    try:
        for batch, expected in zip(batches[:2], runs["local"]["metrics"]):
            assert_same_metrics(train_step(trainer, batch, 1.0), expected, rel=1e-4)
    finally:
        trainer.close()


def test_every_rank_runs_the_same_number_of_microbatches(runs):
    for metrics in runs["fsdp"]["metrics"]:
        assert metrics["rank_microbatches_min"] == metrics["rank_microbatches_max"]
        assert 2 * metrics["rank_microbatches_max"] >= metrics["microbatches"]
    odd = runs["fsdp"]["metrics"][1]
    # 3 sequences, 2 minibatches: the two-sequence micro-batch is split, the lone sequence gets an empty partner
    assert odd["sequences"] == 3 and odd["microbatches"] == 2 and odd["rank_microbatches_max"] == 2
    # the local trainer runs the plan as it is
    assert runs["local"]["metrics"][1]["rank_microbatches_max"] == 2


def test_each_step_reports_the_positions_its_ranks_computed(runs, batches):
    """Summed over the ranks, split and empty micro-batches included: what `areal plan` costs a step by."""
    from areal_core.rl.trainer import step_shape

    for version, (batch, local, fsdp) in enumerate(zip(batches, runs["local"]["metrics"], runs["fsdp"]["metrics"])):
        for backend, metrics, ranks in (("local", local, 1), ("fsdp", fsdp, config("fsdp").fsdp_processes)):
            share = config(backend).share_prompts
            assert metrics["positions"] == step_shape(batch, config(backend), share, version, ranks)[0], (backend,
                                                                                                        version)
    # the three-sequence step on two ranks: its pair split (each padded to its own width), the lone one beside an
    # empty micro-batch of two padding positions; not what one rank computes
    assert runs["fsdp"]["metrics"][1]["positions"] != runs["local"]["metrics"][1]["positions"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=8), min_size=1, max_size=5), st.integers(1, 4))
def test_rank_share_gives_every_rank_the_same_count_and_each_sequence_once(minibatch_shapes, ranks):
    # minibatch_shapes: per minibatch, the number of sequences in each of its micro-batches
    plan, lengths = [], []
    for sizes in minibatch_shapes:
        minibatch = []
        for size in sizes:
            minibatch.append(list(range(len(lengths), len(lengths) + size)))
            lengths += [(len(lengths) + k) * 37 % 200 + 1 for k in range(size)]
        plan.append(minibatch)
    shares = [rank_share(plan, lengths, rank, ranks) for rank in range(ranks)]
    for m, minibatch in enumerate(plan):
        assert len({len(share[m]) for share in shares}) == 1
        dealt = sorted(i for share in shares for mb in share[m] for i in mb)
        assert dealt == sorted(i for mb in minibatch for i in mb)


def test_fsdp_resumes_from_a_checkpoint_of_either_backend(runs, model_dir, batches):
    """A fresh FSDP trainer (as after a kill) loads the FSDP checkpoint taken after step 2 and repeats step 3
    exactly; then the local trainer's checkpoint, and matches the local step 3. And the local trainer
    resumes from the FSDP checkpoint."""
    with create_trainer(model_dir, config("fsdp"), TOTAL_STEPS) as resumed:
        assert resumed.load_checkpoint(runs["fsdp"]["checkpoint"]) == 2
        assert_same_metrics(train_step(resumed, batches[2], 1.0), runs["fsdp"]["metrics"][2], rel=1e-6)
        assert resumed.version == 3
        weights = load_weights(resumed.publish(runs["fsdp"]["weights"].parent / "fsdp-resumed"))
        for name, expected in load_weights(runs["fsdp"]["weights"]).items():
            torch.testing.assert_close(weights[name], expected, rtol=1e-6, atol=1e-7, msg=name)

        assert resumed.load_checkpoint(runs["local"]["checkpoint"]) == 2
        assert_same_metrics(train_step(resumed, batches[2], 1.0), runs["local"]["metrics"][2], rel=1e-4)
    # leaving the block closed it: torchrun and the ranks are gone
    assert not any(process_is_running(pid) for pid in [resumed.torchrun_pid, *resumed.worker_pids])

    local = LocalTrainer(model_dir, config("local"), TOTAL_STEPS)
    assert local.load_checkpoint(runs["fsdp"]["checkpoint"]) == 2
    assert_same_metrics(train_step(local, batches[2], 1.0), runs["fsdp"]["metrics"][2], rel=1e-4)


def test_a_checkpoint_taken_right_after_a_no_grad_pass_holds_the_whole_state(runs, model_dir, batches, tmp_path):
    """FSDP2 leaves the root's weights unsharded after a forward pass (pi_prox): the module then holds full tensors
    in place of the optimizer's shards. A checkpoint taken there still holds every weight and Adam moment."""
    with create_trainer(model_dir, config("fsdp"), TOTAL_STEPS) as trainer:
        assert trainer.load_checkpoint(runs["fsdp"]["checkpoint"]) == 2
        trainer.recompute_proximal(trainer.prepare(batches[2], 1.0))
        trainer.save_checkpoint(tmp_path / "after-prox")
    expected, got = (LocalTrainer(model_dir, config("local"), TOTAL_STEPS) for _ in range(2))
    expected.load_checkpoint(runs["fsdp"]["checkpoint"])
    got.load_checkpoint(tmp_path / "after-prox")
    for (name, want), have in zip(expected.model.named_parameters(), got.model.parameters()):
        torch.testing.assert_close(have, want, rtol=0, atol=0, msg=name)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(got.learner.optimizer.state[have][key],
                                       expected.learner.optimizer.state[want][key], rtol=0, atol=0, msg=f"{key}/{name}")


def test_a_killed_rank_is_a_clear_error_not_a_hang(model_dir, batches, tmp_path):
    trainer = FSDPTrainer(model_dir, config("fsdp"), TOTAL_STEPS, scratch_dir=tmp_path)
    try:
        assert len(trainer.worker_pids) == 2
        os.kill(trainer.worker_pids[1], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(TrainerError, match="FSDP trainer failed while running 'prepare'") as failure:
            train_step(trainer, batches[0], 1.0)
        assert time.monotonic() - started < 30
        first_line = str(failure.value).splitlines()[0]
        assert "rank 1 died first (exit code -9, SIGKILL)" in first_line, first_line
        assert not process_is_running(trainer.torchrun_pid)
        assert not any(process_is_running(pid) for pid in trainer.worker_pids)
        with pytest.raises(TrainerError, match="already failed"):
            trainer.publish(model_dir.parent / "never")
        assert trainer.log_path == tmp_path / "workers.log" and trainer.log_path.is_file()  # kept: the error quotes it
    finally:
        trainer.close()


CONTROLLER = textwrap.dedent("""
    import json, sys, time
    from areal_core.rl.fsdp import FSDPTrainer
    from areal_core.rl.config import TrainerConfig
    trainer = FSDPTrainer(sys.argv[1], TrainerConfig(backend="fsdp"), total_steps=1, scratch_dir=sys.argv[2])
    print(json.dumps({"torchrun": trainer.torchrun_pid, "ranks": trainer.worker_pids}), flush=True)
    time.sleep(600)
""")


def test_ranks_exit_when_the_controller_process_dies(model_dir, tmp_path):
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(model_dir), str(tmp_path)],
                                  stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(controller.stdout.readline())
        assert all(process_is_running(pid) for pid in [pids["torchrun"], *pids["ranks"]])
        controller.kill()
        controller.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(process_is_running(p) for p in [pids["torchrun"], *pids["ranks"]]):
            time.sleep(0.2)
        assert not any(process_is_running(p) for p in [pids["torchrun"], *pids["ranks"]])
    finally:
        controller.kill()
        controller.wait()


def test_an_unknown_trainer_backend_is_an_error_listing_the_registered_ones(model_dir):
    from areal_core.config import load_config
    from areal_core.errors import ConfigError, UnknownNameError
    from areal_core.rl.config import TrainConfig

    with pytest.raises(ConfigError, match=r"trainer: backend 'deepspeed' is not a registered trainer backend "
                                          r"\(registered: fsdp, local; plugins add more"):
        load_config(TrainConfig, None, ["trainer.backend=deepspeed"])
    with pytest.raises(UnknownNameError, match="no trainer backend named 'deepspeed' is registered"):
        create_trainer(model_dir, TrainerConfig(backend="deepspeed"), 1)


def test_rank_0_writes_a_checkpoint_a_tensor_at_a_time_not_the_whole_state_at_once(tmp_path):
    """At 0.5B parameters rank 0 gathered the full weights and both Adam moments before writing (6 GB) and a 24 GiB
    machine killed it at the first checkpoint (bench/bench_real_size.py). Now its memory while it writes grows by
    about one tensor: here under a quarter of the full state (1.5 GB of a 126M-parameter model; measured: 0.23 GB,
    against 0.57 GB the old way), and the other ranks, which only send their shards, never hold a full tensor
    (they all-gathered each one before: at 0.5B the 545 MB embedding and its moments). Then the checkpoint resumes
    in the local trainer, which reads it a tensor at a time too, the step after it the same."""
    import psutil

    # matrices of 64 MB: past glibc's mmap threshold, so memory freed is given back and RSS shows what is live
    model = init_model(tmp_path / "model", seed=0, num_hidden_layers=2, hidden_size=2048, intermediate_size=8192)
    settings = TrainerConfig(backend="fsdp", micro_batch_tokens=256, measure_stale_mismatch=False)
    batch = make_batch(model, 0, groups=2, group_size=2)
    trainer = create_trainer(model, settings, 4)
    try:
        train_step(trainer, batch, 1.0)
        parameters = sum(p.numel() for p in LocalTrainer(model, TrainerConfig(), 1).model.parameters())
        rank0, rank1 = (psutil.Process(next(m["pid"] for m in trainer.members if m["rank"] == rank)) for rank in (0, 1))
        with peak_rss_growth(rank0) as writer, peak_rss_growth(rank1) as sender:
            trainer.save_checkpoint(tmp_path / "checkpoint")
        full_state = 12 * parameters   # float32 weights and Adam's two moments
        assert writer.bytes < full_state / 4, (writer.bytes, full_state)
        largest = 4 * 2048 * 8192
        assert sender.bytes < largest / 2, (sender.bytes, largest)
        after = train_step(trainer, make_batch(model, 1, groups=2, group_size=2), 1.0)
    finally:
        trainer.close()
    local = LocalTrainer(model, TrainerConfig(micro_batch_tokens=256, measure_stale_mismatch=False), 4)
    # Loading reads each tensor into memory of its own: a memory-mapped file kept every page the load touched
    # resident (measured on this model: the load grew 2.4 GB that way, 1.2 GB now, for Adam's new 1.0 GB of moments).
    with peak_rss_growth() as load:
        assert local.load_checkpoint(tmp_path / "checkpoint") == 1
    moments = 8 * parameters   # what the load must allocate; the mapped file added its 12 bytes per parameter
    assert load.bytes < moments + 4 * parameters, (load.bytes, moments)
    again = train_step(local, make_batch(model, 1, groups=2, group_size=2), 1.0)
    assert again["loss"] == pytest.approx(after["loss"], rel=1e-4, abs=1e-6)
