"""The reward service: the one way rewards are executed (training, evals, `areal score`).

An async API over interchangeable backends, chosen by name in the config:

- ``local`` (default): a process pool on this machine with a hard timeout per request and
  replacement of worker processes that die (areal_core.reward_pool).
- ``celery``: Celery workers (`areal worker`) on any number of machines, reached through a broker
  (Redis by default, any Celery broker URL accepted), with requests sent in batches.

Both return the same RewardResults for the same requests::

    from areal_core.reward_service import RewardService, RewardServiceConfig

    async with RewardService(RewardServiceConfig(backend="celery", broker_url="redis://host:6379/0")) as service:
        results = await service.score(requests)
"""
from areal_core.reward_service.config import RewardServiceConfig, RewardServiceError
from areal_core.reward_service.service import RewardBackend, RewardService, make_backend

__all__ = ["RewardBackend", "RewardService", "RewardServiceConfig", "RewardServiceError", "make_backend"]
