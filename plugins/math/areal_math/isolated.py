"""Verification with a hard timeout: each call runs in a killable worker process.

A signal alarm cannot interrupt SymPy inside a thread (and not at all inside C code), so `verify`
alone cannot promise to return in time. `MathVerifier` sends each verification to worker processes of
areal-core's reward pool (`areal_core.rewards.RewardPool`), which kills a worker (and its process group)
when a call passes its deadline and starts a fresh one; the call then gets a result with ``error`` set. Workers find the `math` reward
through the plugin registry, so the `math` plugin must be allowed by ``AREAL_PLUGINS`` when it is set.

    with MathVerifier(timeout=5) as verifier:
        result = verifier.verify("\\frac{1}{2}", "\\boxed{0.5}")
"""
from __future__ import annotations

from typing import Any, Iterable

from areal_core.rewards import RewardPool
from areal_core.types import RewardRequest, RewardResult


class MathVerifier:
    """The `math` reward in `workers` killable processes, `timeout` seconds per verification."""

    def __init__(self, timeout: float = 10.0, workers: int = 1, **options: Any) -> None:
        from areal_math import check_options

        check_options(options)  # fail here, in the caller, not once per request in a worker
        self.timeout = timeout
        self.options = dict(options)
        self._pool = RewardPool(workers=workers, timeout=timeout)
        self._started = False

    def __enter__(self) -> "MathVerifier":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        if not self._started:
            self._pool.start()
            self._started = True

    def close(self) -> None:
        if self._started:
            self._pool.close()
            self._started = False

    @property
    def restarts(self) -> int:
        """How many workers were killed and replaced (timeouts, crashes)."""
        return self._pool.restarts

    def verify_many(self, pairs: Iterable[tuple[Any, str]]) -> list[RewardResult]:
        """Verify (reference, response) pairs; results in order, one per pair, each within the timeout."""
        self.start()
        requests = [
            RewardRequest(reward="math", sample={"reference": reference}, response=response,
                          options=self.options, request_id=str(i))
            for i, (reference, response) in enumerate(pairs)
        ]
        return self._pool.score(requests)

    def verify(self, reference: Any, response: str) -> RewardResult:
        return self.verify_many([(reference, response)])[0]
