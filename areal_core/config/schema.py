"""Typed dataclasses from plain dicts (YAML, JSON, command-line overrides), with errors that name the key.

One small converter serves the run config and task specs alike, so a wrong value anywhere reads the same:
``dataset.size: expected int, got 'ten'``.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Mapping, TypeVar, Union

from areal_core.errors import ConfigError

T = TypeVar("T")


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def convert(tp: Any, value: Any, key: str) -> Any:
    """Check `value` against the annotation `tp` and convert it (dicts to dataclasses, lists to tuples)."""
    origin = typing.get_origin(tp)
    where = key or "<root>"
    if tp is Any or tp is object:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        real = [o for o in options if o is not type(None)]
        if len(real) == 1:  # Optional[X]: X's own message is the clearest
            return convert(real[0], value, key)
        if isinstance(value, Mapping):  # a mapping can only be meant as the one structured option
            structured = [o for o in real if dataclasses.is_dataclass(o) or typing.get_origin(o) is dict or o is dict]
            if len(structured) == 1:
                return convert(structured[0], value, key)
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return convert(option, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin in (list, tuple) or tp in (list, tuple):
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_describe(value)}")
        item_tp = args[0] if args else Any
        items = [convert(item_tp, item, f"{key}[{i}]") for i, item in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin is dict or tp is dict:
        args = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {_describe(value)}")
        key_tp, val_tp = args if args else (Any, Any)
        out = {}
        for k, v in value.items():
            if key_tp is str and not isinstance(k, str):
                raise ConfigError(f"{where}: keys must be strings, got {_describe(k)}")
            out[k] = convert(val_tp, v, f"{key}.{k}" if key else str(k))
        return out
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {_describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected int, got {_describe(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {_describe(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_describe(value)}")
        return value
    if isinstance(tp, type):
        if not isinstance(value, tp):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {_describe(value)}")
        return value
    raise TypeError(f"schema: unsupported annotation {tp!r} at {where}")


def build(cls: type[T], data: Any, key: str = "") -> T:
    """Build dataclass `cls` from a mapping; unknown or missing keys and wrong types are ConfigErrors.

    After construction, a ``validate(self)`` method on the dataclass (if any) may raise ValueError
    for cross-field rules; its message is reported under this key.
    """
    where = key or "<root>"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {_describe(data)}")
    upgrade = getattr(cls, "upgrade_keys", None)
    if callable(upgrade):  # keys an earlier version wrote (a saved config.yaml being resumed), in today's terms
        data = upgrade(dict(data))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for name in data:
        if name not in fields:
            prefix = f"{key}." if key else ""
            raise ConfigError(
                f"{prefix}{name}: unknown key (expected one of: {', '.join(sorted(fields))})"
            )
    kwargs = {}
    for name, f in fields.items():
        sub_key = f"{key}.{name}" if key else name
        if name in data:
            kwargs[name] = convert(hints[name], data[name], sub_key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{sub_key}: missing required key")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return obj


def to_plain(obj: Any) -> Any:
    """Dataclasses/tuples to dicts/lists, for YAML and JSON."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
