import socket

import pytest

from areal_core.engine.model import init_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny model `areal init-model` makes with its defaults."""
    return init_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny_model_v1(tmp_path_factory):
    """Same architecture, other weights: what a trainer would publish as version 1."""
    return init_model(tmp_path_factory.mktemp("tiny-v1") / "model", seed=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
