"""The rollout controller with a real engine and a real reward service."""
import asyncio

import pytest

from areal_core.engine.local import LocalEngine
from areal_core.engine.model import init_model
from areal_core.rewards import RewardService, RewardServiceConfig
from areal_core.rl.rollout import RolloutConfig, RolloutController, RolloutInterrupted, staleness_histogram
from areal_core.tasks import get_task


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("rollout") / "model", hidden_size=32, num_hidden_layers=1,
                      intermediate_size=64)


async def settle(controller, seconds=0.3):
    """Wait until the controller has stopped submitting (it is blocked on the staleness gate)."""
    while True:
        before = controller.submitted
        await asyncio.sleep(seconds)
        if controller.submitted == before:
            return


def test_staleness_gate_admits_batch_size_times_eta_plus_one_prompts_per_version(model_dir):
    async def run():
        config = RolloutConfig(batch_size=4, group_size=2, max_staleness=1, max_new_tokens=4)
        async with LocalEngine(model_dir) as engine, RewardService(RewardServiceConfig(workers=1)) as rewards:
            controller = RolloutController(get_task("arithmetic-test"), engine, rewards, engine.tokenizer, config)
            controller.start()
            await settle(controller)
            first = controller.submitted            # batches 0 and 1 may run at version 0
            batch = await controller.next_batch()
            await controller.set_version(1)
            await settle(controller)
            second = controller.submitted           # now batch 2 too
            await controller.stop()
            return first, second, batch

    first, second, batch = asyncio.run(run())
    assert first == 8 and second == 12
    assert len(batch) == 4 and all(len(g.trajectories) == 2 for g in batch)
    trajectories = [t for g in batch for t in g.trajectories]
    assert all(t.reward.error is None and t.output_versions == [0] * len(t.output_token_ids) for t in trajectories)
    assert staleness_histogram(trajectories, version=1) == {1: 8}


def test_failed_rewards_are_dropped_from_their_group_only(model_dir, plugin_dirs, monkeypatch):
    """A reward that crashes for some responses: those responses leave their group, the rest stays."""
    from areal_core.plugins import reset_plugin_manager

    monkeypatch.syspath_prepend(str(plugin_dirs["testkit"]))
    monkeypatch.setenv("AREAL_PLUGINS", "testkit,arithmetic")
    reset_plugin_manager()

    async def run():
        config = RolloutConfig(batch_size=2, group_size=3, max_staleness=0, max_new_tokens=3)
        task = get_task("arithmetic-test")
        async with LocalEngine(model_dir) as engine, RewardService(RewardServiceConfig(workers=1, timeout=5)) as rewards:
            controller = RolloutController(task, engine, rewards, engine.tokenizer, config,
                                           reward_options={})
            # swap in a reward that always raises: every response fails verification
            controller.task = task
            object.__setattr__(task.spec.reward, "name", "raises")
            controller.start()
            batch = await controller.next_batch()
            await controller.stop()
            return batch, controller.dropped

    try:
        batch, dropped = asyncio.run(run())
    finally:
        reset_plugin_manager()
    assert all(g.trajectories == [] and g.dropped == 3 for g in batch)
    assert sum(dropped.values()) >= 6 and any("raised ValueError" in k for k in dropped)


def test_a_prompt_whose_rollout_fails_finishes_empty_and_counted_instead_of_stalling_the_batch(model_dir, tmp_path):
    """A prompt too long for the engine (every generate call is rejected): its group finishes empty with the
    reason counted, the batch is handed over, and the other prompts' groups are whole."""
    from areal_core.tasks import Task, task_spec_from_dict

    rows = ['{"id": "ok1", "question": "1+2=", "reference": "3"}',
            '{"id": "too-long", "question": "' + "9+" * 400 + '1=", "reference": "0"}',
            '{"id": "ok2", "question": "2+2=", "reference": "4"}']
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
    spec = task_spec_from_dict({"name": "flaky", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
                                "reward": {"name": "arithmetic"}}, "flaky")

    async def run():
        config = RolloutConfig(batch_size=3, group_size=2, max_staleness=0, max_new_tokens=3)
        async with LocalEngine(model_dir, max_seq_len=256) as engine, \
                RewardService(RewardServiceConfig(workers=1)) as rewards:
            controller = RolloutController(Task(spec, tmp_path), engine, rewards, engine.tokenizer, config)
            controller.start()
            batch = await asyncio.wait_for(controller.next_batch(), timeout=120)
            await controller.stop()
            return batch, controller

    batch, controller = asyncio.run(run())
    assert sorted((g.sample_id, len(g.trajectories), g.dropped) for g in batch) == [("ok1", 2, 0), ("ok2", 2, 0), ("too-long", 0, 2)]
    assert controller.dropped == {"rollout failed: ContextLengthError": 2}  # (an EngineError)
    assert "ContextLengthError: prompt of 802 tokens leaves no room under the engine's max length 256" in controller.last_failure



