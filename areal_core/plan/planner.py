"""`areal plan`: predictions for a cluster from a cost profile, each one a simulated run (plan/simulate.py).

For a GPU count and a run's config (batch, group, lengths: the same KEY=VALUE overrides as `areal train`), every
scenario is simulated: the synchronous baseline (η = 0, updates wait for generation in flight), asynchronous runs
for each η with interruption and without (updates wait), at each generation/training split. Reported per scenario:
trajectories and tokens per second, the share of time the generation and training GPUs sit idle, the staleness of
the trained data; then the best split and what asynchrony buys there.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from areal_core.config import load_config
from areal_core.errors import ConfigError
from areal_core.plan.engine import LengthModel
from areal_core.plan.profile import Profile
from areal_core.plan.simulate import simulate
from areal_core.plan.tools import CallWriter, ToolUse, tools_of
from areal_core.plan.workload import Workload, describe, trained_lengths_of
from areal_core.rl.config import SYNC_OVERRIDES, TrainConfig
from areal_core.tasks import get_task
from areal_core.workflows import choose_workflow


@dataclass(frozen=True)
class Scenario:
    generation_gpus: int
    training_gpus: int
    eta: int                 # max staleness; 0 with wait: the synchronous baseline
    interrupt: bool          # weight updates interrupt generation (else they wait for it)

    @property
    def mode(self) -> str:
        if self.eta == 0 and not self.interrupt:
            return "sync"
        return f"async eta={self.eta} {'interrupt' if self.interrupt else 'wait'}"

    @property
    def name(self) -> str:
        return f"{self.mode} gen={self.generation_gpus} train={self.training_gpus}"

    def overrides(self) -> list[str]:
        if self.eta == 0 and not self.interrupt:
            return list(SYNC_OVERRIDES)
        return [f"rollout.max_staleness={self.eta}",
                f"rollout.weight_update={'interrupt' if self.interrupt else 'wait'}"]


def splits(profile: Profile, gpus: int, generation_gpus: int | None = None) -> list[tuple[int, int]]:
    """(generation, training) GPU counts to try: the one given, else every whole number of servers that leaves
    the trainer at least one GPU."""
    if generation_gpus is not None:
        return [(generation_gpus, gpus - generation_gpus)]
    step = profile.gpus_per_server
    found = [(g, gpus - g) for g in range(step, gpus, step)]
    if not found:
        raise ConfigError(f"{gpus} GPUs cannot hold a generation server of {step} GPUs and a trainer")
    return found


def scenarios(profile: Profile, gpus: int, etas: Iterable[int], generation_gpus: int | None = None,
              max_splits: int = 8) -> list[Scenario]:
    every = splits(profile, gpus, generation_gpus)
    if len(every) > max_splits:   # evenly spaced, the ends included
        every = [every[round(i * (len(every) - 1) / (max_splits - 1))] for i in range(max_splits)]
    out = []
    for generation, training in every:
        out.append(Scenario(generation, training, 0, False))
        for eta in sorted(set(etas) - {0}):
            out += [Scenario(generation, training, eta, True), Scenario(generation, training, eta, False)]
    return out


def measure(summary: dict[str, Any], metrics: list[dict[str, Any]], servers: int) -> dict[str, Any]:
    """What a simulated run says about its cluster."""
    seconds = summary["rl_seconds"]
    tokens = sum(m["response_tokens"] for m in metrics)   # every response of every batch, trained or not
    busy = sum(s["busy_s"] for s in summary["engine_servers"])
    training = sum(m["train_seconds"] for m in metrics)
    staleness: Counter = Counter()
    for m in metrics:
        staleness.update({int(k): v for k, v in m["staleness_hist"].items()})
    return {"seconds": seconds, "trajectories_per_second": summary["trajectories_per_second"],
            "tokens_per_second": tokens / seconds if seconds else 0.0,
            "generation_idle": max(0.0, 1 - busy / (seconds * servers)) if seconds else 0.0,
            "training_idle": max(0.0, 1 - training / seconds) if seconds else 0.0,
            "staleness": dict(sorted(staleness.items()))}


def predict(profile: Profile, run: list[str], tokenizer: Any, out_dir: Path, gpus: int, etas: Iterable[int],
            generation_gpus: int | None = None, echo: Callable[[str], None] = lambda line: None,
            lengths: LengthModel | None = None, tools: ToolUse | None = None) -> dict[str, Any]:
    """Simulate every scenario, each response as long as `lengths` draws (a Workload: plan/workload.py), a
    tool-using workflow's calls as `tools` (or the workload's run) draws them (plan/tools.py); the report (also
    written to out_dir/plan.json)."""
    workload = describe_workload(run, lengths)
    config = load_config(TrainConfig, None, list(run))
    workflow = choose_workflow(get_task(config.task, config.data_dir), config.rollout.workflow_options,
                               config.rollout.workflow)
    if workflow.spec.uses_tools:
        tools = tools or tools_of(lengths)   # (given to a workflow without tools, the simulation refuses it)
    if tools is not None:
        workload = workload or {"text": "no --lengths"}
        workload["tools"] = tools.summary()
        workload["text"] += f"; {tools.describe()}"
        if workflow.spec.uses_tools and CallWriter(tools, workflow.options.get("call_format", "xml"),
                                                   list(workflow.tools), tokenizer).any_turn_calls:
            workload["text"] += (f" (workflow {workflow.name!r}'s call format reads any turn as a call: its limits, "
                                 "not the calls an episode, decide how many it makes)")
    rewards = getattr(lengths, "rewards", None)   # a run's reward rate and uniform groups, with its lengths
    if rewards:
        profile = dataclasses.replace(profile, rewards=dataclasses.replace(profile.rewards, **rewards))
        workload["rewards"] = rewards
        workload["text"] += (f"; rewards as in that run: {rewards['correct_rate']:.1%} correct, "
                             f"{rewards['uniform_groups']:.1%} of groups alike (skipped by the step loop)")
    trained = trained_lengths_of(lengths, config)
    if trained is not None:
        workload["trained_lengths"] = {"prompt_mean": trained.prompts.mean, "response_mean": trained.responses.mean}
        workload["text"] += f"; {trained.describe()}"
    results = []
    for index, scenario in enumerate(scenarios(profile, gpus, etas, generation_gpus)):
        run_dir = out_dir / "runs" / f"{index:03d}"
        summary = simulate([*run, f"output_dir={out_dir}", *scenario.overrides()],
                           profile.cluster(scenario.generation_gpus, scenario.training_gpus), tokenizer, run_dir,
                           lengths=lengths, tools=tools)
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        result = {**asdict(scenario), "name": scenario.name, "mode": scenario.mode,
                  **measure(summary, metrics, scenario.generation_gpus // profile.gpus_per_server)}
        echo(f"{scenario.name}: {result['trajectories_per_second']:.3g} trajectories/s")
        results.append(result)
    report = {"profile": profile.name, "gpus": gpus, "run": run, **({"workload": workload} if workload else {}),
              "scenarios": results, **best(results),
              "assumptions": ASSUMPTIONS + ([TOOL_ASSUMPTION] if tools is not None else []), "sources": profile.sources}
    (out_dir / "plan.json").write_text(json.dumps(report, indent=2))
    return report


def describe_workload(run: list[str], lengths: LengthModel | None) -> dict[str, Any] | None:
    """The workload's summary for the report (mean, p99, max, the share cut at the run's max_new_tokens); a run
    whose workflow sets every length itself (sampled_lengths) is refused beside one."""
    if lengths is None:
        return None
    config = load_config(TrainConfig, None, list(run))
    workflow = choose_workflow(get_task(config.task, config.data_dir), config.rollout.workflow_options,
                               config.rollout.workflow)
    if workflow.name == "sampled_lengths":
        raise ConfigError("the sampled_lengths workflow sets every response's length itself (EOS ignored): give "
                          "response lengths one way, the workflow's lengths option or a workload, not both")
    limit = config.rollout.max_new_tokens
    if isinstance(lengths, Workload):
        return {**lengths.summary(limit), "max_new_tokens": limit, "text": describe(lengths.summary(limit), limit)}
    return {"kind": "python", "max_new_tokens": limit, "text": f"a length model from Python ({lengths!r:.60})"}


def best(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest asynchronous scenario, the fastest synchronous one, and the speed-up between them."""
    sync = max((r for r in results if r["eta"] == 0), key=lambda r: r["trajectories_per_second"])
    asynchronous = max((r for r in results if r["eta"] > 0), key=lambda r: r["trajectories_per_second"],
                       default=None)
    out: dict[str, Any] = {"best_sync": sync["name"]}
    if asynchronous is not None:
        out.update(best_async=asynchronous["name"],
                   speedup=asynchronous["trajectories_per_second"] / sync["trajectories_per_second"])
    return out


