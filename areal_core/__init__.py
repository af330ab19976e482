"""areal-core: asynchronous reinforcement learning for LLM reasoning, with plugins for tasks and rewards.

Plugin authors need only::

    from areal_core import hookimpl, RewardResult
"""
__version__ = "0.1.0"  # first: the plugin manager, imported below, reports it for the default plugins

from areal_core.plugins.hookspecs import hookimpl  # noqa: E402
from areal_core.types import RewardRequest, RewardResult, Trajectory  # noqa: E402

__all__ = ["hookimpl", "RewardResult", "RewardRequest", "Trajectory", "__version__"]
