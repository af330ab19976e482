"""Shared fixtures: the real data sets, the installed `areal` CLI, hermetic plugin selection."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """The real public eval sets: $AREAL_DATA_DIR, else ../shared/data beside the checkout."""
    env = os.environ.get("AREAL_DATA_DIR")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if not (path / "README.md").exists():
        pytest.skip(f"the shared eval data is not at {path}; set AREAL_DATA_DIR")
    return path


def run_areal(*args: str, env: dict[str, str] | None = None, cwd: str | Path | None = None,
              timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed `areal` console script as a user would (a real process)."""
    full_env = {**os.environ, **(env or {})}
    areal = Path(sys.executable).parent / "areal"
    return subprocess.run([str(areal), *args], env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, input=input)


@pytest.fixture
def areal():
    return run_areal
