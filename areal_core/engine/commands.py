"""`areal init-model` and `areal serve`."""
from __future__ import annotations

from pathlib import Path

import click

from areal_core.engine.model import ENGINE_DTYPES
from areal_core.engine.presets import PRESETS


@click.command("init-model")
@click.argument("output_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--preset", type=click.Choice(list(PRESETS)),
              help="A real-size architecture (random weights, a byte-level BPE tokenizer trained here on the eval "
                   "data, Qwen's special tokens and chat template) instead of the tiny embedded model.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random initial weights.")
@click.option("--layers", "num_hidden_layers", type=click.IntRange(1),
              help="Decoder layers (default 3; with --preset, the preset's).")
@click.option("--hidden-size", type=click.IntRange(1), help="Hidden size (default 128; not with --preset).")
@click.option("--vocab-size", type=click.IntRange(16384), default=32768, show_default=True,
              help="With --preset: the BPE vocabulary to train (at most; what the data yields may be less).")
@click.option("--tokenizer-from", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="With --preset: take the tokenizer of this model directory instead of training one (a machine "
                   "without the eval data).")
@click.option("--force", is_flag=True, help="Overwrite an existing model directory.")
@click.pass_context
def init_model_command(ctx: click.Context, output_dir: Path, preset: str | None, seed: int,
                       num_hidden_layers: int | None, hidden_size: int | None, vocab_size: int,
                       tokenizer_from: Path | None, force: bool) -> None:
    """Create a model directory: by default a tiny Qwen2 with a character-level tokenizer (CPU-sized; the demo's
    model, which `areal train` builds and caches itself, is `--layers 3 --hidden-size 96`); with --preset, a
    real-size one (e.g. `--preset qwen2.5-0.5b`: 494M parameters, ~1 GB) to rehearse what users run."""
    import json

    from areal_core.engine.model import ModelError, init_model

    if (output_dir / "config.json").exists() and not force:
        raise ModelError(f"{output_dir} already holds a model; pass --force to overwrite it")
    if preset is not None:
        from areal_core.engine.presets import init_preset_model

        if hidden_size:
            raise click.UsageError("--hidden-size does not apply to --preset (its shapes are the real model's)")
        data_dir = (ctx.find_root().obj or {}).get("data_dir")
        path = init_preset_model(output_dir, preset, seed=seed, data_dir=data_dir, vocab_size=vocab_size,
                                 tokenizer_from=tokenizer_from,
                                 **({"num_hidden_layers": num_hidden_layers} if num_hidden_layers else {}))
        info = json.loads((path / "areal_model.json").read_text())
        click.echo(f"created {path}: {preset}, {info['parameters']:,} parameters, byte-level BPE tokenizer of "
                   f"{info['tokenizer_vocab']:,} tokens")
        return
    if tokenizer_from is not None:
        raise click.UsageError("--tokenizer-from applies to --preset (the default model's tokenizer is built in)")
    overrides = {k: v for k, v in {"num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size}.items() if v}
    if hidden_size:
        overrides["intermediate_size"] = 3 * hidden_size
    path = init_model(output_dir, seed=seed, **overrides)
    info = json.loads((path / "areal_model.json").read_text())
    click.echo(f"created {path}: Qwen2, {info['num_hidden_layers']} layers, hidden {info['hidden_size']}, "
               f"character tokenizer")


@click.command("serve")
@click.argument("model_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=30000, show_default=True, type=int)
@click.option("--max-running-requests", default=64, show_default=True, type=click.IntRange(1),
              help="Requests decoded together (KV cache slots).")
@click.option("--max-seq-len", type=click.IntRange(2), help="Longest prompt + output (default: the model's limit).")
@click.option("--device", default="cpu", show_default=True, help="torch device, e.g. cuda:0.")
@click.option("--dtype", default="float32", show_default=True,
              type=click.Choice(ENGINE_DTYPES),
              help="float8 / float4 / int4 / int3: weights rounded to float8 e4m3 / 4-bit e2m1 / 4- or 3-bit integers, "
                   "arithmetic in bfloat16")
@click.option("--torch-threads", type=click.IntRange(1), help="torch intra-op threads (1 when sharing a small CPU).")
@click.option("--weight-version", default=0, show_default=True, help="Version tag of the initial weights.")
@click.option("--prefix-cache-slots", type=click.IntRange(0), default=0, show_default=True,
              help="Slots beyond --max-running-requests that keep finished requests' caches for a next turn.")
def serve_command(model_dir: Path, host: str, port: int, max_running_requests: int, max_seq_len: int | None,
                  device: str, dtype: str, torch_threads: int | None, weight_version: int,
                  prefix_cache_slots: int) -> None:
    """Serve MODEL_DIR with the local engine over SGLang's native HTTP API (/generate, /pause_generation,
    /continue_generation, /update_weights_from_disk, /health, /model_info, /flush_cache)."""
    from areal_core.engine.server import serve

    click.echo(f"serving {model_dir} on http://{host}:{port} (SGLang-compatible API)", err=True)
    serve(str(model_dir), host=host, port=port, max_running_requests=max_running_requests, max_seq_len=max_seq_len,
          device=device, dtype=dtype, torch_threads=torch_threads, weight_version=weight_version,
          prefix_cache_slots=prefix_cache_slots)
