"""Running evals: n samples per problem through a response source, scored by the reward service, each
sample stored as soon as it is scored, metrics from the stored samples.

    ResponseSource ──► respond ×n per problem ──► reward service ──► results store ──► metrics, details files

An eval is identified by a key: the hash of what decides its samples (model content hash, task spec hash,
dataset hash, reward and options, plugin versions, sampling settings, seed, limit). Running an eval whose
key has a finished run reuses that run; a run left unfinished (killed, crashed) is resumed: only the
(problem, sample) pairs it lacks are done. Sampling is seeded per (problem, sample), so the resumed run
ends with exactly the samples of an uninterrupted one.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from areal_core.eval.metrics import aggregate
from areal_core.eval.records import EvalSample, EvalSettings
from areal_core.eval.sources import (
    EngineSource,
    ModelRef,
    ReplaySource,
    ResponseSource,
    model_dir_hash,
    resolve_settings,
)
from areal_core.eval.store import ResultsStore, RunRecord, dumps, utc_now
from areal_core.files import atomic_write
from areal_core.tasks import Task
from areal_core.types import RewardRequest, RewardResult
from areal_core.workflows import DEFAULT_WORKFLOW, EpisodeRunner, WorkflowChoice, choose_workflow

Progress = Callable[[str, int, int], None]  # (task, samples done, samples in the eval)


@dataclass
class TaskResult:
    """One eval of one model on one task. status: new, resumed, or reused (an identical finished run)."""

    task: str
    settings: EvalSettings
    samples: list[EvalSample]
    metrics: dict[str, Any]
    run_id: int | None = None
    status: str = "new"
    details_path: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    workflow: WorkflowChoice | None = None  # the workflow it ran, when not the task's own


# -- generation and scoring --------------------------------------------------------------------------
def eval_reward_options(task: Task, reward_options: dict[str, Any] | None = None,
                        reward_mode: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The options an eval scores `task` with, and its grading mode: `reward_mode`, else the task spec's
    mode for evals (lenient unless it says otherwise), for a reward that has modes."""
    from areal_core.rewards.registry import graded_options

    reward = task.spec.reward
    return graded_options(reward.name, reward.options, reward_mode or reward.mode_for("eval"), reward_options)


async def generate_and_score(source: ResponseSource, task: Task, problems: list[dict[str, Any]],
                             settings: EvalSettings, rewards: Any, *, reward_options: dict[str, Any] | None = None,
                             reward_mode: str | None = None,
                             skip: set[tuple[str, int]] = frozenset(), on_sample: Callable[[EvalSample], None] | None = None,
                             concurrency: int = 64, workflow: WorkflowChoice | None = None) -> list[EvalSample]:
    """Respond to and score every (problem, sample index) not in `skip`; `on_sample` sees each scored sample
    as it completes. The first failure (e.g. the engine is unreachable) cancels the rest and is raised."""
    reward = task.spec.reward
    options, _ = eval_reward_options(task, reward_options, reward_mode)
    slots = asyncio.Semaphore(concurrency)
    episodes = episode_runner(source, task, rewards, options, settings, workflow)

    async def one(problem_index: int, sample: dict[str, Any], sample_index: int) -> EvalSample:
        transcript: list[dict[str, Any]] | None = None
        if episodes is not None:  # a multi-turn workflow: the episode is generated and scored together
            async with slots:
                episode = await episodes.run(sample, source.sampling(sample, sample_index, settings),
                                             f"eval-{task.name}-{sample['id']}-{sample_index}")
            response, finish_reason, result = episode.final_response(), episode.finish_reason, episode.reward
            transcript = [{**turn, "tokens": turn["end"] - turn["start"]} for turn in episode.turns]
            result = result if result is not None else RewardResult.failure("generation aborted")
            result = dataclasses.replace(result, details={**result.details, "episode": {
                "ended_by": episode.ended_by, "tool_calls": episode.tool_calls, "generations": episode.generations,
                **({"scores": episode.scores} if episode.scores else {})}})
        else:
            async with slots:
                response, finish_reason = await source.respond(task, sample, sample_index, settings)
            future = await rewards.submit(RewardRequest(reward=reward.name, sample=sample, response=response, options=options))
            result = await future
        extracted = result.details.get("extracted")
        scored = EvalSample(prompt_id=sample["id"], problem_index=problem_index, sample_index=sample_index,
                            response=response, score=result.score, correct=result.correct, error=result.error,
                            extracted=extracted if isinstance(extracted, str) else None,
                            finish_reason=finish_reason, details=result.details, transcript=transcript)
        if on_sample is not None:
            on_sample(scored)
        return scored

    jobs = [asyncio.ensure_future(one(i, sample, k)) for i, sample in enumerate(problems)
            for k in range(settings.n) if (sample["id"], k) not in skip]
    if not jobs:
        return []
    try:
        done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_EXCEPTION)
        for job in done:
            job.result()  # raises the first failure
        return [job.result() for job in jobs]
    finally:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)


