"""Fixtures for the eval tests: a tiny model, real task samples, headless Chromium, the Docker sandbox."""
from __future__ import annotations

from pathlib import Path

import pytest

from areal_sandbox.testing import docker_engine, sandbox_image  # noqa: F401 (fixtures)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The embedded architecture at its smallest; untrained, so its answers are noise, but seeded
    noise: the same weights, settings and seeds must give the same samples whichever way they are run."""
    from areal_core.engine.model import init_model

    return init_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, num_hidden_layers=2, hidden_size=96,
                      intermediate_size=288)


@pytest.fixture
def eval_env(data_dir, tmp_path) -> dict[str, str]:
    """Environment of an `areal` process: the shared data, a results store of this test only."""
    return {"AREAL_DATA_DIR": str(data_dir), "AREAL_EVAL_DB": str(tmp_path / "evals.sqlite")}


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium driven by Selenium. Missing Chromium is a failure, not a skip: CI installs it
    (`.ci/run`), and a page nobody renders is a page nobody tested."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: install Debian's chromium and chromium-driver "
                    "(apt-get install chromium chromium-driver; .ci/run does)")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1400"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()
