"""Multi-turn episodes in the runtime: the rollout controller runs a task's workflow, a weight update lands
between turns and every token keeps its own version, a workflow that raises loses only its episode, and the
trainer trains on the policy's tokens only."""
import asyncio
import json
import time

import pytest
import torch

from areal_core.engine.local import LocalEngine
from areal_core.engine.protocol import SamplingParams
from areal_core.engine.model import init_model
from areal_core.rewards import RewardService, RewardServiceConfig
from areal_core.rl.config import RolloutConfig, TrainerConfig
from areal_core.rl.rollout import RolloutController, staleness_histogram
from areal_core.rl.trainer import PPOLearner, build_microbatch
from areal_core.tasks import Task, task_spec_from_dict
from areal_core.types import RewardResult, Trajectory
from areal_core.workflows import EpisodeRunner, choose_workflow


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
             "intermediate_size": 64}
    root = tmp_path_factory.mktemp("agentic")
    return init_model(root / "v0", seed=0, **small), init_model(root / "v1", seed=1, **small)


def _task(tmp_path, workflow, rows=None):
    rows = rows or [{"id": f"r{i}", "question": f"{i}+1=", "reference": str(i + 1)} for i in range(4)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = task_spec_from_dict({"name": "agentic", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
                                "reward": {"name": "arithmetic"}, **({"workflow": workflow} if workflow else {})},
                               "agentic")
    return Task(spec, tmp_path)


def _controller_batch(task, model_dir, config, during=None):
    async def run():
        async with LocalEngine(model_dir, max_seq_len=256) as engine, \
                RewardService(RewardServiceConfig(workers=1)) as rewards:
            controller = RolloutController(task, engine, rewards, engine.tokenizer, config)
            controller.start()
            if during is not None:
                await during(controller)
            batch = await asyncio.wait_for(controller.next_batch(), timeout=120)
            await controller.stop()
            return batch, controller

    return asyncio.run(run())


def test_a_weight_update_between_turns_gives_each_turn_the_version_that_produced_it(tmp_path, model_dirs,
                                                                                  testkit_in_process):
    """The update lands while the episode waits for a slow tool: the first turn is version 0, the turn after the
    tool version 1, the tool's tokens are masked out, and staleness counts the policy's oldest token."""
    v0, v1 = model_dirs
    workflow = {"name": "scripted", "options": {"tools": ["naps"], "script": ["tool:naps:1.5"], "max_new_tokens": 6}}
    config = RolloutConfig(batch_size=2, group_size=2, max_staleness=0, max_new_tokens=6, weight_update="interrupt")

    async def update_during_the_nap(controller):
        await asyncio.sleep(0.7)
        await controller.update_weights(str(v1), 1)

    batch, controller = _controller_batch(_task(tmp_path, workflow), v0, config, update_during_the_nap)
    trajectories = [t for g in batch for t in g.trajectories]
    assert len(trajectories) == 4 and controller.dropped == {}
    for t in trajectories:
        first, tool, last = t.turns
        assert (first["role"], tool["role"], last["role"]) == ("assistant", "tool", "assistant")
        assert tool["text"] == "slept 1.5" and t.episode["tool_calls"] == 1
        assert set(t.output_versions[first["start"]:first["end"]]) == {0}
        assert set(t.output_versions[last["start"]:last["end"]]) == {1}
        assert t.loss_mask == [1] * first["end"] + [0] * (tool["end"] - tool["start"]) + [1] * (last["end"] - last["start"])
        assert t.policy_tokens == len(t.output_token_ids) - (tool["end"] - tool["start"])
        assert Trajectory.from_dict(json.loads(json.dumps(t.to_dict()))) == t  # checkpoints keep episodes whole
    assert staleness_histogram(trajectories, 1) == {1: 4}


def test_a_workflow_that_raises_loses_only_its_episode_and_is_counted(tmp_path, model_dirs, testkit_in_process):
    config = RolloutConfig(batch_size=2, group_size=3, max_staleness=0, max_new_tokens=4)
    batch, controller = _controller_batch(_task(tmp_path, {"name": "raising"}), model_dirs[0], config)
    assert [(len(g.trajectories), g.dropped) for g in batch] == [(2, 1), (2, 1)]
    assert controller.dropped == {"workflow 'raising' failed: RuntimeError: the workflow broke": 2}
    assert all(t.trajectory_id.split(".")[1] in ("1", "2") for g in batch for t in g.trajectories)


def test_tool_failures_become_results_the_episode_goes_on(tmp_path, model_dirs, testkit_in_process):
    workflow = {"name": "scripted", "options": {"tools": ["hangs", "raises", "floods"], "tool_timeout_s": 0.3,
                                                "max_tool_output_chars": 50, "max_new_tokens": 3,
                                                "script": ["tool:hangs:", "tool:raises:x", "tool:floods:", "tool:nope:"]}}
    config = RolloutConfig(batch_size=1, group_size=2, max_staleness=0, max_new_tokens=3)
    batch, controller = _controller_batch(_task(tmp_path, workflow), model_dirs[0], config)
    for t in batch[0].trajectories:
        tools = [turn for turn in t.turns if turn["role"] == "tool"]
        assert [turn["error"] for turn in tools] == [True, True, False, True]
        assert tools[0]["text"] == "error: tool 'hangs' timed out after 0.3s"
        assert tools[1]["text"] == "error: tool 'raises' failed: ValueError: bad arguments 'x'"
        assert len(tools[2]["text"]) <= 50 and "characters cut" in tools[2]["text"]
        assert tools[3]["text"] == "error: unknown tool 'nope'; the tools are: floods, hangs, raises"
        assert len([turn for turn in t.turns if turn["role"] == "assistant"]) == 5


def test_episode_limits_end_an_episode_where_it_stands(tmp_path, model_dirs, testkit_in_process):
    script = ["tool:naps:0.01"] * 6
    for options, ended_by, generations in [({"max_turns": 3}, "max_turns", 3),
                                           ({"max_total_tokens": 20, "max_new_tokens": 4}, "max_total_tokens", None),
                                           ({"budget_s": 0.5, "script": ["tool:naps:0.3"] * 6}, "budget", None)]:
        workflow = {"name": "scripted", "options": {"tools": ["naps"], "script": script, **options}}
        config = RolloutConfig(batch_size=1, group_size=1, max_staleness=0, max_new_tokens=4)
        batch, _ = _controller_batch(_task(tmp_path, workflow), model_dirs[0], config)
        (t,) = batch[0].trajectories
        assert t.episode["ended_by"] == ended_by, options
        if generations is not None:
            assert t.episode["generations"] == generations
        if "max_total_tokens" in options:
            assert len(t.prompt_token_ids) + len(t.output_token_ids) <= 20 + 14  # the last tool result may pass it


def test_the_budget_cuts_a_stalled_generation_or_a_waiting_workflow_and_keeps_what_the_episode_holds(
        tmp_path, model_dirs, testkit_in_process):
    """At budget_s whatever is still running is cut: a generation on an engine that stopped answering (the
    request is aborted, not left running), or a wait of the workflow's own. The episode ends there, scored on its
    turns so far; one cut before any policy turn ended has nothing to train on and is a counted failure."""
    async def episode_of(script, paused_from_start=False):
        workflow = {"name": "scripted", "options": {"tools": ["naps"], "budget_s": 4.0, "script": script}}
        task = _task(tmp_path, workflow)
        async with LocalEngine(model_dirs[0], max_seq_len=256) as engine, \
                RewardService(RewardServiceConfig(workers=1)) as rewards:
            runner = EpisodeRunner(task, engine, engine.tokenizer, rewards, workflow=choose_workflow(task),
                                   reward_options={}, max_new_tokens=4)
            if paused_from_start:
                await engine.pause()
            started = time.monotonic()
            episode = await asyncio.wait_for(runner.run(task.samples()[0], SamplingParams(max_new_tokens=4, seed=0),
                                                        "b.0"), timeout=30)
            elapsed = time.monotonic() - started
            for _ in range(100):  # the cut request leaves the engine (its abort is handled on the engine's thread)
                if engine.requests == 0:
                    break
                await asyncio.sleep(0.05)
            return episode, elapsed, engine.requests

    # (a budget of 4 s: the first turn and its scoring fit in it on a busy machine too)
    for script, roles in [(["tool:naps:0.01", "pause-engine"], ["assistant", "tool", "assistant"]),
                          (["wait:60"], ["assistant"]),
                          (["score", "wait:60"], ["assistant", "assistant"])]:
        episode, elapsed, left = asyncio.run(episode_of(script))
        assert episode.ended_by == "budget" and elapsed < 20, script
        assert [turn["role"] for turn in episode.turns] == roles and left == 0
        assert episode.reward is not None and episode.reward.error is None
        assert episode.final_response() == episode.last_policy_text()  # scored on its last turn, not an earlier one
    episode, elapsed, left = asyncio.run(episode_of([], paused_from_start=True))
    assert episode.ended_by == "budget" and episode.tokens == [] and left == 0
    assert episode.reward.error == "budget_s=4 ran out before the episode's first policy turn ended"


def test_the_loss_and_its_normaliser_count_the_policys_tokens_only(model_dirs):
    """What sits at masked (tool) positions never reaches the loss: behaviour log-probs of nonsense there give
    the same loss, and the normaliser counts the policy's 4 tokens, not the 6 of the output."""
    from areal_core.engine.model import load_model

    def trajectory(masked_logprob):
        logprobs = [-1.0, -1.0, masked_logprob, masked_logprob, -1.0, -1.0]
        return Trajectory("a", "t", "s", "g", [5, 6, 7], [10, 11, 12, 13, 14, 15], logprobs, [0] * 6, "", "stop",
                          RewardResult(1.0), output_loss_mask=[1, 1, 0, 0, 1, 1])

    mb = build_microbatch([trajectory(0.0)], [0], 0, torch.device("cpu"))
    assert mb.response[0].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert trajectory(0.0).policy_tokens == 4
    model = load_model(model_dirs[0]).train()
    learner = PPOLearner(model, None, TrainerConfig(ppo_minibatches=1), total_steps=1, version=0, pad_id=0)
    losses = []
    for masked in (0.0, -50.0):
        mb = build_microbatch([trajectory(masked)], [0], 0, torch.device("cpu"))
        mb.advantages = torch.tensor([1.0])
        prepared = learner.prepare([trajectory(masked)], 1.0)
        result = learner._microbatch_loss(mb, None, None, prepared, float(trajectory(masked).policy_tokens), 1)
        losses.append((result.loss.item(), result.stats.tokens))
    assert losses[0] == losses[1] and losses[0][1] == 4
    batch = learner.prepare([trajectory(-50.0), trajectory(0.0)], 1.0)
    learner.recompute_proximal(batch)
    stats = learner.ppo_update(batch, torch.tensor([1.0, -1.0]))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values() if isinstance(v, float))


