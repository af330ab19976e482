"""`areal tasks` and `areal tasks show NAME`."""
from __future__ import annotations

import json
from typing import Any

import click
import yaml

from areal_core.errors import ArealError


@click.group("tasks", invoke_without_command=True)
@click.option("--no-size", is_flag=True, help="Do not load datasets to count samples (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def tasks_command(ctx: click.Context, no_size: bool, as_json: bool) -> None:
    """List tasks: name, where the spec comes from, number of samples, reward; a task whose reward is not
    installed is listed as unavailable, with the plugin to install."""
    if ctx.invoked_subcommand is not None:
        return
    from areal_core.tasks import Task, task_registry, unavailable_reason

    obj = ctx.find_root().obj
    registry = task_registry(obj["tasks_dirs"])
    rows = []
    for name, spec in registry.items():
        size: Any = None
        if spec.dataset.generator:
            size = spec.dataset.size  # generated datasets have exactly their size: no need to generate them
        elif not no_size:
            try:
                size = len(Task(spec, obj["data_dir"]).samples())
            except ArealError as exc:
                size = f"unavailable: {exc}"
        missing = unavailable_reason(spec)
        rows.append({"name": name, "source": registry.source(name), "size": size, "reward": spec.reward.name,
                     "reward_plugin": spec.reward.plugin, "available": missing is None, "unavailable": missing,
                     "description": spec.description})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(title="areal tasks")
    for column in ("task", "source", "size", "reward", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        install = f": pip install {row['reward_plugin']}" if row["reward_plugin"] else ""
        reward = row["reward"] if row["available"] else f"[red]{row['reward']} (unavailable{install})[/red]"
        size = "-" if row["size"] is None else (str(row["size"]) if isinstance(row["size"], int) else f"[red]{row['size']}[/red]")
        table.add_row(row["name"], row["source"], size, reward, row["description"])
    from rich.console import Console

    Console().print(table)


@tasks_command.command("show")
@click.argument("name")
@click.pass_context
def tasks_show(ctx: click.Context, name: str) -> None:
    """Print one task spec and its first rendered prompt."""
    from areal_core.tasks import Task, task_registry

    obj = ctx.find_root().obj
    registry = task_registry(obj["tasks_dirs"])
    spec = registry.get(name)
    task = Task(spec, obj["data_dir"])
    click.echo(f"# {name} (from {registry.source(name)})")
    click.echo(yaml.safe_dump(spec.to_dict(), sort_keys=False, allow_unicode=True).rstrip())
    samples = task.samples()
    click.echo(f"\n# {len(samples)} samples from {task.describe_source()}; first prompt:")
    prompt = task.render_prompt(samples[0])
    if isinstance(prompt, str):
        click.echo(prompt)
    else:
        for message in prompt:
            click.echo(f"[{message['role']}]\n{message['content']}")
