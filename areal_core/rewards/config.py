"""Configuration of the reward service: one typed dataclass, the single source of its defaults."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from areal_core.errors import ArealError, ConfigError

DEFAULT_BROKER_URL = "redis://localhost:6379/0"
DEFAULT_QUEUE = "rewards"


class RewardServiceError(ArealError):
    """The reward service cannot run: its broker is unreachable, no worker serves a queue, or it is closed."""


@dataclass(frozen=True)
class RewardServiceConfig:
    """How rewards are executed.

    backend:         a registered reward backend: "local" (a process pool on this machine), "celery"
                     (workers started with `areal worker`, reached through a Celery broker), or one a
                     plugin adds (`areal plugins` lists them).
    options:         settings of a plugin backend (the built-in ones take none).
    timeout:         seconds one request may run; past it the request gets an error result. Enforced
                     by killing the process that runs it, on this machine or on the Celery worker.
    max_in_flight:   requests submitted but not finished; `submit` waits for room beyond this.
    concurrency:     reward name -> calls one worker process runs at once, over the `concurrency` an async
                     or io_bound reward declares (e.g. an API's rate limit); naming a plain reward runs
                     it in threads. On Celery workers: `areal worker --reward-concurrency NAME=N`.

    local backend
    workers:         reward worker processes.
    memory_limit_mb: address-space limit of each worker process (None: unlimited).

    celery backend
    broker_url:      any Celery broker URL (default: Redis on this machine).
    result_backend:  Celery result backend URL; None means the broker URL when it is Redis.
    queue:           queue for rewards not named in `routes`.
    routes:          reward name -> queue, e.g. {"code": "code"} for a queue that only machines with
                     Docker serve (`areal worker --queues code`).
    batch_size:      requests per Celery task: batching hides the per-task broker round trip.
    batch_wait:      seconds a partial batch waits for more requests before it is sent anyway.
    result_timeout:  seconds a batch may wait for a worker, on top of its own longest run time
                     (requests x timeout); past that its requests get an error result (e.g. no worker
                     is left to serve the queue) and a worker that finds it later drops it.
    connect_timeout: seconds to wait for the broker and result backend to answer.
    require_workers: at start, fail unless a worker serves every queue in use.
    max_batches_in_flight: Celery tasks sent and not yet answered (one waiting thread each).
    """

    backend: str = "local"
    options: dict[str, Any] = field(default_factory=dict)
    timeout: float = 30.0
    max_in_flight: int = 4096
    concurrency: dict[str, int] = field(default_factory=dict)
    workers: int = 2
    memory_limit_mb: int | None = None
    broker_url: str = DEFAULT_BROKER_URL
    result_backend: str | None = None
    queue: str = DEFAULT_QUEUE
    routes: dict[str, str] = field(default_factory=dict)
    batch_size: int = 32
    batch_wait: float = 0.02
    result_timeout: float = 900.0
    connect_timeout: float = 5.0
    require_workers: bool = True
    max_batches_in_flight: int = 64

    def __post_init__(self) -> None:
        from areal_core.plugins import check_backend

        try:
            check_backend("reward", self.backend)
        except ValueError as exc:
            raise ConfigError(f"reward service: {exc}") from None
        seconds = {"timeout": self.timeout, "result_timeout": self.result_timeout,
                   "connect_timeout": self.connect_timeout}
        for name, value in seconds.items():
            if not _is_number(value) or value <= 0:
                raise ConfigError(f"reward service {name}: expected a number of seconds > 0, got {value!r}")
        if not _is_number(self.batch_wait) or self.batch_wait < 0:
            raise ConfigError(f"reward service batch_wait: expected a number of seconds >= 0, got {self.batch_wait!r}")
        counts = {"max_in_flight": self.max_in_flight, "workers": self.workers, "batch_size": self.batch_size,
                  "max_batches_in_flight": self.max_batches_in_flight}
        for name, value in counts.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"reward service {name}: expected an integer >= 1, got {value!r}")
        if self.memory_limit_mb is not None and (not isinstance(self.memory_limit_mb, int) or self.memory_limit_mb < 1):
            raise ConfigError(f"reward service memory_limit_mb: expected an integer >= 1 or None, got {self.memory_limit_mb!r}")
        for name, url in (("broker_url", self.broker_url), ("result_backend", self.result_backend)):
            if url is not None and (not isinstance(url, str) or "://" not in url):
                raise ConfigError(f"reward service {name}: expected a URL like redis://host:6379/0, got {url!r}")
        if not isinstance(self.queue, str) or not self.queue:
            raise ConfigError(f"reward service queue: expected a non-empty queue name, got {self.queue!r}")
        for reward, limit in self.concurrency.items():
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ConfigError(f"reward service concurrency.{reward}: expected an integer >= 1, got {limit!r}")
        for reward, queue in self.routes.items():
            if not isinstance(queue, str) or not queue:
                raise ConfigError(f"reward service routes.{reward}: expected a non-empty queue name, got {queue!r}")

    def queue_for(self, reward: str) -> str:
        return self.routes.get(reward, self.queue)

    def queues(self) -> list[str]:
        """Every queue this configuration can send to."""
        return sorted({self.queue, *self.routes.values()})

    def resolved_result_backend(self) -> str:
        """The result backend URL: as configured, else the broker URL when the broker is Redis."""
        if self.result_backend:
            return self.result_backend
        return default_result_backend(self.broker_url)


def parse_concurrency(pairs: tuple[str, ...] | list[str]) -> dict[str, int]:
    """NAME=N pairs (the command line's --reward-concurrency) -> {name: N}; a ConfigError names a bad pair."""
    limits = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"--reward-concurrency {pair!r}: expected NAME=N with N an integer >= 1, e.g. judge=32")
        limits[name.strip()] = int(value)
    return limits


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def default_result_backend(broker_url: str) -> str:
    scheme = urlsplit(broker_url).scheme
    if scheme in ("redis", "rediss"):
        return broker_url
    raise ConfigError(
        f"reward service broker {safe_url(broker_url)}: a non-Redis broker needs a result backend; "
        "set result_backend (e.g. redis://host:6379/1)"
    )


def safe_url(url: str) -> str:
    """The URL with any password masked, for messages."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url