def episode_runner(source: ResponseSource, task: Task, rewards: Any, options: dict[str, Any],
                   settings: EvalSettings, workflow: WorkflowChoice | None = None) -> EpisodeRunner | None:
    """The runner of the task's workflow (or `workflow`) when it is not a single generation and the source
    generates (a replay source holds final responses only: they are scored as they are)."""
    workflow = workflow or choose_workflow(task)
    if workflow.name == DEFAULT_WORKFLOW or not isinstance(source, EngineSource):
        return None
    return EpisodeRunner(task, source.engine, source.tokenizer, rewards, workflow=workflow, reward_options=options,
                         max_new_tokens=settings.max_new_tokens)


def answer_based(problems: list[dict[str, Any]]) -> bool:
    """A task is answer-based (majority voting makes sense) when its samples carry a `reference` answer."""
    return bool(problems) and all("reference" in sample for sample in problems)


def compute_metrics(problems: list[dict[str, Any]], settings: EvalSettings, samples: Iterable[EvalSample]) -> dict[str, Any]:
    samples = list(samples)
    metrics = aggregate(samples, settings.k, answer_based=answer_based(problems), greedy=settings.decoding == "greedy")
    episodes = [s.details["episode"] for s in samples if isinstance(s.details.get("episode"), dict)]
    if episodes:  # a multi-turn workflow: how often the model called a tool, and how many times
        metrics["tool_call_rate"] = sum(e.get("tool_calls", 0) > 0 for e in episodes) / len(episodes)
        metrics["tool_calls_mean"] = sum(e.get("tool_calls", 0) for e in episodes) / len(episodes)
    return metrics


async def evaluate_task(engine: Any, task: Task, tokenizer: Any, rewards: Any, settings: EvalSettings, *,
                        reward_options: dict[str, Any] | None = None, concurrency: int = 256,
                        workflow: WorkflowChoice | None = None) -> TaskResult:
    """Evaluate the weights an engine holds now (what `areal train` does at eval steps); nothing is stored.
    Pass the result to `record_eval` to put it in the results store."""
    problems = task.samples()[: settings.limit or None]
    samples = await generate_and_score(EngineSource(engine, tokenizer), task, problems, settings, rewards,
                                       reward_options=reward_options, concurrency=concurrency, workflow=workflow)
    samples.sort(key=lambda s: (s.problem_index, s.sample_index))
    return TaskResult(task.name, settings, samples, compute_metrics(problems, settings, samples), workflow=workflow)


# -- manifest and identity ---------------------------------------------------------------------------
def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def dataset_hash(task: Task, store: ResultsStore) -> str:
    """sha256 of the dataset file, or of the samples themselves for generated or hub data sets."""
    spec = task.spec.dataset
    if spec.path:
        path = Path(spec.path).expanduser()
        path = path if path.is_absolute() else task.data_dir / path
        if path.is_file():
            return store.file_sha256(path)
    return _sha256(dumps(task.samples()))


def code_version() -> dict[str, str | None]:
    """areal-core's version, and the git commit when it runs from a checkout."""
    import areal_core

    root = Path(areal_core.__file__).resolve().parent.parent
    try:
        run = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        commit = run.stdout.strip() if run.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"areal_core": areal_core.__version__, "git_commit": commit}


def plugin_versions() -> dict[str, str | None]:
    from areal_core.plugins import get_plugin_manager

    return {info.name: info.version for info in get_plugin_manager().plugins.values() if info.error is None}


