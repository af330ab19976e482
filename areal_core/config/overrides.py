"""Loading a run configuration: defaults, then a YAML file, then `key.sub=value` overrides.

The dataclass defaults are the single source of truth. The resolved config is printed at the start of
a run and saved beside its outputs (`config.yaml`), so every result can be reproduced.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml

from areal_core.errors import ConfigError
from areal_core.config.schema import build, to_plain
from areal_core.files import atomic_write

T = TypeVar("T")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=1` -> (['a', 'b'], 1). The value is read as YAML, so `x=true`, `x=[1,2]`, `x=null` work;
    anything that is not valid YAML stays a string."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. trainer.lr=1e-4")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: the key must be dotted names like trainer.lr")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    # PyYAML reads `1e-4` as a string (YAML 1.1 wants `1.0e-4`); a number is what people mean.
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        value = float(value)
    return key.split("."), value


def parse_options(texts: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` command-line options (e.g. `--reward-option image=x:y`) as a flat mapping, values read as YAML."""
    parsed: dict[str, Any] = {}
    for text in texts:
        path, value = parse_override(text)
        parsed[".".join(path)] = value
    return parsed


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    data = dict(data)
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(path[: i + 1])} is not a section")
            node[part] = child = dict(child)
            node = child
        node[path[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Defaults of `cls`, then the YAML file at `path`, then the dotted overrides."""
    data = read_yaml(path) if path else {}
    data = apply_overrides(data, overrides)
    try:
        return build(cls, data)
    except ConfigError as exc:
        source = f"{path} + overrides" if path and overrides else (str(path) if path else "overrides")
        raise ConfigError(f"config ({source}): {exc}") from None


def config_to_yaml(config: Any) -> str:
    return yaml.safe_dump(to_plain(config), sort_keys=False, default_flow_style=False)


def save_config(config: Any, run_dir: str | Path) -> Path:
    return atomic_write(Path(run_dir) / "config.yaml", config_to_yaml(config))
