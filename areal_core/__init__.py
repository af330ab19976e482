"""areal-core: asynchronous reinforcement learning for LLM reasoning, with plugins for tasks and rewards.

Plugin authors need only::

    from areal_core import hookimpl, RewardResult
"""
from areal_core.hookspecs import hookimpl
from areal_core.types import RewardRequest, RewardResult, Trajectory

__version__ = "0.1.0"

__all__ = ["hookimpl", "RewardResult", "RewardRequest", "Trajectory", "__version__"]
