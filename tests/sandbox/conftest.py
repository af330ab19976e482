"""Fixtures for the sandbox tests: the real Docker engine, the runner image, a warm pool."""
from __future__ import annotations

import pytest

from areal_sandbox import SandboxConfig, open_sandbox
from areal_sandbox.testing import docker_engine, sandbox_image  # noqa: F401 (fixtures)

# Tight limits keep the hostile programs quick to judge.
HOSTILE_LIMITS = dict(pool_size=1, timeout_s=2.0, total_timeout_s=8.0, wall_factor=1.5, memory_mb=256, output_bytes=64 * 1024,
                      pids_limit=32, workdir_mb=8, tmp_mb=8, shm_mb=4)


@pytest.fixture(scope="module")
def pool(docker_engine, sandbox_image):  # noqa: F811 (fixtures imported above)
    config = SandboxConfig(image=sandbox_image, **HOSTILE_LIMITS)
    with open_sandbox(config, client=docker_engine, prewarm=True) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def spin_pool(docker_engine, sandbox_image):  # noqa: F811
    # A wide wall-clock allowance, so that the CPU-time limit is what stops a spinning program even
    # when the test's neighbours leave it a fraction of a core (the 1.5x of `pool` needs two thirds).
    config = SandboxConfig(image=sandbox_image, **{**HOSTILE_LIMITS, "wall_factor": 10.0})
    with open_sandbox(config, client=docker_engine, prewarm=True) as sandbox:
        yield sandbox