def build_manifest(*, model: str, model_ref: str, model_hash: str, task: Task, settings: EvalSettings,
                   reward_options: dict[str, Any], store: ResultsStore, reward_mode: str | None = None,
                   workflow: WorkflowChoice | None = None) -> dict[str, Any]:
    """Everything needed to tell what an eval was and to reproduce it; `key` hashes the part that decides
    its samples and their scores: model, task, data, reward with its options and its plugin's version,
    settings (not the date, the name given to the model, other plugins or the code commit)."""
    from areal_core.rewards.registry import reward_registry

    options, mode = eval_reward_options(task, reward_options, reward_mode)
    reward = {"name": task.spec.reward.name, "options": options}
    if mode is not None:
        reward["mode"] = mode  # the grading mode (strict or lenient): shown by the leaderboard
    plugins = plugin_versions()
    provider = reward_registry().get(reward["name"]).plugin
    reward["plugin"] = f"{provider} {plugins.get(provider) or ''}".strip()  # a new verifier version is a new eval
    manifest = {
        "model": model, "model_ref": model_ref, "model_hash": model_hash,
        "task": task.name, "task_spec_hash": _sha256(dumps(task.spec.content())),
        "dataset": task.describe_source(), "dataset_hash": dataset_hash(task, store),
        "reward": reward, "plugins": plugins, "settings": settings.to_dict(), "seed": settings.seed,
        "date": utc_now(), "code_version": code_version(),
    }
    workflow = workflow or choose_workflow(task)
    if workflow.name != DEFAULT_WORKFLOW:  # (single-turn evals keep the keys they had before workflows)
        manifest["workflow"] = workflow.manifest()
    identity = {name: manifest[name] for name in ("model_hash", "task", "task_spec_hash", "dataset_hash", "reward",
                                                  "workflow") if name in manifest}
    manifest["key"] = _sha256(dumps({**identity, "settings": settings.identity()}))
    return manifest


# -- outputs -----------------------------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "_", text).strip("._") or "model"


def write_details(result: TaskResult, directory: Path, stem: str) -> Path:
    """`<stem>.samples.jsonl` (one row per sample: prompt id, sample index, response, extracted answer,
    score, verdict, error, reward details) and `<stem>.metrics.json` (metrics, settings, manifest)."""
    details = directory / f"{stem}.samples.jsonl"
    atomic_write(details, (json.dumps(s.to_dict(), ensure_ascii=False) + "\n" for s in result.samples))
    summary = {"task": result.task, "run_id": result.run_id, "settings": result.settings.to_dict(),
               "metrics": result.metrics, "manifest": result.manifest, "details": details.name}
    atomic_write(directory / f"{stem}.metrics.json", [json.dumps(summary, indent=2, ensure_ascii=False) + "\n"])
    return details


def _notify(model: str, result: TaskResult) -> None:
    from areal_core.plugins import get_plugin_manager

    get_plugin_manager().hook.on_eval_result(model=model, task=result.task, metrics=result.metrics,
                                details_path=str(result.details_path or ""))


# -- areal eval --------------------------------------------------------------------------------------
@dataclass
class _Plan:
    task: Task
    settings: EvalSettings
    problems: list[dict[str, Any]]
    manifest: dict[str, Any]
    existing: RunRecord | None


async def run_evals(ref: ModelRef, tasks: list[Task], store: ResultsStore, *, requested: dict[str, Any],
                    reward_service: Any, output_dir: Path, name: str | None = None, force: bool = False,
                    reward_options: dict[str, Any] | None = None, tokenizer_path: str | None = None,
                    max_running_requests: int = 64, torch_threads: int | None = None, concurrency: int = 64,
                    echo: Callable[[str], None] = print, progress: Progress | None = None,
                    reward_mode: str | None = None) -> list[TaskResult]:
    """`areal eval`: evaluate one model on each task, reusing identical finished runs and resuming
    unfinished ones. requested: n, k, temperature, top_p, top_k, max_new_tokens, limit, seed (None: task default)."""
    from areal_core.rewards import RewardService

    reward_options = dict(reward_options or {})
    name = name or ref.default_name
    log_dir = output_dir / _slug(name)  # server logs of engines the eval starts
    source: ResponseSource | None = None
    if ref.replay:
        source = ReplaySource(ref, [task.name for task in tasks])
    elif ref.url is not None:  # a running server: it says which model it holds
        source = await EngineSource.open(ref, store, tokenizer_path=tokenizer_path, log_dir=log_dir)
    try:
        # Plan every task first: bad settings fail before a model loads, and a model directory is loaded only
        # when some eval is not already in the store.
        model_hash = source.model_hash if source is not None else model_dir_hash(ref.model, store)
        plans = []
        for task in tasks:
            settings = source.settings(task, **requested) if source is not None else resolve_settings(task, **requested)
            manifest = build_manifest(model=name, model_ref=str(ref), model_hash=model_hash, task=task,
                                      settings=settings, reward_options=reward_options, store=store,
                                      reward_mode=reward_mode)
            problems = task.samples()[: settings.limit or None]
            plans.append(_Plan(task, settings, problems, manifest, store.find_run(manifest["key"])))
        pending = [p for p in plans if force or p.existing is None or not p.existing.finished]
        if pending and source is None:
            source = await EngineSource.open(ref, store, tokenizer_path=tokenizer_path, log_dir=log_dir,
                                             max_running_requests=max_running_requests, torch_threads=torch_threads)
        results = []
        service = RewardService(reward_service)
        if pending:
            await service.start()
        try:
            for plan in plans:
                results.append(await _run_plan(plan, source, service, store, name=name, force=force,
                                               reward_options=reward_options, concurrency=concurrency, echo=echo,
                                               progress=progress, reward_mode=reward_mode))
                result = results[-1]
                result.details_path = write_details(result, output_dir / _slug(name), plan.task.name)
                _notify(name, result)
        finally:
            await service.close(cancel_pending=True)
        return results
    finally:
        if source is not None:
            await source.close()


