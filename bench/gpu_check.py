"""The GPU check (issue 22): the local engine and trainer on CUDA with the 0.5B preset, everything a GPU changes
measured in one sitting and written to one folder. Run it through bench/gpu_check.sh (which installs areal-core
on a machine that lacks it); `--tiny` runs the same code at small sizes on a CPU (the test suite does).

    engine     decode tokens/s of the local engine at several batch sizes (every request exactly N tokens)
    trainer    the trainer's pi_prox forward and PPO update on a synthetic batch: seconds, TFLOP/s, MFU
    runs       three `areal train` runs on long-tailed response lengths (workflow sampled_lengths: each response
               exactly n tokens, n log-normal), same seed and sizes: sync (--sync: eta 0, updates wait),
               async (eta 1, interruptible updates), wait (eta 1, updates wait for in-flight requests);
               ratios async/sync and interrupt/wait of trajectories/s
    plan       `areal plan profile` of this device with the async run's config, and the three runs predicted from
               it (issue 23), against what they measured (--skip-plan leaves it out)

Output (--out): results.json (every figure), report.md (the tables), train.log (the three runs' logs), plan-profile.yaml
and plan.log (the profile and its output).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import training_runs   # bench/, beside this script

REPO = Path(__file__).resolve().parents[1]
PRESET = "qwen2.5-0.5b"
# Dense peak TFLOP/s by GPU name and dtype (vendor datasheets; SXM parts): what MFU is measured against.
PEAK_TFLOPS = {"H200": {"bfloat16": 989.4, "float32": 67.0}, "H100": {"bfloat16": 989.4, "float32": 67.0},
               "A100": {"bfloat16": 312.0, "float32": 19.5}}


@dataclass
class Sizes:
    preset_overrides: dict[str, Any]
    dtype: str
    lengths: dict[str, int]             # the log-normal of sampled_lengths: mean, p99, max
    batch_size: int                     # prompts per step
    group_size: int
    steps: int
    throughput_batches: list[int]       # engine: concurrent requests per measurement
    throughput_tokens: int              # engine: tokens generated per request
    mfu_sequences: int                  # trainer: synthetic batch of this many sequences ...
    mfu_prompt_tokens: int              # ... each this many prompt tokens ...
    mfu_response_tokens: int            # ... and this many response tokens
    micro_batch_tokens: int
    extra: list[str] = field(default_factory=list)


SIZES = {
    "gpu": Sizes({}, "bfloat16", {"mean": 160, "p99": 900, "max": 1024}, 16, 8, 4, [1, 16, 64, 256], 128,
                 64, 128, 512, 32768),
    "tiny": Sizes({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                   "num_key_value_heads": 2}, "float32", {"mean": 8, "p99": 32, "max": 40}, 4, 4, 3, [1, 8], 16,
                  8, 16, 32, 4096),
}


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
                            "cpus": os.cpu_count(), "host": platform.node()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda)
    return info


def peak_tflops(info: dict[str, Any], dtype: str) -> float | None:
    name = info.get("gpu", "")
    return next((peaks.get(dtype) for key, peaks in PEAK_TFLOPS.items() if key in name), None)


def build_model(work: Path, sizes: Sizes, tokenizer_from: Path | None) -> Path:
    from areal_core.engine.presets import init_preset_model

    started = time.perf_counter()
    model = init_preset_model(work / "model", PRESET, tokenizer_from=tokenizer_from,
                              data_dir=os.environ.get("AREAL_DATA_DIR"), **sizes.preset_overrides)
    print(f"model: {PRESET} {sizes.preset_overrides or ''} built in {time.perf_counter() - started:.0f} s", flush=True)
    return model


async def engine_throughput(model: Path, device: str, sizes: Sizes) -> list[dict[str, Any]]:
    """Decode tokens/s of the local engine with `batch` requests of exactly throughput_tokens each."""
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.protocol import GenerateRequest, SamplingParams

    engine = LocalEngine(model, device=device, dtype=sizes.dtype, max_running_requests=max(sizes.throughput_batches),
                         torch_threads=None if device.startswith("cuda") else 1).start()
    rows = []
    try:
        params = SamplingParams(max_new_tokens=sizes.throughput_tokens, ignore_eos=True, temperature=1.0)
        prompt = list(range(100, 132))
        await engine.generate(GenerateRequest(prompt, SamplingParams(max_new_tokens=4, ignore_eos=True)))  # warm-up
        for batch in sizes.throughput_batches:
            started = time.perf_counter()
            outputs = await asyncio.gather(*(engine.generate(GenerateRequest([*prompt, i], params, rid=f"b{batch}.{i}"))
                                             for i in range(batch)))
            seconds = time.perf_counter() - started
            tokens = sum(len(o.output_ids) for o in outputs)
            rows.append({"batch": batch, "tokens": tokens, "seconds": round(seconds, 3),
                         "tokens_per_second": round(tokens / seconds, 1),
                         "ms_per_decode_step": round(1000 * seconds / sizes.throughput_tokens, 2)})
            print(f"engine: batch {batch:>4}: {tokens / seconds:10.1f} tokens/s", flush=True)
    finally:
        await engine.close()
    return rows


def trainer_flops(config: dict[str, Any], parameters: int, prompt: int, response: int, sequences: int) -> tuple[float, float]:
    """(forward FLOPs, forward+backward FLOPs) of the batch: 2 N per token for the matrix products (N: every
    parameter but the embedding lookup; tied embeddings count once, as the head), plus causal attention's
    2 x layers x context x hidden per token; backward twice the forward."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    matmul = parameters - (0 if config.get("tie_word_embeddings") else config["vocab_size"] * hidden)
    length = prompt + response
    per_sequence = 2 * matmul * length + 2 * layers * hidden * length * length
    forward = float(per_sequence * sequences)
    return forward, 3 * forward


