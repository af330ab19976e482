"""The `feedback` workflow on a code task: a failed attempt is told which tests failed (run in the real Docker
sandbox), the model tries again, and the episode's reward is its final attempt's."""
from __future__ import annotations

import asyncio
import dataclasses

from areal_code import code_reward

from areal_core.tasks import get_task
from areal_core.tasks.spec import WorkflowRef
from areal_core.workflows.builtin import failure_summary


def test_the_failure_summary_names_the_failed_tests_and_how_they_failed(mbpp, code_options):
    sample = dict(mbpp[1], id=str(mbpp[1]["task_id"]))
    wrong = "```python\ndef " + sample["code"].split("def ", 1)[1].split("(")[0] + "(*args):\n    return None\n```"
    result = code_reward(sample, wrong, format="mbpp", reward="fraction", stop_on_failure=False, **code_options)
    assert result.error is None and result.correct is False
    summary = failure_summary(result)
    failed = [t for t in result.details["tests"] if t["verdict"] != "passed"]
    assert failed and summary.count("\n") == len(failed) - 1
    assert all(f"- {t['name']}: {t['verdict']}" in summary for t in failed)
    assert failure_summary(code_reward(sample, "  ", format="mbpp", **code_options)) == \
        "no program found in the response"


def test_a_feedback_episode_retries_with_the_failure_summary_and_keeps_every_attempts_score(
        tmp_path, data_dir, code_options, monkeypatch):
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.model import init_model
    from areal_core.engine.protocol import SamplingParams
    from areal_core.rewards import RewardService, RewardServiceConfig
    from areal_core.workflows import EpisodeRunner, choose_workflow, episode_trajectory

    monkeypatch.setenv("AREAL_DATA_DIR", str(data_dir))
    base = get_task("mbpp")
    task = type(base)(dataclasses.replace(base.spec, workflow=WorkflowRef("feedback", {"attempts": 3})), data_dir)
    sample = task.samples()[0]
    model = init_model(tmp_path / "model", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, intermediate_size=64, max_position_embeddings=4096)

    async def run():
        async with LocalEngine(model, max_seq_len=4096) as engine, \
                RewardService(RewardServiceConfig(workers=1, timeout=60)) as rewards:
            runner = EpisodeRunner(task, engine, engine.tokenizer, rewards, workflow=choose_workflow(task),
                                   reward_options={"format": "mbpp", **code_options}, max_new_tokens=8)
            return await runner.run(sample, SamplingParams(seed=3), "f.0")

    episode = asyncio.run(run())
    roles = [t["role"] for t in episode.turns]
    trajectory = episode_trajectory(episode, trajectory_id="f.0", task="mbpp", sample_id=sample["id"], group_id="f",
                                    workflow="feedback")
    assert roles == ["assistant", "user", "assistant", "user", "assistant"]
    assert len(episode.scores) == 3 and [s["attempt"] for s in episode.scores] == [0, 1, 2]
    feedback = episode.turns[1]["text"]
    assert feedback.startswith("\nThe tests failed:\n") and feedback.endswith("Write the whole program again, fixed.\n")
    assert set(trajectory.loss_mask[episode.turns[1]["start"]:episode.turns[1]["end"]]) == {0}
    assert episode.reward is not None and episode.reward.correct is False
    assert trajectory.response == episode.turns[[i for i, r in enumerate(roles) if r == "assistant"][-1]]["text"]
    assert trajectory.episode["scores"] == episode.scores
