"""`areal leaderboard`: models ranked per task and on average, from the finished runs in the results store.

For each model (name + content hash) and task the latest finished run counts. The ranking metric is
pass@1 (estimated from all n samples; for greedy n=1 it is the greedy accuracy). On average, models
evaluated on every selected task rank first, by their mean pass@1; the others follow, by the mean
over the tasks they have. Rendered as a terminal table, Markdown, JSON, or one self-contained HTML page
(sortable tables, inline SVG plots, per-sample details behind anchors; no network needed to view it).
"""
from __future__ import annotations

import fnmatch
import html
import math
import re
from dataclasses import dataclass
from typing import Any

from areal_core.errors import InputError
from areal_core.eval.store import ResultsStore, RunRecord, utc_now

RANK_METRIC = "pass@1"
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac"]


@dataclass
class Standing:
    """One model's place: its latest finished run per task and its mean pass@1 over them."""

    model: str
    model_hash: str
    runs: dict[str, RunRecord]
    average: float
    rank: int = 0

    @property
    def label(self) -> str:
        return f"{self.model} ({self.model_hash[:8]})"


@dataclass
class Leaderboard:
    tasks: list[str]
    standings: list[Standing]
    generated: str
    database: str

    def ranked(self, task: str) -> list[tuple[int, Standing, RunRecord]]:
        """(rank, standing, run) of every model with a run on `task`, best pass@1 first (ties share a rank)."""
        rows = sorted(((s, s.runs[task]) for s in self.standings if task in s.runs),
                      key=lambda item: (-metric(item[1], RANK_METRIC), item[0].model))
        ranked, previous = [], None
        for position, (standing, run) in enumerate(rows, start=1):
            value = metric(run, RANK_METRIC)
            rank = ranked[-1][0] if previous is not None and value == previous else position
            ranked.append((rank, standing, run))
            previous = value
        return ranked

    def metric_names(self, task: str) -> list[str]:
        """pass@k, maj@k and avg@n names that some run of `task` reports, in a readable order."""
        names = {name for s in self.standings if task in s.runs for name in s.runs[task].metrics or {}
                 if re.fullmatch(r"(pass|maj|avg)@\d+", name)}
        return sorted(names, key=lambda name: ({"pass": 0, "maj": 1, "avg": 2}[name.split("@")[0]], int(name.split("@")[1])))


def metric(run: RunRecord, name: str) -> float:
    return float((run.metrics or {}).get(name, math.nan))


def build_leaderboard(store: ResultsStore, tasks: list[str] | None = None, models: str | None = None,
                      decoding: str | None = None, grading: str | None = "lenient") -> Leaderboard:
    """The standings over `tasks` (default: every task in the store) of models matching the glob `models`,
    from runs with the given decoding (greedy, sampled or replay; default: any, the latest run counts) and
    grading mode (default lenient, the eval default, so that models are ranked graded alike; None: any;
    runs of rewards without modes always count)."""
    runs = store.finished_runs(tasks)
    if models:
        runs = [run for run in runs if fnmatch.fnmatchcase(run.model, models)]
    if decoding:
        runs = [run for run in runs if run.settings.decoding == decoding]
    graded_out = False
    if grading:
        kept = [run for run in runs if grading_mode(run) in (grading, "-")]
        graded_out, runs = bool(runs) and not kept, kept
    if not runs:
        which = f" for tasks {', '.join(tasks)}" if tasks else ""
        which += f" of models matching {models!r}" if models else ""
        which += f" with {decoding} decoding" if decoding else ""
        which += f" graded {grading} (--grading any shows the others)" if graded_out else ""
        raise InputError(f"the results store {store.engine.url.render_as_string(hide_password=True)} has no finished "
                         f"evals{which}; run `areal eval` first")
    latest: dict[tuple[str, str], dict[str, RunRecord]] = {}
    for run in runs:  # in id order: a later run replaces an earlier one
        latest.setdefault((run.model, run.model_hash), {})[run.task] = run
    task_names = list(tasks) if tasks else sorted({run.task for run in runs})
    standings = [Standing(model, model_hash, by_task,
                          sum(metric(r, RANK_METRIC) for r in by_task.values()) / len(by_task))
                 for (model, model_hash), by_task in latest.items()]
    standings.sort(key=lambda s: (-len(s.runs), -s.average, s.model))
    for position, standing in enumerate(standings, start=1):
        standing.rank = position
    return Leaderboard(task_names, standings, utc_now(), store.engine.url.render_as_string(hide_password=True))


