"""areal-sandbox: run untrusted programs against tests in a local Docker sandbox.

    from areal_sandbox import Execution, SandboxConfig, open_sandbox

    with open_sandbox(SandboxConfig(pool_size=2)) as sandbox:
        result = sandbox.run(Execution(mode="function", program="def f(x):\\n    return x + 1\\n",
                                       tests=("assert f(1) == 2",)))
        result.passed, [t.verdict for t in result.tests]

Build the runner image first with `areal sandbox build-image` (offline; no registry needed).
"""
from areal_sandbox.docker_backend import (
    DockerPoolSandbox,
    DockerRunSandbox,
    docker_client,
    open_sandbox,
    shared_sandbox,
)
from areal_sandbox.errors import DockerUnavailableError, ImageBuildError, ImageMissingError, SandboxError
from areal_sandbox.types import VERDICTS, Execution, ExecutionResult, Sandbox, SandboxConfig, TestVerdict

__version__ = "0.1.0"

__all__ = [
    "DockerPoolSandbox", "DockerRunSandbox", "DockerUnavailableError", "Execution", "ExecutionResult",
    "ImageBuildError", "ImageMissingError", "Sandbox", "SandboxConfig", "SandboxError", "TestVerdict", "VERDICTS",
    "docker_client", "open_sandbox", "shared_sandbox", "__version__",
]
