"""Trainer checkpoints and weight publications on disk, written so that a kill never leaves a half-written
directory that looks complete.

A checkpoint directory holds everything a trainer needs to continue exactly where it stopped:

    model.safetensors, config.json, tokenizer files   the weights, in the layout `publish` writes (an HF model dir)
    optimizer.safetensors                              the optimizer's tensor states, "<state>/<parameter name>"
                                                       (AdamW: exp_avg/..., exp_avg_sq/...); absent before a step
    optimizer.pt                                       the rest of the optimizer (each parameter's step, the param
                                                       groups' settings) and the LR scheduler
    rng.pt                                             torch RNG states, one per trainer process
    adapters.safetensors                               with trainer.lora: the LoRA adapters (model.safetensors
                                                       then holds the frozen base weights, under the HF names)
    trainer_state.json                                 the manifest: policy version and every file's size and
                                                       sha256; written last, so its presence means "complete"

States are *full* (unsharded, keyed by parameter name), so a checkpoint written by the local trainer loads
into the FSDP one and back. They are written and read one tensor at a time (StreamedSafetensors): a 0.5B
model's full weights and Adam moments gathered at once (6 GB on rank 0) ran a 24 GiB machine out of memory.
Everything is written into a temporary sibling directory, fsync'ed, and renamed into place in one step.
Checkpoints of format 1 (the whole optimizer state in optimizer.pt) still load.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from areal_core.engine.weight_sync import BASE_LAYER, LORA_A, is_adapter, served_name
from areal_core.errors import ArealError
from areal_core.files import atomic_directory

MANIFEST = "trainer_state.json"
CHECKPOINT_FORMAT = "areal-trainer-checkpoint/2"
FORMAT_1 = "areal-trainer-checkpoint/1"   # optimizer.pt held the whole optimizer state
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
OPTIMIZER_TENSORS_FILE = "optimizer.safetensors"
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


SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
                      torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2"}
SAFETENSORS_NAMES = {name: dtype for dtype, name in SAFETENSORS_DTYPES.items()}
Entry = tuple[str, torch.dtype, tuple[int, ...]]   # a tensor's name, dtype and shape


class StreamedSafetensors:
    """A safetensors file written one tensor at a time: the header first, from every tensor's name, dtype and
    shape given up front, then each tensor's bytes in that order (the format safetensors reads, with the data
    8-byte aligned). Its sha256 is computed as it is written."""

    def __init__(self, path: Path, entries: list[Entry], metadata: dict[str, str] | None = None) -> None:
        header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
        offset = 0
        for name, dtype, shape in entries:
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.path, self._entries, self._written = path, list(entries), 0
        self._digest = hashlib.sha256()
        self._file = open(path, "wb")
        self._write(struct.pack("<Q", len(raw)) + raw)

    def _write(self, data: Any) -> None:
        self._file.write(data)
        self._digest.update(data)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        if self._written >= len(self._entries):
            raise CheckpointError(f"{self.path}: {name} is one tensor more than the header lists")
        expected = self._entries[self._written]
        got = (name, tensor.dtype, tuple(tensor.shape))
        if got != expected:
            raise CheckpointError(f"{self.path}: tensor {self._written} is {got}, the header says {expected}")
        data = tensor.detach().cpu().contiguous().reshape(-1)
        if data.numel():
            self._write(data.view(torch.uint8).numpy())
        self._written += 1

    def close(self) -> str:
        """The file's sha256 (CheckpointError if a listed tensor was never written)."""
        self._file.close()
        if self._written != len(self._entries):
            raise CheckpointError(f"{self.path}: {len(self._entries) - self._written} of its tensors were never written")
        return self._digest.hexdigest()


@dataclass
class StateLayout:
    """What a trainer's full state holds, known on every rank before any tensor is gathered: the tensors of each
    file (in the order `tensors` yields them), the optimizer's scalars and its param groups' settings."""

    files: dict[str, list[Entry]]
    optimizer_scalars: dict[str, dict[str, float]] = field(default_factory=dict)
    param_groups: list[dict[str, Any]] = field(default_factory=list)