# -- text formats -----------------------------------------------------------------------------------
def percent(value: float | None, se: float | None = None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{100 * value:.1f}" + (f" ± {100 * se:.1f}" if se is not None else "")


def _run_cell(run: RunRecord, name: str) -> str:
    metrics = run.metrics or {}
    return percent(metrics.get(name), metrics.get(f"{name}_se"))


def overview_rows(board: Leaderboard) -> list[list[str]]:
    rows = []
    for s in board.standings:
        covered = f" ({len(s.runs)}/{len(board.tasks)} tasks)" if len(s.runs) < len(board.tasks) else ""
        rows.append([str(s.rank), s.label, percent(s.average) + covered]
                    + [_run_cell(s.runs[t], RANK_METRIC) if t in s.runs else "-" for t in board.tasks])
    return rows


def grading_mode(run: RunRecord) -> str:
    """How a run was graded (strict or lenient, for a reward with modes; "-" otherwise)."""
    return str(((run.manifest or {}).get("reward") or {}).get("mode") or "-")


def task_rows(board: Leaderboard, task: str) -> tuple[list[str], list[list[str]]]:
    names = board.metric_names(task)
    header = ["rank", "model", *names, "errors", "grading", "settings", "run"]
    rows = []
    for rank, standing, run in board.ranked(task):
        errors = (run.metrics or {}).get("errors", 0)
        where = f"#{run.id}" + (f" (train step {run.step})" if run.source == "train" else "")
        rows.append([str(rank), standing.label, *(_run_cell(run, n) for n in names), str(errors), grading_mode(run),
                     run.settings.describe() + f", k={','.join(map(str, run.settings.k))}", where])
    return header, rows


def render_markdown(board: Leaderboard) -> str:
    def table(header: list[str], rows: list[list[str]]) -> list[str]:
        escape = lambda cell: cell.replace("|", "\\|")  # noqa: E731
        return ["| " + " | ".join(map(escape, header)) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(map(escape, row)) + " |" for row in rows)]

    lines = ["# Leaderboard", "", f"pass@1 in %, ± standard error over problems. Generated {board.generated}.", "",
             "## Average over tasks", "", *table(["rank", "model", "average", *board.tasks], overview_rows(board))]
    for task in board.tasks:
        header, rows = task_rows(board, task)
        if rows:
            lines += ["", f"## {task}", "", *table(header, rows)]
    return "\n".join(lines) + "\n"


