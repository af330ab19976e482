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


@pytest.fixture(scope="session", autouse=True)
def private_eval_store(tmp_path_factory):
    """`areal train` and `areal eval` record results in the user's store by default: tests (and the
    processes they start) use a throw-away one instead."""
    previous = os.environ.get("AREAL_EVAL_DB")
    os.environ["AREAL_EVAL_DB"] = str(tmp_path_factory.mktemp("eval-store") / "evals.sqlite")
    yield
    if previous is None:
        os.environ.pop("AREAL_EVAL_DB", None)
    else:
        os.environ["AREAL_EVAL_DB"] = previous


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


FIXTURE_PLUGINS = REPO / "tests" / "fixtures" / "plugins"


@pytest.fixture(scope="session")
def plugin_dirs(tmp_path_factory) -> dict[str, Path]:
    """Each test plugin under tests/fixtures/plugins, pip-installed into its own target directory.

    A test puts the directories it wants on PYTHONPATH, so plugins are installed for that test's processes
    only (a real `pip install` of a real distribution with an `areal` entry point, nothing faked).
    """
    dirs = {}
    for source in sorted(FIXTURE_PLUGINS.iterdir()):
        target = tmp_path_factory.mktemp(f"site-{source.name}")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
             "--no-index", "--target", str(target), str(source)],
            check=True, capture_output=True, text=True,
        )
        dirs[source.name] = target
    return dirs


@pytest.fixture
def with_plugins(plugin_dirs):
    """with_plugins("testkit", "dupe") -> environment for a subprocess that sees those test plugins."""

    def env(*names: str, **extra: str) -> dict[str, str]:
        paths = [str(plugin_dirs[name]) for name in names]
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        return {"PYTHONPATH": os.pathsep.join(paths), **extra}

    return env


@pytest.fixture
def testkit_in_process(plugin_dirs, monkeypatch):
    """Load the testkit plugin in this process (spawned reward workers inherit sys.path)."""
    from areal_core.plugins import reset_plugin_manager

    monkeypatch.syspath_prepend(str(plugin_dirs["testkit"]))
    monkeypatch.setenv("AREAL_PLUGINS", "testkit,arithmetic")
    reset_plugin_manager()
    yield
    reset_plugin_manager()
