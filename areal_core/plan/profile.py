"""Cost profiles: what one generation server, the trainer and the reward workers of a cluster cost, as YAML.

    name: qwen2.5-1.5b-h100            # what the numbers describe
    generation:                        # one server (GenerationCosts, plan/engine.py), on gpus_per_server GPUs
      gpus_per_server: 1
      step_s: 0.012
      sequence_s: 2.0e-5
      context_token_s: 1.0e-9
      prefill_token_s: 2.0e-5
      kv_tokens: 1000000
      max_running: 512
      weight_load_s: 2.0
    training:                          # the trainer on reference_gpus GPUs (TrainingCosts, plan/trainer.py)
      reference_gpus: 8
      proximal_token_s: 1.0e-6
      update_token_s: 3.0e-6
      optimizer_step_s: 0.5
      publish_s: 5.0
    rewards: {mean_s: 0.05, p99_s: 0.5, workers: 64, correct_rate: 0.5}
    shared:                            # only when generation and training share their hardware (one CPU machine)
      generation_slowdown: 1.6         # a decode step's cost multiplied while the trainer works
      training_slowdown: 1.3           # the trainer's, while generation runs (SharedCosts, plan/colocation.py)
      request_slowdown: 2.0            # a request's work on the rollout path (request_s) while the trainer works
                                       # (default: generation_slowdown)
    sources:                           # where each number comes from: a measurement, a paper, a benchmark
      generation.step_s: "measured by areal plan profile on ..."

A trainer on G GPUs takes reference_gpus / G times the profile's per-token seconds (linear data-parallel
scaling, an assumption the planner lists); a cluster of G generation GPUs runs G / gpus_per_server servers. A
profile with `shared` describes generation and training on the same hardware (as `areal plan profile` measures
one machine): its simulations slow each by the other while both work, whatever the split.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from areal_core.errors import ConfigError
from areal_core.plan.colocation import SharedCosts
from areal_core.plan.engine import GenerationCosts
from areal_core.plan.simulate import ClusterCosts
from areal_core.plan.trainer import RewardCosts, TrainingCosts


@dataclass(frozen=True)
class Profile:
    name: str
    generation: GenerationCosts
    training: TrainingCosts
    rewards: RewardCosts = field(default_factory=RewardCosts)
    gpus_per_server: int = 1
    reference_gpus: int = 1
    sources: dict[str, str] = field(default_factory=dict)
    shared: SharedCosts | None = None

    def cluster(self, generation_gpus: int, training_gpus: int) -> ClusterCosts:
        """The costs of a cluster with these GPUs for generation and for training."""
        servers, rest = divmod(generation_gpus, self.gpus_per_server)
        if servers < 1 or rest:
            raise ConfigError(f"{generation_gpus} generation GPUs do not make whole servers of {self.gpus_per_server}")
        if training_gpus < 1:
            raise ConfigError(f"the trainer needs at least one GPU, got {training_gpus}")
        scale = self.reference_gpus / training_gpus
        # a pass's own cost (per micro-batch) stays: each rank runs its share of the passes (SimulatedTrainer.ranks)
        training = dataclasses.replace(self.training, proximal_token_s=self.training.proximal_token_s * scale,
                                       update_token_s=self.training.update_token_s * scale)
        return ClusterCosts(self.generation, training, self.rewards, servers, self.shared, trainer_ranks=training_gpus)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name,
                "generation": {"gpus_per_server": self.gpus_per_server, **dataclasses.asdict(self.generation)},
                "training": {"reference_gpus": self.reference_gpus, **dataclasses.asdict(self.training)},
                "rewards": dataclasses.asdict(self.rewards),
                **({"shared": dataclasses.asdict(self.shared)} if self.shared is not None else {}),
                "sources": dict(self.sources)}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
        return path


def _part(data: dict[str, Any], key: str, cls: type, extra: tuple[str, ...], where: str) -> tuple[Any, dict]:
    section = data.get(key)
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: {key} must be a mapping of costs, got {section!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(section) - known - set(extra))
    if unknown:
        raise ConfigError(f"{where}: unknown {key} cost {unknown[0]!r} (known: {', '.join(sorted(known | set(extra)))})")
    try:
        return cls(**{k: v for k, v in section.items() if k in known}), {k: section[k] for k in extra if k in section}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {key}: {exc}") from None


def load_profile(path: str | Path) -> Profile:
    """A profile from YAML; a missing section, an unknown or bad cost is an error naming it and the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no profile at {path}")
    data = yaml.safe_load(path.read_text())
    where = f"profile {path}"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with generation and training costs")
    unknown = sorted(set(data) - {"name", "generation", "training", "rewards", "shared", "sources"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: generation, name, rewards, shared, sources, "
                          "training)")
    generation, per_server = _part(data, "generation", GenerationCosts, ("gpus_per_server",), where)
    training, reference = _part(data, "training", TrainingCosts, ("reference_gpus",), where)
    rewards = _part(data, "rewards", RewardCosts, (), where)[0] if "rewards" in data else RewardCosts()
    shared = _part(data, "shared", SharedCosts, (), where)[0] if data.get("shared") is not None else None
    counts = {"gpus_per_server": per_server.get("gpus_per_server", 1), "reference_gpus": reference.get("reference_gpus", 1)}
    for key, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{where}: {key} must be a whole number >= 1, got {value!r}")
    sources = data.get("sources") or {}
    if not isinstance(sources, dict):
        raise ConfigError(f"{where}: sources must map a cost (generation.step_s) to where it comes from")
    return Profile(str(data.get("name", path.stem)), generation, training, rewards,
                   sources={str(k): str(v) for k, v in sources.items()}, shared=shared, **counts)
