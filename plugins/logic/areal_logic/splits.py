"""Train / held-out splits of generated puzzles that never overlap.

Each generator hashes a canonical key of a puzzle (before the costly part of making it, where it can) and
keeps the puzzle only when the hash falls on its split's side of `heldout_fraction`. The same puzzle
therefore always lands in the same split, whatever the seed.
"""
from __future__ import annotations

import hashlib

from areal_core.errors import ConfigError


def in_heldout(key: str, heldout_fraction: float) -> bool:
    """A stable hash splits puzzles into train and held-out test, so the two never overlap."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < heldout_fraction


def check_split(family: str, split: str, heldout_fraction: float) -> None:
    if split not in ("train", "test"):
        raise ConfigError(f"generator {family!r}: split must be 'train' or 'test', got {split!r}")
    if not isinstance(heldout_fraction, (int, float)) or not 0.0 < heldout_fraction < 1.0:
        raise ConfigError(f"generator {family!r}: heldout_fraction must be between 0 and 1 (exclusive), "
                          f"got {heldout_fraction!r}")
