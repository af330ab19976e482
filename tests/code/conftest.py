"""Fixtures for the code plugin tests: the real Docker sandbox and the shared eval data."""
from __future__ import annotations

import gzip
import json

import pytest

from areal_sandbox.testing import docker_engine, sandbox_image  # noqa: F401 (fixtures)

@pytest.fixture(scope="session")
def code_options(sandbox_image):  # noqa: F811 (fixture imported above)
    """Reward options for the tests: the test image, two warm containers so two rows run at once."""
    return {"image": sandbox_image, "pool_size": 2}


@pytest.fixture(scope="session")
def humaneval(data_dir):
    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def mbpp(data_dir):
    return json.loads((data_dir / "mbpp" / "sanitized-mbpp.json").read_text())


@pytest.fixture(scope="session")
def leetcode(data_dir):
    return json.loads((data_dir / "leetcode_functional" / "test.json").read_text())


@pytest.fixture(scope="session")
def code_contests(data_dir):
    return [json.loads(line) for line in (data_dir / "code_contests_sample" / "test.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def codeforces(data_dir):
    return json.loads((data_dir / "codeforces_stdio" / "test.json").read_text())
