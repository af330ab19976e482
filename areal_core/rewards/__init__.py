"""Rewards: the contract a reward function keeps, the registry of rewards, the killable process pool that
runs them with hard timeouts, the async reward service over interchangeable backends (a local pool, Celery
workers, or a plugin's), and `areal score` (a file of responses scored through the service).

    from areal_core.rewards import RewardService, RewardServiceConfig

    async with RewardService(RewardServiceConfig(backend="celery", broker_url="redis://host:6379/0")) as service:
        results = await service.score(requests)

    with RewardPool(workers=2, timeout=10) as pool:       # the pool alone, synchronous (plugins use it)
        results = pool.score(requests)
"""
from areal_core.rewards.config import RewardServiceConfig, RewardServiceError
from areal_core.rewards.contract import RewardFn, RewardSpec, call_reward, check_sample
from areal_core.rewards.pool import RewardPool, RewardPoolError
from areal_core.rewards.registry import reward_registry
from areal_core.rewards.service import RewardBackend, RewardService, make_backend

__all__ = ["RewardBackend", "RewardFn", "RewardPool", "RewardPoolError", "RewardService", "RewardServiceConfig",
           "RewardServiceError", "RewardSpec", "call_reward", "check_sample", "make_backend", "reward_registry"]
