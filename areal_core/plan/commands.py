"""`areal plan`."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click


def parse_etas(text: str) -> list[int]:
    try:
        etas = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise click.BadParameter(f"--eta takes whole numbers separated by commas (0,1,2,4), got {text!r}") from None
    if not etas or etas[0] < 0:
        raise click.BadParameter(f"--eta takes max staleness values >= 0, got {text!r}")
    return etas


class PlanGroup(click.Group):
    """`areal plan PROFILE ...` is `areal plan predict PROFILE ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["predict", *args]
        return super().parse_args(ctx, args)


@click.group("plan", cls=PlanGroup)
def plan_command() -> None:
    """Size a cluster: predict sync against async throughput from a cost profile (`areal plan PROFILE ...`, the
    same as `areal plan predict`), or measure a profile on this machine (`areal plan profile`)."""


@plan_command.command("profile")
@click.argument("args", nargs=-1, metavar="[CONFIG.yaml] [KEY=VALUE]...")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("profile.yaml"),
              show_default=True, help="Where the profile goes (its raw timings beside it, .timings.json).")
@click.option("--name", default=None, help="The profile's name (default: the model and this machine).")
@click.option("--repeats", type=click.IntRange(min=2), default=3, show_default=True,
              help="Times each batch-level timing is taken (a request's cost beyond the engine, the shared "
                   "hardware): a steadier profile on a busy machine, about 20 s more each on the embedded model.")
@click.option("--lengths", "lengths_source", metavar="RUN_DIR|FILE|mean=N,p99=N,max=N", default=None,
              help="Response lengths for the batches timed through the rollout path (a request's cost, the shared "
                   "hardware), as `areal plan --lengths` takes them: the run you plan, since how much engine and "
                   "trainer slow each other on one machine depends on them (default: as long as the model writes).")
@click.option("--tools", "tools_source", metavar="RUN_DIR|calls=N,seconds=S[,p99=S][,result_tokens=N]", default=None,
              help="A tool-using workflow's calls, as `areal plan --tools` takes them: the profile's episodes call "
                   "tools as often as it says and each call takes its drawn seconds, so that what the rollout path "
                   "costs a turn is measured apart from what the tools take (default: the --lengths run's, when it "
                   "made calls).")
def profile_command(args: tuple[str, ...], output: Path, name: str | None, repeats: int,
                    lengths_source: str | None, tools_source: str | None) -> None:
    """Measure a cost profile on this machine with the real engine, trainer and reward service of a run's config
    (as `areal train` takes it; default: the embedded model, the local engine and trainer, the arithmetic task)."""
    import asyncio
    import json

    from areal_core.config import load_config
    from areal_core.engine.model import load_tokenizer
    from areal_core.plan.measure import measure_profile
    from areal_core.plan.tools import load_tool_use
    from areal_core.plan.workload import load_workload
    from areal_core.rl.commands import config_arguments
    from areal_core.rl.config import TrainConfig
    from areal_core.rl.model_cache import resolve_model

    path, overrides = config_arguments(args)
    config = load_config(TrainConfig, path, overrides)
    lengths = None if lengths_source is None else load_workload(lengths_source,
                                                                load_tokenizer(resolve_model(config.model)))
    tools = load_tool_use(tools_source) if tools_source is not None else None
    profile, timings = asyncio.run(measure_profile(config, name, repeats, lengths, tools))
    output.parent.mkdir(parents=True, exist_ok=True)
    profile.save(output)
    output.with_suffix(".timings.json").write_text(json.dumps(timings, indent=2))
    g, t, r = profile.generation, profile.training, profile.rewards
    click.echo(f"generation: a decode step {g.step_s * 1e3:.3g} ms + {g.sequence_s * 1e3:.3g} ms per sequence + "
               f"{g.context_token_s * 1e6:.3g} us per KV token; prefill {g.prefill_token_s * 1e6:.3g} us per token; "
               f"{g.request_s * 1e3:.3g} ms per request on the rollout path; weight load {g.weight_load_s:.3g} s")
    if t.per_position:
        click.echo(f"training: pi_prox {t.proximal_token_s * 1e6:.3g} us per token position + "
                   f"{t.proximal_microbatch_s * 1e3:.3g} ms per micro-batch + {t.proximal_step_s * 1e3:.3g} ms a step, "
                   f"update {t.update_token_s * 1e6:.3g} us per "
                   f"position + {t.update_microbatch_s * 1e3:.3g} ms per micro-batch + {t.optimizer_step_s:.3g} s per "
                   f"optimizer step (positions the step's micro-batches compute"
                   f"{', prompts packed once' if t.shared_prompts else ''}); publish {t.publish_s:.3g} s")
    else:
        click.echo(f"training: pi_prox {t.proximal_token_s * 1e6:.3g} us per token + "
                   f"{t.proximal_sequence_s * 1e6:.3g} us per sequence, update {t.update_token_s * 1e6:.3g} us per "
                   f"token + {t.update_sequence_s * 1e6:.3g} us per sequence + {t.optimizer_step_s:.3g} s per "
                   f"optimizer step; publish {t.publish_s:.3g} s")
    click.echo(f"rewards: {r.mean_s * 1e3:.3g} ms mean, {r.p99_s * 1e3:.3g} ms p99, {r.workers} at once")
    if profile.shared is not None:
        shared = profile.shared
        click.echo(f"shared hardware: decode steps {shared.generation_slowdown:.2f}x and a request's work on the "
                   f"rollout path {shared.effective_request_slowdown:.2f}x slower while the trainer works, training "
                   f"{shared.training_slowdown:.2f}x slower while generation runs")
    click.echo(f"profile: {output}")


@plan_command.command("predict")
@click.argument("profile", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("run", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--gpus", type=int, required=True, help="GPUs of the cluster, generation and training together.")
@click.option("--generation-gpus", type=int, default=None,
              help="GPUs for generation (default: try splits from one server to all but one GPU).")
@click.option("--eta", "etas", default="0,1,2,4", show_default=True, help="Max staleness values to simulate.")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Model directory whose tokenizer counts the prompts' and the --lengths responses' tokens "
                   "(default: the embedded model's).")
@click.option("--lengths", "lengths_source", metavar="RUN_DIR|FILE|mean=N,p99=N,max=N", default=None,
              help="Response lengths: an `areal train` run directory (its metrics.jsonl's per-step lengths, pooled), "
                   "a file of responses (JSONL or JSON: 'response', 'completion', 'output' or 'text' fields, "
                   "`areal eval` *.samples.jsonl, or a directory of them) or of whole-number lengths, or a log-normal "
                   "long tail; drawn per request, cut at rollout.max_new_tokens (default: the workflow's, else every "
                   "response rollout.max_new_tokens long).")
@click.option("--tools", "tools_source", metavar="RUN_DIR|calls=N,seconds=S[,p99=S][,result_tokens=N]", default=None,
              help="A tool-using workflow's calls: a run directory that made them (its tool_calls_hist, tool seconds "
                   "and result tokens), or calls an episode (Poisson mean), seconds a call (a log-normal with p99), "
                   "tokens a result (default: the --lengths run's, when it made calls; --tools replaces it whole).")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where plan.json, plan.png and the simulated runs go (default: runs/plan-<time>).")
def predict_command(profile: Path, run: tuple[str, ...], gpus: int, generation_gpus: int | None, etas: str,
                 tokenizer_dir: Path | None, lengths_source: str | None, tools_source: str | None,
                 output: Path | None) -> None:
    """Predict a cluster's throughput, sync against async, from a cost PROFILE (YAML, or a shipped profile's name:
    h800-qwen1.5b, h800-qwen7b; see docs/deployment.md).

    Every scenario is a run of the real rollout controller and step loop on simulated servers, trainer and reward
    workers, on a virtual clock. KEY=VALUE sets the run as for `areal train`; --lengths the responses' lengths,
    e.g. the batch and a long tail, or the lengths of a run made before:

        areal plan profile.yaml --gpus 64 rollout.batch_size=512 rollout.group_size=16 steps=10
            --lengths mean=6000,p99=28000,max=32768 rollout.max_new_tokens=32768

        areal plan profile.yaml --gpus 64 --lengths runs/gsm8k-qwen-20261201-101500 rollout.max_new_tokens=8192

    A tool-using workflow runs as it is; the policy's calls and the tools' seconds are drawn (--tools):

        areal plan profile.yaml --gpus 8 task=gsm8k rollout.workflow=tool_calls --tools calls=2,seconds=0.5,p99=4
    """
    from areal_core.engine.model import build_char_tokenizer, load_tokenizer
    from areal_core.plan.planner import predict
    from areal_core.plan.profile import load_profile
    from areal_core.plan.tools import load_tool_use
    from areal_core.plan.workload import load_workload

    bad = [arg for arg in run if "=" not in arg]
    if bad:
        raise click.UsageError(f"unexpected argument {bad[0]!r}: give KEY=VALUE overrides of the run")
    if generation_gpus is not None and not 0 < generation_gpus < gpus:
        raise click.BadParameter(f"--generation-gpus must leave the trainer at least one of {gpus} GPUs, "
                                 f"got {generation_gpus}")
    loaded = load_profile(profile_path(profile))
    tokenizer = load_tokenizer(tokenizer_dir) if tokenizer_dir else build_char_tokenizer()
    lengths = load_workload(lengths_source, tokenizer) if lengths_source is not None else None
    tools = load_tool_use(tools_source) if tools_source is not None else None
    out = output or Path("runs") / f"plan-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    report = predict(loaded, ["warmup.enabled=false", "eval_task=null", *run], tokenizer, out, gpus,
                     parse_etas(etas), generation_gpus, echo=lambda line: click.echo(line, err=True), lengths=lengths,
                     tools=tools)
    print_report(report)
    click.echo(f"workload: {report['workload']['text']}" if "workload" in report else
               "workload: no --lengths: the workflow's lengths (sampled_lengths), else rollout.max_new_tokens each")
    plot_report(report, out / "plan.png")
    click.echo(f"report: {out / 'plan.json'}; plot: {out / 'plan.png'}")


def profile_path(profile: Path) -> Path:
    """PROFILE as given: a YAML file, or the name of a profile shipped in areal_core/plan/profiles (h800-qwen1.5b)."""
    shipped = Path(__file__).with_name("profiles")
    if profile.is_file() or len(profile.parts) > 1 or profile.suffix in (".yaml", ".yml"):
        return profile
    if (shipped / f"{profile}.yaml").is_file():
        return shipped / f"{profile}.yaml"
    names = ", ".join(sorted(p.stem for p in shipped.glob("*.yaml")))
    raise click.BadParameter(f"no profile file {profile} and no shipped profile of that name (shipped: {names})",
                             param_hint="PROFILE")


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"areal plan: {report['profile']} on {report['gpus']} GPUs (simulated)")
    for column in ("mode", "gen GPUs", "train GPUs", "traj/s", "tokens/s", "gen idle", "train idle", "stale ≤"):
        table.add_column(column, justify="left" if column == "mode" else "right", no_wrap=column == "mode")
    for r in report["scenarios"]:
        table.add_row(r["mode"], str(r["generation_gpus"]), str(r["training_gpus"]),
                      f"{r['trajectories_per_second']:.3g}", f"{r['tokens_per_second']:.4g}", f"{r['generation_idle']:.0%}",
                      f"{r['training_idle']:.0%}", str(max(r["staleness"], default=0)))
    Console(width=max(100, Console().width)).print(table)
    click.echo(f"best synchronous: {report['best_sync']}")
    if "best_async" in report:
        click.echo(f"best asynchronous: {report['best_async']}: {report['speedup']:.2f}x the synchronous")
    click.echo("assumptions: " + "; ".join(report["assumptions"]))


def plot_report(report: dict[str, Any], path: Path) -> None:
    """Throughput against the generation GPUs, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, list[tuple[int, float]]] = {}
    for r in report["scenarios"]:
        lines.setdefault(r["mode"], []).append((r["generation_gpus"], r["trajectories_per_second"]))
    figure, axes = plt.subplots(figsize=(7, 4))
    for mode, points in lines.items():
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=mode)
    axes.set_xlabel(f"generation GPUs (of {report['gpus']})")
    axes.set_ylabel("trajectories / s")
    axes.set_title(f"{report['profile']}: predicted throughput")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
