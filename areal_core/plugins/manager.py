"""The plugin manager: finds plugins through the `areal` entry-point group, calls their hooks through pluggy,
and keeps the registries the registration hooks fill.

Built-in plugins load through the same path as third-party ones: the task plugins ship as ordinary
distributions with an `areal` entry point, and the backends that come with areal-core (engines, reward
backends, trainers) are default plugins, registered the same way but always (the `llm` way: its built-in
models are a default plugin). Set ``AREAL_PLUGINS`` to a comma-separated list of entry point names to load
only those (``AREAL_PLUGINS=`` loads none); tests use it to stay hermetic.

Hooks are called through pluggy (`pm.hook.NAME(...)`), so hook wrappers, ordering and `firstresult` work as
pluggy documents them. Each plugin's implementation is wrapped once, when the plugin is registered, so that
(1) a registration hook knows which plugin is registering (duplicates name both plugins), and (2) a plugin
whose hook raises is recorded with the cause and skipped: the CLI, a training run and every other plugin
keep working. A plugin that fails to import, or whose hooks are malformed, is recorded the same way.
"""
from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.metadata
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, TypeVar

import pluggy

from areal_core import __version__
from areal_core.errors import ConfigError, DuplicateNameError, PluginError, UnknownNameError
from areal_core.plugins import hookspecs

ENTRY_POINT_GROUP = "areal"
PLUGINS_ENV = "AREAL_PLUGINS"
# The backends that come with areal-core, registered through the hooks like any plugin's.
DEFAULT_PLUGINS = {
    "builtin-engines": "areal_core.engine.backends",
    "builtin-reward-backends": "areal_core.rewards.backends",
    "builtin-trainers": "areal_core.rl.backends",
    "builtin-audit": "areal_core.audit.generic",
    "builtin-workflows": "areal_core.workflows.builtin",
}
# Notification hooks: a plugin that raises in one is warned about; the others still get the call.
NOTIFICATION_HOOKS = {"on_trajectory", "on_train_step", "on_eval_result"}

T = TypeVar("T")
_registering: contextvars.ContextVar[str] = contextvars.ContextVar("areal_registering_plugin")


@dataclass
class PluginInfo:
    """What `areal plugins` shows about one installed plugin."""

    name: str
    distribution: str | None
    version: str | None
    module: str
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    builtin: bool = False


def _short_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def registering_plugin() -> str:
    """The plugin whose hook is running now (a `register` callable uses it to credit the plugin)."""
    return _registering.get("unknown plugin")


