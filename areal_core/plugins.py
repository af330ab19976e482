"""The plugin manager: finds plugins through the `areal` entry-point group and builds the registries.

Built-in plugins ship as ordinary distributions with an `areal` entry point, so they load through
exactly the same path as third-party ones. Set ``AREAL_PLUGINS`` to a comma-separated list of entry
point names to load only those (``AREAL_PLUGINS=`` loads none); tests use it to stay hermetic.

A plugin that fails to import, or whose hooks are malformed, is recorded with its name and the cause
and skipped: the CLI and every other plugin keep working.
"""
from __future__ import annotations

import importlib.metadata
import os
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar

import pluggy

from areal_core import hookspecs
from areal_core.errors import DuplicateNameError, PluginError, UnknownNameError

ENTRY_POINT_GROUP = "areal"
PLUGINS_ENV = "AREAL_PLUGINS"


@dataclass
class PluginInfo:
    """What `areal plugins` shows about one installed plugin."""

    name: str
    distribution: str | None
    version: str | None
    module: str
    hooks: list[str] = field(default_factory=list)
    error: str | None = None


def _short_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class PluginManager:
    """pluggy's manager plus a record of what loaded, what failed, and why."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("areal")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.problems: list[str] = []

    def load_entry_points(self, only: set[str] | None = None) -> None:
        """Import and register every `areal` entry point (or only those named in `only`)."""
        entry_points = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        found = {ep.name for ep in entry_points}
        if only is not None:
            for missing in sorted(only - found):
                self.problems.append(f"{PLUGINS_ENV} names plugin {missing!r}, but no such plugin is installed")
        for ep in entry_points:
            if only is not None and ep.name not in only:
                continue
            dist = getattr(ep, "dist", None)
            info = PluginInfo(
                name=ep.name,
                distribution=dist.name if dist else None,
                version=dist.version if dist else None,
                module=ep.value,
            )
            if ep.name in self.plugins:
                info.error = (
                    f"entry point name {ep.name!r} is also used by distribution "
                    f"{self.plugins[ep.name].distribution!r}; rename one of them"
                )
                self.plugins[f"{ep.name} ({info.distribution})"] = info
                continue
            self.plugins[ep.name] = info
            try:
                module = ep.load()
            except BaseException as exc:  # a plugin may raise anything at import, even SystemExit
                info.error = f"failed to import {ep.value!r}: {_short_error(exc)}"
                continue
            self.register(module, ep.name, info)

    def register(self, plugin: Any, name: str, info: PluginInfo | None = None) -> None:
        """Register one plugin object; on a malformed hook, record the cause and leave it out."""
        info = info or self.plugins.setdefault(
            name, PluginInfo(name=name, distribution=None, version=None, module=repr(plugin))
        )
        try:
            self.pm.register(plugin, name=name)
            # Unknown hook names (typos such as `register_reward`) only show up here.
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            info.error = f"invalid hook: {_short_error(exc)}"
            return
        info.hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])

    def call_each(self, hook_name: str, **kwargs_for: Callable[[str], Any]) -> None:
        """Call a registration hook plugin by plugin, so every registration knows its plugin.

        ``kwargs_for`` maps each hook argument to a factory taking the plugin name (e.g. a
        ``register`` bound to that plugin). A hook that raises is recorded on its plugin and skipped;
        a DuplicateNameError is a configuration problem the user must fix, so it propagates.
        """
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            kwargs = {key: factory(impl.plugin_name) for key, factory in kwargs_for.items()}
            try:
                impl.function(**kwargs)
            except DuplicateNameError:
                raise
            except Exception as exc:
                message = f"hook {hook_name} raised {_short_error(exc)}"
                info = self.plugins.get(impl.plugin_name)
                if info is not None and info.error is None:
                    info.error = message
                self.problems.append(f"plugin {impl.plugin_name!r}: {message}")
                self.last_traceback = traceback.format_exc()

    def notify(self, hook_name: str, **kwargs: Any) -> None:
        """Call a lifecycle hook on every plugin; a failing plugin is warned about, never fatal."""
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            try:
                impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})
            except Exception as exc:
                import warnings

                warnings.warn(f"plugin {impl.plugin_name!r}: hook {hook_name} raised {_short_error(exc)}")


_manager: PluginManager | None = None
_manager_lock = threading.Lock()


def plugins_filter_from_env() -> set[str] | None:
    value = os.environ.get(PLUGINS_ENV)
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _manager
    with _manager_lock:
        if _manager is None:
            manager = PluginManager()
            manager.load_entry_points(plugins_filter_from_env())
            _manager = manager
        return _manager


def reset_plugin_manager() -> None:
    """Forget loaded plugins and registries (tests, or after installing a plugin at run time)."""
    global _manager
    with _manager_lock:
        _manager = None
    from areal_core import registry

    registry.reset_registries()


T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> item, remembering which plugin (or file) registered each name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._sources: dict[str, str] = {}

    def add(self, name: str, item: T, source: str) -> None:
        if not isinstance(name, str) or not name:
            raise PluginError(f"{source}: a {self.kind} must be registered under a non-empty string name, got {name!r}")
        if name in self._items:
            raise DuplicateNameError(
                f"{self.kind} {name!r} is registered twice: by {self._sources[name]} and by {source}; "
                f"uninstall or disable one of them (e.g. with {PLUGINS_ENV})"
            )
        self._items[name] = item
        self._sources[name] = source

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise UnknownNameError(
                f"no {self.kind} named {name!r} is registered (known: {known}); "
                f"is the plugin that provides it installed? See `areal plugins`"
            ) from None

    def source(self, name: str) -> str:
        return self._sources[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)
