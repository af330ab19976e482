"""Errors of the sandbox: each one sentence saying what is wrong and the command that fixes it."""
from areal_core.errors import ArealError


class SandboxError(ArealError):
    """The sandbox cannot run code (as opposed to the code failing its tests)."""


class DockerUnavailableError(SandboxError):
    """The Docker engine cannot be reached."""


class ImageMissingError(SandboxError):
    """The runner image is not built, or was built from another version of the harness."""


class ImageBuildError(SandboxError):
    """Building the runner image failed."""
