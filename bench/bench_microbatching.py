"""Packed (dynamic, token-budget) vs fixed-size micro-batches in the trainer, side by side (AReaL: +30%).

The same batches of long-tailed trajectories (`arithmetic-longtail` prompts with their reference answers
as responses: lengths 5 to 35 tokens, most short) go through the same PPO step of the local trainer with
`trainer.microbatching=packed` (first-fit decreasing under `micro_batch_tokens`) and `fixed`
(`micro_batch_size` sequences in arrival order, each padded to its longest). Steps alternate between the
two so machine noise hits both alike. Reported: training tokens (real, unpadded) per second and the share
of padding in what the model computed. A third mode, `packed+shared`, is packed with the responses to one
prompt trained in one row behind a single copy of the prompt (`trainer.share_prompts`, the default; the
other two have it off, so their ratio is packing alone); its ratio is against `packed`.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_microbatching.py [--steps 6] [--batch 512] [--fixed-size 64]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import torch


def build_batch(model_dir: Path, count: int, group: int, seed: int):
    from areal_core.engine.model import load_tokenizer
    from areal_core.tasks import get_task
    from areal_core.types import RewardResult, Trajectory

    task = get_task("arithmetic-longtail")
    samples = task.samples()
    tokenizer = load_tokenizer(model_dir)
    rng = random.Random(seed)
    batch = []
    for g in range(count // group):
        sample = samples[rng.randrange(len(samples))]
        prompt = task.prompt_token_ids(sample, tokenizer)
        output = tokenizer(sample["reference"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for i in range(group):
            score = float(i % 2)  # mixed rewards: every sequence carries gradient
            batch.append(Trajectory(f"p{g}.{i}", task.name, str(sample["id"]), f"p{g}", prompt, output,
                                    [-0.5] * len(output), [0] * len(output), sample["reference"], "stop",
                                    RewardResult(score=score, correct=bool(score))))
    rng.shuffle(batch)  # arrival order: finished requests come back interleaved
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per mode")
    parser.add_argument("--batch", type=int, default=512, help="trajectories per step")
    parser.add_argument("--fixed-size", type=int, default=64, help="sequences per fixed-size micro-batch")
    parser.add_argument("--token-budget", type=int, default=4096, help="padded tokens per packed micro-batch")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from areal_core.engine.model import init_model
    from areal_core.rl.config import TrainerConfig
    from areal_core.rl.trainer import create_trainer, train_step

    with tempfile.TemporaryDirectory(prefix="bench-microbatch-") as tmp:
        model_dir = init_model(Path(tmp) / "model", seed=0, num_hidden_layers=2, hidden_size=96, intermediate_size=288)
        modes = {
            "packed": TrainerConfig(microbatching="packed", micro_batch_tokens=args.token_budget, ppo_minibatches=1,
                                    share_prompts=False),
            "fixed": TrainerConfig(microbatching="fixed", micro_batch_size=args.fixed_size, ppo_minibatches=1,
                                   share_prompts=False),
            "packed+shared": TrainerConfig(microbatching="packed", micro_batch_tokens=args.token_budget,
                                           ppo_minibatches=1, share_prompts=True),
        }
        trainers = {mode: create_trainer(model_dir, config, total_steps=args.steps + 1) for mode, config in modes.items()}
        batches = [build_batch(model_dir, args.batch, 16, seed) for seed in range(args.steps + 1)]
        tokens = {mode: 0 for mode in modes}
        seconds = {mode: 0.0 for mode in modes}
        padding = {mode: [] for mode in modes}
        micro = {mode: [] for mode in modes}
        for step, batch in enumerate(batches):
            for mode, trainer in trainers.items():
                started = time.perf_counter()
                metrics = train_step(trainer, batch, 1.0)
                elapsed = time.perf_counter() - started
                if step == 0:
                    continue  # warm-up step: allocator and kernels
                tokens[mode] += sum(len(t.prompt_token_ids) + len(t.output_token_ids) for t in batch)
                seconds[mode] += elapsed
                padding[mode].append(metrics["padding_fraction"])
                micro[mode].append(metrics["microbatches"])
        for trainer in trainers.values():
            trainer.close()

    lengths = sorted(len(t.prompt_token_ids) + len(t.output_token_ids) for t in batches[0])
    print(f"{args.steps} steps x {args.batch} trajectories, sequence length median {lengths[len(lengths) // 2]}, "
          f"max {lengths[-1]} tokens")
    for mode in modes:
        print(f"{mode:>13}: {tokens[mode] / seconds[mode]:8.0f} training tokens/s, padding "
              f"{sum(padding[mode]) / len(padding[mode]):.2%}, {sum(micro[mode]) / len(micro[mode]):.1f} micro-batches/step")
    print(f"ratio packed/fixed: {(tokens['packed'] / seconds['packed']) / (tokens['fixed'] / seconds['fixed']):.2f}x "
          "training tokens/s")
    print(f"ratio packed+shared/packed: {(tokens['packed+shared'] / seconds['packed+shared']) / (tokens['packed'] / seconds['packed']):.2f}x "
          "training tokens/s (tokens counted unshared in both)")
    print("reproduce: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_microbatching.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
