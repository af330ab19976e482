"""`areal eval` and `areal leaderboard`."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from areal_core.errors import ConfigError


def _k_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise ConfigError(f"--k {text!r}: expected comma-separated positive integers, e.g. 1,4,8")
    return values


def _task_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ConfigError(f"--tasks {text!r}: expected comma-separated task names (see `areal tasks`)")
    return list(dict.fromkeys(names))


DB_HELP = ("Results database: a file path (SQLite) or a SQLAlchemy URL such as postgresql://host/areal "
           "(default $AREAL_EVAL_DB, else ~/.local/share/areal/evals.sqlite).")


@click.command("eval")
@click.option("--model", "model_text", required=True, metavar="DIR|NAME:DIR|NAME://HOST:PORT|replay:FILE.jsonl",
              help="A local model directory (run in-process); NAME:DIR, the directory served by engine backend NAME "
                   "(e.g. server:DIR starts `areal serve`); NAME://HOST:PORT, a running server of backend NAME (e.g. "
                   "sglang://HOST:PORT, SGLang or `areal serve`); or replay:FILE.jsonl, responses made elsewhere "
                   "(rows: the task's id field or `id`, and `response`). Plugins add engine backends "
                   "(`areal plugins`).")
@click.option("--tasks", "tasks_text", required=True, help="Comma-separated task names, e.g. math500,gsm8k.")
@click.option("--n", type=click.IntRange(1), help="Samples per problem (default: the task's eval.n).")
@click.option("--k", "k_text", metavar="K1,K2,...", help="pass@k / maj@k to report (default: the task's k up to n, powers of two up to n, and n).")
@click.option("--temperature", type=click.FloatRange(min=0), help="Sampling temperature; 0 is greedy (default: the task's).")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), help="Nucleus sampling (default: the task's).")
@click.option("--top-k", type=click.IntRange(1), help="Sample from the k likeliest tokens only (default: off).")
@click.option("--max-new-tokens", type=click.IntRange(1), help="Longest response (default: the task's).")
@click.option("--limit", type=click.IntRange(1), help="Evaluate only the first N problems of each task.")
@click.option("--seed", default=0, show_default=True, type=int, help="Sampling seed; each (problem, sample) draws from its own stream.")
@click.option("--name", help="Name on the leaderboard (default: <run>@step<N> for weights of a training run, else "
                             "the directory name, host:port or file name).")
@click.option("--db", envvar="AREAL_EVAL_DB", help=DB_HELP)
@click.option("--output-dir", default="evals", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Per-sample details go to DIR/<model>/<task>.samples.jsonl, metrics to <task>.metrics.json.")
@click.option("--force", is_flag=True, help="Run again even when an identical eval is already stored.")
@click.option("--reward-option", "reward_options", multiple=True, metavar="KEY=VALUE",
              help="Reward option over the task's (repeatable; value read as YAML), e.g. image=areal-sandbox:latest.")
@click.option("--grading", "reward_mode", type=click.Choice(["lenient", "strict"]),
              help="Grading mode of a reward that has modes (math): lenient, the eval default, reads the answer as "
                   "models write it; strict, the training default, only in the form the prompt asked for. "
                   "Default: the task spec's reward.modes.eval, else lenient.")
@click.option("--reward-workers", default=2, show_default=True, type=click.IntRange(1), help="Reward worker processes.")
@click.option("--reward-timeout", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds one sample's scoring may take; past it the sample gets a verifier error.")
@click.option("--reward-backend", default="local", show_default=True, metavar="NAME",
              help="local: a process pool here; celery: `areal worker` processes via --broker; or a plugin's.")
@click.option("--broker", envvar="AREAL_BROKER_URL", default="redis://localhost:6379/0", show_default=True,
              help="Celery broker URL (--reward-backend celery).")
@click.option("--tokenizer", "tokenizer_path", type=click.Path(file_okay=False, exists=True),
              help="Tokenizer directory for sglang:// (default: the server's model path, when it is a directory here).")
@click.option("--concurrency", default=64, show_default=True, type=click.IntRange(1),
              help="Samples generated at once (and engine batch slots for a local model).")
@click.option("--torch-threads", type=click.IntRange(1), help="torch threads of the in-process engine.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def eval_command(ctx: click.Context, model_text: str, tasks_text: str, n: int | None, k_text: str | None,
                 temperature: float | None, top_p: float | None, top_k: int | None, max_new_tokens: int | None,
                 limit: int | None, seed: int, name: str | None, db: str | None, output_dir: Path, force: bool,
                 reward_options: tuple[str, ...], reward_workers: int, reward_timeout: float, reward_backend: str,
                 broker: str, tokenizer_path: str | None, concurrency: int, torch_threads: int | None,
                 quiet: bool, reward_mode: str | None = None) -> None:
    """Evaluate a model on tasks: n samples per problem, scored by the tasks' rewards; pass@k (unbiased
    estimator), avg@n, maj@k (answer-based tasks) and greedy accuracy, with standard errors.

    Every sample goes to the results store as soon as it is scored: an identical eval already stored is
    reported without running again, and an interrupted one resumes where it stopped. For example

    \b
        areal eval --model /models/Qwen2.5-1.5B --tasks math500,gsm8k --n 8 --k 1,4,8 --temperature 0.6
        areal eval --model sglang://gpu1:30000 --tasks aime24 --n 32
        areal eval --model replay:outputs.jsonl --tasks humaneval
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from areal_core.config import parse_options
    from areal_core.eval.runner import run_evals
    from areal_core.eval.sources import parse_model
    from areal_core.eval.store import ResultsStore
    from areal_core.rewards import RewardServiceConfig
    from areal_core.tasks import get_task

    obj = ctx.find_root().obj or {}
    ref = parse_model(model_text)
    tasks = [get_task(task, obj.get("data_dir"), obj.get("tasks_dirs", ())) for task in _task_list(tasks_text)]
    requested: dict[str, Any] = {"n": n, "k": _k_list(k_text), "temperature": temperature, "top_p": top_p,
                                 "top_k": top_k, "max_new_tokens": max_new_tokens, "limit": limit, "seed": seed}
    service = RewardServiceConfig(backend=reward_backend, workers=reward_workers, timeout=reward_timeout,
                                  broker_url=broker)
    console = Console()
    with ResultsStore(db) as store, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                             TimeRemainingColumn(), disable=quiet or not sys.stderr.isatty(),
                                             console=Console(stderr=True)) as bar:
        bars: dict[str, Any] = {}

        def progress(task: str, done: int, total: int) -> None:
            if task not in bars:
                bars[task] = bar.add_task(task, total=total)
            bar.update(bars[task], completed=done)

        results = asyncio.run(run_evals(
            ref, tasks, store, requested=requested, reward_service=service, output_dir=output_dir, name=name,
            force=force, reward_options=parse_options(reward_options), reward_mode=reward_mode,
            tokenizer_path=tokenizer_path,
            max_running_requests=concurrency, torch_threads=torch_threads, concurrency=concurrency,
            echo=click.echo, progress=progress))
        for result in results:
            _print_result(console, result, store.url)


