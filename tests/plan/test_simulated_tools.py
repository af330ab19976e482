"""Tool-using workflows on the simulated cluster (plan/tools.py): the production workflow runs each episode, the
simulated engine writes the calls a tool model draws in the workflow's call format, the simulated tools take their
drawn seconds on the virtual clock through `run_tool` (its timeout included); a real tool-using run logs what the
model is drawn from, and `areal plan --lengths RUN_DIR` simulates that run's tool calls."""
from __future__ import annotations

import asyncio
import json
import statistics

import pytest
import yaml

from areal_core.engine.model import build_char_tokenizer
from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.errors import ConfigError
from areal_core.plan.profile import load_profile
from areal_core.plan.tools import CallWriter, ToolUse, load_tool_use, poisson, tools_of
from areal_core.plan.workload import Histogram, load_workload
from tests.conftest import run_areal
from tests.plan.test_plan_command import PROFILE
from areal_core.rl.config import SYNC_OVERRIDES
from tests.plan.test_simulated_run import COSTS, run

CALCULATOR = ["task=calculator", "steps=2", "rollout.batch_size=4", "rollout.group_size=4", "warmup.enabled=false",
              "eval_task=null", "rollout.max_new_tokens=36"]


def fixed(calls: int, seconds: float, result_tokens: float = 0.0) -> ToolUse:
    return ToolUse(source="this test", calls=Histogram.of([(calls, 1)]), fixed_seconds=seconds,
                   result_tokens=result_tokens)


def simulate_tools(tmp_path, name: str, tools: ToolUse, *overrides: str):
    from areal_core.plan.simulate import simulate

    simulate([*CALCULATOR, f"output_dir={tmp_path}", *overrides], COSTS, build_char_tokenizer(), tmp_path / name,
             tools=tools)
    return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_the_calculator_workflow_runs_on_the_simulated_cluster_with_the_drawn_calls_and_tool_seconds(tmp_path):
    """Every episode makes the model's two calls (the task's max_tool_calls), each 4 virtual seconds, each result about
    30 tokens; then answers: three generations an episode, and the episode lasts the tools' 8 s and more."""
    metrics = simulate_tools(tmp_path, "tools", fixed(2, 4.0, result_tokens=30))
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["tool_calls_hist"] == [[2, 16]] and m["tool_call_rate"] == 1.0
        assert m["turns"] == 3 * 16
        assert m["tool_seconds_mean"] == 4.0 and m["tool_seconds_quantiles"][0] == [0.0, 4.0]
        assert 28 <= m["tool_result_tokens_mean"] <= 32
        assert m["episode_seconds_mean"] > 8.0
        assert m["policy_token_fraction"] < 1.0   # the results are in the episode, masked out of the loss


def test_the_sync_and_async_scenarios_give_each_episodes_calls_the_same_seconds(tmp_path):
    """Through the real path (the rollout controller, the episode runner, the workflow, run_tool), a call's seconds
    come from its episode and place in it: the two scenarios' steps (the same prompts) wait alike on their tools,
    though their calls come in another order."""
    use = load_tool_use("calls=2,seconds=1,p99=8,result_tokens=20")
    sync = simulate_tools(tmp_path, "sync", use, "steps=3", *SYNC_OVERRIDES)
    asynchronous = simulate_tools(tmp_path, "async", use, "steps=3", "rollout.max_staleness=2")
    assert [m["prompts"] for m in sync] == [m["prompts"] for m in asynchronous]
    assert [m["tool_seconds_mean"] for m in sync] == pytest.approx([m["tool_seconds_mean"] for m in asynchronous])
    assert len({round(m["tool_seconds_mean"], 6) for m in sync}) == 3   # drawn: each step's differ


def test_a_tool_slower_than_its_timeout_is_cut_by_run_tool_on_the_virtual_clock(tmp_path):
    """tool_timeout_s (10 s by default) cuts a 30 s tool exactly as in a real run: an error result after 10 s."""
    metrics = simulate_tools(tmp_path, "slow", fixed(1, 30.0))
    assert all(m["tool_calls_hist"] == [[1, 16]] and m["tool_seconds_mean"] == 10.0 for m in metrics)
    faster = simulate_tools(tmp_path, "timeout", fixed(1, 30.0), "rollout.workflow_options={tool_timeout_s: 2}")
    assert all(m["tool_seconds_mean"] == 2.0 for m in faster)


