"""The real-size rehearsal (issue 22): a 0.5B-class model with a BPE tokenizer through every path of a run.

The `qwen2.5-0.5b` preset (494M parameters, random weights, `areal init-model --preset`) trains on `gsm8k`
prompts with the `math` reward: a real SGLang server on this CPU generates (weights streamed to it over a gloo
group, engine.weight_sync=distributed), the FSDP2 trainer runs 2 ranks under torchrun, the reward service
scores. After `--steps` asynchronous steps (a checkpoint each) the `areal train` process is killed with SIGKILL,
then `areal train --resume` runs `--resume-steps` more. Random weights score 0, so every group is uniform:
rollout.skip_uniform_groups=false keeps them in the batch, and a small entropy bonus (trainer.entropy_coef) gives
them a gradient, so the optimizer steps (a step with every advantage 0 and no other term is skipped, and Adam's
moments would never exist): every phase runs at its full cost, and the checkpoints hold the optimizer state.

Printed: per phase and step (generation and reward per trajectory, pi_prox, update, weight sync, checkpoint) its
seconds; each process's peak RSS against its theoretical minimum (trainer rank: fp32 weights + grads + Adam
moments / ranks; engine: its weights), and per phase of a step (every sample in memory.csv of --output); the
checkpoint's size and seconds; whether the resumed run lost or repeated anything; then the weight sync of one update by disk, distributed and delta side by side
(bench/bench_weight_sync.py's measurement, on the same model).

    AREAL_DATA_DIR=../shared/data .venv/bin/python bench/bench_real_size.py [--steps 3] [--resume-steps 2]
        [--batch 4] [--group 2] [--max-new-tokens 64] [--model DIR] [--output DIR] [--no-sync-compare]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "tests" / "engine" / "sglang_cpu_shim"   # stands in for the CUDA-only sgl-kernel on a CPU
SGLANG_CPU_ARGS = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
                   "--dtype", "float32", "--disable-cuda-graph", "--max-total-tokens", "8192",
                   "--max-running-requests", "32"]
GIB = 1024 ** 3


class PeakMemory:
    """Polls the RSS of a process tree (and the engine's) every `every_s`: the peak per role, and every sample
    (wall-clock time, role, bytes) to tell which phase of a step each peak fell in."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s, self.peaks, self.roots = every_s, {}, {}
        self.samples: list[tuple[float, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def watch(self, name: str, pid: int) -> None:
        self.roots[name] = pid

    def _poll(self) -> None:
        while not self._stop.wait(self.every_s):
            now = time.time()
            for name, pid in list(self.roots.items()):
                try:
                    root = psutil.Process(pid)
                    tree = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    continue
                for process in tree:
                    try:
                        role = role_of(name, process)
                        rss = process.memory_info().rss
                    except psutil.NoSuchProcess:
                        continue
                    if role:
                        self.peaks[role] = max(self.peaks.get(role, 0), rss)
                        self.samples.append((now, role, rss))

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            f.write("time,role,rss_bytes\n")
            f.writelines(f"{t:.2f},{role},{rss}\n" for t, role, rss in self.samples)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def role_of(name: str, process: psutil.Process) -> str | None:
    """What a process of the run is: the controller (areal train itself), an FSDP rank, a reward worker."""
    command = " ".join(process.cmdline())
    if name == "engine":   # SGLang's processes: the HTTP/tokenizer one, its scheduler (the weights), detokenizer
        return f"engine {process.name()}"
    if "areal_core.rl.fsdp_worker" in command:
        rank = process.environ().get("RANK")
        return f"trainer rank {rank}" if rank is not None else "trainer helper"
    if "torch.distributed.run" in command:
        return "torchrun"
    if "multiprocessing" in command or "spawn_main" in command:
        return "reward worker"
    if "areal" in command and " train" in command:
        return "controller"
    return None


def start_sglang(model: Path, log: Path, python: str):
    from areal_core.engine.launch import ServerProcess, free_port

    env = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(SHIM)}
    server = ServerProcess.sglang(model, free_port(), python=python, env=env, log_path=log,
                                  extra_args=SGLANG_CPU_ARGS, weight_version=0).start()
    started = time.perf_counter()
    server.wait_ready(900)
    return server, time.perf_counter() - started


def areal_train(args: list[str], log: Path) -> subprocess.Popen:
    command = [str(Path(sys.executable).with_name("areal")), "train", *args]
    print(f"[{time.strftime('%X')}] areal {' '.join(command[1:])}", flush=True)
    return subprocess.Popen(command, stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def kill_after_checkpoint(process: subprocess.Popen, run_dirs: Path, name: str, step: int) -> Path:
    """SIGKILL the run once checkpoint `step` is complete (checkpoints are renamed into place when whole)."""
    while True:
        runs = sorted(run_dirs.glob(f"{name}-*"))
        if runs and (runs[-1] / "checkpoints" / f"step{step:06d}").is_dir():
            process.send_signal(signal.SIGKILL)
            process.wait()
            return runs[-1]
        if process.poll() is not None:
            raise SystemExit(f"areal train exited ({process.returncode}) before checkpoint {step}; see its log")
        time.sleep(0.2)


def orphans_gone(seconds: float) -> float | None:
    """Seconds until no FSDP rank of the killed run is left (they watch the controller), or None past `seconds`."""
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if not any("areal_core.rl.fsdp_worker" in " ".join(p.info["cmdline"] or [])
                   for p in psutil.process_iter(["cmdline"])):
            return time.perf_counter() - started
        time.sleep(0.5)
    return None


def theory(model: Path, ranks: int) -> dict[str, float]:
    """Bytes: a trainer rank's share of fp32 weights, grads and Adam's two moments; the engine's fp32 weights and
    its KV pool (--max-total-tokens tokens of keys and values in every layer)."""
    parameters = json.loads((model / "areal_model.json").read_text())["parameters"]
    config = json.loads((model / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    tokens = int(SGLANG_CPU_ARGS[SGLANG_CPU_ARGS.index("--max-total-tokens") + 1])
    kv = tokens * config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim * 4
    return {"parameters": parameters, "trainer rank": 16 * parameters / ranks, "engine": 4 * parameters + kv}


def check_run(run_dir: Path, steps: int, batch: int, group: int) -> list[str]:
    """Nothing lost or repeated: each step once, each prompt once, the whole batch every step."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    problems = []
    if [m["step"] for m in metrics] != list(range(1, steps + 1)):
        problems.append(f"steps logged {[m['step'] for m in metrics]}, expected 1..{steps}")
    prompts = [p for m in metrics for p in m["prompts"]]
    if len(prompts) != len(set(prompts)):
        problems.append(f"prompts trained twice: {sorted({p for p in prompts if prompts.count(p) > 1})}")
    if any(len(m["prompts"]) != batch for m in metrics):
        problems.append("a batch without its batch_size prompts")
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary["trajectories"] != steps * batch * group:
        problems.append(f"{summary['trajectories']} trajectories, expected {steps * batch * group}")
    return problems


def phase_windows(run_dir: Path) -> list[tuple[float, float, str]]:
    """(start, end, phase) of each step's trainer phases in wall-clock time: a step is logged right after its
    weight sync, which follows the update, which follows pi_prox; its checkpoint is taken after the log."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    checkpoints = {c["step"]: c for c in map(json.loads, (run_dir / "checkpoints.jsonl").read_text().splitlines())}
    windows = []
    for m in metrics:
        end = m["time"]
        sync = end - m["publish_seconds"]
        update = sync - m["update_seconds"]
        windows += [(update - m["proximal_seconds"], update, "pi_prox"), (update, sync, "update"),
                    (sync, end, "weight sync")]
        if m["step"] in checkpoints:
            windows.append((end, end + checkpoints[m["step"]]["seconds"], "checkpoint"))
    return windows


def phase_peaks(samples: list[tuple[float, str, int]], windows: list[tuple[float, float, str]]) -> dict:
    """{role: {phase: peak bytes}}; samples outside every window are "other" (start-up, resume's load, waiting)."""
    peaks: dict[str, dict[str, int]] = {}
    for t, role, rss in samples:
        phase = next((name for start, end, name in windows if start <= t <= end), "other")
        by_phase = peaks.setdefault(role, {})
        by_phase[phase] = max(by_phase.get(phase, 0), rss)
    return peaks


def report(run_dir: Path, peaks: dict[str, int], minimum: dict[str, float], sglang_start_s: float) -> None:
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    checkpoints = {c["step"]: c for c in map(json.loads, (run_dir / "checkpoints.jsonl").read_text().splitlines())}
    print(f"\nper step, seconds (generation and reward: mean per trajectory, overlapped with training)")
    print(f"{'step':>4} {'episode':>8} {'reward':>7} {'pi_prox':>8} {'update':>8} {'sync':>6} {'ckpt':>6} "
          f"{'wait':>7} {'tokens':>6}")
    for m in metrics:
        c = checkpoints.get(m["step"], {})
        print(f"{m['step']:>4} {m['episode_seconds_mean']:>8.1f} {m['reward_seconds_mean']:>7.3f} "
              f"{m['proximal_seconds']:>8.1f} {m['update_seconds']:>8.1f} {m['publish_seconds']:>6.2f} "
              f"{c.get('seconds', float('nan')):>6.1f} {m['wait_seconds']:>7.1f} {m['response_length_mean']:>6.1f}")
    last = checkpoints[max(checkpoints)]
    print(f"checkpoint: {last['bytes'] / GIB:.2f} GiB, {last['seconds']:.1f} s (step {last['step']}); "
          f"SGLang server ready in {sglang_start_s:.0f} s")
    print(f"\npeak RSS per process vs theoretical minimum ({minimum['parameters'] / 1e6:.0f}M parameters; trainer "
          f"rank: 16 B/param / ranks, engine: 4 B/param + KV pool; only its scheduler holds them)")
    for role, rss in sorted(peaks.items()):
        floor = next((minimum[k] for k in ("trainer rank", "engine") if role.startswith(k)), None)
        ratio = f"{rss / floor:.2f}x of {floor / GIB:.2f} GiB" if floor else "(no theoretical figure)"
        print(f"  {role:<28} {rss / GIB:6.2f} GiB  {ratio}")


def report_phases(samples: list[tuple[float, str, int]], run_dir: Path) -> None:
    windows = phase_windows(run_dir)   # the resumed run appends its steps to the same files
    by_role = phase_peaks([s for s in samples if s[1].startswith(("trainer rank", "engine"))], windows)
    names = ["pi_prox", "update", "weight sync", "checkpoint", "other"]
    print("\npeak RSS per phase of a step, GiB (\"other\": start-up, the resumed run's load, waiting for a batch)")
    print(f"  {'':<28}" + "".join(f"{name:>12}" for name in names))
    for role, by_phase in sorted(by_role.items()):
        print(f"  {role:<28}" + "".join(f"{by_phase[n] / GIB:>12.2f}" if n in by_phase else f"{'-':>12}"
                                        for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="qwen2.5-0.5b")
    parser.add_argument("--model", type=Path, help="a model directory already built (default: build the preset)")
    parser.add_argument("--steps", type=int, default=3, help="steps before the kill")
    parser.add_argument("--resume-steps", type=int, default=2, help="steps after --resume")
    parser.add_argument("--batch", type=int, default=4, help="prompts per step")
    parser.add_argument("--group", type=int, default=2, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--micro-batch-tokens", type=int, default=512, help="trainer.micro_batch_tokens")
    parser.add_argument("--output", type=Path, help="keep the run and logs here (default: a temp dir)")
    parser.add_argument("--no-sync-compare", action="store_true", help="skip disk vs distributed vs delta")
    parser.add_argument("overrides", nargs="*", help="extra KEY=VALUE overrides of the run")
    args = parser.parse_args()
    python = os.environ.get("AREAL_SGLANG_PYTHON", str(REPO / ".venv-sglang" / "bin" / "python"))
    if not Path(python).exists():
        raise SystemExit(f"no SGLang virtualenv at {python}: run `bash scripts/setup-sglang.sh`")

    with tempfile.TemporaryDirectory(prefix="bench-real-size-") as tmp:
        out = args.output or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        model = args.model
        if model is None:
            from areal_core.engine.presets import init_preset_model

            print(f"building the {args.preset} preset ...", flush=True)
            model = init_preset_model(out / args.preset, args.preset, data_dir=os.environ.get("AREAL_DATA_DIR"))
        total = args.steps + args.resume_steps
        with PeakMemory() as memory:
            server, sglang_start_s = start_sglang(model, out / "sglang.log", python)
            memory.watch("engine", server.process.pid)
            try:
                overrides = [
                    "name=real-size", f"output_dir={out / 'runs'}", f"model.path={model}", "task=gsm8k",
                    "eval_task=null", "warmup.enabled=false", f"steps={total}", f"rollout.batch_size={args.batch}",
                    f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.max_new_tokens}",
                    "rollout.max_staleness=1", "rollout.skip_uniform_groups=false", "trainer.backend=fsdp",
                    "trainer.fsdp_processes=2", "trainer.lr=1e-5", "trainer.entropy_coef=1e-3",
                    # each layer's activations recomputed in the backward pass: a rank then holds ~one layer's
                    f"trainer.micro_batch_tokens={args.micro_batch_tokens}", "trainer.gradient_checkpointing=true",
                    "checkpoint_every=1", "tensorboard=false",
                    "eval.db=null", "engine.backend=sglang", f"engine.urls=[{server.url}]",
                    "engine.weight_sync=distributed", "reward.workers=1", *args.overrides]
                first = areal_train(overrides, out / "train.log")
                memory.watch("first", first.pid)
                run_dir = kill_after_checkpoint(first, out / "runs", "real-size", args.steps)
                print(f"[{time.strftime('%X')}] killed areal train (SIGKILL) after checkpoint {args.steps}", flush=True)
                gone = orphans_gone(120)
                print(f"FSDP ranks of the killed run gone after {gone:.1f} s" if gone is not None else
                      "FSDP ranks of the killed run still alive after 120 s", flush=True)
                second = areal_train(["--resume", str(run_dir)], out / "train.log")
                memory.watch("second", second.pid)
                if second.wait() != 0:
                    raise SystemExit(f"areal train --resume failed ({second.returncode}); see {out / 'train.log'}")
            finally:
                server.stop()
        memory.write(out / "memory.csv")
        report(run_dir, memory.peaks, theory(model, 2), sglang_start_s)
        report_phases(memory.samples, run_dir)
        problems = check_run(run_dir, total, args.batch, args.group)
        print("resume: nothing lost or repeated (steps, prompts, trajectories)" if not problems else
              "resume PROBLEMS: " + "; ".join(problems))
        if not args.no_sync_compare:
            compare_sync(model, out)
    print("reproduce: AREAL_DATA_DIR=../shared/data .venv/bin/python bench/bench_real_size.py " + " ".join(sys.argv[1:]))


def compare_sync(model: Path, out: Path) -> None:
    import asyncio

    import bench_weight_sync

    settings = argparse.Namespace(threads=1, repeats=3, bucket_mb=256.0, model=str(model), preset=None)
    print(f"\n[{time.strftime('%X')}] weight sync of one update, disk vs distributed vs delta "
          "(bench_weight_sync.py, median of 3)", flush=True)
    times = asyncio.run(bench_weight_sync.measure(settings, model, out))
    bench_weight_sync.print_table(times, settings)


if __name__ == "__main__":
    main()
