"""Trainer checkpoints and weight publications on disk, written so that a kill never leaves a half-written
directory that looks complete.

A checkpoint directory holds everything a trainer needs to continue exactly where it stopped:

    model.safetensors, config.json, tokenizer files   the weights, in the layout `publish` writes (an HF model dir)
    optimizer.pt                                       full optimizer state (keyed by parameter name) + LR scheduler
    rng.pt                                             torch RNG states, one per trainer process
    trainer_state.json                                 the manifest: policy version and every file's size and
                                                       sha256; written last, so its presence means "complete"

States are *full* (unsharded, keyed by parameter name), so a checkpoint written by the local trainer loads
into the FSDP one and back. Everything is written into a temporary sibling directory, fsync'ed, and renamed
into place in one step.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from areal_core.errors import ArealError

MANIFEST = "trainer_state.json"
CHECKPOINT_FORMAT = "areal-trainer-checkpoint/1"
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"


class CheckpointError(ArealError):
    """A trainer checkpoint is missing, incomplete, corrupt, or does not fit the model."""


def _fsync_path(path: Path) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_directory(directory: str | Path, durable: bool = True) -> Iterator[Path]:
    """Yield an empty temporary directory beside `directory`; when the block succeeds, rename it to
    `directory` (replacing an existing one). With `durable`, every file and the directories are fsync'ed
    first, so after a crash `directory` is either the old one or the complete new one.
    The block failing removes the temporary directory and leaves `directory` untouched."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    # Left by a writer that was killed. An old copy is garbage only once `directory` exists: a kill between
    # the two renames below leaves the old copy as the only complete one.
    stale = [*directory.parent.glob(f".{directory.name}.tmp-*")]
    if directory.exists():
        stale += directory.parent.glob(f".{directory.name}.old-*")
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        yield tmp
        if durable:
            for path in sorted(tmp.rglob("*"), reverse=True):  # files before the directories holding them
                _fsync_path(path)
            _fsync_path(tmp)
        old = None
        if directory.exists():
            # os.replace cannot overwrite a non-empty directory: move the old one aside first.
            old = directory.parent / f".{directory.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(directory, old)
        os.replace(tmp, directory)
        if durable:
            _fsync_path(directory.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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
        write_model_files(tmp, model_state, model_config, tokenizer)
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
    return Checkpoint(
        version=int(manifest["version"]),
        model_state=load_file(str(directory / WEIGHTS_FILE)),
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
