"""Hook specifications: everything a plugin can add to or observe in areal.

A plugin is a module (or object) with functions decorated by `areal_core.hookimpl` whose names are the
hooks below; it is found through the `areal` entry-point group. Registration hooks receive a `register`
callable: the plugin says *what* it adds, the core decides *how* it is stored (and rejects duplicates,
naming both plugins). Notification hooks' return values are ignored and an exception in one is reported as
a warning, never allowed to stop a run. Hooks are called through pluggy, so `@hookimpl(tryfirst=True)`,
`@hookimpl(wrapper=True)` and the rest of pluggy's options work as documented there.

The backends areal-core ships with (the `local`, `server` and `sglang` engines, the `local` and `celery`
reward backends, the `local` and `fsdp` trainers) are registered through these same hooks, by default
plugins (`areal_core/engine/backends.py`, `areal_core/rewards/backends.py`, `areal_core/rl/backends.py`):
a new backend is one module and one hookimpl, chosen by name in the config.
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

    Call ``register(name, fn, *, required_fields=(), description="", modes={})`` once per reward, where ``fn`` is

        fn(sample: dict, response: str, **options) -> RewardResult | bool | float

    ``sample`` holds the task sample's fields (e.g. ``reference``), ``response`` the model's text and
    ``options`` the reward options of the task spec or the command line. ``fn`` must be importable at
    module level (rewards are found by name in other processes). ``required_fields`` are sample
    fields the reward needs; inputs lacking one are rejected before scoring with an error naming it.
    ``modes`` names grading modes and the options each stands for (the math reward: ``{"strict":
    {"extract": "strict"}, "lenient": {"extract": "lenient"}}``): ``areal train`` grades in ``strict``
    and ``areal eval`` in ``lenient`` unless the task spec's ``reward.modes`` says otherwise.
    """


@hookspec
def register_tasks(register: Callable[..., None]) -> None:
    """Register task specs. Called once when the task registry is first built.

    Call ``register(spec)`` with a ``TaskSpec`` or a plain dict of the same shape as a task YAML file
    (see ``areal_core.tasks``); to register a YAML file shipped inside the plugin, pass
    ``areal_core.tasks.load_task_yaml(path)``.
    """


@hookspec
def register_generators(register: Callable[..., None]) -> None:
    """Register dataset generators that task specs can name (``dataset: {generator: NAME}``).

    Call ``register(name, fn)`` where ``fn(seed: int, size: int, **options) -> Iterable[dict]``
    yields ``size`` rows, deterministically for a given seed and options.
    """


@hookspec
def register_engines(register: Callable[..., None]) -> None:
    """Register generation engine backends: `areal train engine.backend=NAME`, `areal eval --model NAME:DIR`
    (start the backend on a model directory) and `areal eval --model NAME://HOST:PORT` (a running server).

    Call ``register(name, factory, *, description="")`` where

        factory(target: EngineTarget, config: EngineConfig, run_dir: Path | None)
            -> AsyncContextManager[InferenceEngine]

    ``target`` (``areal_core.engine.EngineTarget``) says what to serve: ``target.model`` a model directory to
    start engines on, or ``target.urls`` servers already running (the config's ``engine.urls``). ``config`` is
    the ``engine`` section (``config.options`` holds settings for plugin backends); ``run_dir``, when given,
    is where a training run keeps server logs. Entering the context starts the engines and yields an
    ``areal_core.engine.InferenceEngine``; leaving it stops them. Built-in example: ``local_engines`` in
    ``areal_core/engine/backends.py``.
    """


@hookspec
def register_reward_backends(register: Callable[..., None]) -> None:
    """Register reward service backends: `reward.backend=NAME` in training, `--reward-backend NAME` for
    `areal eval`, `--backend NAME` for `areal score`.

    Call ``register(name, factory, *, description="")`` where ``factory(config: RewardServiceConfig)``
    returns an ``areal_core.rewards.RewardBackend``: ``start(deliver)``, ``submit(key, request, timeout)``,
    ``close()``; the reward service around it owns futures, back-pressure and request ids.
    """


