"""Pytest fixtures for tests that need the real Docker sandbox (import them into a conftest.py).

`docker_engine` reaches the engine, starting it with sandbox/scripts/start-docker.sh when this
process may (root, script present); it skips the test, with the reason, only when Docker truly
cannot run here. `sandbox_image` builds the runner image when it is missing or outdated.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

START_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "start-docker.sh"
TEST_IMAGE = os.environ.get("AREAL_SANDBOX_IMAGE", "areal-sandbox:latest")


def _reach_engine():
    from areal_sandbox.docker_backend import docker_client
    from areal_sandbox.errors import DockerUnavailableError

    try:
        return docker_client(), ""
    except DockerUnavailableError as exc:
        first_error = str(exc)
    if os.geteuid() == 0 and START_SCRIPT.exists() and not os.environ.get("DOCKER_HOST"):
        run = subprocess.run(["bash", str(START_SCRIPT)], capture_output=True, text=True, timeout=600)
        try:
            return docker_client(), ""
        except DockerUnavailableError as exc:
            return None, f"{exc}; start-docker.sh said: {(run.stdout + run.stderr).strip()[-500:]}"
    return None, first_error


@pytest.fixture(scope="session")
def docker_engine():
    client, reason = _reach_engine()
    if client is None:
        pytest.skip(f"Docker cannot run here: {reason}")
    return client


@pytest.fixture(scope="session")
def sandbox_image(docker_engine) -> str:
    from areal_sandbox.docker_backend import check_image
    from areal_sandbox.errors import ImageMissingError
    from areal_sandbox.image import build_image_offline

    try:
        check_image(docker_engine, TEST_IMAGE)
    except ImageMissingError:
        build_image_offline(docker_engine, TEST_IMAGE)
        check_image(docker_engine, TEST_IMAGE)
    return TEST_IMAGE


def sandbox_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every process on this machine running as the sandbox user."""
    from areal_sandbox.image import SANDBOX_UID

    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != SANDBOX_UID:
                continue
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append((int(name), cmdline.strip()))
    return found