def write_checkpoint(directory: str | Path, *, version: int, layout: StateLayout,
                     tensors: Iterable[tuple[str, str, torch.Tensor]], scheduler_state: dict[str, Any],
                     rng_states: list[dict[str, Any]], model_config: Any, tokenizer: Any, backend: str) -> Path:
    """Write a complete checkpoint atomically (see the module docstring for the layout): `tensors` yields
    (file, name, full tensor) in the layout's order, each written before the next is asked for."""
    directory = Path(directory)
    with atomic_directory(directory, durable=True) as tmp:
        writers = {file: StreamedSafetensors(tmp / file, entries) for file, entries in layout.files.items()
                   if entries or file == WEIGHTS_FILE}
        for file, name, tensor in tensors:
            writers[file].write(name, tensor)
        digests = {file: writer.close() for file, writer in writers.items()}
        model_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save({"scheduler": scheduler_state, "scalars": layout.optimizer_scalars,
                    "param_groups": layout.param_groups}, tmp / OPTIMIZER_FILE)
        torch.save(rng_states, tmp / RNG_FILE)
        files = {}
        for path in sorted(tmp.rglob("*")):
            if path.is_file():
                name = str(path.relative_to(tmp))
                files[name] = {"bytes": path.stat().st_size, "sha256": digests.get(name) or _sha256(path)}
        manifest = {"format": CHECKPOINT_FORMAT, "version": version, "backend": backend,
                    "processes": len(rng_states), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return directory


def verify_checkpoint(directory: str | Path, digests: bool = True) -> dict[str, Any]:
    """The manifest of a complete, intact checkpoint; CheckpointError naming the problem otherwise. digests=False
    checks the files' sizes but not their sha256 (for a reader the checkpoint was just verified for: at 0.5B each
    pass reads 6 GB)."""
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
    if not isinstance(manifest, dict) or manifest.get("format") not in (CHECKPOINT_FORMAT, FORMAT_1):
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
        if digests and _sha256(path) != expected["sha256"]:
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


@dataclass
class CheckpointMeta:
    """The small part of a checkpoint, read whole: version, scheduler, RNG states, the optimizer's scalars and
    param groups (the tensors are read one by one from the files, `CheckpointTensors`)."""

    version: int
    scheduler_state: dict[str, Any]
    rng_states: list[dict[str, Any]]
    optimizer_scalars: dict[str, dict[str, float]]
    param_groups: list[dict[str, Any]]
    manifest: dict[str, Any]
    tensor_names: set[str] = field(default_factory=set)   # of optimizer.safetensors

    @property
    def optimizer_stepped(self) -> bool:
        return bool(self.optimizer_scalars)


def read_meta(directory: str | Path, manifest: dict[str, Any]) -> CheckpointMeta:
    """The small part of a verified checkpoint of the current format."""
    from safetensors import safe_open

    directory = Path(directory)
    optimizer = torch.load(directory / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    names: set[str] = set()
    if OPTIMIZER_TENSORS_FILE in manifest["files"]:
        with safe_open(str(directory / OPTIMIZER_TENSORS_FILE), framework="pt") as f:
            names = set(f.keys())
    return CheckpointMeta(int(manifest["version"]), optimizer["scheduler"],
                          torch.load(directory / RNG_FILE, map_location="cpu", weights_only=True),
                          optimizer["scalars"], optimizer["param_groups"], manifest, names)


class CheckpointTensors:
    """A verified checkpoint's tensor files: `get(file, name)` reads one tensor into memory of its own.

    Read with plain reads, not memory-mapped (as safetensors' safe_open is): every page of a mapped file that a load
    touches stays in the process's resident memory until the file is closed, so loading a 0.5B checkpoint (5.9 GB)
    put all of it on top of the rank's own state."""

    def __init__(self, directory: str | Path, manifest: dict[str, Any]) -> None:
        self._files: dict[str, tuple[Path, int, dict[str, Any]]] = {}
        for file in (WEIGHTS_FILE, ADAPTERS_FILE, OPTIMIZER_TENSORS_FILE):
            if file in manifest["files"]:
                path = Path(directory) / file
                with open(path, "rb") as f:
                    (length,) = struct.unpack("<Q", f.read(8))
                    header = json.loads(f.read(length))
                self._files[file] = (path, 8 + length, header)

    def get(self, file: str, name: str) -> torch.Tensor:
        path, data_start, header = self._files[file]
        entry = header.get(name)
        if entry is None:
            raise CheckpointError(f"{path} has no tensor {name}")
        dtype = SAFETENSORS_NAMES[entry["dtype"]]
        start, end = entry["data_offsets"]
        tensor = torch.empty(entry["shape"], dtype=dtype)
        raw = tensor.reshape(-1).view(torch.uint8)
        if raw.numel() != end - start:
            raise CheckpointError(f"{path}: {name} has {end - start} bytes, its shape and dtype {raw.numel()}")
        with open(path, "rb", buffering=0) as f:
            f.seek(data_start + start)
            view, done = memoryview(raw.numpy()), 0
            while done < len(view):
                count = f.readinto(view[done:])
                if not count:
                    raise CheckpointError(f"{path} ends inside {name} (truncated)")
                done += count
        return tensor


def is_format_1(manifest: dict[str, Any]) -> bool:
    return manifest.get("format") == FORMAT_1


def read_checkpoint(directory: str | Path, manifest: dict[str, Any] | None = None) -> Checkpoint:
    """Load a checkpoint of format 1 onto the CPU, whole; verified first unless its verified `manifest` is given."""
    from safetensors.torch import load_file

    directory = Path(directory)
    manifest = manifest or verify_checkpoint(directory)
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


def check_model_keys(directory: str | Path, stored: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]],
                     tied_embeddings: bool) -> None:
    """The checkpoint's weights name exactly the model's parameters (the tied output head may be absent), each of
    the model's shape (`stored_shapes`; `expected`: name -> full, unsharded shape)."""
    missing = set(expected) - set(stored) - ({"lm_head.weight"} if tied_embeddings else set())
    unexpected = set(stored) - set(expected)
    if missing or unexpected:
        raise CheckpointError(f"trainer checkpoint {directory} does not fit this model: "
                              f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    reshaped = [f"{name} is {list(stored[name])}, the model's {list(expected[name])}"
                for name in sorted(stored) if tuple(stored[name]) != tuple(expected[name])]
    if reshaped:
        raise CheckpointError(f"trainer checkpoint {directory} does not fit this model (another size of it?): "
                              f"{'; '.join(reshaped[:3])}" + (f"; and {len(reshaped) - 3} more" if len(reshaped) > 3 else ""))


def stored_shapes(directory: str | Path, manifest: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """name -> shape of the parameters a verified checkpoint holds (the adapters' and their base weights' as peft
    names them), read from the files' headers without loading them."""
    from safetensors import safe_open

    def shapes(file: str) -> dict[str, Any]:
        with safe_open(str(Path(directory) / file), framework="pt") as weights:
            return {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}

    base = shapes(WEIGHTS_FILE)
    return join_adapters(base, shapes(ADAPTERS_FILE)) if ADAPTERS_FILE in manifest["files"] else base


def join_adapters(base: dict[str, Any], adapters: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's base weights (under the HF names) and adapters as the model's full state: an adapted module's
    base weights under peft's names again."""
    adapted = {name[:-len(LORA_A)] for name in adapters if name.endswith(LORA_A)}
    joined = dict(adapters)
    for name, tensor in base.items():
        module, _, leaf = name.rpartition(".")
        joined[f"{module}{BASE_LAYER}{leaf}" if module in adapted else name] = tensor
    return joined