def trainer_mfu(model: Path, device: str, sizes: Sizes, info: dict[str, Any]) -> dict[str, Any]:
    import torch

    from areal_core.rl.config import TrainerConfig
    from areal_core.rl.trainer import LocalTrainer
    from areal_core.types import RewardResult, Trajectory

    config = TrainerConfig(device=device, dtype=sizes.dtype, micro_batch_tokens=sizes.micro_batch_tokens,
                           measure_stale_mismatch=False, lr=1e-6)
    trainer = LocalTrainer(model, config, total_steps=4)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(1000, min(vocab, 16000), (n,), generator=generator).tolist()

    trajectories = [Trajectory(
        trajectory_id=f"t{i}", task="synthetic", sample_id=str(i), group_id=f"g{i}", prompt_token_ids=ids(sizes.mfu_prompt_tokens),
        output_token_ids=ids(sizes.mfu_response_tokens), output_logprobs=[-5.0] * sizes.mfu_response_tokens,
        output_versions=[0] * sizes.mfu_response_tokens, response="", finish_reason="length",
        reward=RewardResult(score=float(i % 2))) for i in range(sizes.mfu_sequences)]
    advantages = torch.tensor([1.0 if i % 2 else -1.0 for i in range(sizes.mfu_sequences)])
    timings = []
    try:
        for repeat in range(2):   # the first pays for the kernels' first launches
            started = time.perf_counter()
            batch = trainer.prepare(trajectories, 1.0)
            trainer.recompute_proximal(batch)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            proximal = time.perf_counter() - started
            trainer.ppo_update(batch, advantages)   # reads its metrics back: synchronised
            timings.append((proximal, time.perf_counter() - started - proximal))
    finally:
        trainer.close()
    proximal, update = timings[-1]
    parameters = json.loads((model / "areal_model.json").read_text())["parameters"]
    forward, train = trainer_flops(json.loads((model / "config.json").read_text()), parameters,
                                   sizes.mfu_prompt_tokens, sizes.mfu_response_tokens, sizes.mfu_sequences)
    peak = peak_tflops(info, sizes.dtype)
    achieved = (forward + train) / (proximal + update) / 1e12
    result = {"sequences": sizes.mfu_sequences, "tokens": sizes.mfu_sequences * (sizes.mfu_prompt_tokens +
              sizes.mfu_response_tokens), "dtype": sizes.dtype, "proximal_seconds": round(proximal, 3),
              "update_seconds": round(update, 3), "tflops": round(achieved, 2), "peak_tflops": peak,
              "mfu": round(achieved / peak, 4) if peak else None}
    print(f"trainer: pi_prox {proximal:.2f} s, update {update:.2f} s: {achieved:.2f} TFLOP/s"
          + (f", MFU {achieved / peak:.1%}" if peak else " (no peak known for this device: no MFU)"), flush=True)
    return result


