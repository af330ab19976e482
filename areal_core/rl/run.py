"""`areal train`: one training run, whose step loop (`TrainingRun.train`) reads like the algorithm.

The rollout controller generates continuously (bounded by the staleness rule) while the trainer works on the
previous batch in a worker thread; after every step the controller moves every generation server to the trainer's
new weights (interrupting in-flight requests, which continue with the new weights): through the disk, or streamed
over a process group (`engine.weight_sync`, weight_updates.py). See
`rollout.py` for the data flow, `algorithms.py` for the equations, `trainer.py` for the PPO phases.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch

from areal_core.config import config_to_yaml, load_config, save_config
from areal_core.engine import EngineTarget, InferenceEngine, start_engines
from areal_core.errors import ConfigError
from areal_core.eval.records import EvalSettings
from areal_core.eval.runner import evaluate_task, record_eval
from areal_core.files import atomic_directory, atomic_write, directory_bytes
from areal_core.rewards import RewardService
from areal_core.rl.algorithms import group_advantages
from areal_core.rl.config import TrainConfig, check_resume_config
from areal_core.rl.memory import return_freed_memory, setup_objects_frozen
from areal_core.rl.model_cache import resolve_model
from areal_core.rl.report import RunLogger, format_eval, mismatch_summary, plot_rewards, print_summary
from areal_core.rl.resume import latest_checkpoint, save_run_checkpoint, supersede_redone_evals, truncate_log
from areal_core.rl.rollout import (Group, RolloutController, is_uniform, sequence_tokens, skips_uniform_groups,
                                   staleness_histogram, trained_groups)
from areal_core.rl.trainer import TrainerBackend, create_trainer
from areal_core.rl.warmup import warmed_up
from areal_core.rl.weight_updates import WeightStreamer
from areal_core.tasks import Task, get_task
from areal_core.workflows import WorkflowChoice, choose_workflow
from areal_core.types import Trajectory

Echo = Callable[[str], None]
MISMATCH_WARNING_EVERY = 50  # steps between two warnings of a lasting engine/trainer mismatch


class TrainingRun:
    """A run's parts (trainer, engine, reward service, rollout controller, logger) and its step loop."""

    def __init__(self, config: TrainConfig, run_dir: Path, task: Task, eval_task: Task | None,
                 trainer: TrainerBackend, engine: InferenceEngine, rewards: RewardService, logger: RunLogger,
                 state: dict[str, Any], weights: Path, echo: Echo, *, resumed: bool, started: float,
                 eval_workflow: WorkflowChoice | None) -> None:
        self.config, self.run_dir, self.task, self.eval_task = config, run_dir, task, eval_task
        self.trainer, self.engine, self.rewards, self.logger, self.echo = trainer, engine, rewards, logger, echo
        self.state = state                # step, elapsed_seconds, trajectories (+ the controller's, when resumed)
        self.weights: Path | None = weights   # the directory holding the weights the engines serve now, if any
        self.started = started            # when the run (model, warm-up, trainer start) began: loop time
        self.db = results_db(config)
        self.evals: list[dict[str, Any]] = truncate_log(run_dir / "evals.jsonl", state["step"]) if resumed else []
        if resumed:   # a checkpoint after the one resumed from (found damaged) is written again
            truncate_log(run_dir / "checkpoints.jsonl", state["step"])
        self.eval_workflow = eval_workflow  # chosen and checked before the run started (check_workflows)
        self._next_mismatch_warning = 0
        self.rollout = RolloutController(task, engine, rewards, trainer.tokenizer, config.rollout,
                                         on_trajectory=self._on_trajectory, reward_options=config.reward_options)
        if "controller" in state:
            self.rollout.load_state_dict(state["controller"])
        self.streamer = (None if config.engine.weight_sync == "disk" else   # weights to the engines without the disk
                         WeightStreamer(trainer, engine, config.engine, config.trainer.device))

    async def train(self) -> dict[str, Any]:
        """Evaluate, run the steps, evaluate again; returns the summary (also saved as summary.json)."""
        config, trainer, rollout = self.config, self.trainer, self.rollout
        now = asyncio.get_running_loop().time   # the event loop's clock: virtual under `areal plan`
        T = config.rollout.temperature
        first_step = self.state["step"] + 1
        if first_step > 1 or config.engine.urls:
            # Servers we did not start hold some other model, and resumed ones do not know the policy version.
            await self.sync_weights()
        before = next((e for e in self.evals if e["step"] == 0), None) or await self.evaluate(0)
        if before:
            self.echo("held-out accuracy before RL: " + format_eval(before))
        rollout.start()
        clock = now() - self.state["elapsed_seconds"]  # the training clock continues on resume
        stopped_early = False
        with self.logger.progress, setup_objects_frozen():
            try:
                for step in range(first_step, config.steps + 1):
                    wait_started = now()
                    groups = await rollout.next_batch()                           # the replay buffer's next batch
                    waited = now() - wait_started
                    batch, trained = self.trajectories(groups, step)              # less uniform groups
                    stale = staleness_histogram(batch, trainer.version)
                    started = now()
                    prepared = await asyncio.to_thread(trainer.prepare, trained, T, config.rollout.top_p,
                                                       config.rollout.top_k)
                    await asyncio.to_thread(trainer.recompute_proximal, prepared)   # pi_prox: weights before update
                    proximal_done = now()
                    advantages = group_advantages(torch.tensor([t.reward.score for t in trained]),
                                                  [t.group_id for t in trained], config.trainer.advantage)
                    metrics = await asyncio.to_thread(trainer.ppo_update, prepared, advantages)  # version + 1
                    metrics["train_seconds"] = now() - started
                    metrics["proximal_seconds"] = proximal_done - started
                    metrics["update_seconds"] = metrics["train_seconds"] - metrics["proximal_seconds"]
                    started = now()
                    held, sync_metrics = await self.sync_weights(step)              # pause, load, resume
                    metrics.update(sync_metrics, wait_seconds=waited, publish_seconds=now() - started,
                                   update_hold_seconds=held, staleness_max=max(stale), staleness_hist=stale)
                    self.log(step, groups, batch, trained, metrics, clock)
                    stopped_early = await self.evaluate_during(step)
                    if config.checkpoint_every and (step % config.checkpoint_every == 0 or step == config.steps
                                                    or stopped_early):
                        await self.checkpoint(step)
                    if stopped_early:
                        break
            finally:
                await rollout.stop()
        return await self.finish(clock, stopped_early)

    # -- the phases, one method each -----------------------------------------------------------------------
    def trajectories(self, groups: list[Group], step: int) -> tuple[list[Trajectory], list[Trajectory]]:
        """(the whole batch, what is trained on): groups whose responses all scored the same carry no
        gradient under group-normalised advantages and are skipped (unless a KL term needs them)."""
        batch = [t for g in groups for t in g.trajectories]
        if not batch:
            last = self.rollout.last_failure
            if last is None:
                reasons = self.rollout.dropped.most_common(1)
                last = (f"every response dropped, most often for: {reasons[0][0]} ({reasons[0][1]}x)" if reasons
                        else "every response dropped, see dropped_responses")
            raise RuntimeError(f"every rollout of batch {step} failed (last: {last}); see the engine and reward logs")
        return batch, [t for g in trained_groups(groups, skips_uniform_groups(self.config)) for t in g.trajectories]

    async def sync_weights(self, step: int | None = None) -> tuple[float, dict[str, Any]]:
        """Move every engine to the trainer's weights (engine.weight_sync), and keep them as policies/stepN when
        asked; (seconds generation was held, metrics of the transfer)."""
        if self.streamer is None:
            return await self.load_weights(await asyncio.to_thread(self.publish), step), {}
        held, metrics = await self.streamer.update(self.trainer.version, self.rollout.hold_for_update)
        self.weights = None   # the engines' weights are on no disk now
        keep = self.config.keep_policy_every
        if step is not None and keep and step % keep == 0:
            await asyncio.to_thread(self.trainer.publish, self.run_dir / "policies" / f"step{step:06d}")
        return held, metrics

    def publish(self) -> Path:
        """Write the trainer's weights to `weights/v<version>`, where every server can load them."""
        return self.trainer.publish(self.run_dir / "weights" / f"v{self.trainer.version}")

    async def load_weights(self, path: Path, step: int | None = None) -> float:
        """Move every generation server to the weights at `path`, then keep a copy as `policies/stepN` when
        asked (after the load: the copy never delays generation); returns the seconds generation was held."""
        held = await self.rollout.update_weights(str(path), self.trainer.version)
        self.weights = path
        keep = self.config.keep_policy_every
        if step is not None and keep and step % keep == 0:
            await asyncio.to_thread(self._keep_policy, path, self.run_dir / "policies" / f"step{step:06d}")
        for old in (self.run_dir / "weights").iterdir():  # older weights are no longer needed by any server
            if old != path and old.is_dir() and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
        return held

    @staticmethod
    def _keep_policy(weights: Path, target: Path) -> None:
        with atomic_directory(target, durable=False) as tmp:
            shutil.copytree(weights, tmp, dirs_exist_ok=True)  # whole or not at all

    def log(self, step: int, groups: list[Group], batch: list[Trajectory], trained: list[Trajectory],
            metrics: dict[str, Any], clock: float) -> None:
        self.state["trajectories"] += len(batch)
        self.state["elapsed_seconds"] = elapsed = asyncio.get_running_loop().time() - clock
        lengths = [len(t.output_token_ids) for t in batch]
        response_tokens = sum(lengths)
        metrics.update({
            "trajectories_per_second": self.state["trajectories"] / elapsed, "elapsed_seconds": elapsed,
            "dropped_responses": sum(g.dropped for g in groups),
            "response_length_mean": response_tokens / len(batch), "response_tokens": response_tokens,
            "responses": len(batch), **length_distribution(lengths),
            "response_length_prompt_share": length_prompt_share(
                [[len(t.output_token_ids) for t in g.trajectories] for g in groups]),
            # per trajectory: the whole episode (queueing at the engine included) and its reward calls
            "episode_seconds_mean": sum(t.seconds for t in batch) / len(batch),
            "reward_seconds_mean": sum(t.reward_seconds for t in batch) / len(batch),
            "reward_mean": sum(t.reward.score for t in batch) / len(batch),
            "mixed_group_fraction": sum(not is_uniform(g) for g in groups) / len(groups),
            "trained_sequences": len(trained), "prompts": [int(g.group_id[1:]) for g in groups],
            # prompt + response tokens, of what was trained and of the batch: the groups that carry a gradient are
            # not a random share of the batch (easy short prompts are the mixed ones)
            "trained_tokens": sequence_tokens(trained), "batch_tokens": sequence_tokens(batch),
            # and the trained sequences' lengths: `areal plan` trains sequences of these (their padding and packing are
            # not the batch's: in the CPU demo every trained answer is four tokens long)
            **length_distribution([len(t.prompt_token_ids) for t in trained], "trained_prompt_length"),
            **length_distribution([len(t.output_token_ids) for t in trained], "trained_response_length"),
            "batch_prompts_used": self.rollout.last_batch_prompts,  # > batch_size: dynamic sampling dropped some
        })
        episodes = [t.episode for t in batch if t.episode]
        if episodes:  # a multi-turn workflow: how often the policy called a tool, and how its episodes ended
            metrics["tool_call_rate"] = sum(e.get("tool_calls", 0) > 0 for e in episodes) / len(episodes)
            metrics["tool_calls_mean"] = sum(e.get("tool_calls", 0) for e in episodes) / len(episodes)
            metrics["policy_token_fraction"] = (sum(t.policy_tokens for t in batch)
                                                / max(1, sum(len(t.output_token_ids) for t in batch)))
            metrics.update(tool_use(batch, episodes))
        self.logger.log(step, self.trainer.version, metrics)
        self.warn_of_mismatch(step, metrics)

    def warn_of_mismatch(self, step: int, metrics: dict[str, Any]) -> None:
        """A warning when the engine/trainer mismatch KL passes trainer.mismatch_warn_kl: at the first such step,
        then at most every MISMATCH_WARNING_EVERY steps while it lasts."""
        threshold, kl = self.config.trainer.mismatch_warn_kl, metrics.get("mismatch_kl", 0.0)
        if threshold is None or kl <= threshold or step < self._next_mismatch_warning:
            return
        self._next_mismatch_warning = step + MISMATCH_WARNING_EVERY
        self.echo(f"warning: step {step}: engine/trainer mismatch KL {kl:.3g} > trainer.mismatch_warn_kl={threshold} "
                  f"(mean |log-prob gap| {metrics['mismatch_abs_mean']:.3g}, {metrics['mismatch_large_fraction']:.1%} "
                  f"of tokens off by more than 0.1): the engine samples another policy than the trainer learns; "
                  f"{metrics.get('behav_capped_fraction', 0.0):.1%} of tokens masked or truncated by "
                  f"trainer.correction={self.config.trainer.correction} (docs/off-policy.md)")

    async def evaluate_during(self, step: int) -> bool:
        """The every-N-steps eval (before the same step's checkpoint: a kill during it resumes from the
        checkpoint before and evaluates again, instead of leaving a hole in evals.jsonl); True to stop early."""
        every, target = self.config.eval.every, self.config.eval.stop_at_accuracy
        if not (every and step % every == 0 and step < self.config.steps):
            return False
        record = await self.evaluate(step)
        return target is not None and record.get("sampled_accuracy", 0.0) >= target

    async def evaluate(self, step: int) -> dict[str, Any]:
        """Held-out accuracy of the weights the engines serve now (greedy, and sampled at the rollout
        temperature), recorded in evals.jsonl and the results store."""
        if self.eval_task is None:
            return {}
        config, rollout = self.config, self.config.rollout
        record: dict[str, Any] = {"step": step}
        for key, enabled, temperature in (("greedy_accuracy", config.eval.greedy, 0.0),
                                          ("sampled_accuracy", config.eval.sampled, rollout.temperature)):
            if not enabled:
                continue
            settings = EvalSettings(n=1, k=(1,), temperature=temperature, top_p=rollout.top_p, top_k=rollout.top_k,
                                    seed=config.seed,
                                    max_new_tokens=config.eval.max_new_tokens or rollout.max_new_tokens,
                                    limit=config.eval.limit)
            result = await evaluate_task(self.engine, self.eval_task, self.trainer.tokenizer, self.rewards, settings,
                                         reward_options=config.reward_options, workflow=self.eval_workflow)
            record[key] = result.metrics["accuracy"]
            if "tool_call_rate" in result.metrics:
                record[key.replace("accuracy", "tool_call_rate")] = result.metrics["tool_call_rate"]
            if self.db is not None:
                await asyncio.to_thread(record_eval, self.db, f"{self.run_dir.name}@step{step}", self.eval_task,
                                        result, model_path=self.weights, step=step, run_dir=self.run_dir,
                                        reward_options=config.reward_options)
        self.evals.append(record)
        with open(self.run_dir / "evals.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        return record

    async def checkpoint(self, step: int) -> None:
        # The snapshot is taken now, between awaits: consistent with the batches taken so far.
        snapshot = {"step": step, "elapsed_seconds": self.state["elapsed_seconds"],
                    "trajectories": self.state["trajectories"], "controller": self.rollout.state_dict()}
        started = asyncio.get_running_loop().time()
        target = await asyncio.to_thread(save_run_checkpoint, self.run_dir, step, self.trainer, snapshot,
                                         self.config.keep_checkpoints)
        seconds = asyncio.get_running_loop().time() - started
        record = {"step": step, "seconds": round(seconds, 3), "bytes": directory_bytes(target),
                  "path": str(target.relative_to(self.run_dir))}
        with open(self.run_dir / "checkpoints.jsonl", "a") as f:   # how long each checkpoint took, and its size
            f.write(json.dumps(record) + "\n")

    async def finish(self, clock: float, stopped_early: bool) -> dict[str, Any]:
        rl_seconds = asyncio.get_running_loop().time() - clock
        history = self.logger.history
        last_step = history[-1]["step"] if history else 0
        after = self.evals[-1] if stopped_early else await self.evaluate(last_step)
        trajectories = self.state["trajectories"]
        summary = {
            "run_dir": str(self.run_dir), "steps": last_step, "rl_seconds": rl_seconds,
            "total_seconds": asyncio.get_running_loop().time() - self.started, "trajectories": trajectories,
            "trajectories_per_second": trajectories / rl_seconds if rl_seconds else 0.0,
            "before": next((e for e in self.evals if e["step"] == 0), {}), "after": after,
            "stopped_early": stopped_early, "dropped_responses": dict(self.rollout.dropped),
            "final_reward_mean": history[-1]["reward_mean"] if history else None,
            "engine_servers": self.engine.server_stats(),  # per generation server: requests, failures, state
            "mismatch": mismatch_summary(history),
        }
        atomic_write(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        if history:
            plot_rewards(history, self.evals, self.run_dir / "reward_curve.png")
        print_summary(summary, self.echo)
        return summary

    async def close(self) -> None:
        """Leave the weight group the trainer shares with the engines, if any."""
        if self.streamer is not None:
            await self.streamer.close()

    def _on_trajectory(self, trajectory: Trajectory) -> None:
        self.logger.hook.on_trajectory(trajectory=trajectory, run_dir=str(self.run_dir))


async def run_training(config: TrainConfig, echo: Echo = print, resume: str | Path | None = None) -> dict[str, Any]:
    """Run `areal train` with a resolved config; returns the summary (also saved as summary.json).

    resume: the directory of an earlier run of this config; it continues from its newest intact checkpoint
    (from the start, in the same directory, when it has none)."""
    started = asyncio.get_running_loop().time()
    return_freed_memory()   # this process may hold the local trainer (the FSDP ranks set it themselves)
    torch.manual_seed(config.seed)
    if config.engine.torch_threads:
        torch.set_num_threads(config.engine.torch_threads)
    task = get_task(config.task, config.data_dir)  # before anything is written: a missing plugin is named first
    eval_task = get_task(config.eval_task, config.data_dir) if config.eval_task else None
    warmup_task = get_task(config.warmup.task, config.data_dir) if config.warmup.task else task
    eval_workflow = check_workflows(config, task, eval_task)  # a workflow or tool not installed, bad options: here
    run_dir, checkpoint = open_run_dir(config, resume, echo)
    save_config(config, run_dir)
    echo(f"# resolved config (saved to {run_dir / 'config.yaml'})\n{config_to_yaml(config)}")
    state: dict[str, Any] = checkpoint[1] if checkpoint else {"step": 0, "elapsed_seconds": 0.0, "trajectories": 0}
    if checkpoint is not None:
        model_dir = checkpoint[0] / "trainer"  # an HF model dir holding the checkpointed policy
    else:
        model_dir = resolve_model(config.model)
        if config.warmup.enabled:
            model_dir = await asyncio.to_thread(warmed_up, model_dir, warmup_task, config.warmup, config.trainer.device,
                                                echo)
    trainer = create_trainer(model_dir, config.trainer, total_steps=config.steps, scratch_dir=run_dir / "trainer")
    if checkpoint is not None:
        trainer.load_checkpoint(checkpoint[0] / "trainer")
    logger = RunLogger(run_dir, config.tensorboard, config.steps, resume_step=state["step"] if resume else None)
    db = results_db(config)
    if resume and eval_task is not None and db is not None:
        await asyncio.to_thread(supersede_redone_evals, db, run_dir, state["step"], echo)
    try:
        async with contextlib.AsyncExitStack() as stack:
            target = EngineTarget(model=model_dir, urls=tuple(config.engine.urls))
            engine = await stack.enter_async_context(start_engines(config.engine, target, run_dir))
            rewards = await stack.enter_async_context(RewardService(config.reward))
            run = TrainingRun(config, run_dir, task, eval_task, trainer, engine, rewards, logger, state, model_dir, echo,
                              resumed=resume is not None, started=started, eval_workflow=eval_workflow)
            stack.push_async_callback(run.close)   # before the engines stop
            return await run.train()
    finally:
        logger.close()
        trainer.close()


LENGTH_HISTOGRAM_BINS = 32   # distinct lengths a step logs exactly; more, and it logs quantiles
LENGTH_QUANTILES = tuple(i / 100 for i in range(100)) + (0.995, 0.999, 1.0)


def length_distribution(lengths: list[int], name: str = "response_length") -> dict[str, list[list[float]]]:
    """A step's lengths (its responses' by default) in one line of metrics.jsonl (`areal plan --lengths RUN_DIR`
    draws from them): `<name>_hist`, [[tokens, count], ...], when they take at most LENGTH_HISTOGRAM_BINS values,
    else `<name>_quantiles`, [[p, tokens], ...]: the sorted lengths at index round(p (n - 1)) for p in
    LENGTH_QUANTILES (every percentile, 99.5, 99.9, the max: ~1.3 kB at any batch size). Pairs, not a mapping,
    so TensorBoard does not get a scalar per length."""
    counts = Counter(lengths)
    if len(counts) <= LENGTH_HISTOGRAM_BINS:
        return {f"{name}_hist": [[tokens, count] for tokens, count in sorted(counts.items())]}
    ordered = sorted(lengths)
    return {f"{name}_quantiles": [[p, ordered[round(p * (len(ordered) - 1))]] for p in LENGTH_QUANTILES]}


TOOL_SECONDS_QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)


def turn_lengths(batch: list[Trajectory]) -> list[int]:
    """The tokens of each policy generation (a request to the engine) of these trajectories, in order."""
    turns = [turn["end"] - turn["start"] for t in batch for turn in t.turns if turn["role"] == "assistant"]
    return turns + [len(t.output_token_ids) for t in batch if not t.turns]   # one generation, nothing appended


def tool_use(batch: list[Trajectory], episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """A multi-turn step's turns and tool calls in metrics.jsonl, what `areal plan --lengths RUN_DIR` simulates a tool
    workflow from: `turn_length_hist` or `turn_length_quantiles` (the policy's generations, each a request to the
    engine) with `turns` (their count), `tool_calls_hist` ([[calls, episodes], ...]), and when tools ran,
    `tool_seconds_mean`, `tool_seconds_quantiles` ([[p, seconds], ...] per call) and `tool_result_tokens_mean` (the
    tokens a result adds, its wrapper included)."""
    turns = turn_lengths(batch)
    out: dict[str, Any] = length_distribution(turns, "turn_length")
    out["turns"] = len(turns)
    out["tool_calls_hist"] = [[calls, count] for calls, count in
                              sorted(Counter(int(e.get("tool_calls", 0)) for e in episodes).items())]
    seconds = sorted(float(s) for e in episodes for s in e.get("tool_seconds", ()))
    if seconds:
        out["tool_seconds_mean"] = sum(seconds) / len(seconds)
        out["tool_seconds_quantiles"] = [[p, seconds[round(p * (len(seconds) - 1))]] for p in TOOL_SECONDS_QUANTILES]
    results = [turn["end"] - turn["start"] for t in batch for turn in t.turns if "tool" in turn]
    if results:
        out["tool_result_tokens_mean"] = sum(results) / len(results)
    return out


def length_prompt_share(groups: list[list[int]]) -> float | None:
    """The share of the variance of log response length that lies between prompts (the intraclass correlation
    ICC(1) of one-way ANOVA over the groups, unequal sizes allowed), in [0, 1]: 0 when a prompt says nothing of how
    long its answers run, 1 when a group's answers are equally long. It decides how long a group holds its slot
    when prompts in flight are capped (`areal plan --lengths RUN_DIR` draws lengths with it); None with fewer than
    two groups of two or more, or when every length is the same."""
    logs = [[math.log(max(1, n)) for n in group] for group in groups if len(group) >= 2]
    total = sum(len(group) for group in logs)
    if len(logs) < 2:
        return None
    grand = sum(map(sum, logs)) / total
    means = [sum(group) / len(group) for group in logs]
    between = sum(len(g) * (m - grand) ** 2 for g, m in zip(logs, means)) / (len(logs) - 1)
    within = sum((x - m) ** 2 for g, m in zip(logs, means) for x in g) / (total - len(logs))
    size = (total - sum(len(g) ** 2 for g in logs) / total) / (len(logs) - 1)   # the groups' effective size
    denominator = between + (size - 1) * within
    if denominator <= 0:
        return None
    return min(1.0, max(0.0, (between - within) / denominator))


def check_workflows(config: TrainConfig, task: Task, eval_task: Task | None) -> WorkflowChoice | None:
    """The workflows the run uses, chosen (and so checked) before anything starts: training's, and the held-out
    eval's (returned), which runs the same workflow as training when `rollout.workflow` names one."""
    options = config.rollout.workflow_options
    choose_workflow(task, options, config.rollout.workflow)
    if eval_task is None:
        return None
    return choose_workflow(eval_task, options if config.rollout.workflow else {}, config.rollout.workflow)


def open_run_dir(config: TrainConfig, resume: str | Path | None, echo: Echo) -> tuple[Path, Any]:
    """(the run directory, its newest intact checkpoint or None): a new `<output_dir>/<name>-<time>`, or the
    directory being resumed, whose checkpoint must fit the config (the keys that fix the prompts)."""
    if resume is None:
        run_dir = Path(config.output_dir).resolve() / f"{config.run_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir.mkdir(parents=True, exist_ok=False)
        return run_dir, None
    run_dir = Path(resume).resolve()  # servers elsewhere load weights by this path: never relative
    if not (run_dir / "config.yaml").exists():
        raise ConfigError(f"--resume {run_dir}: not a run directory (no config.yaml)")
    checkpoint = latest_checkpoint(run_dir, warn=echo)
    echo(f"resuming {run_dir} from {checkpoint[0].name}" if checkpoint
         else f"resuming {run_dir}: no intact checkpoint, starting again from step 0")
    if checkpoint is not None:
        check_resume_config(config, load_config(TrainConfig, run_dir / "config.yaml", []), run_dir)
    return run_dir, checkpoint


def results_db(config: TrainConfig) -> str | None:
    """Where the run's evals are recorded for `areal leaderboard` (None: nowhere)."""
    from areal_core.eval.store import default_db

    return default_db() if config.eval.db == "default" else config.eval.db