def render_table(board: Leaderboard, console: Any) -> None:
    from rich.table import Table

    overview = Table(title="leaderboard: pass@1 (%) ± standard error; average over tasks")
    for column in ["rank", "model", "average", *board.tasks]:
        overview.add_column(column, justify="left" if column == "model" else "right")
    for row in overview_rows(board):
        overview.add_row(*row)
    console.print(overview)
    for task in board.tasks:
        header, rows = task_rows(board, task)
        if not rows:
            continue
        table = Table(title=task)
        for column in header:
            table.add_column(column, justify="left" if column in ("model", "settings") else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def to_json(board: Leaderboard) -> dict[str, Any]:
    return {
        "generated": board.generated, "database": board.database, "tasks": board.tasks, "rank_metric": RANK_METRIC,
        "models": [{
            "rank": s.rank, "model": s.model, "model_hash": s.model_hash, "average": s.average,
            "tasks": {task: {"run_id": run.id, "rank": next(r for r, st, _ in board.ranked(task) if st is s),
                             "metrics": run.metrics, "settings": run.settings.to_dict(), "decoding": run.settings.decoding,
                             "grading": grading_mode(run),
                             "source": run.source, "step": run.step, "date": run.finished_at or run.created_at}
                      for task, run in s.runs.items()},
        } for s in board.standings],
    }


# -- HTML -------------------------------------------------------------------------------------------
def _color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def bar_chart(board: Leaderboard) -> str:
    """Grouped bars: pass@1 per task (one group per task, one bar per model), with ±1 SE whiskers."""
    models = board.standings
    width, height, left, bottom, top = 860, 320, 48, 40, 16
    plot_w, plot_h = width - left - 16, height - bottom - top
    group_w = plot_w / max(1, len(board.tasks))
    bar_w = min(36.0, 0.8 * group_w / max(1, len(models)))
    y = lambda v: top + plot_h * (1 - v)  # noqa: E731
    parts = [f'<svg class="plot plot-bars" role="img" aria-label="pass@1 per task" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for tick in range(0, 101, 20):
        parts.append(f'<line x1="{left}" x2="{width - 16}" y1="{y(tick / 100):.1f}" y2="{y(tick / 100):.1f}" class="grid"/>'
                     f'<text x="{left - 6}" y="{y(tick / 100) + 4:.1f}" text-anchor="end">{tick}</text>')
    for t, task in enumerate(board.tasks):
        start = left + t * group_w + (group_w - bar_w * len(models)) / 2
        for m, standing in enumerate(models):
            run = standing.runs.get(task)
            if run is None:
                continue
            value, se = metric(run, RANK_METRIC), (run.metrics or {}).get(f"{RANK_METRIC}_se")
            x = start + m * bar_w
            title = html.escape(f"{standing.model} on {task}: pass@1 {percent(value, se)}")
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{y(value):.1f}" width="{bar_w * 0.9:.1f}" '
                         f'height="{plot_h * value:.1f}" fill="{_color(m)}"><title>{title}</title></rect>')
            if se:
                cx = x + bar_w * 0.45
                parts.append(f'<line class="whisker" x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(min(1, value + se)):.1f}" '
                             f'y2="{y(max(0, value - se)):.1f}"/>')
        parts.append(f'<text x="{left + (t + 0.5) * group_w:.1f}" y="{height - bottom + 18}" text-anchor="middle">'
                     f'{html.escape(task)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def pass_at_k_chart(board: Leaderboard, task: str) -> str | None:
    """pass@k against k (log scale), one line per model, for a task where some run has several k."""
    series = []
    for m, standing in enumerate(board.standings):
        run = standing.runs.get(task)
        if run is None:
            continue
        points = sorted((int(name.split("@")[1]), value) for name, value in (run.metrics or {}).items()
                        if re.fullmatch(r"pass@\d+", name))
        series.append((m, standing, points))
    ks = sorted({k for _, _, points in series for k, _ in points})
    if len(ks) < 2:
        return None
    width, height, left, bottom, top = 420, 260, 44, 36, 14
    plot_w, plot_h = width - left - 14, height - bottom - top
    span = math.log2(ks[-1]) or 1.0
    x = lambda k: left + plot_w * math.log2(k) / span  # noqa: E731
    y = lambda v: top + plot_h * (1 - v)  # noqa: E731
    parts = [f'<svg class="plot plot-passk" role="img" aria-label="pass@k on {html.escape(task)}" '
             f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for tick in range(0, 101, 25):
        parts.append(f'<line x1="{left}" x2="{width - 14}" y1="{y(tick / 100):.1f}" y2="{y(tick / 100):.1f}" class="grid"/>'
                     f'<text x="{left - 6}" y="{y(tick / 100) + 4:.1f}" text-anchor="end">{tick}</text>')
    for k in ks:
        parts.append(f'<text x="{x(k):.1f}" y="{height - bottom + 16}" text-anchor="middle">{k}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">k</text>')
    for m, standing, points in series:
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(k):.1f},{y(v):.1f}" for i, (k, v) in enumerate(points))
        parts.append(f'<path class="curve" d="{path}" stroke="{_color(m)}" fill="none">'
                     f'<title>{html.escape(standing.model)}</title></path>')
        parts += [f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="3" fill="{_color(m)}"><title>'
                  f'{html.escape(standing.model)}: pass@{k} {percent(v)}</title></circle>' for k, v in points]
    parts.append("</svg>")
    return "".join(parts)


def anchor(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


def render_html(board: Leaderboard, store: ResultsStore, details_limit: int = 500, response_chars: int = 1500) -> str:
    """One self-contained page. details_limit: samples shown per run (0: none); responses are cut at
    `response_chars` (every sample stays complete in the store and the eval's details file)."""
    import jinja2
    from markupsafe import Markup

    environment = jinja2.Environment(loader=jinja2.PackageLoader("areal_core.eval", "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    runs = sorted({run.id: (s, run) for s in board.standings for run in s.runs.values()}.items())
    details = []
    for _, (standing, run) in runs:
        samples = store.samples(run.id) if details_limit else []
        details.append({"run": run, "standing": standing, "samples": samples[:details_limit], "total": len(samples)})
    tasks = [{"name": task, "anchor": anchor(f"task-{task}"), "ranked": board.ranked(task),
              "metrics": board.metric_names(task), "curve": Markup(pass_at_k_chart(board, task) or "")}
             for task in board.tasks]
    return environment.get_template("leaderboard.html").render(
        board=board, tasks=tasks, details=details, bars=Markup(bar_chart(board)), colors=PALETTE,
        percent=percent, metric=metric, anchor=anchor, grading_mode=grading_mode, response_chars=response_chars, details_limit=details_limit)
