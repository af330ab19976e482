"""Helpers shared by the eval tests."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from areal_core.tasks import get_task


def write_replay(path: Path, task: str, limit: int, n: int, right: Callable[[int, int], bool],
                 with_task: bool = False) -> Path:
    """A replay file for an arithmetic task: for problem i and sample j the true answer when right(i, j),
    else a wrong one; ids are the real sample ids of the task."""
    rows = []
    for i, sample in enumerate(get_task(task).samples()[:limit]):
        for j in range(n):
            response = sample["reference"] if right(i, j) else sample["reference"] + "9"
            rows.append({**({"task": task} if with_task else {}), "id": sample["id"], "response": response})
    with open(path, "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def read_metrics(output_dir: Path, model: str, task: str) -> dict:
    return json.loads((output_dir / model / f"{task}.metrics.json").read_text())


def read_details(output_dir: Path, model: str, task: str) -> list[dict]:
    lines = (output_dir / model / f"{task}.samples.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def areal_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    """The installed `areal` script in a real process (for module-scoped fixtures, where the `areal`
    fixture cannot be used)."""
    import os
    import subprocess
    import sys

    return subprocess.run([str(Path(sys.executable).parent / "areal"), *args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)
