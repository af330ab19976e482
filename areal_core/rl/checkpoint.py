"""Trainer checkpoints and weight publications on disk, written so that a kill never leaves a half-written
directory that looks complete.

A checkpoint directory holds everything a trainer needs to continue exactly where it stopped:

    model.safetensors, config.json, tokenizer files   the weights, in the layout `publish` writes (an HF model dir)
    optimizer.pt                                       full optimizer state (keyed by parameter name) + LR scheduler
    rng.pt                                             torch RNG states, one per trainer process
    adapters.safetensors                               with trainer.lora: the LoRA adapters (model.safetensors
                                                       then holds the frozen base weights, under the HF names)
    trainer_state.json                                 the manifest: policy version and every file's size and
                                                       sha256; written last, so its presence means "complete"

States are *full* (unsharded, keyed by parameter name), so a checkpoint written by the local trainer loads
into the FSDP one and back. Everything is written into a temporary sibling directory, fsync'ed, and renamed
into place in one step.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from areal_core.engine.weight_sync import BASE_LAYER, LORA_A, is_adapter, served_name
from areal_core.errors import ArealError
from areal_core.files import atomic_directory

MANIFEST = "trainer_state.json"
CHECKPOINT_FORMAT = "areal-trainer-checkpoint/1"
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"
ADAPTERS_FILE = "adapters.safetensors"


class CheckpointError(ArealError):
    """A trainer checkpoint is missing, incomplete, corrupt, or does not fit the model."""


def write_model_files(directory: Path, model_state: dict[str, torch.Tensor], model_config: Any, tokenizer: Any) -> None:
    """The weights as safetensors plus config and tokenizer: the layout `save_pretrained` uses, so any
    generation server (or `load_model`) can load the directory."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().cpu().contiguous() for name, tensor in model_state.items()}
    if getattr(model_config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # the same tensor as the embedding; stored once
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    model_config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_checkpoint(directory: str | Path, *, version: int, model_state: dict[str, torch.Tensor],
                     optimizer_state: dict[str, Any], scheduler_state: dict[str, Any],
                     rng_states: list[dict[str, Any]], model_config: Any, tokenizer: Any, backend: str) -> Path:
    """Write a complete checkpoint atomically (see the module docstring for the layout)."""
    directory = Path(directory)
    with atomic_directory(directory, durable=True) as tmp:
        base, adapters = split_adapters(model_state)
        write_model_files(tmp, base, model_config, tokenizer)
        if adapters:
            from safetensors.torch import save_file

            save_file({k: v.detach().cpu().contiguous() for k, v in adapters.items()}, str(tmp / ADAPTERS_FILE))
        torch.save({"optimizer": optimizer_state, "scheduler": scheduler_state}, tmp / OPTIMIZER_FILE)
        torch.save(rng_states, tmp / RNG_FILE)
        files = {str(path.relative_to(tmp)): {"bytes": path.stat().st_size, "sha256": _sha256(path)}
                 for path in sorted(tmp.rglob("*")) if path.is_file()}
        manifest = {"format": CHECKPOINT_FORMAT, "version": version, "backend": backend,
                    "processes": len(rng_states), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return directory


def verify_checkpoint(directory: str | Path) -> dict[str, Any]:
    """The manifest of a complete, intact checkpoint; CheckpointError naming the problem otherwise."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"trainer checkpoint {directory} does not exist")
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"trainer checkpoint {directory} is incomplete: it has no {MANIFEST} "
                              "(the manifest is written last, so the save was interrupted)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (ValueError, OSError) as exc:
        raise CheckpointError(f"trainer checkpoint {directory}: {MANIFEST} is not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != CHECKPOINT_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CheckpointError(f"trainer checkpoint {directory}: {MANIFEST} has format {found!r}, "
                              f"expected {CHECKPOINT_FORMAT!r}")
    for name in (WEIGHTS_FILE, OPTIMIZER_FILE, RNG_FILE):
        if name not in manifest.get("files", {}):
            raise CheckpointError(f"trainer checkpoint {directory}: the manifest does not list {name}")
    for name, expected in manifest["files"].items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"trainer checkpoint {directory} is missing {name}")
        size = path.stat().st_size
        if size != expected["bytes"]:
            raise CheckpointError(f"trainer checkpoint {directory}: {name} has {size} bytes, "
                                  f"the manifest says {expected['bytes']} (truncated or overwritten)")
        if _sha256(path) != expected["sha256"]:
            raise CheckpointError(f"trainer checkpoint {directory}: {name} does not match its sha256 "
                                  "in the manifest (corrupt)")
    return manifest


@dataclass
class Checkpoint:
    """What `read_checkpoint` loads: full (unsharded) states keyed by parameter name."""

    version: int
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    scheduler_state: dict[str, Any]
    rng_states: list[dict[str, Any]]
    manifest: dict[str, Any]


def read_checkpoint(directory: str | Path) -> Checkpoint:
    """Verify, then load a checkpoint onto the CPU."""
    from safetensors.torch import load_file

    directory = Path(directory)
    manifest = verify_checkpoint(directory)
    optimizer = torch.load(directory / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    model_state = load_file(str(directory / WEIGHTS_FILE))
    if ADAPTERS_FILE in manifest["files"]:
        model_state = join_adapters(model_state, load_file(str(directory / ADAPTERS_FILE)))
    return Checkpoint(
        version=int(manifest["version"]),
        model_state=model_state,
        optimizer_state=optimizer["optimizer"],
        scheduler_state=optimizer["scheduler"],
        rng_states=torch.load(directory / RNG_FILE, map_location="cpu", weights_only=True),
        manifest=manifest,
    )


def check_model_keys(directory: str | Path, loaded: set[str], expected: set[str], tied_embeddings: bool) -> None:
    """The checkpoint's weights name exactly the model's parameters (the tied output head may be absent)."""
    missing = expected - loaded - ({"lm_head.weight"} if tied_embeddings else set())
    unexpected = loaded - expected
    if missing or unexpected:
        raise CheckpointError(f"trainer checkpoint {directory} does not fit this model: "
                              f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")


def stored_names(directory: str | Path, manifest: dict[str, Any]) -> set[str]:
    """The parameter names a verified checkpoint holds (the adapters' and their base weights' as peft names them),
    read from the files' headers without loading them."""
    from safetensors import safe_open

    def names(file: str) -> dict[str, Any]:
        with safe_open(str(Path(directory) / file), framework="pt") as weights:
            return dict.fromkeys(weights.keys())

    base = names(WEIGHTS_FILE)
    return set(join_adapters(base, names(ADAPTERS_FILE)) if ADAPTERS_FILE in manifest["files"] else base)


def split_adapters(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the base weights under the HF names, the LoRA adapters) of a model's full state."""
    adapters = {name: t for name, t in state.items() if is_adapter(name)}
    return {served_name(name): t for name, t in state.items() if name not in adapters}, adapters


def join_adapters(base: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`split_adapters`' inverse: an adapted module's base weights under peft's names again."""
    adapted = {name[:-len(LORA_A)] for name in adapters if name.endswith(LORA_A)}
    joined = dict(adapters)
    for name, tensor in base.items():
        module, _, leaf = name.rpartition(".")
        joined[f"{module}{BASE_LAYER}{leaf}" if module in adapted else name] = tensor
    return joined