def run_overrides(mode: str, model: Path, device: str, sizes: Sizes) -> list[str]:
    """`areal train` overrides of the check's `mode` run (sync, async, wait), without its name and output_dir."""
    lengths = ", ".join(f"{k}: {v}" for k, v in sizes.lengths.items())
    return [
        f"model.path={model}", "task=arithmetic", "eval_task=null",
        "warmup.enabled=false", f"steps={sizes.steps}", f"rollout.batch_size={sizes.batch_size}",
        f"rollout.group_size={sizes.group_size}", f"rollout.max_new_tokens={sizes.lengths['max']}",
        "rollout.workflow=sampled_lengths", f"rollout.workflow_options={{lengths: {{{lengths}}}}}",
        "rollout.skip_uniform_groups=false", f"trainer.device={device}", f"engine.device={device}",
        f"trainer.dtype={sizes.dtype}", f"engine.dtype={sizes.dtype}", f"trainer.micro_batch_tokens={sizes.micro_batch_tokens}",
        "trainer.lr=1e-6", "engine.weight_sync=distributed", "checkpoint_every=0", "tensorboard=false", "eval.db=null",
        "rollout.max_staleness=0" if mode == "sync" else "rollout.max_staleness=1",
        f"rollout.weight_update={'interrupt' if mode == 'async' else 'wait'}", *sizes.extra]