def test_calls_are_drawn_per_episode_and_only_for_turns_that_may_call(tmp_path):
    tokenizer = build_char_tokenizer()
    use = ToolUse(source="test", calls=Histogram.of([(0, 1), (1, 1), (3, 2)]))
    writer = CallWriter(use, "xml", ["calculator"], tokenizer)
    tool_turn = SamplingParams(max_new_tokens=40, stop=("</tool>",))
    counts = []
    for episode in range(2000):
        rid = f"p{episode}.0"
        calls = sum(writer(GenerateRequest([5], tool_turn, rid=rid if turn == 0 else f"{rid}.t{turn}")) is not None
                    for turn in range(5))
        counts.append(calls)
        assert calls == use.calls_in(rid)
    assert set(counts) == {0, 1, 3} and statistics.fmean(counts) == pytest.approx(1.75, abs=0.1)
    assert writer(GenerateRequest([5], SamplingParams(max_new_tokens=40), rid="p1.0")) is None   # not a tool turn
    text = tokenizer.decode(writer.calls[0])
    assert text == '<tool name="calculator">1</tool>'
    drawn = [poisson(1.5).draw(u / 10_000) for u in range(10_000)]
    assert statistics.fmean(drawn) == pytest.approx(1.5, abs=0.01)


def test_an_episodes_calls_take_the_same_seconds_whatever_order_the_episodes_call_in():
    """The simulated tools draw a call's seconds from its episode and its place in it, not from the order calls
    come in: the sync and async scenarios of one plan give an episode the same tool seconds."""
    from areal_core.plan.clock import run_virtual
    from areal_core.plan.tools import SimulatedTools
    from areal_core.workflows.runtime import current_episode

    use = load_tool_use("calls=2,seconds=1,p99=8")

    def seconds(order: list[str]) -> dict[tuple[str, int], float]:
        tools = SimulatedTools(use, ["calculator"], build_char_tokenizer())
        call = tools.specs["calculator"].fn
        taken: dict[tuple[str, int], float] = {}

        async def calls() -> None:
            for k, episode in enumerate(order):
                current_episode.set(episode)
                loop = asyncio.get_running_loop()
                started = loop.time()
                await call("1")
                taken[episode, order[:k + 1].count(episode)] = loop.time() - started

        run_virtual(calls())
        return taken

    forward = seconds(["p0.0", "p0.0", "p1.0", "p2.3", "p1.0"])
    backward = seconds(["p2.3", "p1.0", "p1.0", "p0.0", "p0.0"])
    assert forward == pytest.approx(backward) and len(set(forward.values())) == 5


def test_a_tool_model_is_only_for_a_workflow_that_calls_tools(tmp_path):
    from areal_core.plan.tools import tools_from_run

    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "tool_calls_hist": [[0, 32]], "turns": 64}) + "\n")
    assert tools_from_run(tmp_path / "metrics.jsonl") is None   # a feedback run, an untrained policy: no calls
    with pytest.raises(ConfigError, match="no step made a tool call"):
        load_tool_use(tmp_path)
    with pytest.raises(ConfigError, match="workflow 'single_turn' of task 'arithmetic' calls no tools"):
        simulate_tools(tmp_path, "plain", fixed(1, 1.0), "task=arithmetic")


def test_a_tool_model_is_read_from_parameters_and_bad_ones_are_refused_by_name(tmp_path):
    use = load_tool_use("calls=2,seconds=0.5,p99=4,result_tokens=30")
    assert use.summary()["calls_mean"] == pytest.approx(2.0, abs=0.01) and use.result_tokens == 30
    seconds = [use.seconds_of(str(k)) for k in range(20_000)]
    assert statistics.fmean(seconds) == pytest.approx(0.5, rel=0.05)
    assert sorted(seconds)[int(0.99 * len(seconds))] == pytest.approx(4.0, rel=0.1)
    assert load_tool_use("calls=1,seconds=0.25").seconds_of("x") == 0.25
    for text, message in [("calls=2", "calls and seconds are needed"), ("calls=2,seconds=1,speed=3", "unknown key"),
                          ("calls=x,seconds=1", "is not a number"), ("calls=-1,seconds=1", "must be a number >= 0"),
                          ("calls=1,seconds=2,p99=1", "log-normal needs mean <= p99")]:
        with pytest.raises(ConfigError, match=message):
            load_tool_use(text)
    with pytest.raises(ConfigError, match="no such run directory"):
        load_tool_use(tmp_path / "missing")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "responses": 4}) + "\n")
    with pytest.raises(ConfigError, match="no step made a tool call"):
        load_tool_use(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "tool_calls_hist": [[1, -2]]}) + "\n")
    with pytest.raises(ConfigError, match="tool_calls_hist must be"):
        load_tool_use(tmp_path)


