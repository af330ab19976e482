"""Fixtures for the areal-logic tests: the plugin loaded alone, and the real Logic-RL K&K test sets."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from areal_core.plugins import reset_plugin_manager

KK_SIZES = (3, 4, 5, 6, 7)


@pytest.fixture(scope="session")
def kk_samples(data_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """The 500 Logic-RL puzzles as samples of the registered tasks knights_knaves_{3..7}ppl."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AREAL_PLUGINS", "logic")
        reset_plugin_manager()
        try:
            from areal_core.tasks import get_task

            samples = {n: get_task(f"knights_knaves_{n}ppl", data_dir).samples() for n in KK_SIZES}
        finally:
            reset_plugin_manager()
    return samples


@pytest.fixture
def logic_only(monkeypatch):
    """Only the logic plugin is loaded, in this process and in the processes it starts."""
    monkeypatch.setenv("AREAL_PLUGINS", "logic")
    reset_plugin_manager()
    yield
    reset_plugin_manager()

