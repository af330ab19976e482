"""Helpers of the sandbox tests (a module of its own: every test directory has a conftest.py)."""
from __future__ import annotations

import time

from areal_sandbox.docker_backend import list_containers
from areal_sandbox.testing import sandbox_processes


def settle(pool, timeout: float = 30.0) -> list[str]:
    """Wait until the pool has all its containers idle again (a replaced one restarts in the
    background); returns their ids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = pool.container_ids()
        if len(ids) == pool.config.pool_size:
            return ids
        time.sleep(0.05)
    raise AssertionError(f"the pool did not get back to {pool.config.pool_size} idle containers")


def assert_host_clean(pool, client) -> None:
    """No program process survives anywhere on this machine, and the pool owns exactly its warm
    containers (nothing leaked)."""
    ids = settle(pool)
    leftovers = [(pid, cmd) for pid, cmd in sandbox_processes() if "supervisor.py" not in cmd]
    assert leftovers == [], f"processes of the sandbox user survived: {leftovers}"
    owned = sorted(c.id for c in list_containers(client, pool.pool_id))
    assert owned == sorted(ids)
