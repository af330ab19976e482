"""The project's own exception types.

Every error a user can cause (bad input, a broken plugin, a malformed task spec) is raised as one of
these with one sentence naming the input and what was expected; the CLI prints it without a stack trace.
Anything else escaping to the CLI is a bug and keeps its traceback.
"""


class ArealError(Exception):
    """Base class of all errors caused by input, configuration or environment."""


class PluginError(ArealError):
    """A plugin failed to load, or registered something invalid."""


class DuplicateNameError(PluginError):
    """Two plugins registered the same reward, task or generator name."""


class UnknownNameError(ArealError):
    """A reward, task or generator name that no loaded plugin registered."""


class ConfigError(ArealError):
    """A configuration file or command-line override does not fit the typed schema."""


class TaskSpecError(ConfigError):
    """A task spec (YAML or plugin-registered) is malformed."""


class DatasetError(ArealError):
    """A task's dataset cannot be found, read, or mapped to samples."""


class InputError(ArealError):
    """A user-supplied input file (e.g. for `areal score`) is malformed."""
