"""AReaL's published sync -> async speed-ups, predicted by `areal plan`'s simulation from the shipped GPU profiles
(issue 23, item 4, second part): 1.5B on 16 nodes x 8 H800 (128 GPUs), 41.0 h -> 14.8 h (2.77x); 7B on 24 nodes
(192 GPUs), 57.7 h -> 25.4 h (2.27x) (AReaL v0.3 blog, Table 2; docs/plan-public-figures.md 1a).

Each scenario is a simulated run of the production controller and step loop (plan/simulate.py) on the profile's
costs, a few steps of AReaL's batch (512 prompts x 16 responses, max 27,648 new tokens, 4 PPO minibatches, at most
512 prompts in flight), responses of a long tail (the sampled_lengths workflow):

    sync        AReaL's synchronous baseline: generation on every GPU, then training on every GPU (colocated,
                one after the other): simulated as a synchronous run (eta 0, updates wait) whose servers and trainer
                each have all the GPUs, which never overlap in a synchronous run
    async       the asynchronous system: 3/4 of the GPUs generate, 1/4 train (AReaL's split), eta 4 and 8,
                interruptible weight updates; and at eta 4 other splits (the best one is reported)

Throughput is the steady state: trajectories of steps 2..N over their seconds (step 1 fills the pipeline).
Then the project's own predictions, AReaL's batch on 512 and 4,096 GPUs.

How many prompts may be in flight decides the answer, and with it how alike a prompt's answers run. AReaL's code
caps prompts in flight at max_concurrent_rollouts (default and benchmark config: the batch, 512), a prompt holding
its slot until its last answer ends: with independent answers the servers run ever fewer sequences and asynchrony
buys 1.1x (1.5B) and 1.16x (7B); with answers alike (--prompt-share 0.8) 1.74x and 2.05x, and 2.31x / 2.61x against
a synchronous run on the same split (--sync-split). With as many in flight as the staleness bound admits (eta 4:
5 batches, 2,560 prompts; --concurrency, the default here) generation keeps ahead of the trainer.
docs/plan-public-figures.md 6a has the figures and what each assumption rests on.

    .venv/bin/python bench/bench_plan_gpu.py                          # everything (an hour or more on 2 cores)
    .venv/bin/python bench/bench_plan_gpu.py --only areal --models 1.5B 7B --etas 4   # the two reproductions
    .venv/bin/python bench/bench_plan_gpu.py --only areal --models 1.5B 7B --etas 4 --concurrency 512 \
        --prompt-share 0.8 --sync-split                               # AReaL's cap, answers alike, both baselines
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from areal_core.engine.model import build_char_tokenizer
from areal_core.plan.profile import load_profile
from areal_core.plan.simulate import simulate
from areal_core.rl.config import SYNC_OVERRIDES

PROFILES = Path(__file__).resolve().parent.parent / "areal_core" / "plan" / "profiles"
# model: (profile, GPUs, published sync hours, published async hours)
SETUPS = {"1.5B": ("h800-qwen1.5b", 128, 41.0, 14.8), "7B": ("h800-qwen7b", 192, 57.7, 25.4),
          # the project's own predictions, AReaL's batch on larger clusters: nothing published to compare with
          "1.5B@512": ("h800-qwen1.5b", 512, 0.0, 0.0), "1.5B@4096": ("h800-qwen1.5b", 4096, 0.0, 0.0),
          "7B@512": ("h800-qwen7b", 512, 0.0, 0.0), "7B@4096": ("h800-qwen7b", 4096, 0.0, 0.0)}
# Response lengths: a log-normal of mean 7,000 tokens whose 4% above 27,648 are cut there (p99 54,600 uncut): the
# R1-Distill 1.5B run's mean length reached ~7.1k at a 24k limit (AReaL distill_1.5b_24k_curve.png), and "the
# truncation rate remained below 5%" at 27K (AReaL v0.2 blog, 7B): plan-public-figures 1f.
LENGTHS = {"mean": 7000, "p99": 54600, "max": 27648}


CONCURRENCY = [2560]   # prompts in flight at most (--concurrency)


def run_config(lengths: dict, steps: int) -> list[str]:
    options = "{lengths: {" + ", ".join(f"{k}: {v}" for k, v in lengths.items()) + "}}"
    return ["task=arithmetic", f"steps={steps}", "rollout.batch_size=512", "rollout.group_size=16",
            f"rollout.max_new_tokens={lengths['max']}", f"rollout.max_concurrent_prompts={CONCURRENCY[0]}",
            "trainer.ppo_minibatches=4", "rollout.skip_uniform_groups=false", "warmup.enabled=false",
            "eval_task=null", "rollout.workflow=sampled_lengths", f"rollout.workflow_options={options}"]


def scenario(profile_name: str, generation: int, training: int, eta: int, steps: int, lengths: dict, out: Path) -> dict:
    """One simulated run; its steady throughput (steps 2..N) and what it cost this machine."""
    profile = load_profile(PROFILES / f"{profile_name}.yaml")
    overrides = list(SYNC_OVERRIDES) if eta == 0 else [f"rollout.max_staleness={eta}", "rollout.weight_update=interrupt"]
    run_dir = out / f"{profile_name}-{generation}-{training}-{eta}"
    started = time.process_time()
    simulate([*run_config(lengths, steps), f"output_dir={out}", *overrides], profile.cluster(generation, training),
             build_char_tokenizer(), run_dir)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    later = metrics[1:]
    seconds = metrics[-1]["elapsed_seconds"] - metrics[0]["elapsed_seconds"]
    trajectories = sum(m["responses"] if "responses" in m else m["trained_sequences"] for m in later)
    return {"generation_gpus": generation, "training_gpus": training, "eta": eta,
            "step_s": seconds / len(later), "first_step_s": metrics[0]["elapsed_seconds"],
            "trajectories_per_s": trajectories / seconds,
            "tokens_per_s": sum(m["response_tokens"] for m in later) / seconds,
            "train_s": sum(m["train_seconds"] for m in later) / len(later),
            "wait_s": sum(m["wait_seconds"] for m in later) / len(later),
            "mean_length": sum(m["response_tokens"] for m in metrics) / sum(m["trained_sequences"] for m in metrics),
            "cpu_s": time.process_time() - started}


def echo(label: str, row: dict) -> None:
    print(f"  {label:<28} step {row['step_s']:7.1f} s (first {row['first_step_s']:6.1f} s; train {row['train_s']:5.1f} s, "
          f"wait {row['wait_s']:6.1f} s)  {row['trajectories_per_s']:6.2f} traj/s  {row['tokens_per_s'] / 1e3:7.1f}k tok/s"
          f"  [{row['cpu_s']:.0f} s CPU]", flush=True)


def compare(model: str, gpus: int, args: argparse.Namespace, out: Path, splits: list[float]) -> dict:
    profile, _, sync_h, async_h = SETUPS[model]
    print(f"{model} on {gpus} GPUs ({profile}):", flush=True)
    sync = scenario(profile, gpus, gpus, 0, args.steps, LENGTHS, out)
    echo("sync (all GPUs, in turn)", sync)
    split_sync, areal_generation = None, round(gpus * 0.75)
    if args.sync_split:
        split_sync = scenario(profile, areal_generation, gpus - areal_generation, 0, args.steps, LENGTHS, out)
        echo(f"sync on the {areal_generation}:{gpus - areal_generation} split", split_sync)
    rows = {}
    for fraction in splits:
        generation = round(gpus * fraction)
        for eta in (args.etas if fraction == 0.75 else [args.etas[0]]):
            row = scenario(profile, generation, gpus - generation, eta, args.steps, LENGTHS, out)
            rows[(generation, eta)] = row
            echo(f"async eta={eta} {generation}:{gpus - generation}", row)
    areal_split = {eta: rows[(areal_generation, eta)] for eta in args.etas if (areal_generation, eta) in rows}
    best = max(rows.values(), key=lambda r: r["trajectories_per_s"])
    result = {"model": model, "gpus": gpus, "sync": sync, "async": {f"{g}:{gpus - g} eta={e}": r
                                                                    for (g, e), r in rows.items()},
              "published": sync_h / async_h if sync_h else None,
              "predicted_areal_split": {eta: r["trajectories_per_s"] / sync["trajectories_per_s"]
                                        for eta, r in areal_split.items()},
              "best": f"{best['generation_gpus']}:{best['training_gpus']} eta={best['eta']}",
              "sync_split": split_sync,
              "predicted_vs_sync_split": ({eta: r["trajectories_per_s"] / split_sync["trajectories_per_s"]
                                           for eta, r in areal_split.items()} if split_sync else None),
              "predicted_best": best["trajectories_per_s"] / sync["trajectories_per_s"]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["areal", "all"], default="all",
                        help="areal: AReaL's 3:1 split alone; all: also 1:1 and 7:1 (at the first eta)")
    parser.add_argument("--steps", type=int, default=3, help="simulated steps a scenario (throughput from 2..N)")
    parser.add_argument("--etas", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--concurrency", type=int, default=2560,
                        help="prompts in flight at most (default: 5 batches, what eta 4 admits; AReaL's benchmark "
                             "config says max_concurrent_rollouts 512)")
    parser.add_argument("--prompt-share", type=float, default=0.0,
                        help="share of the log-length variance a prompt decides (0: a group's answers independent, "
                             "the default; 1: equally long): how long a group holds its slot under a prompt cap")
    parser.add_argument("--models", nargs="+", default=list(SETUPS), choices=list(SETUPS),
                        help="setups to simulate (default: all; MODEL@GPUS: AReaL's batch on a larger cluster)")
    parser.add_argument("--sync-split", action="store_true",
                        help="also a synchronous run on the 3:1 split (eta 0: generation GPUs idle while the trainer "
                             "works and the other way round), the baseline if AReaL's \"sync AReaL\" is its own "
                             "decoupled system at eta 0")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    CONCURRENCY[0] = args.concurrency
    if args.prompt_share:
        LENGTHS["prompt_share"] = args.prompt_share
    splits = [0.75] if args.only == "areal" else [0.5, 0.75, 0.875]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            results.append(compare(model, SETUPS[model][1], args, Path(tmp), splits if "@" not in model else [0.75]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nresponses: log-normal mean {LENGTHS['mean']}, p99 {LENGTHS['p99']} (uncut), cut at {LENGTHS['max']}, "
          f"prompt share {args.prompt_share:g}; "
          f"512 prompts x 16, at most {args.concurrency} in flight; {args.steps} steps a scenario")
    print("| setup | GPUs | published sync->async | predicted, AReaL's 3:1 split | within 25%? | best split | predicted there |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        at_split = ", ".join(f"{v:.2f}x (eta {e})" for e, v in r["predicted_areal_split"].items())
        if r["published"]:
            within = ", ".join("yes" if abs(v / r["published"] - 1) <= 0.25 else f"no ({v / r['published'] - 1:+.0%})"
                               for v in r["predicted_areal_split"].values())
            published = f"{r['published']:.2f}x"
        else:
            within, published = "-", "-"
        print(f"| {r['model']} | {r['gpus']} | {published} | {at_split} | {within} | {r['best']} | "
              f"{r['predicted_best']:.2f}x |")
    for r in results:
        if r["predicted_vs_sync_split"]:
            print(f"{r['model']}: async on the 3:1 split against sync on the same split: " + ", ".join(
                f"{v:.2f}x (eta {e})" for e, v in r["predicted_vs_sync_split"].items()))
    print("reproduce: .venv/bin/python bench/bench_plan_gpu.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