class Registry(Generic[T]):
    """Name -> item, remembering which plugin (or file) registered each name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._sources: dict[str, str] = {}
        self._plugins: dict[str, str] = {}

    def add(self, name: str, item: T, source: str, plugin: str | None = None) -> None:
        """Add `item` as `name`; `source` says where it comes from in messages, `plugin` names the plugin that
        registered it (None for items from elsewhere, e.g. a YAML file)."""
        if not isinstance(name, str) or not name:
            raise PluginError(f"{source}: a {self.kind} must be registered under a non-empty string name, got {name!r}")
        if name in self._items:
            raise DuplicateNameError(
                f"{self.kind} {name!r} is registered twice: by {self._sources[name]} and by {source}; "
                f"uninstall or disable one of them (e.g. with {PLUGINS_ENV})"
            )
        self._items[name] = item
        self._sources[name] = source
        if plugin is not None:
            self._plugins[name] = plugin

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

    def plugin(self, name: str) -> str | None:
        return self._plugins.get(name)

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)


class PluginManager:
    """pluggy's manager plus a record of what loaded, what failed and why, and the registries built from it."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("areal")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.problems: list[str] = []
        self._cache: dict[Hashable, Any] = {}
        self._lock = threading.RLock()

    def load_default_plugins(self) -> None:
        """Register the backends that come with areal-core (always, whatever ``AREAL_PLUGINS`` says)."""
        for name, module_name in DEFAULT_PLUGINS.items():
            info = PluginInfo(name=name, distribution="areal-core", version=__version__, module=module_name,
                              builtin=True)
            self.plugins[name] = info
            try:
                module = importlib.import_module(module_name)
            except MemoryError:
                raise  # not a broken plugin: this process cannot run (e.g. a reward worker's memory limit)
            except Exception as exc:
                info.error = f"failed to import {module_name!r}: {_short_error(exc)}"
                continue
            self.register(module, name, info)

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
            info = PluginInfo(name=ep.name, distribution=dist.name if dist else None,
                              version=dist.version if dist else None, module=ep.value)
            if ep.name in self.plugins:
                info.error = (f"entry point name {ep.name!r} is also used by distribution "
                              f"{self.plugins[ep.name].distribution!r}; rename one of them")
                self.plugins[f"{ep.name} ({info.distribution})"] = info
                continue
            self.plugins[ep.name] = info
            try:
                module = ep.load()
            except MemoryError:
                raise  # not a broken plugin: this process cannot run (e.g. a reward worker's memory limit)
            except BaseException as exc:  # a plugin may raise anything at import, even SystemExit
                info.error = f"failed to import {ep.value!r}: {_short_error(exc)}"
                continue
            self.register(module, ep.name, info)

    def register(self, plugin: Any, name: str, info: PluginInfo | None = None) -> None:
        """Register one plugin object; on a malformed hook, record the cause and leave it out."""
        info = info or self.plugins.setdefault(
            name, PluginInfo(name=name, distribution=None, version=None, module=repr(plugin)))
        try:
            self.pm.register(plugin, name=name)
            # Unknown hook names (typos such as `register_reward`) only show up here.
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            info.error = f"invalid hook: {_short_error(exc)}"
            return
        callers = self.pm.get_hookcallers(plugin) or []
        for caller in callers:
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not (impl.hookwrapper or impl.wrapper):
                    impl.function = self._guarded(impl.function, caller.name, name)
        info.hooks = sorted(caller.name for caller in callers)

    def _guarded(self, function: Callable[..., Any], hook: str, plugin: str) -> Callable[..., Any]:
        """`function` (one plugin's implementation of `hook`) as pluggy will call it: crediting `plugin` with
        what it registers, and turning its exceptions into a recorded problem (or, for notifications, a
        warning). A DuplicateNameError is a configuration problem the user must fix, and a MemoryError says
        this process cannot run at all: both propagate."""
        @functools.wraps(function)
        def guarded(*args: Any) -> Any:
            token = _registering.set(plugin)
            try:
                return function(*args)
            except (DuplicateNameError, MemoryError):
                raise
            except Exception as exc:
                message = f"hook {hook} raised {_short_error(exc)}"
                if hook in NOTIFICATION_HOOKS:
                    warnings.warn(f"plugin {plugin!r}: {message}", stacklevel=2)
                    return None
                info = self.plugins.get(plugin)
                if info is not None and info.error is None:
                    info.error = message
                self.problems.append(f"plugin {plugin!r}: {message}")
                return None
            finally:
                _registering.reset(token)

        return guarded

    @property
    def hook(self) -> Any:
        """pluggy's hook relay: `manager.hook.on_train_step(step=..., ...)`."""
        return self.pm.hook

    def cached(self, key: Hashable, build: Callable[[], T]) -> T:
        """`build()` once per manager and key (registries are built on first use, under one lock)."""
        with self._lock:
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    def registry(self, hook: str, kind: str, make: Callable[..., tuple[str, T]]) -> Registry[T]:
        """The registry that registration hook `hook` fills, built on first use by calling the hook once: each
        plugin gets a ``register(*args, **kwargs)`` that adds ``make(plugin, *args, **kwargs) -> (name, item)``."""
        def build() -> Registry[T]:
            registry: Registry[T] = Registry(kind)

            def register(*args: Any, **kwargs: Any) -> None:
                plugin = registering_plugin()
                name, item = make(plugin, *args, **kwargs)
                registry.add(name, item, f"plugin {plugin!r}", plugin)

            getattr(self.pm.hook, hook)(register=register)
            return registry

        return self.cached(("registry", hook), build)


@dataclass(frozen=True)
class BackendSpec:
    """A registered backend: its kind (engine, reward, trainer), name, factory and the plugin that provides it."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: str
    description: str = ""


BACKEND_HOOKS = {"engine": "register_engines", "reward": "register_reward_backends",
                 "trainer": "register_trainer_backends"}


def backends(kind: str) -> Registry[BackendSpec]:
    """The registered backends of one kind: "engine", "reward" or "trainer" (see hookspecs.py)."""
    def make(plugin: str, name: str, factory: Callable[..., Any], *, description: str = "") -> tuple[str, BackendSpec]:
        if not callable(factory):
            raise PluginError(f"plugin {plugin!r}: {kind} backend {name!r} is not callable")
        return name, BackendSpec(kind, name, factory, plugin, description)

    return get_plugin_manager().registry(BACKEND_HOOKS[kind], f"{kind} backend", make)


def check_no_options(kind: str, name: str, options: dict[str, Any]) -> None:
    """For backends that take no options (the built-in ones): a ConfigError naming any that were given."""
    if options:
        raise ConfigError(f"{kind} backend {name!r} takes no {kind}.options, got {sorted(options)}")


def check_backend(kind: str, name: str) -> None:
    """Raise ValueError (reported under its config key) unless a backend `name` of `kind` is registered."""
    registry = backends(kind)
    if name not in registry:
        raise ValueError(f"backend {name!r} is not a registered {kind} backend (registered: "
                         f"{', '.join(registry.names()) or 'none'}; plugins add more, see `areal plugins`)")


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
            manager.load_default_plugins()
            manager.load_entry_points(plugins_filter_from_env())
            _manager = manager
        return _manager


def reset_plugin_manager() -> None:
    """Forget loaded plugins and the registries built from them (tests, or after installing a plugin)."""
    global _manager
    with _manager_lock:
        _manager = None
