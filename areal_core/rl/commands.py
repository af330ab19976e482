"""`areal train`."""
from __future__ import annotations

import asyncio
from pathlib import Path

import click


def config_arguments(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """(a CONFIG.yaml, KEY=VALUE overrides) of a command's arguments, as `areal train` takes them."""
    path, overrides = None, []
    for arg in args:
        if "=" in arg:
            overrides.append(arg)
        elif path is None and Path(arg).suffix in (".yaml", ".yml"):
            path = arg
        else:
            raise click.UsageError(f"unexpected argument {arg!r}: give one CONFIG.yaml and KEY=VALUE overrides")
    return path, overrides


@click.command("train", context_settings={"ignore_unknown_options": False})
@click.argument("args", nargs=-1, metavar="[CONFIG.yaml] [KEY=VALUE]...")
@click.option("--sync", is_flag=True, help="Synchronous baseline: max staleness 0, weight updates wait for "
                                           "in-flight generation (same as rollout.max_staleness=0 rollout.weight_update=wait).")
@click.option("--print-config", is_flag=True, help="Print the resolved config and exit.")
@click.option("--resume", "resume", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="RUN_DIR",
              help="Continue a run (e.g. one that was killed) from its newest intact checkpoint, with the config "
                   "saved in RUN_DIR (KEY=VALUE arguments may still override it, e.g. steps=600).")
def train_command(args: tuple[str, ...], sync: bool, print_config: bool, resume: Path | None) -> None:
    """Asynchronous decoupled-PPO training.

    With no arguments: the CPU demo. It builds the tiny embedded model, gives it a short supervised
    warm-up on the arithmetic task (cached for later runs), runs async RL and prints the held-out
    accuracy before and after. Any task and model work the same way, e.g.

        areal train task=gsm8k eval_task=gsm8k model.path=/models/Qwen2.5-0.5B engine.backend=sglang

    A YAML file gives the config; KEY=VALUE arguments override it (see --print-config for every key).
    """
    from areal_core.config import config_to_yaml, load_config
    from areal_core.rl.config import SYNC_OVERRIDES, TrainConfig
    from areal_core.rl.run import run_training

    path, overrides = config_arguments(args)
    if resume is not None:
        if path is not None:
            raise click.UsageError("--resume uses the config saved in RUN_DIR; give KEY=VALUE overrides, not a file")
        if not (resume / "config.yaml").exists():
            raise click.UsageError(f"--resume {resume}: not a run directory (no config.yaml in it)")
        path = str(resume / "config.yaml")
    if sync:
        overrides = SYNC_OVERRIDES + overrides
    config = load_config(TrainConfig, path, overrides)
    if print_config:
        click.echo(config_to_yaml(config))
        return
    asyncio.run(run_training(config, echo=click.echo, resume=resume))