def _print_result(console: Any, result: Any, db_url: str) -> None:
    from rich.table import Table

    from areal_core.eval.leaderboard import percent

    metrics = result.metrics
    table = Table(title=f"{result.task}: {result.settings.describe()} ({metrics['problems']} problems, run #{result.run_id})")
    table.add_column("metric")
    table.add_column("value (%)", justify="right")
    table.add_column("± SE", justify="right")
    names = [name for name in metrics if "@" in name and not name.endswith("_se")]
    for name in ["accuracy", "greedy_accuracy", *names, "mean_score"]:
        if name in metrics:
            se = metrics.get(f"{name}_se")
            table.add_row(name, percent(metrics[name]), "-" if se is None else f"{100 * se:.1f}")
    console.print(table)
    click.echo(f"{result.task}: {metrics['correct']} correct, {metrics['wrong']} wrong, {metrics['errors']} verifier "
               f"errors, {metrics['unjudged']} unjudged of {metrics['samples']} samples; details {result.details_path}")


@click.command("leaderboard")
@click.option("--db", envvar="AREAL_EVAL_DB", help=DB_HELP)
@click.option("--tasks", "tasks_text", help="Comma-separated tasks to rank on (default: every task in the store).")
@click.option("--models", help="Only models whose name matches this glob, e.g. 'qwen*'.")
@click.option("--decoding", type=click.Choice(["greedy", "sampled", "replay"]),
              help="Only runs with this decoding (default: any; per model and task the latest run counts).")
@click.option("--grading", type=click.Choice(["lenient", "strict", "any"]), default="lenient", show_default=True,
              help="Only runs graded in this mode (rewards with modes, e.g. math); runs of other rewards always count.")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "html", "json"]), default="table",
              show_default=True, help="table: in the terminal; html: one self-contained page with sortable "
                                      "tables, plots and per-sample details.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE instead of stdout.")
@click.option("--details-limit", default=500, show_default=True, type=click.IntRange(0),
              help="html: samples shown per run (0: none).")
def leaderboard_command(db: str | None, tasks_text: str | None, models: str | None, decoding: str | None, fmt: str,
                        output: Path | None, details_limit: int, grading: str = "lenient") -> None:
    """Models ranked per task and on average (pass@1 ± standard error), with n, k and decoding settings."""
    from rich.console import Console

    from areal_core.eval.leaderboard import build_leaderboard, render_html, render_markdown, render_table, to_json
    from areal_core.eval.store import ResultsStore

    with ResultsStore(db) as store:
        board = build_leaderboard(store, _task_list(tasks_text) if tasks_text else None, models, decoding,
                                  None if grading == "any" else grading)
        if fmt == "table":
            if output is None:
                render_table(board, Console())
                return
            with open(output, "w", encoding="utf-8") as f:
                render_table(board, Console(file=f, width=160))
            text = None
        elif fmt == "markdown":
            text = render_markdown(board)
        elif fmt == "json":
            text = json.dumps(to_json(board), indent=2)
        else:
            text = render_html(board, store, details_limit=details_limit)
    if output is None:
        click.echo(text, nl=False)
    else:
        if text is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
