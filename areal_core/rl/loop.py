"""`areal train`: the asynchronous training loop.

The rollout controller generates continuously (bounded by the staleness rule) while the trainer works on
the previous batch in a worker thread; after every step the trainer publishes its weights and the
controller moves every generation server to them (interrupting in-flight requests, which continue with
the new weights). See `rollout.py` for the data-flow diagram.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from areal_core.config import config_to_yaml, save_config
from areal_core.engine.protocol import InferenceEngine
from areal_core.errors import ConfigError
from areal_core.reward_service import RewardService, RewardServiceConfig
from areal_core.rl.rollout import RolloutConfig, RolloutController, is_uniform, staleness_histogram
from areal_core.rl.resume import latest_checkpoint, save_run_checkpoint, truncate_log
from areal_core.rl.trainer import TrainerConfig, create_trainer
from areal_core.rl.warmup import WarmupConfig, supervised_warmup
from areal_core.schema import to_plain
from areal_core.tasks import get_task


@dataclass
class ModelConfig:
    path: str = "embedded"            # a Hugging Face model directory, or "embedded" (built by areal, cached)
    # Embedded model only. 3 layers, not 2: on the CPU demo the deeper model learns the carry the 2-layer one
    # kept missing (held-out greedy after RL 89-98% over nine runs of 450-500 steps, against 80-92% over
    # six), at ~1.3x the trainer's step time (bench/RESULTS.md).
    num_hidden_layers: int = 3
    hidden_size: int = 96             # embedded model only
    seed: int = 0                     # embedded model only


@dataclass
class EngineConfig:
    backend: Literal["server", "local", "sglang"] = "local"
    servers: int = 1                  # server: number of `areal serve` processes to start
    urls: list[str] = field(default_factory=list)   # sglang: servers already running (else launched)
    launch_args: list[str] = field(default_factory=list)  # sglang: extra launch_server arguments
    torch_threads: int = 1
    max_running_requests: int = 256
    startup_timeout: float = 300.0


@dataclass
class EvalConfig:
    every: int = 0                    # evaluate every N steps (0: only before and after)
    limit: int = 500                  # held-out samples
    greedy: bool = True
    sampled: bool = True              # temperature = rollout temperature
    max_new_tokens: int | None = None  # default: rollout.max_new_tokens
    stop_at_accuracy: float | None = None  # stop when sampled held-out accuracy reaches this
    db: str | None = "default"        # results store for `areal leaderboard`: "default" is the one `areal eval`
                                      # uses ($AREAL_EVAL_DB or the user data dir); a path or SQLAlchemy URL; null: none


@dataclass
class TrainConfig:
    name: str = "arithmetic-demo"
    output_dir: str = "runs"
    task: str = "arithmetic"
    eval_task: str | None = "arithmetic-test"
    steps: int = 450                  # the CPU demo: ~4.5 minutes on two cores with the 3-layer embedded model
    seed: int = 0
    data_dir: str | None = None
    reward_options: dict[str, Any] = field(default_factory=dict)  # merged over the task's reward options
    tensorboard: bool = True
    keep_policy_every: int = 0        # keep the published weights of every N-th step in RUN_DIR/policies/ (0: none)
    checkpoint_every: int = 20        # write a resumable checkpoint every N steps (0: never)
    keep_checkpoints: int = 2         # the newest N checkpoints are kept (an older one is the fallback)
    model: ModelConfig = field(default_factory=ModelConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    reward: RewardServiceConfig = field(default_factory=lambda: RewardServiceConfig(workers=1))
    eval: EvalConfig = field(default_factory=EvalConfig)

    def validate(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.rollout.weight_update not in ("interrupt", "wait"):
            raise ValueError(f"rollout.weight_update must be interrupt or wait, got {self.rollout.weight_update!r}")
        if self.rollout.batch_size < 1 or self.rollout.group_size < 1:
            raise ValueError("rollout.batch_size and rollout.group_size must be >= 1")


SYNC_OVERRIDES = ["rollout.max_staleness=0", "rollout.weight_update=wait"]


def cache_dir() -> Path:
    return Path(os.environ.get("AREAL_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "areal")


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resolve_model(config: ModelConfig) -> Path:
    """The model directory: the configured path, or the embedded model (created once, then cached)."""
    if config.path != "embedded":
        from areal_core.engine.model import check_model_dir

        return check_model_dir(config.path)
    from areal_core.engine.model import TINY_DEFAULTS, init_model

    settings = {"num_hidden_layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
                "intermediate_size": 3 * config.hidden_size}
    target = cache_dir() / "models" / f"embedded-{_digest(TINY_DEFAULTS, settings, config.seed)}"
    if not (target / "model.safetensors").exists():
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        init_model(tmp, seed=config.seed, **settings)
        publish_cache_entry(tmp, target)
    return target


def publish_cache_entry(tmp: Path, target: Path) -> None:
    """Move a freshly built model directory into the cache, atomically.

    Runs started together on a cold cache each build the same entry (same key, same content); the first to
    finish puts its copy in place and the others drop theirs. An entry in place is never deleted: another
    run may be loading from it."""
    if target.exists() and not (target / "model.safetensors").exists():
        # Damaged from outside (entries only ever appear whole). Renamed aside before it is deleted, so that
        # two runs finding it cannot delete the good entry one of them has put in its place meanwhile.
        aside = target.with_name(f"{target.name}.damaged{os.getpid()}")
        try:
            os.replace(target, aside)
        except OSError:
            pass  # another run moved it first
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:  # the target is a non-empty directory: another run finished first
        if not (target / "model.safetensors").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _keep_policy(weights: Path, target: Path) -> None:
    """Copy published weights to `policies/stepN`, whole or not at all (a kill mid-copy must not leave a
    directory that looks like a policy)."""
    from areal_core.rl.checkpoint import atomic_directory

    with atomic_directory(target, durable=False) as tmp:
        shutil.copytree(weights, tmp, dirs_exist_ok=True)


# Keys that fix which prompts a checkpoint has trained on (batch k is prompts [kB, (k+1)B) of the task's
# order under rollout.seed): changed on resume, prompts would be skipped or trained twice.
RESUME_FIXED_KEYS = ("task", "rollout.seed", "rollout.batch_size", "rollout.group_size")


def _check_resume_config(config: "TrainConfig", run_dir: Path) -> None:
    from areal_core.config import load_config

    saved = load_config(TrainConfig, run_dir / "config.yaml", [])

    def get(obj: Any, key: str) -> Any:
        for part in key.split("."):
            obj = getattr(obj, part)
        return obj

    changed = [f"{key}={get(config, key)!r} (the run has {get(saved, key)!r})"
               for key in RESUME_FIXED_KEYS if get(config, key) != get(saved, key)]
    if changed:
        raise ConfigError(f"--resume {run_dir}: {', '.join(changed)}: these keys fix which prompts the checkpoint "
                          f"has trained on and cannot change on resume ({', '.join(RESUME_FIXED_KEYS)})")


def _file_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.safetensors")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class RunLogger:
    """metrics.jsonl + TensorBoard + plugin hooks + a live progress line."""

    def __init__(self, run_dir: Path, tensorboard: bool, total_steps: int, resume_step: int | None = None) -> None:
        from areal_core.plugins import get_plugin_manager

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
        self.hooks = get_plugin_manager()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn(),
                                 disable=not sys.stderr.isatty())
        self.bar = self.progress.add_task("train", total=total_steps, completed=resume_step or 0, info="")

    def log(self, step: int, version: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, "version": version, "time": time.time(), **metrics}
        self.history.append(record)
        self.metrics_file.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, step)
        numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.hooks.notify("on_train_step", step=step, policy_version=version, metrics=numeric, run_dir=str(self.run_dir))
        info = (f"reward {metrics.get('reward_mean', 0):.3f} | mixed {metrics.get('mixed_group_fraction', 0):.2f} | "
                f"{metrics.get('trajectories_per_second', 0):.0f} traj/s | stale≤{metrics.get('staleness_max', 0)}")
        self.progress.update(self.bar, completed=step, info=info)

    def close(self) -> None:
        self.metrics_file.close()
        if self.writer is not None:
            self.writer.close()


def plot_rewards(history: list[dict[str, Any]], evals: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([h["step"] for h in history], [h["reward_mean"] for h in history], label="training reward (mean)")
    for key, style in (("sampled_accuracy", "o-"), ("greedy_accuracy", "s--")):
        points = [(e["step"], e[key]) for e in evals if key in e]
        if points:
            ax.plot(*zip(*points), style, label=f"held-out {key.replace('_', ' ')}")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class Engines:
    """Starts and stops the generation backend chosen in the config; `engine` implements InferenceEngine."""

    def __init__(self, config: EngineConfig, model_dir: Path, run_dir: Path) -> None:
        self.config = config
        self.model_dir = model_dir
        self.run_dir = run_dir
        self.processes: list[Any] = []
        self.engine: InferenceEngine | None = None

    async def __aenter__(self) -> InferenceEngine:
        from areal_core.engine.sglang_client import SGLangEngine, ServerProcess

        config = self.config
        if config.backend == "local":
            from areal_core.engine.local import LocalEngine

            self.engine = LocalEngine(self.model_dir, max_running_requests=config.max_running_requests,
                                      torch_threads=config.torch_threads).start()
            return self.engine
        urls = list(config.urls)
        if not urls:
            import socket

            for i in range(config.servers):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                log = str(self.run_dir / f"engine-{i}.log")
                env = {"OMP_NUM_THREADS": str(config.torch_threads), "AREAL_PARENT_PID": str(os.getpid())}
                if config.backend == "server":
                    process = ServerProcess.areal(str(self.model_dir), port, log_path=log, env=env, extra_args=[
                        "--torch-threads", str(config.torch_threads),
                        "--max-running-requests", str(config.max_running_requests)])
                else:
                    process = ServerProcess.sglang(str(self.model_dir), port, extra_args=config.launch_args,
                                                   log_path=log, env=env)
                self.processes.append(process.start(die_with_parent=True))
            for process in self.processes:
                await asyncio.to_thread(process.wait_ready, config.startup_timeout)
            urls = [p.url for p in self.processes]
        self.engine = SGLangEngine(urls)
        return self.engine

    async def __aexit__(self, *exc: Any) -> None:
        if self.engine is not None:
            await self.engine.close()
        for process in self.processes:
            process.stop()


async def run_training(config: TrainConfig, echo=print, resume: str | Path | None = None) -> dict[str, Any]:
    """Run `areal train` with a resolved config; returns the summary (also saved as summary.json).

    resume: the directory of an earlier run of this config; it continues from its newest intact
    checkpoint (from the start, in the same directory, when it has none)."""
    import torch

    torch.manual_seed(config.seed)
    torch.set_num_threads(max(1, config.engine.torch_threads))
    checkpoint = None
    if resume is not None:
        run_dir = Path(resume).resolve()  # servers elsewhere load weights by this path: never relative
        if not (run_dir / "config.yaml").exists():
            raise ConfigError(f"--resume {run_dir}: not a run directory (no config.yaml)")
        checkpoint = latest_checkpoint(run_dir, warn=lambda message: echo(message))
        echo(f"resuming {run_dir} from {checkpoint[0].name}" if checkpoint
             else f"resuming {run_dir}: no intact checkpoint, starting again from step 0")
        if checkpoint is not None:
            _check_resume_config(config, run_dir)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(config.output_dir).resolve() / f"{config.name}-{stamp}"
        run_dir.mkdir(parents=True, exist_ok=False)
    save_config(config, run_dir)
    echo(f"# resolved config (saved to {run_dir / 'config.yaml'})\n{config_to_yaml(config)}")
    started = time.perf_counter()

    task = get_task(config.task, config.data_dir)
    eval_task = get_task(config.eval_task, config.data_dir) if config.eval_task else None
    if checkpoint is not None:
        model_dir = checkpoint[0] / "trainer"  # an HF model dir holding the checkpointed policy
    else:
        model_dir = resolve_model(config.model)
    if config.warmup.enabled and checkpoint is None:
        key = _digest(_file_digest(model_dir), to_plain(config.warmup), config.task, task.spec.to_dict())
        warm_dir = cache_dir() / "warmup" / key
        if (warm_dir / "model.safetensors").exists():
            echo(f"warm-up: reusing {warm_dir}")
        else:
            t0 = time.perf_counter()
            tmp = warm_dir.with_name(warm_dir.name + f".tmp{os.getpid()}")
            await asyncio.to_thread(supervised_warmup, model_dir, task, config.warmup, tmp, config.trainer.device)
            publish_cache_entry(tmp, warm_dir)
            done = json.loads((warm_dir / "warmup.json").read_text())
            echo(f"warm-up: {done['steps']} supervised steps in {time.perf_counter() - t0:.1f}s "
                 f"(training-batch exact match {done['final_batch_accuracy']:.0%}) -> {warm_dir}")
        model_dir = warm_dir

    state: dict[str, Any] = checkpoint[1] if checkpoint else {"step": 0, "elapsed_seconds": 0.0, "trajectories": 0}
    trainer = create_trainer(model_dir, config.trainer, total_steps=config.steps, scratch_dir=run_dir / "trainer")
    if checkpoint is not None:
        trainer.load_checkpoint(checkpoint[0] / "trainer")
    tokenizer = trainer.tokenizer
    logger = RunLogger(run_dir, config.tensorboard, config.steps, resume_step=state["step"] if resume else None)
    evals: list[dict[str, Any]] = truncate_log(run_dir / "evals.jsonl", state["step"]) if resume else []
    db = results_db(config) if resume and eval_task is not None else None
    if db is not None:
        await asyncio.to_thread(_supersede_redone_evals, db, run_dir, state["step"], echo)
    try:
        async with Engines(config.engine, model_dir, run_dir) as engine, RewardService(config.reward) as rewards:
            return await _train(config, run_dir, task, eval_task, trainer, tokenizer, engine, rewards, logger,
                                evals, state, started, echo, model_dir)
    finally:
        logger.close()
        trainer.close()


def results_db(config: TrainConfig) -> str | None:
    """Where the run's evals are recorded for `areal leaderboard` (None: nowhere)."""
    from areal_core.eval.store import default_db

    return default_db() if config.eval.db == "default" else config.eval.db


