"""Run configuration: typed dataclasses (the single source of defaults), built from YAML and `key.sub=value`
overrides with errors that name the key (`schema.py`), printed back and saved with a run's outputs."""
from areal_core.config.overrides import (
    apply_overrides,
    config_to_yaml,
    load_config,
    parse_options,
    parse_override,
    read_yaml,
    save_config,
)
from areal_core.config.schema import build, convert, to_plain

__all__ = ["apply_overrides", "build", "config_to_yaml", "convert", "load_config", "parse_options", "parse_override",
           "read_yaml", "save_config", "to_plain"]
