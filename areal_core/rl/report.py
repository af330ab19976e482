"""What a training run shows and leaves behind: metrics.jsonl, TensorBoard, the plugins' `on_train_step`
notifications and a live progress line while it runs; the reward curve and a summary table at the end."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from areal_core.plugins import get_plugin_manager
from areal_core.rl.resume import truncate_log


class RunLogger:
    """metrics.jsonl + TensorBoard + plugin hooks + a live progress line."""

    def __init__(self, run_dir: Path, tensorboard: bool, total_steps: int, resume_step: int | None = None) -> None:
        self.run_dir = run_dir
        # Resuming: drop what the killed run logged after its checkpoint; those steps are trained again.
        self.history: list[dict[str, Any]] = [] if resume_step is None else truncate_log(run_dir / "metrics.jsonl", resume_step)
        self.metrics_file = open(run_dir / "metrics.jsonl", "a", buffering=1)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                purge = None if resume_step is None else resume_step + 1
                self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge)
            except ImportError:
                print("warning: tensorboard is not installed; metrics go to metrics.jsonl only", file=sys.stderr)
        self.hook = get_plugin_manager().hook
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn(),
                                 disable=not sys.stderr.isatty())
        self.bar = self.progress.add_task("train", total=total_steps, completed=resume_step or 0, info="")

    def log(self, step: int, version: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, "version": version, "time": time.time(), **metrics}
        self.history.append(record)
        self.metrics_file.write(json.dumps(record) + "\n")
        numeric = scalar_metrics(metrics)
        if self.writer is not None:
            for key, value in numeric.items():
                self.writer.add_scalar(key, value, step)
        self.hook.on_train_step(step=step, policy_version=version, metrics=numeric, run_dir=str(self.run_dir))
        info = (f"reward {metrics.get('reward_mean', 0):.3f} | mixed {metrics.get('mixed_group_fraction', 0):.2f} | "
                f"{metrics.get('trajectories_per_second', 0):.0f} traj/s | stale≤{metrics.get('staleness_max', 0)}")
        self.progress.update(self.bar, completed=step, info=info)

    def close(self) -> None:
        self.metrics_file.close()
        if self.writer is not None:
            self.writer.close()


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The numbers among `metrics`, a histogram ({value: count}, e.g. staleness_hist) as one scalar per bin
    (`staleness_hist/0`, `staleness_hist/1`, ...): what TensorBoard and the plugins' hook get."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    out: dict[str, float] = {}
    for key, value in metrics.items():
        if number(value):
            out[key] = float(value)
        elif isinstance(value, dict) and value and all(number(v) for v in value.values()):
            out.update({f"{key}/{bin_}": float(count) for bin_, count in value.items()})
    return out


def mismatch_summary(history: list[dict[str, Any]]) -> dict[str, float]:
    """The run's engine/trainer mismatch (trainer.py's mismatch_* metrics) over the steps that measured any."""
    steps = [h for h in history if h.get("mismatch_tokens")]
    if not steps:
        return {}
    return {"kl_mean": sum(h["mismatch_kl"] for h in steps) / len(steps),
            "kl_max": max(h["mismatch_kl"] for h in steps),
            "abs_mean": sum(h["mismatch_abs_mean"] for h in steps) / len(steps),
            "abs_max": max(h["mismatch_abs_max"] for h in steps),
            "large_fraction_mean": sum(h["mismatch_large_fraction"] for h in steps) / len(steps),
            "corrected_fraction_mean": sum(h.get("behav_capped_fraction", 0.0) for h in steps) / len(steps)}


def plot_rewards(history: list[dict[str, Any]], evals: list[dict[str, Any]], path: Path) -> None:
    """The reward and held-out accuracy curves; below them, when measured, the engine/trainer mismatch KL and the
    share of tokens the off-policy correction masked or truncated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [h for h in history if h.get("mismatch_tokens")]
    if measured:
        fig, (ax, below) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
        steps = [h["step"] for h in measured]
        below.plot(steps, [max(h["mismatch_kl"], 1e-12) for h in measured], label="engine/trainer mismatch KL")
        below.plot(steps, [max(h.get("behav_capped_fraction", 0.0), 1e-12) for h in measured], ":",
                   label="tokens masked or truncated (share)")
        below.set_yscale("log")
        below.set_xlabel("step")
        below.grid(alpha=0.3)
        below.legend(loc="upper right", fontsize="small")
    else:
        fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([h["step"] for h in history], [h["reward_mean"] for h in history], label="training reward (mean)")
    tool_steps = [(h["step"], h["tool_call_rate"]) for h in history if "tool_call_rate" in h]
    if tool_steps:  # a tool-using workflow: how often the policy called a tool
        ax.plot(*zip(*tool_steps), ":", label="training tool-call rate")
    for key, style in (("sampled_accuracy", "o-"), ("greedy_accuracy", "s--")):
        points = [(e["step"], e[key]) for e in evals if key in e]
        if points:
            ax.plot(*zip(*points), style, label=f"held-out {key.replace('_', ' ')}")
    if not measured:
        ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_eval(record: dict[str, Any]) -> str:
    parts = []
    if "greedy_accuracy" in record:
        parts.append(f"greedy {record['greedy_accuracy']:.1%}")
    if "sampled_accuracy" in record:
        parts.append(f"sampled (T=1) {record['sampled_accuracy']:.1%}")
    if "greedy_tool_call_rate" in record:
        parts.append(f"tool calls (greedy) {record['greedy_tool_call_rate']:.0%}")
    return ", ".join(parts)


def print_summary(summary: dict[str, Any], echo: Callable[[str], None]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="areal train: summary")
    table.add_column("")
    table.add_column("before RL", justify="right")
    table.add_column("after RL", justify="right")
    for key in ("greedy_accuracy", "sampled_accuracy", "greedy_tool_call_rate", "sampled_tool_call_rate"):
        if key in summary["before"] and key in summary["after"]:
            table.add_row(f"held-out {key.replace('_', ' ')}", f"{summary['before'][key]:.1%}", f"{summary['after'][key]:.1%}")
    if table.rows:   # no held-out eval: no empty table
        Console().print(table)
    if "greedy_accuracy" in summary["after"]:
        echo(f"held-out accuracy: {summary['after']['greedy_accuracy']:.0%} (greedy), "
             f"{summary['after'].get('sampled_accuracy', float('nan')):.0%} (sampled, T=1); "
             f"was {summary['before']['greedy_accuracy']:.0%} / {summary['before'].get('sampled_accuracy', float('nan')):.0%}")
    mismatch = summary.get("mismatch") or {}
    if mismatch:
        echo(f"engine/trainer mismatch: KL {mismatch['kl_mean']:.2g} per step (max {mismatch['kl_max']:.2g}), "
             f"largest |log-prob gap| {mismatch['abs_max']:.2g}; {mismatch['corrected_fraction_mean']:.2%} of tokens "
             "masked or truncated by the correction")
    echo(f"{summary['steps']} RL steps in {summary['rl_seconds']:.1f}s ({summary['trajectories_per_second']:.0f} "
         f"trajectories/s); whole run {summary['total_seconds']:.1f}s; outputs in {summary['run_dir']}")