def _supersede_redone_evals(db: str, run_dir: Path, step: int, echo) -> None:
    """A resumed run evaluates the steps after its checkpoint again: their old records leave the leaderboard."""
    from areal_core.eval.store import ResultsStore

    with ResultsStore(db) as store:
        count = store.supersede_training_evals(str(run_dir), step)
    if count:
        echo(f"results store: {count} eval record(s) of steps after {step} marked superseded (they are redone)")


async def _train(config: TrainConfig, run_dir: Path, task, eval_task, trainer, tokenizer, engine, rewards,
                 logger: RunLogger, evals: list[dict[str, Any]], state: dict[str, Any], started: float,
                 echo, model_dir: Path) -> dict[str, Any]:
    rollout = config.rollout
    eval_tokens = config.eval.max_new_tokens or rollout.max_new_tokens
    first_step = state["step"] + 1
    from areal_core.eval.records import EvalSettings
    from areal_core.eval.runner import evaluate_task, record_eval

    db = results_db(config)
    weights = {"dir": model_dir}  # the directory holding the weights the engine serves now

    async def evaluate(step: int) -> dict[str, Any]:
        if eval_task is None:
            return {}
        record: dict[str, Any] = {"step": step}
        for key, enabled, temperature in (("greedy_accuracy", config.eval.greedy, 0.0),
                                          ("sampled_accuracy", config.eval.sampled, rollout.temperature)):
            if not enabled:
                continue
            settings = EvalSettings(n=1, k=(1,), temperature=temperature, top_p=rollout.top_p,
                                    max_new_tokens=eval_tokens, limit=config.eval.limit, seed=config.seed)
            result = await evaluate_task(engine, eval_task, tokenizer, rewards, settings,
                                         reward_options=config.reward_options)
            record[key] = result.metrics["accuracy"]
            if db is not None:
                await asyncio.to_thread(record_eval, db, f"{run_dir.name}@step{step}", eval_task, result,
                                        model_path=weights["dir"], step=step, run_dir=run_dir)
        evals.append(record)
        with open(run_dir / "evals.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        return record

    if first_step > 1 or config.engine.urls:
        # Servers we did not start hold some other model, and resumed ones do not know the policy version:
        # publish the starting policy into the run directory (which every server can read) and load it.
        path = await asyncio.to_thread(trainer.publish, run_dir / "weights" / f"v{trainer.version}")
        await engine.update_weights(str(path), trainer.version)
        weights["dir"] = path
    before = next((e for e in evals if e["step"] == 0), None)
    if before is None:
        before = await evaluate(0)
    if before:
        echo("held-out accuracy before RL: " + _format_eval(before))
    hooks = logger.hooks

    def on_trajectory(trajectory):
        hooks.notify("on_trajectory", trajectory=trajectory, run_dir=str(run_dir))

    controller = RolloutController(task, engine, rewards, tokenizer, rollout, on_trajectory=on_trajectory,
                                   reward_options=config.reward_options)
    if "controller" in state:
        controller.load_state_dict(state["controller"])
    controller.start()
    rl_started = time.perf_counter() - state["elapsed_seconds"]  # the training clock continues on resume
    trajectories_total = state["trajectories"]
    stopped_early = False
    with logger.progress:
        try:
            for step in range(first_step, config.steps + 1):
                wait_started = time.perf_counter()
                groups = await controller.next_batch()
                waited = time.perf_counter() - wait_started
                batch = [t for g in groups for t in g.trajectories]
                if not batch:
                    last = controller.last_failure or "every response dropped, see dropped_responses"
                    raise RuntimeError(f"every rollout of batch {step} failed (last: {last}); see the engine and "
                                       "reward logs")
                stale = staleness_histogram(batch, trainer.version)
                informative = [g for g in groups if not is_uniform(g)]
                trained = batch
                if rollout.skip_uniform_groups and informative and config.trainer.kl_coef == 0:
                    trained = [t for g in informative for t in g.trajectories]
                metrics = await asyncio.to_thread(trainer.train_step, trained, rollout.temperature)
                publish_started = time.perf_counter()
                path = await asyncio.to_thread(trainer.publish, run_dir / "weights" / f"v{trainer.version}")
                held = await controller.update_weights(str(path), trainer.version)
                weights["dir"] = path
                if config.keep_policy_every and step % config.keep_policy_every == 0:
                    await asyncio.to_thread(_keep_policy, path, run_dir / "policies" / f"step{step:06d}")
                _prune_weights(run_dir / "weights", keep=path)
                trajectories_total += len(batch)
                elapsed = time.perf_counter() - rl_started
                metrics.update({
                    "wait_seconds": waited, "publish_seconds": time.perf_counter() - publish_started,
                    "update_hold_seconds": held, "trajectories_per_second": trajectories_total / elapsed,
                    "elapsed_seconds": elapsed, "staleness_max": max(stale), "staleness_hist": stale,
                    "dropped_responses": sum(g.dropped for g in groups),
                    "response_length_mean": sum(len(t.output_token_ids) for t in batch) / len(batch),
                    "reward_mean": sum(t.reward.score for t in batch) / len(batch),
                    "mixed_group_fraction": len(informative) / len(groups), "trained_sequences": len(trained),
                    "prompts": [int(g.group_id[1:]) for g in groups],
                })
                logger.log(step, trainer.version, metrics)
                # Evaluate before the checkpoint of the same step: a kill during the eval then resumes from the
                # checkpoint before and does the eval again, instead of leaving a hole in evals.jsonl.
                if config.eval.every and step % config.eval.every == 0 and step < config.steps:
                    record = await evaluate(step)
                    target = config.eval.stop_at_accuracy
                    stopped_early = target is not None and record.get("sampled_accuracy", 0.0) >= target
                if config.checkpoint_every and (step % config.checkpoint_every == 0 or step == config.steps
                                                or stopped_early):
                    # Snapshot now, between awaits: consistent with the batches taken so far.
                    snapshot = {"step": step, "elapsed_seconds": elapsed, "trajectories": trajectories_total,
                                "controller": controller.state_dict()}
                    await asyncio.to_thread(save_run_checkpoint, run_dir, step, trainer, snapshot,
                                            config.keep_checkpoints)
                if stopped_early:
                    break
        finally:
            await controller.stop()
    rl_seconds = time.perf_counter() - rl_started
    last_step = logger.history[-1]["step"] if logger.history else 0
    after = evals[-1] if stopped_early else await evaluate(last_step)
    summary = {
        "run_dir": str(run_dir), "steps": last_step, "rl_seconds": rl_seconds,
        "total_seconds": time.perf_counter() - started, "trajectories": trajectories_total,
        "trajectories_per_second": trajectories_total / rl_seconds if rl_seconds else 0.0,
        "before": before, "after": after, "stopped_early": stopped_early,
        "dropped_responses": dict(controller.dropped),
        "final_reward_mean": logger.history[-1]["reward_mean"] if logger.history else None,
        # per generation server (server / sglang backends): requests served, failures, state
        "engine_servers": engine.server_stats() if hasattr(engine, "server_stats") else [],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if logger.history:
        plot_rewards(logger.history, evals, run_dir / "reward_curve.png")
    _print_summary(summary, echo)
    return summary


def _prune_weights(directory: Path, keep: Path) -> None:
    """Published weights older than the newest are no longer needed by any server."""
    for old in directory.iterdir():
        if old != keep and old.is_dir() and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)


def _format_eval(record: dict[str, Any]) -> str:
    parts = []
    if "greedy_accuracy" in record:
        parts.append(f"greedy {record['greedy_accuracy']:.1%}")
    if "sampled_accuracy" in record:
        parts.append(f"sampled (T=1) {record['sampled_accuracy']:.1%}")
    return ", ".join(parts)


def _print_summary(summary: dict[str, Any], echo) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="areal train: summary")
    table.add_column("")
    table.add_column("before RL", justify="right")
    table.add_column("after RL", justify="right")
    for key in ("greedy_accuracy", "sampled_accuracy"):
        if key in summary["before"]:
            table.add_row(f"held-out {key.replace('_', ' ')}", f"{summary['before'][key]:.1%}", f"{summary['after'][key]:.1%}")
    Console().print(table)
    if "greedy_accuracy" in summary["after"]:
        echo(f"held-out accuracy: {summary['after']['greedy_accuracy']:.0%} (greedy), "
             f"{summary['after'].get('sampled_accuracy', float('nan')):.0%} (sampled, T=1); "
             f"was {summary['before']['greedy_accuracy']:.0%} / {summary['before'].get('sampled_accuracy', float('nan')):.0%}")
    echo(f"{summary['steps']} RL steps in {summary['rl_seconds']:.1f}s ({summary['trajectories_per_second']:.0f} "
         f"trajectories/s); whole run {summary['total_seconds']:.1f}s; outputs in {summary['run_dir']}")
