"""Continuous batching vs Hugging Face `generate` with static batches, and the cost of one interruption.

Same model, same prompts, same concurrency (B requests decoded together), long-tailed output lengths
(most answers short, a few long: the shape of reasoning rollouts). A static batch decodes until its
longest member is done; continuous batching refills a finished slot at the next step. Throughput counts
only requested tokens. Then: with B requests in flight, the wall-clock cost of pause + load new weights
+ continue on the local engine.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_generation.py [--requests 96] [--concurrency 16]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import torch


def long_tailed_lengths(n: int, rng: random.Random, short: int, long: int) -> list[int]:
    """90% short answers (uniform in [short/2, short]), 10% long ones (uniform in [long/2, long])."""
    return [rng.randint(long // 2, long) if rng.random() < 0.1 else rng.randint(short // 2, short) for _ in range(n)]


def hf_static(model, prompts, lengths, batch: int, pad_id: int) -> float:
    from transformers import GenerationConfig

    started = time.perf_counter()
    for i in range(0, len(prompts), batch):
        chunk, want = prompts[i:i + batch], lengths[i:i + batch]
        width = max(map(len, chunk))
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk])      # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        config = GenerationConfig(max_new_tokens=max(want), min_new_tokens=max(want), do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad_id, eos_token_id=None)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return time.perf_counter() - started


async def continuous(model_dir, prompts, lengths, batch: int) -> tuple[float, dict]:
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.protocol import GenerateRequest, SamplingParams

    async with LocalEngine(model_dir, max_running_requests=batch) as engine:
        await engine.generate(GenerateRequest(prompts[0], SamplingParams(max_new_tokens=2)))  # warm up
        started = time.perf_counter()
        outs = await asyncio.gather(*(engine.generate(GenerateRequest(p, SamplingParams(max_new_tokens=n, ignore_eos=True, seed=i)))
                                      for i, (p, n) in enumerate(zip(prompts, lengths))))
        elapsed = time.perf_counter() - started
        assert [len(o.output_ids) for o in outs] == lengths
        return elapsed, dict(engine.stats)


async def interruption_cost(model_dir, new_weights, prompts, batch: int, repeats: int) -> list[float]:
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.protocol import GenerateRequest, SamplingParams

    costs = []
    async with LocalEngine(model_dir, max_running_requests=batch) as engine:
        for r in range(repeats):
            tasks = [asyncio.create_task(engine.generate(GenerateRequest(p, SamplingParams(max_new_tokens=150, ignore_eos=True))))
                     for p in prompts[:batch]]
            while len(engine._running) < batch or min(len(x.output_ids) for x in engine._running) < 5:
                await asyncio.sleep(0.002)
            started = time.perf_counter()
            await engine.pause("retract")
            await engine.update_weights(new_weights, version=r + 1)
            await engine.resume()
            costs.append(time.perf_counter() - started)
            outs = await asyncio.gather(*tasks)
            assert all(o.num_interruptions == 1 and len(o.output_ids) == 150 for o in outs)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--short", type=int, default=24)
    parser.add_argument("--long", type=int, default=192)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from areal_core.engine.model import init_model, load_model, load_tokenizer

    tmp = Path(tempfile.mkdtemp(prefix="areal-bench-gen-"))
    size = {"hidden_size": args.hidden_size, "intermediate_size": 3 * args.hidden_size, "num_hidden_layers": args.layers}
    model_dir = init_model(tmp / "v0", seed=0, **size)
    new_weights = init_model(tmp / "v1", seed=1, **size)
    rng = random.Random(0)
    tokenizer = load_tokenizer(model_dir)
    prompts = [tokenizer(f"{rng.randrange(1000)}+{rng.randrange(1000)}=", add_special_tokens=False)["input_ids"]
               for _ in range(args.requests)]
    lengths = long_tailed_lengths(args.requests, rng, args.short, args.long)
    tokens = sum(lengths)
    model = load_model(model_dir)
    print(f"{args.requests} requests, concurrency {args.concurrency}, {tokens} output tokens "
          f"(lengths {min(lengths)}..{max(lengths)}, mean {tokens / len(lengths):.1f}); model {size}", flush=True)
    hf_seconds = hf_static(model, prompts, lengths, args.concurrency, tokenizer.pad_token_id)
    cb_seconds, stats = asyncio.run(continuous(model_dir, prompts, lengths, args.concurrency))
    print(f"HF generate, static batches of {args.concurrency}: {hf_seconds:7.2f} s  {tokens / hf_seconds:8.1f} tok/s")
    print(f"areal local engine, continuous:   {cb_seconds:7.2f} s  {tokens / cb_seconds:8.1f} tok/s  ({stats['steps']} steps)")
    print(f"ratio (continuous / static): {hf_seconds / cb_seconds:.2f}x")
    costs = asyncio.run(interruption_cost(model_dir, new_weights, prompts, args.concurrency, repeats=5))
    costs.sort()
    print(f"one interruption (pause + load weights + continue, {args.concurrency} requests in flight): "
          f"median {costs[len(costs) // 2] * 1000:.1f} ms, min {costs[0] * 1000:.1f} ms, max {costs[-1] * 1000:.1f} ms")
    print(f"reproduce: OMP_NUM_THREADS=1 {sys.executable.split('/')[-1]} bench/bench_generation.py "
          f"--requests {args.requests} --concurrency {args.concurrency}")


if __name__ == "__main__":
    main()
