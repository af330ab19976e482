"""The `areal` command line. Plugins add subcommands through the `register_commands` hook."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from areal_core import __version__
from areal_core.errors import ArealError, DuplicateNameError
from areal_core.plugins import get_plugin_manager


class ArealGroup(click.Group):
    """Turns the project's own errors into one clear line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ArealError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


def _console():
    from rich.console import Console

    return Console()


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


# --- areal plugins ------------------------------------------------------------------------------
@cli.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def plugins_command(as_json: bool) -> None:
    """List installed plugins: version, implemented hooks, and what failed to load and why."""
    from areal_core.registry import generator_registry, reward_registry

    manager = get_plugin_manager()
    problems: list[str] = []
    provided: dict[str, list[str]] = {}
    for kind, build in (("reward", reward_registry), ("generator", generator_registry)):
        try:
            registry = build()
        except DuplicateNameError as exc:
            problems.append(str(exc))
            continue
        for name, spec in registry.items():
            provided.setdefault(spec.plugin, []).append(f"{kind}:{name}")
    problems = manager.problems + problems
    rows = []
    for info in manager.plugins.values():
        rows.append({
            "name": info.name, "distribution": info.distribution, "version": info.version,
            "module": info.module, "hooks": info.hooks, "provides": provided.get(info.name, []),
            "error": info.error,
        })
    if as_json:
        click.echo(json.dumps({"plugins": rows, "problems": problems}, indent=2))
        return
    from rich.table import Table

    table = Table(title="areal plugins")
    for column in ("plugin", "distribution", "version", "hooks", "status"):
        table.add_column(column)
    for row in rows:
        status = f"[red]failed: {row['error']}[/red]" if row["error"] else "[green]ok[/green]"
        table.add_row(row["name"], row["distribution"] or "-", row["version"] or "-",
                      ", ".join(row["hooks"]) or "-", status)
    console = _console()
    console.print(table)
    if not rows:
        console.print("no plugins installed (entry point group 'areal')")
    for problem in problems:
        console.print(f"[red]problem:[/red] {problem}", highlight=False)


# --- areal tasks --------------------------------------------------------------------------------
@cli.group("tasks", invoke_without_command=True)
@click.option("--no-size", is_flag=True, help="Do not load datasets to count samples (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def tasks_command(ctx: click.Context, no_size: bool, as_json: bool) -> None:
    """List tasks: name, where the spec comes from, number of samples, reward."""
    if ctx.invoked_subcommand is not None:
        return
    from areal_core.registry import reward_registry, task_registry
    from areal_core.tasks import Task

    registry = task_registry(ctx.obj["tasks_dirs"])
    rewards = reward_registry()
    rows = []
    for name, spec in registry.items():
        size: Any = None
        if spec.dataset.generator:
            size = spec.dataset.size  # generated datasets have exactly their size: no need to generate them
        elif not no_size:
            try:
                size = len(Task(spec, ctx.obj["data_dir"]).samples())
            except ArealError as exc:
                size = f"unavailable: {exc}"
        rows.append({"name": name, "source": registry.source(name), "size": size, "reward": spec.reward.name,
                     "reward_installed": spec.reward.name in rewards, "description": spec.description})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(title="areal tasks")
    for column in ("task", "source", "size", "reward", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        reward = row["reward"] if row["reward_installed"] else f"[red]{row['reward']} (not installed)[/red]"
        size = "-" if row["size"] is None else (str(row["size"]) if isinstance(row["size"], int) else f"[red]{row['size']}[/red]")
        table.add_row(row["name"], row["source"], size, reward, row["description"])
    _console().print(table)


@tasks_command.command("show")
@click.argument("name")
@click.pass_context
def tasks_show(ctx: click.Context, name: str) -> None:
    """Print one task spec and its first rendered prompt."""
    from areal_core.registry import task_registry
    from areal_core.tasks import Task

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


# --- areal score --------------------------------------------------------------------------------
def _parse_options(options: tuple[str, ...]) -> dict[str, Any]:
    from areal_core.config import parse_override

    parsed: dict[str, Any] = {}
    for text in options:
        path, value = parse_override(text)
        parsed[".".join(path)] = value
    return parsed


@cli.command("score")
@click.option("--reward", required=True, help="Registered reward name (see `areal plugins`).")
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL file: one object per line with `response` and the reward's fields.")
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write each row with score/correct/details/error added (written only on success).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1),
              help="Reward worker processes (--backend local).")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds one row may take; a row that takes longer gets an error result.")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="Reward option passed to the reward function (repeatable; value read as YAML).")
@click.option("--backend", type=click.Choice(["local", "celery"]), default="local", show_default=True,
              help="local: a process pool here (--workers); celery: `areal worker` processes via --broker.")
@click.option("--broker", envvar="AREAL_BROKER_URL", default="redis://localhost:6379/0", show_default=True,
              help="Celery broker URL (any Celery broker; also $AREAL_BROKER_URL). --backend celery only.")