def test_the_tool_calls_workflow_runs_calls_appends_results_and_stops_at_its_call_limit(tmp_path, model_dirs,
                                                                                      testkit_in_process):
    """The built-in loop against the real engine: a call format that reads every turn as a calculator call (so
    the untrained model's turns are calls), results appended as environment text, then the call limit ends the
    episode with the last turn unanswered."""
    every_turn = {"pattern": r"(?P<args>[\s\S]*)", "stop": ["</tool>"], "tool": "calculator"}
    workflow = {"name": "tool_calls", "options": {"tools": ["calculator"], "call_format": every_turn,
                                                  "max_tool_calls": 2, "max_turns": 5, "result_format": "[{output}]"}}
    config = RolloutConfig(batch_size=1, group_size=3, max_staleness=0, max_new_tokens=4)
    batch, controller = _controller_batch(_task(tmp_path, workflow), model_dirs[0], config)
    assert controller.dropped == {}
    for t in batch[0].trajectories:
        assert [turn["role"] for turn in t.turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
        assert (t.episode["ended_by"], t.episode["tool_calls"], t.episode["generations"]) == ("max_tool_calls", 2, 3)
        for turn in t.turns[1::2]:
            assert turn["text"].startswith("[") and turn["text"].endswith("]") and turn["tool"] == "calculator"
            assert turn["error"] == turn["text"].startswith("[error: ")
        assert t.response == t.turns[-1]["text"]


def test_single_turn_by_its_short_path_makes_the_episodes_its_workflow_makes(tmp_path, model_dirs, testkit_in_process):
    """Without options single_turn skips building its context; with an option it runs as a workflow: the same
    tokens, log-probs, responses and rewards either way."""
    config = RolloutConfig(batch_size=2, group_size=3, max_staleness=0, max_new_tokens=6)
    short, _ = _controller_batch(_task(tmp_path, None), model_dirs[0], config)
    full, _ = _controller_batch(_task(tmp_path, {"name": "single_turn", "options": {"max_turns": 1}}), model_dirs[0],
                                config)
    rows = [[(t.trajectory_id, t.output_token_ids, t.response, t.reward.score, t.output_loss_mask)
             for g in batch for t in g.trajectories] for batch in (short, full)]
    assert rows[0] == rows[1] and len(rows[0]) == 6
    # (log-probs as equal as two runs of the engine make them: its batches differ with timing)
    logprobs = [[lp for g in batch for t in g.trajectories for lp in t.output_logprobs] for batch in (short, full)]
    assert max(abs(a - b) for a, b in zip(*logprobs)) < 1e-4
    assert all(t.episode == {} and t.turns == [] for batch in (short, full) for g in batch for t in g.trajectories)


def test_sampled_lengths_generates_exactly_the_drawn_length_of_each_response_past_eos(tmp_path, model_dirs):
    """workflow sampled_lengths: every response is exactly its draw long (the model's EOS ignored, at most max),
    the same draw for the same request id; and each trajectory carries its seconds and its reward's seconds."""
    from areal_core.workflows.builtin import sampled_length

    options = {"lengths": {"mean": 10, "p99": 60, "max": 30}, "seed": 3}
    config = RolloutConfig(batch_size=2, group_size=8, max_staleness=0, max_new_tokens=40)
    batch, _ = _controller_batch(_task(tmp_path, {"name": "sampled_lengths", "options": options}), model_dirs[0],
                                 config)
    trajectories = [t for group in batch for t in group.trajectories]
    lengths = [len(t.output_token_ids) for t in trajectories]
    assert lengths == [sampled_length(options, t.trajectory_id, 40) for t in trajectories]
    assert max(lengths) <= 30 and len(set(lengths)) > 3
    assert {t.finish_reason for t in trajectories} == {"length"}
    for t in trajectories:
        assert t.seconds > t.reward_seconds > 0


def test_a_workflow_asking_for_an_empty_stop_string_or_no_tokens_gets_its_own_error_and_the_engine_serves_on(
        tmp_path, model_dirs):
    """ctx.generate checks what a workflow asks before the engine sees it: a ValueError there is the workflow's
    (its episode is dropped as a workflow failure), not an engine error that fails the prompt's whole group."""
    from areal_core.workflows.episode import EpisodeContext, EpisodeLimits

    task = _task(tmp_path, None)

    async def run():
        async with LocalEngine(model_dirs[0], max_seq_len=256) as engine:
            ctx = EpisodeContext(sample=task.samples()[0], task=task, engine=engine, tokenizer=engine.tokenizer,
                                 sampling=SamplingParams(max_new_tokens=4, ignore_eos=True), rid="p0.0", options={},
                                 limits=EpisodeLimits(max_new_tokens=4), tools={}, score=None, call_tool=None)
            episode = ctx.new_episode()
            with pytest.raises(ValueError, match=r"generate\(stop=\('</tool>', ''\)\): stop strings must be non-empty"):
                await ctx.generate(episode, stop=("</tool>", ""))
            with pytest.raises(ValueError, match="expected a whole number >= 1"):
                await ctx.generate(episode, max_new_tokens=0)
            await ctx.generate(episode, stop=("</tool>",))
            return episode

    episode = asyncio.run(run())
    assert episode.generations == 1 and len(episode.tokens) <= 4
