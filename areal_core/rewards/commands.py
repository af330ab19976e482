"""`areal score` (a file of responses scored through the reward service) and `areal worker` (a Celery
reward worker)."""
from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("score")
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
@click.option("--backend", default="local", show_default=True, metavar="NAME",
              help="Reward backend: local (a process pool here, --workers), celery (`areal worker` processes via "
                   "--broker), or one a plugin registers (`areal plugins`).")
@click.option("--broker", envvar="AREAL_BROKER_URL", default="redis://localhost:6379/0", show_default=True,
              help="Celery broker URL (any Celery broker; also $AREAL_BROKER_URL). --backend celery only.")
@click.option("--result-backend", envvar="AREAL_RESULT_BACKEND", default=None,
              help="Celery result backend URL (default: the broker URL when it is Redis).")
@click.option("--queue", default="rewards", show_default=True,
              help="Celery queue to send the rows to (workers choose theirs with `areal worker --queues`).")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(1),
              help="Rows per Celery task (batching hides the broker round trip).")
@click.option("--grading", "mode", type=click.Choice(["lenient", "strict"]),
              help="Grading mode of a reward that has modes (math): lenient (as evals grade) or strict (as "
                   "training grades). Default: the reward's own defaults.")
@click.option("--reward-concurrency", "concurrency", multiple=True, metavar="NAME=N",
              help="Calls of an async or io_bound reward one worker process runs at once, over what it declares "
                   "(--backend local; repeatable).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def score_command(reward: str, input_path: Path, output_path: Path | None, workers: int, timeout: float,
                  options: tuple[str, ...], backend: str, broker: str, result_backend: str | None, queue: str,
                  batch_size: int, quiet: bool, mode: str | None = None, concurrency: tuple[str, ...] = ()) -> None:
    """Score a JSONL file of responses with a reward, with a per-row timeout: in a local process pool,
    or on Celery workers (`areal worker`) with --backend celery."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from areal_core.config import parse_options
    from areal_core.rewards.config import RewardServiceConfig, parse_concurrency
    from areal_core.rewards.score import read_score_input, score_rows, summarise, write_scored

    from areal_core.rewards.registry import graded_options

    rows = read_score_input(input_path, reward)
    reward_options, _ = graded_options(reward, {}, mode, parse_options(options))
    service = RewardServiceConfig(backend=backend, workers=workers, timeout=timeout, broker_url=broker,
                                  result_backend=result_backend, queue=queue, batch_size=batch_size,
                                  concurrency=parse_concurrency(concurrency))
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


@click.command("worker")
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
@click.option("--reward-concurrency", "reward_concurrency", multiple=True, metavar="NAME=N",
              help="Calls of an async or io_bound reward one batch runs at once, over what the reward declares "
                   "(repeatable).")
def worker_command(broker: str, result_backend: str | None, queues: str, concurrency: int | None,
                   visibility_timeout: float, loglevel: str, hostname: str | None,
                   reward_concurrency: tuple[str, ...] = ()) -> None:
    """Serve reward requests from a Celery broker, with every installed plugin loaded.

    Used by `areal score --backend celery` and by training with reward service backend `celery`.
    Each batch runs in a killable process per request with the requester's timeout; a worker killed
    mid-task loses nothing (the task is redelivered after --visibility-timeout)."""
    import os

    from areal_core.errors import ConfigError
    from areal_core.rewards.celery_app import run_worker
    from areal_core.rewards.config import parse_concurrency

    names = [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        raise ConfigError(f"--queues {queues!r}: expected comma-separated queue names, e.g. rewards,code")
    run_worker(broker_url=broker, result_backend=result_backend, queues=names,
               concurrency=concurrency or os.cpu_count() or 1, visibility_timeout=visibility_timeout,
               loglevel=loglevel, hostname=hostname, echo=click.echo,
               reward_concurrency=parse_concurrency(reward_concurrency))
