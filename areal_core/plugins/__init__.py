"""The plugin system: hook specifications, the plugin manager, and the registries the hooks fill."""
from areal_core.plugins.hookspecs import hookimpl, hookspec
from areal_core.plugins.manager import (
    BackendSpec,
    PluginInfo,
    PluginManager,
    Registry,
    backends,
    check_backend,
    check_no_options,
    get_plugin_manager,
    registering_plugin,
    reset_plugin_manager,
)

__all__ = ["BackendSpec", "PluginInfo", "PluginManager", "Registry", "backends", "check_backend", "check_no_options",
           "get_plugin_manager", "hookimpl", "hookspec", "registering_plugin", "reset_plugin_manager"]
