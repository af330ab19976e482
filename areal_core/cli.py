"""The `areal` command line: one group; each subcommand is defined beside what it runs, except `areal plugins`,
which looks at every registry. Plugins add subcommands through the `register_commands` hook."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import click

from areal_core import __version__
from areal_core.audit.commands import audit_command
from areal_core.engine.commands import init_model_command, serve_command
from areal_core.errors import ArealError, DuplicateNameError
from areal_core.eval.commands import eval_command, leaderboard_command
from areal_core.plan.commands import plan_command
from areal_core.plugins import Registry, get_plugin_manager
from areal_core.rewards.commands import score_command, worker_command
from areal_core.rl.commands import train_command
from areal_core.tasks.commands import tasks_command


class ArealGroup(click.Group):
    """Turns the project's own errors into one clear line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ArealError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=ArealGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="areal")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="AREAL_DATA_DIR",
              help="Root of local dataset files (default $AREAL_DATA_DIR, else ~/.local/share/areal/data).")
@click.option("--tasks-dir", "tasks_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="Extra directory of task YAML files (repeatable; also $AREAL_TASKS_PATH).")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, tasks_dirs: tuple[Path, ...]) -> None:
    """areal: asynchronous RL for LLM reasoning, with plugins for tasks and rewards."""
    ctx.obj = {"data_dir": data_dir, "tasks_dirs": tuple(str(d) for d in tasks_dirs)}


BACKEND_LABELS = {"engine": "engine", "reward": "reward-backend", "trainer": "trainer"}


def provided_by_plugin() -> tuple[dict[str, list[str]], list[str]]:
    """(plugin name -> what it registered, as "kind:name"; the problems found while building the registries)."""
    from areal_core.audit import mutator_registry
    from areal_core.plugins.manager import BACKEND_HOOKS, backends
    from areal_core.rewards import reward_registry
    from areal_core.tasks.registry import generator_registry, plugin_task_registry
    from areal_core.workflows import tool_registry, workflow_registry

    problems: list[str] = []
    provided: dict[str, list[str]] = {}
    sources: list[tuple[str, Callable[[], Registry[Any]]]] = [
        ("reward", reward_registry), ("task", plugin_task_registry), ("generator", generator_registry),
        ("audit", mutator_registry), ("workflow", workflow_registry), ("tool", tool_registry),
        *((BACKEND_LABELS[kind], lambda kind=kind: backends(kind)) for kind in BACKEND_HOOKS)]
    for kind, build in sources:
        try:
            registry = build()
        except DuplicateNameError as exc:
            problems.append(str(exc))
            continue
        for name in registry.names():
            provided.setdefault(registry.plugin(name) or "?", []).append(f"{kind}:{name}")
    return provided, problems


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def plugins_command(as_json: bool) -> None:
    """List installed plugins and the default plugins of areal-core: version, implemented hooks, what each
    provides (rewards, tasks, generators, workflows, tools, engine / reward / trainer backends), and what failed
    to load and why."""
    manager = get_plugin_manager()
    provided, problems = provided_by_plugin()
    problems = manager.problems + problems
    rows = [{"name": info.name, "distribution": info.distribution, "version": info.version, "module": info.module,
             "builtin": info.builtin, "hooks": info.hooks, "provides": provided.get(info.name, []),
             "error": info.error} for info in manager.plugins.values()]
    if as_json:
        click.echo(json.dumps({"plugins": rows, "problems": problems}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="areal plugins")
    for column in ("plugin", "distribution", "version", "provides", "status"):
        table.add_column(column, overflow="fold")
    for row in rows:
        status = f"[red]failed: {row['error']}[/red]" if row["error"] else "[green]ok[/green]"
        name = f"{row['name']} (default)" if row["builtin"] else row["name"]
        table.add_row(name, row["distribution"] or "-", row["version"] or "-",
                      ", ".join(row["provides"]) or ", ".join(row["hooks"]) or "-", status)
    console = Console()
    console.print(table)
    if not any(not row["builtin"] for row in rows):
        console.print("no plugins installed (entry point group 'areal')")
    for problem in problems:
        console.print(f"[red]problem:[/red] {problem}", highlight=False)


for command in (train_command, eval_command, audit_command, leaderboard_command, tasks_command, plugins_command, score_command,
                worker_command, serve_command, init_model_command, plan_command):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        get_plugin_manager().hook.register_commands(cli=cli)
    except ArealError as exc:  # never let a plugin take the CLI down
        click.echo(f"warning: {exc}", err=True)
    cli.main(args=argv, prog_name="areal")


if __name__ == "__main__":
    main()
