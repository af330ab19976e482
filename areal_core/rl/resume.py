"""Run checkpoints: what `areal train --resume RUN_DIR` needs to continue a killed run.

    RUN_DIR/checkpoints/step000040/
        trainer/      the trainer checkpoint (weights as an HF model dir, optimizer, scheduler, RNG, version;
                      see checkpoint.py); generation servers restart from these weights
        run.json      the loop's state: step, training clock, trajectory count, and the rollout controller's
                      state (data position, finished groups not yet trained on, prompts still generating)

A step directory is written beside its final name and renamed into place, so one that exists is
complete; run.json carries a checksum of its content and the trainer manifest one per file, so a
checkpoint damaged afterwards is detected and the previous one is used.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Callable

from areal_core.files import atomic_directory, atomic_write
from areal_core.rl.checkpoint import CheckpointError, verify_checkpoint

RUN_STATE = "run.json"


def _digest(state: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def save_run_checkpoint(run_dir: Path, step: int, trainer: Any, state: dict[str, Any], keep: int = 2) -> Path:
    """Write checkpoint `step` (trainer + loop state) atomically; keep only the newest `keep`."""
    root = run_dir / "checkpoints"
    target = root / f"step{step:06d}"
    with atomic_directory(target) as tmp:
        trainer.save_checkpoint(tmp / "trainer")
        (tmp / RUN_STATE).write_text(json.dumps({"sha256": _digest(state), "state": state}))
    complete = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step"))
    for old in complete[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return target


def read_run_state(checkpoint: Path) -> dict[str, Any]:
    """The loop state of a checkpoint, after checking it and the trainer files; CheckpointError if damaged."""
    try:
        payload = json.loads((checkpoint / RUN_STATE).read_text())
        state = payload["state"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{checkpoint / RUN_STATE}: unreadable run state ({exc})") from None
    if payload.get("sha256") != _digest(state):
        raise CheckpointError(f"{checkpoint / RUN_STATE}: checksum mismatch (the file was damaged)")
    verify_checkpoint(checkpoint / "trainer")
    return state


def latest_checkpoint(run_dir: Path, warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint of a run (damaged ones are reported and skipped), or None."""
    root = run_dir / "checkpoints"
    candidates = sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("step")), reverse=True) \
        if root.is_dir() else []
    for checkpoint in candidates:
        try:
            return checkpoint, read_run_state(checkpoint)
        except CheckpointError as exc:
            warn(f"warning: skipping damaged checkpoint {checkpoint.name}: {exc}")
    return None


def truncate_log(path: Path, last_step: int) -> list[dict[str, Any]]:
    """Keep the records of steps <= last_step (a killed run may have logged steps after its last
    checkpoint, which the resumed run does again) and drop a torn last line; rewrite atomically. What is
    dropped is appended to `<name>.superseded` beside it, not lost."""
    if not path.exists():
        return []
    kept, superseded = [], []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            superseded.append(line)  # the line the kill cut short
            continue
        if record.get("step", 0) <= last_step:
            kept.append(record)
        else:
            superseded.append(line)
    if superseded:
        with open(path.with_name(path.name + ".superseded"), "a") as out:
            out.write("".join(line + "\n" for line in superseded))
    atomic_write(path, [json.dumps(r) + "\n" for r in kept])
    return kept


def supersede_redone_evals(db: str, run_dir: Path, step: int, echo: Callable[[str], None]) -> None:
    """A resumed run evaluates the steps after its checkpoint again: their old records leave the leaderboard."""
    from areal_core.eval.store import ResultsStore

    with ResultsStore(db) as store:
        count = store.supersede_training_evals(str(run_dir), step)
    if count:
        echo(f"results store: {count} eval record(s) of steps after {step} marked superseded (they are redone)")
