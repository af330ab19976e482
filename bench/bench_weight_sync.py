"""Weight sync into a generation server, through the disk vs streamed over a process group, side by side (issue 22).

One `areal serve` server holds the model (float32); a local trainer holding the same weights moves it to a new
version by each path, the paths alternating so drift in machine load hits each alike:

    disk          the trainer writes weights/vN (safetensors, atomically: trainer.publish), the server loads it
                  (/update_weights_from_disk): engine.weight_sync=disk
    distributed   /begin_weight_update, the buckets broadcast over a gloo group, /end_weight_update
                  (rl/weight_updates.py): engine.weight_sync=distributed
    delta         the same, with every parameter frozen but the attention's q and v projections (LoRA's usual
                  targets: what a delta update of merged LoRA weights sends): engine.weight_sync=delta

Each update's seconds are the whole transfer, as `publish_seconds` in a run's metrics.jsonl; the group is made
once beforehand (its seconds are reported apart). Medians over `--repeats`, and the ratio of disk to each.

    .venv/bin/python bench/bench_weight_sync.py [--preset qwen2.5-0.5b | --model DIR] [--repeats 3] [--bucket-mb 256]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from areal_core.engine.launch import EngineConfig, ServerProcess, free_port
from areal_core.engine.sglang_client import SGLangEngine
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer
from areal_core.rl.weight_updates import WeightStreamer

DELTA_TARGETS = (".q_proj.", ".v_proj.")


def model_dir(args: argparse.Namespace, tmp: Path) -> Path:
    if args.model:
        return Path(args.model)
    from areal_core.engine.presets import init_preset_model

    print(f"building the {args.preset} preset (random weights, BPE tokenizer on $AREAL_DATA_DIR) ...", flush=True)
    return Path(init_preset_model(tmp / args.preset, args.preset, data_dir=os.environ.get("AREAL_DATA_DIR")))


async def measure(args: argparse.Namespace, model: Path, tmp: Path) -> dict[str, list[float]]:
    trainer = LocalTrainer(model, TrainerConfig(measure_stale_mismatch=False), total_steps=1)
    server = ServerProcess.areal(str(model), free_port(), log_path=str(tmp / "serve.log"),
                                 env={"OMP_NUM_THREADS": str(args.threads)},
                                 extra_args=["--torch-threads", str(args.threads)]).start()
    seconds: dict[str, list[float]] = {"disk": [], "distributed": [], "delta": [], "join": []}
    sizes: dict[str, int] = {}
    try:
        server.wait_ready(900)
        async with SGLangEngine([server.url]) as engine:
            # One group: a delta stream sends the trainable parameters, so with none frozen it sends them all.
            streamer = WeightStreamer(trainer, engine, EngineConfig(backend="server", weight_sync="delta",
                                                                    weight_bucket_mb=args.bucket_mb), "cpu")
            started = time.perf_counter()
            await streamer.open()
            seconds["join"].append(time.perf_counter() - started)
            await streamer.update(0)   # the stream's first update is a full one, whatever is frozen
            version = 0
            for repeat in range(args.repeats):
                for mode in ("disk", "distributed", "delta"):
                    version += 1
                    started = time.perf_counter()
                    if mode == "disk":
                        path = trainer.publish(tmp / "weights" / f"v{version}")
                        await engine.update_weights(str(path), version)
                        sizes["disk"] = sum(f.stat().st_size for f in path.iterdir())
                    else:
                        for name, parameter in trainer.model.named_parameters():
                            parameter.requires_grad_(mode == "distributed" or any(t in name for t in DELTA_TARGETS))
                        _, metrics = await streamer.update(version)
                        sizes[mode] = metrics["weight_sync_bytes"]
                    seconds[mode].append(time.perf_counter() - started)
                    info = await engine.model_info()
                    assert info["weight_version"] == version, (mode, info["weight_version"], version)
                    print(f"  {mode:<12} update {repeat + 1}: {seconds[mode][-1]:.2f} s", flush=True)
            await streamer.close()
    finally:
        server.stop()
        trainer.close()
    return {**seconds, "bytes": [float(sizes[m]) for m in ("disk", "distributed", "delta")]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="qwen2.5-0.5b")
    parser.add_argument("--model", help="a model directory instead of a preset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=256.0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-weight-sync-") as tmp:
        model = model_dir(args, Path(tmp))
        result = asyncio.run(measure(args, model, Path(tmp)))
    print_table(result, args)
    print(f"\nreproduce: .venv/bin/python bench/bench_weight_sync.py "
          f"{'--model ' + args.model if args.model else '--preset ' + args.preset} --repeats {args.repeats} "
          f"--bucket-mb {args.bucket_mb:g}")


def print_table(result: dict[str, list[float]], args: argparse.Namespace) -> None:
    disk_bytes, stream_bytes, delta_bytes = result["bytes"]
    median = {mode: statistics.median(result[mode]) for mode in ("disk", "distributed", "delta")}
    print(f"\nmodel: {args.model or args.preset}; buckets of at most {args.bucket_mb:g} MB; group made in "
          f"{statistics.fmean(result['join']):.2f} s (once per run)")
    print("| path | bytes per update | seconds per update (median of %d) | disk / this |" % args.repeats)
    print("|---|---|---|---|")
    for mode, size in (("disk", disk_bytes), ("distributed", stream_bytes), ("delta", delta_bytes)):
        print(f"| {mode} | {size / 2**20:.0f} MiB | {median[mode]:.2f} | {median['disk'] / median[mode]:.1f}x |")


if __name__ == "__main__":
    main()
