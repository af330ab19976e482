"""`areal audit`: fuzz a reward with responses that must be judged wrong (or right) on a task's samples."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


@click.command("audit")
@click.option("--task", "task_name", required=True, help="Task whose samples and references the variants are made from.")
@click.option("--reward", default=None, help="Reward to audit (default: the task's; see `areal plugins`).")
@click.option("--n", "n", default=100, show_default=True, type=click.IntRange(0),
              help="Samples to audit, drawn with --seed (0: every sample).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sample draw and the mutators.")
@click.option("--grading", "mode", default=None,
              help="Grading mode of a reward that has modes (default: the task's training mode, the one a "
                   "policy learns to game; e.g. --grading lenient for the eval mode).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="Reward option, over the task spec's (repeatable; value read as YAML).")
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report as JSON (for CI).")
@click.option("--max-fn-rate", default=0.01, show_default=True, type=click.FloatRange(0, 1),
              help="Most false negatives (right answers judged wrong, errors included) the audit passes with.")
@click.option("--allow-errors", is_flag=True,
              help="Pass even when the verifier failed or timed out on some responses (still counted).")
@click.option("--examples", default=3, show_default=True, type=click.IntRange(0),
              help="Failing examples kept per family.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1), help="Reward worker processes.")
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds one verification may take; longer ones count as timeouts.")
@click.option("--backend", default="local", show_default=True, metavar="NAME",
              help="Reward backend: local (a process pool), celery (`areal worker`s via --broker) or a plugin's.")
@click.option("--broker", envvar="AREAL_BROKER_URL", default="redis://localhost:6379/0", show_default=True,
              help="Celery broker URL (--backend celery).")
@click.option("--queue", default="rewards", show_default=True,
              help="Celery queue to send the variants to (e.g. `code` where Docker workers serve it).")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(1), help="Variants per Celery task.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def audit_command(ctx: click.Context, task_name: str, reward: str | None, n: int, seed: int, mode: str | None,
                  options: tuple[str, ...], output_path: Path | None, max_fn_rate: float, allow_errors: bool, examples: int,
                  workers: int, timeout: float, backend: str, broker: str, queue: str, batch_size: int,
                  quiet: bool) -> None:
    """Audit a reward for false positives: hedges, several final answers, supersets, near misses, the reference
    quoted before a wrong answer, answers outside the expected tag, degenerate outputs (all must be judged
    wrong), and the reference in equivalent forms (must be judged right). Exit status 1 when it fails: a false
    positive, too many false negatives, or a verifier error or timeout (see --allow-errors)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from areal_core.audit import has_own_mutators
    from areal_core.audit.run import audit, pick_samples
    from areal_core.config import parse_options
    from areal_core.files import atomic_write
    from areal_core.rewards.config import RewardServiceConfig
    from areal_core.rewards.registry import graded_options
    from areal_core.tasks.task import get_task

    task = get_task(task_name, ctx.obj.get("data_dir"), ctx.obj.get("tasks_dirs", ()))
    spec_reward = task.spec.reward
    reward = reward or spec_reward.name
    base = spec_reward.options if reward == spec_reward.name else {}
    reward_options, applied = graded_options(reward, base, mode or spec_reward.mode_for("train"), parse_options(options))
    samples = pick_samples(task.samples(), n, seed)
    if not has_own_mutators(reward):
        click.echo(f"warning: no plugin registers audit mutators for reward {reward!r}: auditing it with the generic "
                   "ones (degenerate outputs; hedges and several answers around the samples' `reference`), which "
                   "only look for false positives; its plugin can add mutators for its answer format with the "
                   "register_audit_mutators hook (see CONTRIBUTING.md)", err=True)
    service = RewardServiceConfig(backend=backend, workers=workers, timeout=timeout, broker_url=broker, queue=queue,
                                  batch_size=batch_size)
    with Progress(TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  disable=quiet or not sys.stderr.isatty()) as progress:
        bar = progress.add_task("audit", total=None)
        report = audit(reward, task.name, samples, reward_options, mode=applied, seed=seed, service=service,
                       max_fn_rate=max_fn_rate, allow_errors=allow_errors, examples=examples,
                       on_variants=lambda total: progress.update(bar, total=total),
                       on_result=lambda i, r: progress.advance(bar))
    print_report(report)
    if output_path is not None:
        atomic_write(output_path, [json.dumps(report, indent=2) + "\n"])
        click.echo(f"wrote {output_path}")
    if not report["passed"]:
        ctx.exit(1)


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    grading = f", grading {report['grading']}" if report["grading"] else ""
    table = Table(title=f"areal audit: reward {report['reward']!r} on task {report['task']!r}{grading}",
                  caption="wrong / right: variants that must be judged so; FP: wrong ones judged right; "
                          "FN: right ones not judged right")
    table.add_column("family", no_wrap=True)
    for column in ("wrong", "FP", "right", "FN", "errors", "timeouts"):
        table.add_column(column, justify="right")

    def row(name: str, c: dict[str, Any], style: str = "") -> None:
        fp = f"[red]{c['false_positives']}[/red]" if c["false_positives"] else "0"
        fn = f"[yellow]{c['false_negatives']}[/yellow]" if c["false_negatives"] else "0"
        table.add_row(name, str(c["must_be_wrong"]), fp, str(c["must_be_right"]), fn, str(c["errors"]),
                      str(c["timeouts"]), style=style)

    for name, counts in report["families"].items():
        row(name, counts)
    row("all", report["totals"], style="bold")
    console.print(table)
    for name, counts in report["families"].items():
        for example in counts["examples"]:
            label = {"false_positive": "[red]false positive[/red]", "false_negative": "[yellow]false negative[/yellow]",
                     "error": "error"}[example["kind"]]
            console.print(f"{label} [{name}] sample {example['sample']!r} ({escape(example['note'])}): "
                          f"{escape(example['response'][:160])!r} -> score {example['score']}"
                          + (f", error: {escape(example['error'][:200])}" if example["error"] else ""), highlight=False)
    t = report["totals"]
    verdict = "[green]PASS[/green]" if report["passed"] else "[red]FAIL[/red]"
    partial = [f"{name} {c['max_wrong_score']:g}" for name, c in report["families"].items() if 0 < c["max_wrong_score"] < 1]
    if partial:
        console.print(f"partial credit on must-be-wrong responses (highest score): {', '.join(partial)}", highlight=False)
    if t["errors"] + t["timeouts"] and not report["allow_errors"]:
        console.print("[red]the verifier failed or timed out on some responses[/red] (--allow-errors to pass anyway)")
    console.print(f"{report['variants']:,} variants of {report['samples']} samples: {t['false_positives']} false positives, "
                  f"{t['false_negatives']} false negatives ({t['false_negative_rate']:.2%}; at most "
                  f"{report['max_false_negative_rate']:.2%} passes), {t['errors']} errors, {t['timeouts']} timeouts; "
                  f"{report['verifications_per_s']} verifications/s -> {verdict}", highlight=False)
