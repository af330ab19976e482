"""Multi-turn episodes with slow tools, and what the workflow layer costs a single generation, side by side.

1. Tool latency hidden by asynchrony. Episodes of the `tool_calls` workflow in which every policy turn calls a
   tool that waits 50-500 ms (`calculator_latency`: log-uniform, mean ~0.2 s) before answering: 3 turns and 2
   tool calls per episode, on the embedded model in the local engine (`--slots` decoding slots, and room to keep
   the cache of every episode in flight, so a turn prefills only its new text), rewards on the local pool. The
   call format takes every turn as a call, so the episode shape does not depend on what an untrained model
   writes. The rollout controller collects the same batches (no training: the policy version stays):

       one-per-slot  as many episodes in flight as the engine has slots: a slot's episode holds it through its
                     tool calls, so the slot idles while the tool waits (how a synchronous agent loop runs)
       async         episodes decoupled from slots (8x as many in flight): while some wait on their tools,
                     the others' turns fill the engine

   Reported: episodes/s of each and the ratio (goal >= 3x).

2. Overhead of the workflow layer. The demo's task (single_turn) through the rollout controller as it is, and
   through the controller with the group rollout it had before workflows (generate n, decode, score; kept
   here verbatim), alternating, several rounds of 3 batches each: trajectories/s of each, the ratio of the
   medians and the median of the rounds' ratios (goal >= 0.95).

    .venv/bin/python bench/bench_agentic.py
    .venv/bin/python bench/bench_agentic.py --episodes 512 --rounds 3
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from areal_core.engine.local import LocalEngine
from areal_core.engine.model import init_model
from areal_core.engine.protocol import GenerateRequest
from areal_core.rewards import RewardService, RewardServiceConfig
from areal_core.rl.config import RolloutConfig
from areal_core.rl.rollout import Group, RolloutController
from areal_core.tasks import Task, get_task
from areal_core.tasks.spec import WorkflowRef
from areal_core.types import RewardRequest, Trajectory

EVERY_TURN_A_CALL = {"pattern": r"(?P<args>[\s\S]*)", "stop": ["</tool>"], "tool": "calculator_latency"}


class PreWorkflowController(RolloutController):
    """The rollout controller with the group rollout it had before workflows existed (verbatim but for names)."""

    async def _rollout_group(self, number: int, version: int) -> None:
        sample = self.sample_for(number)
        prompt = self.task.prompt_token_ids(sample, self.tokenizer)
        group_id = f"p{number}"
        outputs = await asyncio.gather(*(self.engine.generate(GenerateRequest(prompt, self._sampling(number, i),
                                                                              rid=f"p{number}.{i}"))
                                         for i in range(self.config.group_size)))
        responses = [self.tokenizer.decode(o.output_ids, skip_special_tokens=True) for o in outputs]
        reward = self.task.spec.reward
        futures = [await self.rewards.submit(RewardRequest(reward=reward.name, sample=sample, response=text,
                                                           options=dict(self.reward_options), request_id=f"{group_id}.{i}"))
                   for i, text in enumerate(responses)]
        results = list(await asyncio.gather(*futures))
        trajectories, dropped = [], 0
        for i, (output, text, result) in enumerate(zip(outputs, responses, results)):
            if result.error is not None or output.finish_reason == "abort":
                dropped += 1
                self.dropped[result.error or "aborted"] += 1
                continue
            trajectories.append(Trajectory(
                trajectory_id=f"{group_id}.{i}", task=self.task.name, sample_id=str(sample["id"]), group_id=group_id,
                prompt_token_ids=prompt, output_token_ids=output.output_ids, output_logprobs=output.output_logprobs,
                output_versions=output.output_versions, response=text, finish_reason=output.finish_reason,
                reward=result))
        await self.replay_buffer.put(number, Group(group_id, str(sample["id"]), trajectories, dropped, version))


async def collect(controller_class, task: Task, engine, rewards, config: RolloutConfig, batches: int) -> tuple[float, list]:
    """Seconds to collect `batches` batches, and the trajectories."""
    controller = controller_class(task, engine, rewards, engine.tokenizer, config)
    started = time.perf_counter()
    controller.start()
    taken = [t for _ in range(batches) for g in await controller.next_batch() for t in g.trajectories]
    elapsed = time.perf_counter() - started
    await controller.stop()
    return elapsed, taken


def tool_task() -> Task:
    task = get_task("arithmetic")
    options = {"tools": ["calculator_latency"], "call_format": EVERY_TURN_A_CALL, "max_turns": 3, "max_tool_calls": 2,
               "tool_timeout_s": 5.0}
    return Task(dataclasses.replace(task.spec, workflow=WorkflowRef("tool_calls", options)), task.data_dir)


async def tool_latency(model: Path, episodes: int, group: int, slots: int, tokens: int) -> dict[str, float]:
    task, prompts = tool_task(), episodes // group
    rates = {}
    async with LocalEngine(model, max_running_requests=slots, prefix_cache_slots=8 * slots) as engine, \
            RewardService(RewardServiceConfig(workers=1)) as rewards:
        for mode, in_flight in (("one-per-slot", slots), ("async", 8 * slots)):
            config = RolloutConfig(batch_size=prompts, group_size=group, max_staleness=10**6, max_new_tokens=tokens,
                                   max_concurrent_prompts=in_flight // group, seed=len(rates))
            elapsed, taken = await collect(RolloutController, task, engine, rewards, config, 3)
            calls = sum(t.episode["tool_calls"] for t in taken) / len(taken)
            rates[mode] = len(taken) / elapsed
            print(f"  {mode:13s} {len(taken)} episodes in {elapsed:.1f}s: {rates[mode]:.1f} episodes/s "
                  f"({calls:.2f} tool calls, {statistics.mean(len(t.turns) for t in taken):.1f} turns each)", flush=True)
    return rates


async def overhead(model: Path, rounds: int) -> dict[str, list[float]]:
    task, rates = get_task("arithmetic"), {"pre-workflow": [], "workflow": []}
    config = RolloutConfig(max_staleness=10**6)  # the demo's batch (64 x 8) and answer length (16)
    async with LocalEngine(model, max_running_requests=64) as engine, \
            RewardService(RewardServiceConfig(workers=1)) as rewards:
        await collect(RolloutController, task, engine, rewards, config, 1)  # warm: compiled, workers started
        for r in range(rounds):
            for mode, cls in (("pre-workflow", PreWorkflowController), ("workflow", RolloutController))[:: 1 - 2 * (r % 2)]:
                elapsed, taken = await collect(cls, task, engine, rewards, dataclasses.replace(config, seed=r), 3)
                rates[mode].append(len(taken) / elapsed)
                print(f"  round {r} {mode:12s} {len(taken)} trajectories in {elapsed:.2f}s: {rates[mode][-1]:.0f}/s",
                      flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=768, help="episodes per batch of the tool-latency runs")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--slots", type=int, default=16, help="decoding slots of the engine in the tool-latency runs")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds of the overhead comparison")
    parser.add_argument("--turn-tokens", type=lambda v: [int(x) for x in v.split(",")], default=[2, 6],
                        help="longest policy turn of the tool-latency runs, comma-separated (default 2,6)")
    parser.add_argument("--only", choices=["tools", "overhead"], help="run one of the two comparisons")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = init_model(Path(tmp) / "model")
        if args.only in (None, "tools"):
            for tokens in args.turn_tokens:
                print(f"1. tool latency (50-500 ms per call), {args.slots} engine slots, up to {tokens} tokens per "
                      "turn, episodes/s:", flush=True)
                rates = asyncio.run(tool_latency(model, args.episodes, args.group, args.slots, tokens))
                print(f"   async / one-per-slot = {rates['async'] / rates['one-per-slot']:.2f}x (goal >= 3x)")
        if args.only in (None, "overhead"):
            print("2. workflow layer on single_turn, trajectories/s:", flush=True)
            speeds = asyncio.run(overhead(model, args.rounds))
            medians = {mode: statistics.median(v) for mode, v in speeds.items()}
            paired = statistics.median(w / p for w, p in zip(speeds["workflow"], speeds["pre-workflow"]))
            print(f"   workflow / pre-workflow = {medians['workflow'] / medians['pre-workflow']:.3f} "
                  f"(medians {medians['workflow']:.0f} vs {medians['pre-workflow']:.0f}/s; median of the rounds' "
                  f"ratios {paired:.3f}; goal >= 0.95)")
    print("reproduce: .venv/bin/python bench/bench_agentic.py "
          f"--episodes {args.episodes} --group {args.group} --slots {args.slots} --rounds {args.rounds} "
          f"--turn-tokens {','.join(map(str, args.turn_tokens))}" + (f" --only {args.only}" if args.only else ""))


if __name__ == "__main__":
    main()
