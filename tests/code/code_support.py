"""Helpers of the code plugin tests (a module of its own: every test directory has a conftest.py)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SOLUTIONS = Path(__file__).parent / "solutions"


def score_all(rows, options, workers: int = 2):
    """Score (sample, response) pairs with the `code` reward, `workers` at a time, in order."""
    from areal_code import code_reward

    with ThreadPoolExecutor(workers) as executor:
        return list(executor.map(lambda pair: code_reward(pair[0], pair[1], **options), rows))
