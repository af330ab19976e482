"""Trainer backends side by side: LocalTrainer vs FSDPTrainer (FSDP2 under torchrun) on the same batches.

Both start from the same weights and train on the same batches. The run prints each backend's step time
(the local one on 1 thread, and on as many threads as there are FSDP ranks), the ratios, the start-up cost
of the FSDP ranks, and the largest relative loss difference (they should agree to rounding).

On a CPU-only machine the ranks split the cores between them and talk over gloo, so this measures the
overhead of sharding and communication, not a speed-up: FSDP on a few CPU cores is about correctness.
The speed-up comes from more devices (NCCL on GPUs), which this benchmark cannot show on a CPU.

Reproduce:  .venv/bin/python bench/bench_trainer_backends.py [--steps 4] [--processes 2]
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from areal_core.engine.model import init_model, load_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, create_trainer, sequence_logprobs, train_step
from areal_core.types import RewardResult, Trajectory


def make_batch(model_dir: Path, seed: int, groups: int, group_size: int) -> list[Trajectory]:
    """Random prompts and responses (3-12 and 1-60 tokens) with the model's own log-probs as behaviour."""
    rng = random.Random(seed)
    model = load_model(model_dir)
    batch = []
    for g in range(groups):
        prompt = [rng.randrange(5, 100) for _ in range(rng.randrange(3, 12))]
        for k in range(group_size):
            output = [rng.randrange(5, 100) for _ in range(rng.randrange(1, 60))]
            tokens = torch.tensor([prompt + output])
            with torch.no_grad():
                logprobs = sequence_logprobs(model, tokens, torch.ones_like(tokens), 1.0)[0][0, len(prompt) - 1:]
            batch.append(Trajectory(f"{seed}-{g}-{k}", "bench", f"{seed}-{g}", f"{seed}-{g}", prompt, output,
                                    logprobs.tolist(), [0] * len(output), "", "stop",
                                    RewardResult(score=float(rng.random() < 0.5))))
    return batch


def timed_steps(trainer, batches: list[list[Trajectory]]) -> tuple[list[float], list[float]]:
    """(seconds per step, loss per step); the first step is a warm-up and not timed."""
    seconds, losses = [], []
    for i, batch in enumerate(batches):
        started = time.perf_counter()
        losses.append(train_step(trainer, batch, 1.0)["loss"])
        if i:
            seconds.append(time.perf_counter() - started)
    return seconds, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per backend (plus one warm-up)")
    parser.add_argument("--processes", type=int, default=2, help="FSDP ranks (torchrun --nproc-per-node)")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--minibatches", type=int, default=4)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = init_model(Path(tmp) / "model")  # the default tiny model
        batches = [make_batch(model_dir, seed, args.groups, args.group_size) for seed in range(args.steps + 1)]
        settings = {"ppo_minibatches": args.minibatches, "micro_batch_tokens": 1024}
        print(f"{len(batches[0])} sequences per batch, {args.minibatches} minibatches, {args.steps} timed steps "
              f"(+1 warm-up); FSDP: {args.processes} ranks x 1 torch thread")
        # The local trainer twice: on one thread (as one FSDP rank), and on as many threads as FSDP has ranks
        # (the same cores). Each run starts from the same weights.
        local: dict[int, tuple[list[float], list[float]]] = {}
        for threads in sorted({1, args.processes}):
            torch.set_num_threads(threads)
            trainer = LocalTrainer(model_dir, TrainerConfig(**settings), total_steps=len(batches))
            local[threads] = timed_steps(trainer, batches)

        started = time.perf_counter()
        fsdp = create_trainer(model_dir, TrainerConfig(backend="fsdp", fsdp_processes=args.processes, **settings),
                              total_steps=len(batches))
        startup = time.perf_counter() - started
        try:
            fsdp_seconds, fsdp_losses = timed_steps(fsdp, batches)
        finally:
            fsdp.close()

    fsdp_step = statistics.median(fsdp_seconds)
    for threads, (seconds, _) in local.items():
        local_step = statistics.median(seconds)
        print(f"local trainer, {threads} thread(s):      {local_step:7.3f} s/step (median); "
              f"fsdp / local = {fsdp_step / local_step:.2f}x")
    print(f"fsdp trainer, {args.processes} ranks (gloo):   {fsdp_step:7.3f} s/step (median); "
          f"start-up (torchrun, load, shard) {startup:.1f} s")
    local_losses = local[1][1]
    worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(local_losses, fsdp_losses))
    print(f"largest relative loss difference, local vs fsdp, over {len(batches)} steps: {worst:.2e}")
    print("note: FSDP on CPU cores shares the same cores between ranks and adds gloo communication; it is "
          "here for correctness, not speed (GPUs with NCCL are where it pays).")
    print(f"reproduce: .venv/bin/python bench/bench_trainer_backends.py --steps {args.steps} "
          f"--processes {args.processes} --groups {args.groups} --group-size {args.group_size} "
          f"--minibatches {args.minibatches}")


if __name__ == "__main__":
    main()
