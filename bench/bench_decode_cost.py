"""What a long tail costs a synchronous batch on this machine: one decode step's time against the number
of sequences decoded together, on the local engine with the embedded demo model (one torch thread).

A synchronous RL step waits for its longest response: once the short ones are done, the engine decodes the
few long ones at a small batch. On a GPU a decode step over 4 sequences costs about as much as one over
256 (it is bound by reading the weights), so that tail is the waste asynchronous training removes. Here
the step cost grows with the batch, and the ratio printed at the end (the cost of a step over 512
sequences over that of a step over 1) says how much cheaper a tail step is than a full one.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_decode_cost.py [--batches 1,8,64,256,512] [--tokens 40]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

import torch


async def step_costs(model_dir, batches: list[int], tokens: int) -> dict[int, float]:
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.protocol import GenerateRequest, SamplingParams

    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, ignore_eos=True)
    prompt = list(range(10, 18))
    costs = {}
    async with LocalEngine(model_dir, max_running_requests=max(batches), torch_threads=1) as engine:
        for n in batches:
            for repeat in range(2):  # the first round warms the allocator and kernels up
                steps, started = engine.stats["steps"], time.perf_counter()
                await asyncio.gather(*[engine.generate(GenerateRequest(rid=f"{n}-{repeat}-{i}", input_ids=prompt,
                                                                       sampling_params=params)) for i in range(n)])
                costs[n] = (time.perf_counter() - started) / (engine.stats["steps"] - steps)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,64,256,512")
    parser.add_argument("--tokens", type=int, default=40, help="tokens decoded per sequence")
    args = parser.parse_args()
    batches = sorted(int(b) for b in args.batches.split(","))
    torch.set_num_threads(1)
    from areal_core.rl.config import ModelConfig
    from areal_core.rl.model_cache import resolve_model

    costs = asyncio.run(step_costs(resolve_model(ModelConfig()), batches, args.tokens))
    print(f"{'sequences':>9} {'ms / step':>10} {'tokens/s':>9}")
    for n, cost in costs.items():
        print(f"{n:>9} {1000 * cost:>10.2f} {n / cost:>9.0f}")
    low, high = batches[0], batches[-1]
    print(f"ratio: a decode step over {high} sequences costs {costs[high] / costs[low]:.1f}x one over {low}")
    print("reproduce: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_decode_cost.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