def test_what_a_simulation_cannot_write_or_fit_is_refused_before_it_runs(tmp_path):
    with pytest.raises(ConfigError, match="calls tools: a simulated run needs a tool model"):
        run(tmp_path, "none", "task=calculator", "rollout.max_new_tokens=36")
    with pytest.raises(ConfigError, match="a tool call takes 32 tokens with this tokenizer, more than a turn"):
        simulate_tools(tmp_path, "short", fixed(1, 1.0), "rollout.max_new_tokens=16")
    own = "rollout.workflow_options={call_format: {pattern: 'CALC\\((?P<args>.*)\\)', stop: ')', tool: calculator}}"
    with pytest.raises(ConfigError, match="areal plan cannot write a call of tool 'calculator' in call_format"):
        simulate_tools(tmp_path, "own", fixed(1, 1.0), own)


def test_a_call_format_of_the_workflows_own_is_written_when_the_format_reads_a_simple_call_back(tmp_path):
    """bench/bench_agentic.py's format takes every turn as a call: the simulation writes `1</tool>` where the model
    calls, and the workflow reads every turn as a call, as it reads any text a real policy writes."""
    every_turn = ("rollout.workflow_options={call_format: {pattern: '(?P<args>[\\s\\S]*)', stop: '</tool>', "
                  "tool: calculator}}")
    metrics = simulate_tools(tmp_path, "every", fixed(1, 1.0), every_turn)
    # every turn reads as a call, so the task's max_tool_calls (2), not the model's one call, decides, as in a run
    assert all(m["tool_calls_hist"] == [[2, 16]] and m["tool_seconds_mean"] == 1.0 for m in metrics)


TASK = {
    "name": "scripted-naps",
    "dataset": {"generator": "arithmetic", "seed": 0, "size": 64, "options": {"digits": 2}},
    "prompt": {"template": "{{ question }}"},
    "reward": {"name": "arithmetic"},
    "workflow": {"name": "scripted", "options": {"tools": ["naps", "calculator"], "max_new_tokens": 6,
                                                 "script": ["tool:naps:0.2", "tool:calculator:6*7"]}},
}


