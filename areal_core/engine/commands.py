"""`areal init-model` and `areal serve`."""
from __future__ import annotations

from pathlib import Path

import click


@click.command("init-model")
@click.argument("output_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Seed of the random initial weights.")
@click.option("--layers", "num_hidden_layers", type=int, help="Decoder layers (default 3).")
@click.option("--hidden-size", type=int, help="Hidden size (default 128).")
@click.option("--force", is_flag=True, help="Overwrite an existing model directory.")
def init_model_command(output_dir: Path, seed: int, num_hidden_layers: int | None, hidden_size: int | None,
                       force: bool) -> None:
    """Create a tiny Qwen2 with a character-level tokenizer (CPU-sized). The demo's model (`areal train`
    builds and caches its own) is `--layers 3 --hidden-size 96`."""
    from areal_core.engine.model import ModelError, init_model

    if (output_dir / "config.json").exists() and not force:
        raise ModelError(f"{output_dir} already holds a model; pass --force to overwrite it")
    overrides = {k: v for k, v in {"num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size}.items() if v}
    if hidden_size:
        overrides["intermediate_size"] = 3 * hidden_size
    path = init_model(output_dir, seed=seed, **overrides)
    import json

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
              type=click.Choice(["float32", "bfloat16", "float16", "float8", "float4", "int4", "int3"]),
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
