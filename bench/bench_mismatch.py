"""Which off-policy correction to use: the CPU demo with a real engine/trainer mismatch, each correction side by side.

The mismatch is injected the way it happens on GPUs: the engine samples with lower-precision weights and arithmetic
than the float32 trainer learns with (`engine.dtype`):

    bfloat16   weights and arithmetic in bfloat16 (SGLang / vLLM's usual serving dtype)
    float8     weights rounded to float8 e4m3 (one scale per tensor), arithmetic in bfloat16 (an FP8 rollout engine)
    float4     decoder linear weights rounded to 4-bit e2m1 (one scale per 32), arithmetic in bfloat16 (FP4 rollouts)
    int4       every matrix, embeddings and the tied head too, rounded to 4-bit integers (one scale per 32): W4 engines
    int3       the same with 3-bit integers: a mismatch past serving engines', to find where corrections start to matter

and every correction (`trainer.correction`: none, mask, tis, icepop, sequence_mask) trains on each, against the
float32 engine as reference. One more cell samples with top_p=0.9 on the float32 engine: the engines record, and
the trainer recomputes, the truncated distribution's log-probs, so its measured mismatch should be ~0.

Per cell and seed: held-out greedy and sampled (T=1) accuracy of the final policy on 500 problems, served by a
float32 engine for every cell (so the cells compare what was learnt, not how it is served), the mismatch KL (mean over steps of
metrics.jsonl `mismatch_kl`) and the share of tokens the correction masked or truncated. Seeds vary every seed
(`training_runs.seed_overrides`: the trainer's, rollout.seed, the model's initialisation, the warm-up's). Two runs
at a time (each is one torch thread). Results are appended to `--results` as they finish; `--report` prints the
table of a results file again.

    .venv/bin/python bench/bench_mismatch.py [--seeds 0 1] [--steps 450] [--parallel 2] [--results FILE]
    .venv/bin/python bench/bench_mismatch.py --report FILE
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import training_runs

CORRECTIONS = ("none", "mask", "tis", "icepop", "sequence_mask")
SOURCES = ("bfloat16", "float8", "float4", "int4", "int3")
EVAL_TASK = "arithmetic-test"


def cells() -> list[tuple[str, list[str]]]:
    """(name, overrides) of every cell, the reference first."""
    out = [("float32 engine (reference), mask", ["engine.dtype=float32", "trainer.correction=mask"])]
    for source in SOURCES:
        out += [(f"{source} engine, {correction}", [f"engine.dtype={source}", f"trainer.correction={correction}"])
                for correction in CORRECTIONS]
    out.append(("float32 engine, top_p=0.9, mask", ["engine.dtype=float32", "rollout.top_p=0.9",
                                                      "trainer.correction=mask"]))
    # pi_prox without its forward pass (trainer.proximal=loglinear), against the reference's exact recomputation
    out.append(("float32 engine, proximal=loglinear, mask", ["engine.dtype=float32", "trainer.proximal=loglinear",
                                                               "trainer.correction=mask"]))
    return out


async def held_out_accuracy(policy: Path, seed: int, top_p: float) -> tuple[float, float]:
    """(greedy, sampled at T=1) accuracy on the demo's held-out split, served by a float32 local engine: every cell
    is judged the same way, whatever engine it trained with."""
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.model import load_tokenizer
    from areal_core.eval.records import EvalSettings
    from areal_core.eval.runner import evaluate_task
    from areal_core.rewards import RewardService, RewardServiceConfig
    from areal_core.tasks import get_task

    task, scores = get_task(EVAL_TASK), []
    async with RewardService(RewardServiceConfig(workers=1)) as rewards:
        engine = LocalEngine(policy, torch_threads=1).start()
        try:
            for temperature in (0.0, 1.0):
                settings = EvalSettings(n=1, temperature=temperature, top_p=top_p, max_new_tokens=16, limit=500,
                                        seed=seed)
                scores.append((await evaluate_task(engine, task, load_tokenizer(policy), rewards, settings))
                              .metrics["accuracy"])
        finally:
            await engine.close()
    return scores[0], scores[1]


def run_cell(name: str, overrides: list[str], seed: int, steps: int, output: Path) -> dict:
    slug = name.replace(" ", "").replace(",", "-").replace("(", "").replace(")", "").replace("=", "")
    run_dir = training_runs.train(f"{slug}-s{seed}", output, [
        *training_runs.seed_overrides(seed), f"steps={steps}", "checkpoint_every=0", "eval_task=null",
        f"keep_policy_every={steps}", *overrides])
    run = training_runs.read_run(run_dir)
    measured = [m for m in run["metrics"] if m.get("mismatch_tokens")]
    top_p = next((float(o.split("=")[1]) for o in overrides if o.startswith("rollout.top_p=")), 1.0)
    greedy, sampled = asyncio.run(held_out_accuracy(run_dir / "policies" / f"step{steps:06d}", seed, top_p))
    return {"cell": name, "seed": seed, "steps": steps, "greedy": greedy, "sampled": sampled,
            "mismatch_kl": statistics.fmean(m["mismatch_kl"] for m in measured) if measured else 0.0,
            "mismatch_abs_mean": statistics.fmean(m["mismatch_abs_mean"] for m in measured) if measured else 0.0,
            "corrected": statistics.fmean(m.get("behav_capped_fraction", 0.0) for m in run["metrics"]),
            "rl_seconds": run["summary"]["rl_seconds"],
            "trajectories_per_second": run["summary"]["trajectories_per_second"],
            "train_seconds": statistics.fmean(m["train_seconds"] for m in run["metrics"]),
            "prox_approx_error": statistics.fmean(m["prox_approx_error"] for m in run["metrics"])
            if any("prox_approx_error" in m for m in run["metrics"]) else None}


def mean_of(rows: list[dict], key: str, spec: str) -> str:
    """The mean of `key` over the rows that recorded it (older results may lack timings), or a dash."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return format(statistics.fmean(values), spec) if values else "—"


