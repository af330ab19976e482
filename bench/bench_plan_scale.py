"""The rollout controller at scale (issue 23, item 5): its own CPU time per trajectory, measured for real.

`areal plan` runs the production controller (rollout controller, staleness gate, episode runner, reward service
client, step loop) against simulated servers on a virtual clock (plan/simulate.py). The clock is virtual; the CPU
time the process spends is not: it is what the controller (and the simulator beside it) costs. For each cluster
size and batch, two simulated runs, of 1 and 3 steps (the trajectories of the second run beyond the first's alone
are counted, so the run's fixed costs, config, task and servers, drop out; a first small run warms the process), with responses drawn from a long tail (the
sampled_lengths workflow: mean, p99, max):

    servers      simulated generation servers (one GPU each)
    batch        prompts x samples per step
    traj         trajectories the controller finished in the 3-step run beyond the 1-step one
    CPU s        the process's CPU seconds (time.process_time) for them
    sim s        the simulated servers alone serving as many requests of the same lengths (no controller)
    ms/traj      the controller's CPU per trajectory: (CPU s - sim s) / traj
    ms/1k tok    the same per thousand response tokens
    traj/s       simulated trajectories per (virtual) second: what the cluster described would make
    core share   controller CPU seconds per simulated second (ms/traj x traj/s): 1.0 = one core saturated
    bound at     the cluster size at which the controller's one core saturates, per-server throughput held
                 as here: servers / core share

What a real run adds and this does not count: the HTTP client's work on each response (JSON, per-token checks of
the SGLang client), the reward workers' own processes. A simulated response is one special token id repeated, not
text: the bench also times decoding 4,000 tokens of text, as a list (how the controller decoded before) and through
decode_response (as an array), on the char tokenizer.

    .venv/bin/python bench/bench_plan_scale.py                      # 8 to 4096 servers, 64 and 512 prompts a step
    .venv/bin/python bench/bench_plan_scale.py --runs 64x64 --profile   # where the time goes
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

from areal_core.engine.model import build_char_tokenizer
from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.plan.clock import run_virtual
from areal_core.plan.engine import GenerationCosts, SimulatedEngine
from areal_core.plan.simulate import ClusterCosts, simulate
from areal_core.plan.trainer import RewardCosts, TrainingCosts
from areal_core.plugins.hookspecs import hookimpl
from areal_core.plugins.manager import get_plugin_manager
from areal_core.workflows.builtin import sampled_length

# A 1.5B-class model on one H800-class GPU per server, roughly (the controller's CPU per trajectory does not depend
# on these numbers; how many trajectories a simulated second holds, and so the core share, does).
COSTS = ClusterCosts(
    GenerationCosts(step_s=0.012, sequence_s=2e-5, context_token_s=4e-10, prefill_token_s=2e-5, kv_tokens=2_000_000,
                    max_running=512, weight_load_s=2.0),
    TrainingCosts(proximal_token_s=2e-6, update_token_s=6e-6, optimizer_step_s=0.5, publish_s=5.0),
    RewardCosts(mean_s=0.05, p99_s=0.5, workers=256))


class TrajectoryCounter:
    """A plugin counting the trajectories the controller finishes (trained or not: a run ends with some made)."""

    def __init__(self) -> None:
        self.count = 0

    @hookimpl
    def on_trajectory(self, trajectory, run_dir):
        self.count += 1


COUNTER = TrajectoryCounter()


def workload(args: argparse.Namespace, prompts: int, steps: int) -> list[str]:
    lengths = f"{{lengths: {{mean: {args.mean}, p99: {args.p99}, max: {args.max}}}}}"
    return ["task=arithmetic", f"steps={steps}", f"rollout.batch_size={prompts}", f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max}", f"rollout.max_staleness={args.eta}",
            f"rollout.max_concurrent_prompts={prompts * (args.eta + 1)}", "rollout.skip_uniform_groups=false",
            "warmup.enabled=false", "eval_task=null", "rollout.workflow=sampled_lengths",
            f"rollout.workflow_options={lengths}"]


def controller_run(args: argparse.Namespace, servers: int, prompts: int, steps: int, out: Path,
                   profile: bool = False) -> dict:
    """One simulated run: CPU and wall seconds, trajectories made, tokens generated, virtual seconds."""
    costs = ClusterCosts(COSTS.generation, COSTS.training, COSTS.rewards, servers)
    run_dir = out / f"s{servers}-p{prompts}-{steps}"
    tokenizer = build_char_tokenizer()
    profiler = cProfile.Profile() if profile else None
    made = COUNTER.count
    cpu, wall = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    summary = simulate([*workload(args, prompts, steps), f"output_dir={out}"], costs, tokenizer, run_dir)
    if profiler:
        profiler.disable()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile_lines)
        print(text.getvalue())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"cpu": cpu, "wall": wall, "made": COUNTER.count - made, "seconds": summary["rl_seconds"],
            "trained": summary["trajectories"], "tokens": sum(s["tokens"] for s in summary["engine_servers"]),
            "mean_length": sum(m["response_tokens"] for m in metrics) / summary["trajectories"]}


def simulator_run(args: argparse.Namespace, servers: int, requests: int) -> float:
    """CPU seconds of the simulated servers alone serving `requests` requests of the workload's lengths, a batch's
    worth at a time (what the controller submits)."""
    options = {"lengths": {"mean": args.mean, "p99": args.p99, "max": args.max}}

    async def serve() -> None:
        engine = SimulatedEngine(servers, COSTS.generation).start()
        try:
            await asyncio.gather(*(engine.generate(GenerateRequest(
                [1] * 20, SamplingParams(max_new_tokens=sampled_length(options, f"r{i}", args.max), ignore_eos=True),
                rid=f"r{i}")) for i in range(requests)))
        finally:
            await engine.close()

    cpu = time.process_time()
    run_virtual(serve())
    return time.process_time() - cpu


def decode_cost(tokens: int = 4000) -> tuple[float, float]:
    """Milliseconds to decode `tokens` ids of text as a list and through decode_response (best of 5 rounds)."""
    import timeit

    from areal_core.workflows.episode import decode_response

    tokenizer = build_char_tokenizer()
    ids = tokenizer("The sum of 12 and 34 is 46; reversed, 64. " * (tokens // 40), add_special_tokens=False)["input_ids"]
    ids = ids[:tokens]
    as_list = min(timeit.repeat(lambda: tokenizer.decode(ids, skip_special_tokens=True), number=20, repeat=5)) / 20
    as_array = min(timeit.repeat(lambda: decode_response(tokenizer, ids), number=20, repeat=5)) / 20
    return 1e3 * as_list, 1e3 * as_array


def measure(args: argparse.Namespace, servers: int, prompts: int, out: Path) -> dict:
    one = controller_run(args, servers, prompts, 1, out)
    two = controller_run(args, servers, prompts, 3, out, profile=args.profile)
    made, cpu = two["made"] - one["made"], two["cpu"] - one["cpu"]
    simulator = simulator_run(args, servers, made)
    controller = max(0.0, cpu - simulator)
    tokens = made * two["mean_length"]
    per_trajectory = controller / made
    rate = two["trained"] / two["seconds"]
    share = per_trajectory * rate
    return {"servers": servers, "batch": f"{prompts}x{args.group}", "traj": made, "cpu_s": cpu, "sim_s": simulator,
            "ms_per_traj": 1e3 * per_trajectory, "ms_per_1k_tokens": 1e6 * controller / tokens,
            "traj_per_s": rate, "core_share": share, "bound_at": servers / share if share else float("inf"),
            "mean_length": two["mean_length"], "wall_s": one["wall"] + two["wall"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", default=["8x64", "64x64", "64x512", "512x512", "4096x512"],
                        help="SERVERSxPROMPTS: simulated servers and prompts per step (8 servers x 512 prompts "
                             "would be a thousand requests a server: the simulator's own cost, not the controller's)")
    parser.add_argument("--group", type=int, default=16, help="samples per prompt")
    parser.add_argument("--eta", type=int, default=1, help="max staleness")
    parser.add_argument("--mean", type=int, default=4000, help="response tokens: mean of the long tail")
    parser.add_argument("--p99", type=int, default=20000, help="response tokens: 99th percentile")
    parser.add_argument("--max", type=int, default=27648, help="response tokens: the cap (max_new_tokens)")
    parser.add_argument("--profile", action="store_true", help="print where the CPU time goes (cProfile)")
    parser.add_argument("--profile-lines", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    get_plugin_manager().register(COUNTER, "bench-trajectory-counter")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        controller_run(args, 2, 4, 1, Path(tmp))   # imports, plugins, the task's samples: not counted
        for run in args.runs:
            servers, prompts = (int(part) for part in run.split("x"))
            row = measure(args, servers, prompts, Path(tmp))
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(f"\nresponses: log-normal mean {args.mean}, p99 {args.p99}, max {args.max} tokens; eta {args.eta}; "
          f"{rows[0]['mean_length']:.0f} tokens mean as drawn")
    header = ("servers", "batch", "traj", "CPU s", "sim s", "ms/traj", "ms/1k tok", "traj/s", "core share", "bound at")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        print(f"| {r['servers']} | {r['batch']} | {r['traj']} | {r['cpu_s']:.1f} | {r['sim_s']:.1f} | "
              f"{r['ms_per_traj']:.2f} | {r['ms_per_1k_tokens']:.3f} | {r['traj_per_s']:.1f} | {r['core_share']:.3f} | "
              f"{r['bound_at']:,.0f} |")
    as_list, as_array = decode_cost()
    print(f"decoding 4,000 tokens of text: {as_list:.2f} ms as a list, {as_array:.2f} ms through decode_response")
    print("reproduce: .venv/bin/python bench/bench_plan_scale.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