@hookspec
def register_trainer_backends(register: Callable[..., None]) -> None:
    """Register trainer backends: `trainer.backend=NAME`.

    Call ``register(name, factory, *, description="")`` where

        factory(model_path: Path, config: TrainerConfig, *, total_steps: int, version: int,
                scratch_dir: Path | None) -> TrainerBackend

    returns an ``areal_core.rl.trainer.TrainerBackend`` loaded from the HF model directory ``model_path``
    (``scratch_dir`` is the run's ``trainer/`` directory, for backends that keep files).
    """


@hookspec
def register_audit_mutators(register: Callable[..., None]) -> None:
    """Register mutators for `areal audit`, the reward-hacking fuzzer: they turn a task sample into responses
    the reward must judge wrong (hedges, several answers, near misses, ...) or right (the reference in other
    allowed forms). Called once when the mutator registry is first built.

    Call ``register(reward, fn, *, name=None, description="")`` where ``reward`` is the reward name the
    mutator audits ("*" for every reward) and

        fn(sample: dict, rng: random.Random, options: dict) -> Iterable[areal_core.audit.Variant]

    ``options`` are the reward options the audit scores with. Several mutators may audit one reward (a
    third-party plugin may add its own to a built-in reward); ``name`` (default: the plugin's name) tells
    them apart. ``areal_core.audit.answer_variants`` builds the shared families for an answer format.
    """


@hookspec
def register_workflows(register: Callable[..., None]) -> None:
    """Register workflows: how one episode of a task runs (task spec ``workflow: {name: NAME, options: {...}}``).

    Call ``register(name, workflow, *, description="", check=None, uses_tools=False)`` where ``workflow`` is

        async def workflow(ctx: areal_core.workflows.EpisodeContext) -> areal_core.workflows.Episode

    or an object (or class) with ``async def arun_episode(self, ctx)``. The context generates through the engine
    (``await ctx.generate(episode, stop=...)`` appends the policy's tokens exactly), appends text for the policy
    (``ctx.append_message(episode, role, text)``: loss mask 0), calls tools (``await ctx.call_tool(name, args)``:
    always a ToolResult) and scores (``await ctx.score(text)``); ``ctx.options`` holds the task's workflow options,
    ``ctx.limits`` the episode limits. An episode whose ``reward`` is left None is scored on its final response.
    ``check(options, where)`` rejects bad options before a run (raise ConfigError); ``uses_tools``: the workflow
    calls the tools listed in its ``tools`` option, which must be registered. Built in: single_turn, tool_calls,
    feedback (``areal_core/workflows/builtin.py``).
    """


@hookspec
def register_tools(register: Callable[..., None]) -> None:
    """Register tools workflows can call (the ``tools`` option of ``tool_calls``).

    Call ``register(name, fn, *, description="", version="", check=None)`` where

        fn(arguments: str, **options) -> str | areal_core.workflows.ToolResult      (or async def)

    Whatever ``fn`` does (raises, hangs past its timeout, floods output), the model gets a result to read, never
    a crashed episode. ``version`` is recorded in eval manifests; ``check(options)`` raises on tool options (the
    workflow's ``tool_options: {NAME: {...}}``) the tool rejects, before a run starts. Built in: ``calculator`` (areal-core) and
    ``python`` (areal-sandbox: runs in the Docker sandbox with the code reward's isolation and limits).
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
    """Called by the training run after each step, once the new weights are published and the step's
    metrics (loss, reward mean, staleness, throughput, ...) are logged. Return value ignored."""


@hookspec
def on_eval_result(model: str, task: str, metrics: dict[str, Any], details_path: str) -> None:
    """Called after an eval of one model on one task finished and was stored. ``metrics`` holds the
    aggregate metrics (e.g. ``pass@1``); ``details_path`` the per-sample JSONL. Return value ignored."""