async def _run_plan(plan: _Plan, source: ResponseSource | None, rewards: Any, store: ResultsStore, *, name: str,
                    force: bool, reward_options: dict[str, Any], concurrency: int,
                    echo: Callable[[str], None], progress: Progress | None, reward_mode: str | None = None) -> TaskResult:
    task, settings, existing = plan.task, plan.settings, plan.existing
    total = len(plan.problems) * settings.n
    if existing is not None and existing.finished and not force:
        echo(f"{task.name}: identical eval already in the store as run #{existing.id} ({existing.created_at}); "
             "reporting it (--force runs it again)")
        run_id, status = existing.id, "reused"
        settings = EvalSettings.from_dict({**settings.to_dict(), "k": sorted(set(settings.k) | set(existing.settings.k))})
    else:
        if existing is not None and not existing.finished:
            run_id, status = existing.id, "resumed"
            done = store.done_keys(run_id)
            echo(f"{task.name}: resuming run #{run_id}: {len(done)} of {total} samples were done")
        else:
            manifest = plan.manifest
            run_id = store.create_run(key=manifest["key"], model=name, model_ref=manifest["model_ref"],
                                      model_hash=manifest["model_hash"], task=task.name, settings=settings,
                                      manifest=manifest, problems=len(plan.problems))
            status, done = "new", set()
        if progress:
            progress(task.name, len(done), total)
        counter = [len(done)]

        def keep(sample: EvalSample) -> None:
            store.add_samples(run_id, [sample])
            counter[0] += 1
            if progress:
                progress(task.name, counter[0], total)

        assert source is not None
        await generate_and_score(source, task, plan.problems, settings, rewards, reward_options=reward_options,
                                 reward_mode=reward_mode, skip=done, on_sample=keep, concurrency=concurrency)
    samples = store.samples(run_id)
    metrics = compute_metrics(plan.problems, settings, samples)
    store.finish_run(run_id, metrics, settings)
    manifest = store.run(run_id).manifest
    return TaskResult(task.name, settings, samples, metrics, run_id=run_id, status=status, manifest=manifest)


# -- areal train ------------------------------------------------------------------------------------
def record_eval(db: str | Path | ResultsStore | None, model: str, task: Task, result: TaskResult, *,
                model_path: str | Path | None = None, model_hash: str | None = None, step: int | None = None,
                run_dir: str | Path | None = None, reward_options: dict[str, Any] | None = None) -> int:
    """Store an `evaluate_task` result made during training as a finished run (source "train"), so
    `areal leaderboard` shows training checkpoints beside `areal eval` runs; returns the run id.

    model: the name it is listed under (e.g. `<run dir name>@step40`); model_path: the weights directory,
    hashed as `areal eval` hashes a model directory (else model_hash, else a hash of the name);
    run_dir: the training run's directory; the per-sample details go to `<run_dir>/evals/`."""
    store = db if isinstance(db, ResultsStore) else ResultsStore(db)
    try:
        if model_hash is None:
            model_hash = model_dir_hash(model_path, store) if model_path is not None else _sha256(f"name:{model}")
        # the options the samples were scored with (training's reward options), as `areal eval` records them
        manifest = build_manifest(model=model, model_ref=str(model_path or model), model_hash=model_hash, task=task,
                                  settings=result.settings, reward_options=dict(reward_options or {}), store=store,
                                  workflow=result.workflow)
        manifest.update(step=step, run_dir=str(run_dir) if run_dir is not None else None)
        run_id = store.create_run(key=manifest["key"], model=model, model_ref=manifest["model_ref"], model_hash=model_hash,
                                  task=task.name, settings=result.settings, manifest=manifest,
                                  problems=result.metrics["problems"], source="train", step=step,
                                  run_dir=manifest["run_dir"])
        store.add_samples(run_id, result.samples)
        store.finish_run(run_id, result.metrics)
        result.run_id, result.manifest = run_id, manifest
        if run_dir is not None:
            stem = f"{task.name}-{result.settings.decoding}-step{step if step is not None else 'final'}"
            result.details_path = write_details(result, Path(run_dir) / "evals", stem)
        _notify(model, result)
        return run_id
    finally:
        if store is not db:
            store.close()