@click.option("--result-backend", envvar="AREAL_RESULT_BACKEND", default=None,
              help="Celery result backend URL (default: the broker URL when it is Redis).")
@click.option("--queue", default="rewards", show_default=True,
              help="Celery queue to send the rows to (workers choose theirs with `areal worker --queues`).")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(1),
              help="Rows per Celery task (batching hides the broker round trip).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def score_command(reward: str, input_path: Path, output_path: Path | None, workers: int, timeout: float,
                  options: tuple[str, ...], backend: str, broker: str, result_backend: str | None, queue: str,
                  batch_size: int, quiet: bool) -> None:
    """Score a JSONL file of responses with a reward, with a per-row timeout: in a local process pool,
    or on Celery workers (`areal worker`) with --backend celery."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from areal_core.reward_service import RewardServiceConfig
    from areal_core.score import read_score_input, score_rows, summarise, write_scored

    rows = read_score_input(input_path, reward)
    reward_options = _parse_options(options)
    service = RewardServiceConfig(backend=backend, workers=workers, timeout=timeout, broker_url=broker,
                                  result_backend=result_backend, queue=queue, batch_size=batch_size)
    with Progress(TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  disable=quiet or not sys.stderr.isatty(), console=None) as progress:
        bar = progress.add_task("score", total=len(rows))
        results = score_rows(rows, reward, reward_options, workers, timeout,
                             on_result=lambda i, r: progress.advance(bar), service=service)
    if output_path is not None:
        write_scored(rows, results, output_path)
    summary = summarise(results)
    judged = f", correct {summary.correct}/{summary.judged}" if summary.judged else ""
    click.echo(f"scored {summary.rows} rows with reward {reward!r}: mean score {summary.mean_score:.4f}"
               f"{judged}, errors {summary.errors}")
    if summary.errors:
        first = next(r.error for r in results if r.error)
        click.echo(f"first error: {first}")
    if output_path is not None:
        click.echo(f"wrote {output_path}")


# --- areal worker -------------------------------------------------------------------------------
@cli.command("worker")
@click.option("--broker", envvar="AREAL_BROKER_URL", default="redis://localhost:6379/0", show_default=True,
              help="Celery broker URL (any Celery broker; also $AREAL_BROKER_URL).")
@click.option("--result-backend", envvar="AREAL_RESULT_BACKEND", default=None,
              help="Celery result backend URL (default: the broker URL when it is Redis).")
@click.option("--queues", "-Q", default="rewards", show_default=True,
              help="Comma-separated queues to serve, e.g. `rewards,code` on a machine with Docker.")
@click.option("--concurrency", "-c", type=click.IntRange(1), default=None,
              help="Reward batches run at once (default: the number of CPUs).")
@click.option("--visibility-timeout", default=300.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds before a task taken by a worker that died is given to another worker; "
                   "keep it above the longest batch (batch size x timeout).")
@click.option("--loglevel", "-l", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Celery log level (info logs every task).")
@click.option("--hostname", "-n", default=None, help="Worker name (default: areal-PID@HOST).")
def worker_command(broker: str, result_backend: str | None, queues: str, concurrency: int | None,
                   visibility_timeout: float, loglevel: str, hostname: str | None) -> None:
    """Serve reward requests from a Celery broker, with every installed plugin loaded.

    Used by `areal score --backend celery` and by training with reward service backend `celery`.
    Each batch runs in a killable process per request with the requester's timeout; a worker killed
    mid-task loses nothing (the task is redelivered after --visibility-timeout)."""
    import os

    from areal_core.errors import ConfigError
    from areal_core.reward_service.celery_app import run_worker

    names = [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        raise ConfigError(f"--queues {queues!r}: expected comma-separated queue names, e.g. rewards,code")
    run_worker(broker_url=broker, result_backend=result_backend, queues=names,
               concurrency=concurrency or os.cpu_count() or 1, visibility_timeout=visibility_timeout,
               loglevel=loglevel, hostname=hostname, echo=click.echo)


# --- engine commands ----------------------------------------------------------------------------
from areal_core.engine.commands import init_model_command, serve_command  # noqa: E402

cli.add_command(init_model_command)
cli.add_command(serve_command)

from areal_core.rl.commands import train_command  # noqa: E402

cli.add_command(train_command)

from areal_core.eval.commands import eval_command, leaderboard_command  # noqa: E402

cli.add_command(eval_command)
cli.add_command(leaderboard_command)


def _add_plugin_commands() -> None:
    manager = get_plugin_manager()
    manager.call_each("register_commands", cli=lambda plugin: cli)


def main(argv: list[str] | None = None) -> None:
    try:
        _add_plugin_commands()
    except ArealError as exc:  # never let a plugin take the CLI down
        click.echo(f"warning: {exc}", err=True)
    cli.main(args=argv, prog_name="areal")


if __name__ == "__main__":
    main()