def test_a_real_tool_using_run_logs_its_calls_and_areal_plan_simulates_them_from_its_directory(
        tmp_path, with_plugins):
    """A real `areal train` of a workflow that makes two calls an episode (a 0.2 s nap, then the calculator) logs its
    turns and calls; the run's directory gives back the tool model, and `areal plan --lengths RUN_DIR` simulates the
    same episodes, its tools as slow as the run's."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "naps.yaml").write_text(yaml.safe_dump(TASK))
    env = with_plugins("testkit", AREAL_TASKS_PATH=str(tasks))
    out = tmp_path / "train"
    common = ["task=scripted-naps", "rollout.batch_size=4", "rollout.group_size=4", "eval_task=null",
              "warmup.enabled=false", "rollout.skip_uniform_groups=false"]
    result = run_areal("train", *common, "steps=2", "tensorboard=false", f"output_dir={out}", "name=naps", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = out.glob("naps-*")
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for step in steps:
        assert step["tool_calls_hist"] == [[2, 16]] and step["turns"] == 48
        hist = step["turn_length_hist"]
        assert sum(c for _, c in hist) == 48 and all(1 <= t <= 6 for t, _ in hist)
        low, high = step["tool_seconds_quantiles"][0][1], step["tool_seconds_quantiles"][-1][1]
        assert low < 0.1 and 0.2 <= high < 2.0      # the calculator answers at once; the nap takes 0.2 s
        assert step["tool_result_tokens_mean"] > 0
    workload = load_workload(run_dir)
    assert workload.summary()["responses"] == 96   # a request is a turn
    tools = tools_of(workload)
    assert tools.calls.values == (2,) and tools.calls.count == 32
    run_mean = statistics.fmean(s["tool_seconds_mean"] for s in steps)
    assert tools.mean_seconds == pytest.approx(run_mean, rel=0.35)   # quantiles, linear between them
    assert load_tool_use(run_dir).summary() == tools.summary()

    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(PROFILE))
    plan = run_areal("plan", str(tmp_path / "profile.yaml"), "--gpus", "2", "--eta", "0", "--lengths", str(run_dir),
                     "--output", str(tmp_path / "plan"), *common, "steps=2", env=env)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "tool calls as in" in plan.stdout and "2.00 an episode" in plan.stdout
    report = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert report["workload"]["tools"]["calls_mean"] == 2.0
    (simulated,) = [json.loads(line) for line in (tmp_path / "plan" / "runs" / "000" / "metrics.jsonl")
                    .read_text().splitlines()][-1:]
    assert simulated["tool_calls_hist"] == [[2, 16]]
    assert 0.0 < simulated["tool_seconds_mean"] < 2.0


def test_a_profiled_turn_the_tool_model_names_a_call_for_ends_with_that_call_on_the_real_engine():
    """`areal plan profile` of a tool-using run: the real engine writes each turn as long as the workload draws it,
    and a turn that the tool model has a call for ends with that call's ids (what the simulated engine writes), so the
    workflow reads a call whatever the profiled model wrote; the episode's later turns, past its calls, and a request
    that does not stop on the call format, end as drawn."""
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.model import load_tokenizer
    from areal_core.plan.measure import LengthPinnedEngine
    from areal_core.rl.config import TrainConfig
    from areal_core.rl.model_cache import resolve_model
    from areal_core.workflows.episode import decode_response
    from areal_core.workflows.tools import ToolCall, call_format

    model = resolve_model(TrainConfig().model)
    tokenizer = load_tokenizer(model)
    calls = CallWriter(fixed(1, 0.0), "xml", ["calculator"], tokenizer)
    call = calls.calls[0]
    turn = SamplingParams(max_new_tokens=60, stop=tuple(calls.stop))

    async def main():
        async with LocalEngine(model, torch_threads=1) as engine:
            pinned = LengthPinnedEngine(engine, lambda rid, prompt, most: 50, calls, tokenizer)
            return await asyncio.gather(
                pinned.generate(GenerateRequest([5, 6, 7], turn, rid="episode-0")),
                pinned.generate(GenerateRequest([5, 6, 7], turn, rid="episode-0.t1")),   # its one call made
                pinned.generate(GenerateRequest([5, 6, 7], SamplingParams(max_new_tokens=60), rid="episode-1")))

    first, later, plain = asyncio.run(main())
    assert len(call) < 50 and len(first.output_ids) == 50 and first.output_ids[-len(call):] == call
    assert first.finish_reason == "stop"
    assert first.output_logprobs[-len(call):] == [0.0] * len(call) and min(first.output_logprobs[:-len(call)]) < 0
    assert len(first.output_versions) == 50
    found = call_format("xml", "call_format").find(decode_response(tokenizer, first.output_ids))
    assert isinstance(found, ToolCall) and found.name == "calculator"
    for output in (later, plain):
        assert len(output.output_ids) == 50 and output.finish_reason == "length"
        assert output.output_ids[-len(call):] != call


def test_areal_plan_profile_of_a_tool_using_run_charges_a_turn_the_path_and_not_the_tools_waits(areal, tmp_path):
    """The calculator's episodes through the real rollout path, their calls drawn by --tools (two an episode on
    average, at most the task's two; 0.3 s each): a request is a turn (up to three an episode), and what the path
    costs one beyond the engine is told from the tools' waits, which the cost model's batch (the same episodes through
    the controller on the virtual clock) waits too. Were the waits charged to the path, a turn would cost about a
    tenth of a second."""
    overrides = ["task=calculator", "rollout.batch_size=4", "rollout.group_size=4", "rollout.max_new_tokens=36"]
    result = areal("plan", "profile", *overrides, "--tools", "calls=2,seconds=0.3,result_tokens=20", "--repeats", "2",
                   "--output", str(tmp_path / "tools.yaml"), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    timings = json.loads((tmp_path / "tools.timings.json").read_text())
    assert 16 < timings["requests"]["requests"] <= 3 * 16
    assert timings["requests"]["tool_waits_s"] >= 2 * 0.3 - 1e-6   # an episode's two calls in turn, in the slowest
    assert all(seconds > 0.6 for seconds in timings["requests"]["controller_s"])   # the real path waited as long
    profile = load_profile(tmp_path / "tools.yaml")
    assert 0 <= profile.generation.request_s < 0.3 / 10
    assert all("tool calls as in parameters" in source for source in profile.sources.values())
    # a tool-using run without a tool model, or a tool model for a run that calls none: refused before any timing
    refused = areal("plan", "profile", *overrides, "--output", str(tmp_path / "no.yaml"))
    assert refused.returncode != 0 and "workflow 'tool_calls' calls tools" in refused.stderr
    assert "--tools" in refused.stderr and not (tmp_path / "no.yaml").exists()
    refused = areal("plan", "profile", "task=arithmetic", "--tools", "calls=1,seconds=1",
                    "--output", str(tmp_path / "no.yaml"))
    assert refused.returncode != 0 and "calls no tools" in refused.stderr
