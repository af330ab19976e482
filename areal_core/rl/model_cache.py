"""The model cache shared by runs ($AREAL_CACHE_DIR, else ~/.cache/areal): the embedded model, built once per
architecture and seed, and warmed-up models (rl/warmup.py). Entries are keyed by content and appear whole;
runs started together on a cold cache (`bench/bench_staleness.py --parallel`) never pull one from under each
other."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from areal_core.files import atomic_directory
from areal_core.rl.config import ModelConfig

COMPLETE_MARKER = "model.safetensors"  # an entry holding it is whole (entries only ever appear whole)


def cache_dir() -> Path:
    return Path(os.environ.get("AREAL_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "areal")


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_digest(directory: Path) -> str:
    """A hash of a model directory's weights (its *.safetensors files)."""
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.safetensors")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_cache_entry(target: Path, build: Callable[[Path], Any]) -> Path:
    """`target`, built by `build(directory)` unless a whole entry is there already.

    Runs building the same entry at once (same key, same content) each build it; the first to finish puts its
    copy in place and the others drop theirs. An entry in place is never replaced: another run may be loading
    from it. One damaged from outside (no weights) is moved aside and deleted first."""
    if (target / COMPLETE_MARKER).exists():
        return target
    if target.exists() and not (target / COMPLETE_MARKER).exists():
        # Renamed aside before it is deleted, so that two runs finding it cannot delete the good entry one of
        # them has put in its place meanwhile.
        aside = target.with_name(f"{target.name}.damaged{os.getpid()}")
        try:
            os.replace(target, aside)
        except OSError:
            pass  # another run moved it first
        shutil.rmtree(aside, ignore_errors=True)
    with atomic_directory(target, durable=False, keep_existing=True) as tmp:
        build(tmp)
    return target


def resolve_model(config: ModelConfig) -> Path:
    """The model directory: the configured path, or the embedded model (created once, then cached)."""
    from areal_core.engine.model import check_model_dir

    if config.path != "embedded":
        return check_model_dir(config.path)
    from areal_core.engine.model import TINY_DEFAULTS, init_model

    settings = {"num_hidden_layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
                "intermediate_size": 3 * config.hidden_size}
    target = cache_dir() / "models" / f"embedded-{digest(TINY_DEFAULTS, settings, config.seed)}"
    return build_cache_entry(target, lambda directory: init_model(directory, seed=config.seed, **settings))