def report(results: list[dict]) -> str:
    by_cell: dict[str, list[dict]] = {}
    for result in results:
        by_cell.setdefault(result["cell"], []).append(result)
    reference = {r["seed"]: r for r in by_cell.get(cells()[0][0], [])}
    lines = ["| cell | seeds | held-out greedy | sampled | vs reference, same seeds (greedy) | mismatch KL | mean abs gap "
             "| tokens masked/truncated | trainer s/step | traj/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, _ in cells():
        rows = sorted(by_cell.get(name, []), key=lambda r: r["seed"])
        if not rows:
            continue
        greedy = statistics.fmean(r["greedy"] for r in rows)
        per_seed = " / ".join(f"{r['greedy']:.1%}" for r in rows)
        # paired: against the reference's runs of the same seeds (seeds differ by far more than cells do)
        paired = [r["greedy"] - reference[r["seed"]]["greedy"] for r in rows if r["seed"] in reference]
        delta = f"{statistics.fmean(paired) * 100:+.1f} pts" if len(paired) == len(rows) else "(no reference run)"
        lines.append(f"| {name} | {','.join(str(r['seed']) for r in rows)} | {greedy:.1%} ({per_seed}) "
                     f"| {statistics.fmean(r['sampled'] for r in rows):.1%} | {delta} "
                     f"| {statistics.fmean(r['mismatch_kl'] for r in rows):.2g} "
                     f"| {statistics.fmean(r['mismatch_abs_mean'] for r in rows):.2g} "
                     f"| {statistics.fmean(r['corrected'] for r in rows):.2%} "
                     f"| {mean_of(rows, 'train_seconds', '.3f')} | {mean_of(rows, 'trajectories_per_second', '.0f')} |")
        errors = [r["prox_approx_error"] for r in rows if r.get("prox_approx_error") is not None]
        if errors:
            lines[-1] += f" (pi_prox approximation error, mean abs: {statistics.fmean(errors):.2g})"
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=450, help="RL steps per run (the demo's: 450)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time (each uses one torch thread)")
    parser.add_argument("--only", nargs="*", default=None, help="run only the cells whose names contain one of these")
    parser.add_argument("--results", type=Path, default=Path("bench-mismatch.jsonl"),
                        help="results are appended here as runs finish")
    parser.add_argument("--report", type=Path, default=None, help="print the table of a results file and stop")
    args = parser.parse_args()
    if args.report is not None:
        print(report([json.loads(line) for line in args.report.read_text().splitlines() if line.strip()]))
        return
    chosen = [(n, o) for n, o in cells() if args.only is None or any(word in n for word in args.only)]
    jobs = [(name, overrides, seed) for seed in args.seeds for name, overrides in chosen]
    with tempfile.TemporaryDirectory(prefix="bench-mismatch-") as tmp, ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(run_cell, name, overrides, seed, args.steps, Path(tmp)) for name, overrides, seed in jobs]
        results = []
        for future in futures:
            result = future.result()
            results.append(result)
            with open(args.results, "a") as f:
                f.write(json.dumps(result) + "\n")
            print(json.dumps(result), flush=True)
    print(report(results))
    print(f"\nreproduce: .venv/bin/python bench/bench_mismatch.py --seeds {' '.join(map(str, args.seeds))} "
          f"--steps {args.steps}")


if __name__ == "__main__":
    main()