def train_run(mode: str, model: Path, device: str, sizes: Sizes, work: Path, log: Path) -> dict[str, Any]:
    overrides = [f"name={mode}", f"output_dir={work / 'runs'}", *run_overrides(mode, model, device, sizes)]
    command = [sys.executable, "-m", "areal_core.cli", "train", *overrides]
    print(f"[{time.strftime('%X')}] areal train {' '.join(overrides)}", flush=True)
    with open(log, "ab") as f:
        f.write(f"\n=== {mode}: areal train {' '.join(overrides)}\n".encode())
        f.flush()
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"the {mode} run failed ({done.returncode}); its output is in {log}")
    run_dir = max((work / "runs").glob(f"{mode}-*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = read_steps(run_dir)
    tokens = sum(s["response_length_mean"] for s in steps) * sizes.batch_size * sizes.group_size
    return {"mode": mode, "rl_seconds": summary["rl_seconds"], "trajectories": summary["trajectories"],
            "trajectories_per_second": summary["trajectories_per_second"],
            "tokens_per_second": tokens / summary["rl_seconds"], "steps": steps,
            "steady_trajectories_per_second": training_runs.steady_throughput(steps)}


STEP_KEYS = ("step", "trajectories_per_second", "wait_seconds", "train_seconds", "proximal_seconds", "update_seconds",
             "publish_seconds", "update_hold_seconds", "staleness_max", "response_length_mean", "elapsed_seconds")
PHASES = ("wait_seconds", "proximal_seconds", "update_seconds", "publish_seconds")   # a step's seconds, in order


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    """Each step of the run's metrics.jsonl, the figures the check reports."""
    return [{k: m[k] for k in STEP_KEYS if k in m}
            for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def steady_phases(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds a step spends in each phase after the first step: where a prediction and a run part."""
    later = steps[1:] or steps
    return {phase: sum(s[phase] for s in later) / len(later) for phase in PHASES}


def plan_check(model: Path, device: str, sizes: Sizes, work: Path, out: Path, runs: dict[str, Any]) -> dict[str, Any]:
    """`areal plan` on this device (issue 23): `areal plan profile` with the async run's config, then each run
    predicted (a simulated run of the real controller on the profile's costs) against what it measured."""
    from areal_core.config import load_config
    from areal_core.engine.model import load_tokenizer
    from areal_core.plan.profile import load_profile
    from areal_core.plan.simulate import simulate
    from areal_core.rl.config import TrainConfig

    profile_path = out / "plan-profile.yaml"
    command = [sys.executable, "-m", "areal_core.cli", "plan", "profile", "--output", str(profile_path),
               "--repeats", "2", *run_overrides("async", model, device, sizes)]
    print(f"[{time.strftime('%X')}] areal plan profile --output {profile_path} ...", flush=True)
    started = time.perf_counter()
    with open(out / "plan.log", "wb") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"areal plan profile failed ({done.returncode}); its output is in {out / 'plan.log'}")
    profile_seconds = time.perf_counter() - started
    profile = load_profile(profile_path)
    costs = profile.cluster(profile.gpus_per_server, profile.reference_gpus)   # engine and trainer as measured
    tokenizer = load_tokenizer(model)
    predicted: dict[str, float] = {}
    simulated: dict[str, list[dict[str, Any]]] = {}
    for mode in runs:
        config = load_config(TrainConfig, None, [f"name={mode}", f"output_dir={work / 'plan'}",
                                                 *run_overrides(mode, model, device, sizes)])
        run_dir = work / "plan" / mode
        simulate(config, costs, tokenizer, run_dir)
        simulated[mode] = read_steps(run_dir)
        predicted[mode] = training_runs.steady_throughput(simulated[mode])
    measured = {mode: run["steady_trajectories_per_second"] for mode, run in runs.items()}
    rows = {mode: {"measured": measured[mode], "predicted": predicted[mode],
                   "error": predicted[mode] / measured[mode] - 1,
                   "measured_phases": steady_phases(runs[mode]["steps"]),
                   "predicted_phases": steady_phases(simulated[mode]), "predicted_steps": simulated[mode]}
            for mode in runs}
    pairs = {"async_over_sync": ("async", "sync"), "interrupt_over_wait": ("async", "wait")}
    ratios = {name: {"measured": measured[a] / measured[b], "predicted": predicted[a] / predicted[b],
                     "error": (predicted[a] / predicted[b]) / (measured[a] / measured[b]) - 1}
              for name, (a, b) in pairs.items()}
    for mode, row in rows.items():
        print(f"plan: {mode}: predicted {row['predicted']:.2f}, measured {row['measured']:.2f} trajectories/s "
              f"({row['error']:+.1%})", flush=True)
    return {"profile": profile.to_dict(), "profile_seconds": profile_seconds, "runs": rows, "ratios": ratios}


def report(results: dict[str, Any]) -> str:
    m, e, t, runs = results["machine"], results["engine"], results["trainer"], results["runs"]
    lines = [f"# GPU check, {results['date']} ({'tiny' if results['tiny'] else 'full'} sizes)", "",
             f"{m.get('gpu', m['device'])}, torch {m['torch']}; model {results['model']}", "",
             "| engine batch | tokens/s | ms per decode step |", "|---|---|---|"]
    lines += [f"| {r['batch']} | {r['tokens_per_second']:.0f} | {r['ms_per_decode_step']:.1f} |" for r in e]
    mfu = f"{t['mfu']:.1%}" if t["mfu"] is not None else "n/a (no peak known)"
    lines += ["", f"trainer ({t['sequences']} sequences, {t['tokens']} tokens, {t['dtype']}): pi_prox "
              f"{t['proximal_seconds']} s, update {t['update_seconds']} s, {t['tflops']} TFLOP/s, MFU {mfu}", "",
              "| run | trajectories/s | response tokens/s | trainer waiting s/step | generation held s/update |",
              "|---|---|---|---|---|"]
    for run in runs.values():
        steps = run["steps"]
        lines.append(f"| {run['mode']} | {run['trajectories_per_second']:.2f} | {run['tokens_per_second']:.0f} | "
                     f"{sum(s['wait_seconds'] for s in steps) / len(steps):.2f} | "
                     f"{sum(s['update_hold_seconds'] for s in steps) / len(steps):.3f} |")
    lines += ["", f"async / sync: **{results['ratios']['async_over_sync']:.2f}x** trajectories/s; interrupt / wait: "
              f"**{results['ratios']['interrupt_over_wait']:.2f}x**", ""]
    plan = results.get("plan")
    if plan is not None:
        lines += [f"`areal plan` on this device (profile in {plan['profile_seconds']:.0f} s, plan-profile.yaml), "
                  "steady trajectories/s after step 1 (issue 23's goals: within 15%, ratios within 10%):", "",
                  "| run | measured | predicted | error |", "|---|---|---|---|"]
        lines += [f"| {mode} | {row['measured']:.2f} | {row['predicted']:.2f} | {row['error']:+.1%} |"
                  for mode, row in [*plan["runs"].items(), *plan["ratios"].items()]]
        lines += ["", "seconds a step after step 1, measured / predicted:", "",
                  "| run | " + " | ".join(phase.removesuffix("_seconds") for phase in PHASES) + " |",
                  "|---|" + "---|" * len(PHASES)]
        lines += [f"| {mode} | " + " | ".join(f"{row['measured_phases'][p]:.2f} / {row['predicted_phases'][p]:.2f}"
                                             for p in PHASES) + " |" for mode, row in plan["runs"].items()]
        lines.append("")
    lines += [f"lengths: {results['lengths']}; seconds in all: {results['seconds']:.0f}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="small sizes (CPU if no GPU): the CI's run of this script")
    parser.add_argument("--out", type=Path, default=Path(f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--tokenizer-from", type=Path, default=None,
                        help="a model directory whose tokenizer the preset takes (default: .gpu-check/tokenizer if "
                             "bench/gpu_check.sh --prepare made it, else one trained on $AREAL_DATA_DIR)")
    parser.add_argument("--device", default=None, help="default: cuda if there is one (else, with --tiny, cpu)")
    parser.add_argument("--skip-plan", action="store_true",
                        help="leave out areal plan's profile of this device and its predictions of the three runs")
    args = parser.parse_args()

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and not args.tiny:
        raise SystemExit("no GPU here (torch.cuda.is_available() is false): run with --tiny for the CPU sizes")
    sizes = SIZES["tiny" if args.tiny else "gpu"]
    prepared = REPO / ".gpu-check" / "tokenizer"
    tokenizer_from = args.tokenizer_from or (prepared if (prepared / "tokenizer.json").exists() else None)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "tiny": args.tiny, "machine": machine(device),
                               "sizes": asdict(sizes), "lengths": sizes.lengths}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        model = build_model(work, sizes, tokenizer_from)
        info = json.loads((model / "areal_model.json").read_text())
        results["model"] = f"{PRESET}, {info['parameters'] / 1e6:.1f}M parameters, {sizes.dtype}"
        results["engine"] = asyncio.run(engine_throughput(model, device, sizes))
        results["trainer"] = trainer_mfu(model, device, sizes, results["machine"])
        log = args.out / "train.log"
        log.unlink(missing_ok=True)
        results["runs"] = {mode: train_run(mode, model, device, sizes, work, log) for mode in ("sync", "async", "wait")}
        if not args.skip_plan:
            results["plan"] = plan_check(model, device, sizes, work, args.out, results["runs"])
    rate = {mode: run["trajectories_per_second"] for mode, run in results["runs"].items()}
    results["ratios"] = {"async_over_sync": rate["async"] / rate["sync"], "interrupt_over_wait": rate["async"] / rate["wait"]}
    results["seconds"] = time.perf_counter() - started
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    text = report(results)
    (args.out / "report.md").write_text(text)
    print("\n" + text)
    print(f"written: {args.out}/results.json, report.md, train.log")
    print("reproduce: bash bench/gpu_check.sh " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