ASSUMPTIONS = [
    "the trainer's per-token seconds scale as reference_gpus / training GPUs (linear data parallelism), and each "
    "rank runs its share of a minibatch's micro-batches (at least one); a measured profile's tokens are the "
    "positions the step's own plan computes (padding in, a prompt packed once before its answers where the "
    "trainer does so); pi_prox costs what it cost the profiled config (its forward passes are not re-planned for "
    "another trainer.proximal, decoupled or KL setting)",
    "a decode step's seconds are linear in running sequences and in the tokens in their KV caches; a request costs "
    "request_s once beyond its tokens (the controller's and the serving stack's work for it)",
    "generation and training slow each other only in a profile with shared costs (one machine for both), by "
    "constant factors while both work",
    "every generation server is alike and requests go to the one with the fewest in flight",
    "weights reach every server in weight_load_s (from a disk) or, streamed, in stream_byte_s a byte (a broadcast), "
    "whatever the cluster's size",
    "response lengths: the workload's (--lengths), drawn per request, the same in every scenario, cut at "
    "rollout.max_new_tokens; without one, the sampled_lengths workflow's, else every response is "
    "rollout.max_new_tokens long",
    "a response's length does not depend on the policy's version (a run's lengths are pooled over its steps)",
    "with a run's workload, the sequences a step trains take that run's trained prompt and response lengths (matched "
    "apart, each in the order of the step's own; none longer than its longest response): which groups carry a "
    "gradient follows their prompts, not the simulated rewards, and the planned task's prompts are the run's; how "
    "many are trained follows the rewards",
    "training idle counts pi_prox and the update as busy, not writing the weights",
]
TOOL_ASSUMPTION = ("a tool-using episode's calls, each call's seconds and its result's tokens are drawn from the tool "
                   "model (--tools), whatever the policy's version; a tool's seconds do not depend on how many run at "
                   "once; a later turn prefills its whole context (no prefix cache), and costs the profile's request_s "
                   "like a first turn (the workflow's own work on a turn is not measured apart)")
