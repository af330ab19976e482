"""Typed config: defaults, YAML, dotted overrides, clear errors, saved and reloaded unchanged."""
from dataclasses import dataclass, field

import pytest

from areal_core.config import load_config, save_config
from areal_core.errors import ConfigError


@dataclass
class OptimConfig:
    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])


@dataclass
class RunConfig:
    name: str = "demo"
    steps: int = 10
    eta: int | None = None
    sync: bool = False
    optim: OptimConfig = field(default_factory=OptimConfig)


def test_defaults_then_yaml_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 20\noptim: {lr: 0.001}\n")
    config = load_config(RunConfig, path, ["optim.lr=3e-4", "eta=4", "sync=true", "name=x"])
    assert config == RunConfig(name="x", steps=20, eta=4, sync=True, optim=OptimConfig(lr=3e-4))


@pytest.mark.parametrize("override, message", [
    ("optim.lrr=1", "optim.lrr: unknown key (expected one of: betas, lr)"),
    ("steps=many", "steps: expected int, got str 'many'"),
    ("sync=1", "sync: expected true or false"),
    ("optim=3", "optim: expected a mapping"),
    ("steps", "expected KEY=VALUE"),
])
def test_bad_override_names_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(RunConfig, None, [override])
    assert message in str(info.value)


def test_saved_config_reloads_to_the_same_value(tmp_path):
    config = load_config(RunConfig, None, ["eta=2", "optim.betas=[0.8, 0.9]"])
    saved = save_config(config, tmp_path / "run")
    assert load_config(RunConfig, saved) == config