def test_training_grades_in_the_tasks_train_mode_strict_by_default(data_dir, monkeypatch):
    """A rollout scores math500 strictly (a box, as the prompt asks, or nothing), while an eval of the
    same task reads answers leniently: one Minerva-style response is wrong in training, right in evals."""
    from areal_core.eval.runner import eval_reward_options
    from areal_math import verify

    monkeypatch.setenv("AREAL_DATA_DIR", str(data_dir))
    task = get_task("math500")
    controller = RolloutController(task, None, None, None, RolloutConfig())
    assert (controller.reward_options, controller.reward_mode) == ({"extract": "strict"}, "strict")
    assert eval_reward_options(task) == ({"extract": "lenient"}, "lenient")
    sample = task.samples()[0]
    response = f"Final Answer: The final answer is ${sample['reference']}$. I hope it is correct."
    assert verify(sample["reference"], response, **controller.reward_options).correct is False
    assert verify(sample["reference"], response, **eval_reward_options(task)[0]).correct is True
    assert verify(sample["reference"], f"\\boxed{{{sample['reference']}}}", **controller.reward_options).correct


def test_dynamic_sampling_fills_batches_with_groups_that_carry_a_signal(model_dir, plugin_dirs, monkeypatch, tmp_path):
    """Half the prompts always score 0 (uniform groups, no gradient): with dynamic sampling they are dropped and
    more prompts generated in their place, so every batch holds batch_size groups with mixed rewards, in
    admission order, each within the staleness bound; the uniform ones freed their slots under the gate."""
    from areal_core.plugins import reset_plugin_manager
    from areal_core.rl.rollout import is_uniform
    from areal_core.tasks import Task, task_spec_from_dict

    monkeypatch.syspath_prepend(str(plugin_dirs["testkit"]))
    monkeypatch.setenv("AREAL_PLUGINS", "testkit,arithmetic")
    reset_plugin_manager()
    rows = [f'{{"id": "r{i}", "question": "{i}+1=", "uniform": {str(i % 2 == 0).lower()}}}' for i in range(40)]
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
    spec = task_spec_from_dict({"name": "half-uniform", "dataset": {"path": "d.jsonl"},
                                "prompt": {"template": "{{ question }}"}, "reward": {"name": "parity"}}, "half-uniform")

    async def run():
        config = RolloutConfig(batch_size=3, group_size=4, max_staleness=0, max_new_tokens=6, temperature=1.0,
                               dynamic_sampling=True, dynamic_sampling_max_prompts=40)
        async with LocalEngine(model_dir) as engine, RewardService(RewardServiceConfig(workers=1)) as rewards:
            controller = RolloutController(Task(spec, tmp_path), engine, rewards, engine.tokenizer, config)
            controller.start()
            batches, used = [], []
            for version in (1, 2):
                batches.append(await asyncio.wait_for(controller.next_batch(), timeout=120))
                used.append(controller.last_batch_prompts)
                await controller.set_version(version)
            await settle(controller)
            state = controller.state_dict()
            await controller.stop()
            return batches, used, state

    try:
        batches, used, state = asyncio.run(run())
    finally:
        reset_plugin_manager()
    numbers = [int(g.group_id[1:]) for batch in batches for g in batch]
    assert numbers == sorted(numbers) and len(numbers) == 6
    assert all(not is_uniform(g) and g.sample_id in {f"r{i}" for i in range(1, 40, 2)} for batch in batches for g in batch)
    assert all(batch_size >= 3 for batch_size in used) and sum(used) == state["consumed"] > 6  # uniform ones skipped
    assert all(g.submitted_at_version == k for k, batch in enumerate(batches) for g in batch)   # eta = 0 held
    # every admitted prompt past the consumed ones is within the gate: batch_size non-discarded slots at version 2
    assert state["submitted"] - state["discarded"] <= 3 * 3


def test_a_rollout_ended_by_a_base_exception_stops_the_run_instead_of_leaving_it_hanging(model_dir):
    """pytest-timeout's Failed (a BaseException) once hit a rollout task: the task ended without its group and the
    run waited for that group forever. Now the group finishes empty, counted, and next_batch raises the exception;
    a cancellation from anywhere but stop() is a counted failure of its prompt."""
    class Interrupted(BaseException):
        pass

    async def run(error):
        config = RolloutConfig(batch_size=2, group_size=2, max_staleness=0, max_new_tokens=3)
        async with LocalEngine(model_dir) as engine, RewardService(RewardServiceConfig(workers=1)) as rewards:
            controller = RolloutController(get_task("arithmetic-test"), engine, rewards, engine.tokenizer, config)
            real_run = controller.episodes.run

            async def run_episode(sample, sampling, rid):
                if rid == "p1.0":
                    raise error
                return await real_run(sample, sampling, rid)

            controller.episodes.run = run_episode  # the fault, injected into one prompt's episodes
            controller.start()
            try:
                return await asyncio.wait_for(controller.next_batch(), timeout=60), controller
            except RolloutInterrupted as exc:
                return exc, controller
            finally:
                await controller.stop()

    raised, controller = asyncio.run(run(Interrupted("timeout")))
    assert isinstance(raised, RolloutInterrupted) and "prompt 1: Interrupted: timeout" in str(raised)
    assert controller.dropped == {"rollout failed: Interrupted": 2}
    batch, controller = asyncio.run(run(asyncio.CancelledError()))
    assert [len(g.trajectories) for g in batch] == [2, 0]
    assert controller.dropped == {"rollout failed: CancelledError": 2}
