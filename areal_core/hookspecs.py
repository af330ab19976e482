"""Hook specifications: everything a plugin can add to or observe in areal.

A plugin is a module (or object) with functions decorated by `areal_core.hookimpl` whose names are the
hooks below; it is found through the `areal` entry-point group. Registration hooks receive a `register`
callable: the plugin says *what* it adds, the core decides *how* it is stored (and rejects duplicates,
naming both plugins). Lifecycle hooks are notifications: their return values are ignored and an
exception in one is reported as a warning, never allowed to stop a run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from pluggy import HookimplMarker, HookspecMarker

if TYPE_CHECKING:
    import click

    from areal_core.types import Trajectory

hookspec = HookspecMarker("areal")
hookimpl = HookimplMarker("areal")


@hookspec
def register_rewards(register: Callable[..., None]) -> None:
    """Register reward functions. Called once when the reward registry is first built (in every
    process that scores: the CLI, each reward worker, each Celery worker).

    Call ``register(name, fn, *, required_fields=(), description="")`` once per reward, where ``fn`` is

        fn(sample: dict, response: str, **options) -> RewardResult | bool | float

    ``sample`` holds the task sample's fields (e.g. ``reference``), ``response`` the model's text and
    ``options`` the reward options of the task spec or the command line. ``fn`` must be importable at
    module level (rewards are found by name in other processes). ``required_fields`` are sample
    fields the reward needs; inputs lacking one are rejected before scoring with an error naming it.
    """


@hookspec
def register_tasks(register: Callable[..., None]) -> None:
    """Register task specs. Called once when the task registry is first built.

    Call ``register(spec)`` with a ``TaskSpec`` or a plain dict of the same shape as a task YAML file
    (see ``areal_core.tasks``); ``register_task_file(path)`` style helpers are not needed: pass
    ``areal_core.tasks.load_task_yaml(path)`` to register a YAML file shipped inside the plugin.
    """


@hookspec
def register_generators(register: Callable[..., None]) -> None:
    """Register dataset generators that task specs can name (``dataset: {generator: NAME}``).

    Call ``register(name, fn)`` where ``fn(seed: int, size: int, **options) -> Iterable[dict]``
    yields ``size`` rows, deterministically for a given seed and options.
    """


@hookspec
def register_commands(cli: "click.Group") -> None:
    """Add subcommands to the ``areal`` CLI, e.g. ``@cli.command() def mycmd(): ...``.

    Called once while the CLI is built; a plugin whose hook raises is reported by ``areal plugins``
    and its commands are left out, the rest of the CLI keeps working.
    """


@hookspec
def on_trajectory(trajectory: "Trajectory", run_dir: str) -> None:
    """Called by the rollout controller for every finished, scored trajectory, before it enters
    the replay buffer. ``run_dir`` is the training run's output directory. Return value ignored."""


@hookspec
def on_train_step(step: int, policy_version: int, metrics: dict[str, float], run_dir: str) -> None:
    """Called by the trainer after each optimisation step and weight publication, with the step's
    metrics (loss, reward mean, staleness, throughput, ...). Return value ignored."""


@hookspec
def on_eval_result(model: str, task: str, metrics: dict[str, Any], details_path: str) -> None:
    """Called after an eval of one model on one task finished and was stored. ``metrics`` holds the
    aggregate metrics (e.g. ``pass@1``); ``details_path`` the per-sample JSONL. Return value ignored."""
