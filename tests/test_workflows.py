"""Workflows and tools: episodes built token in / token out, tools whose failures become results, the runtime
that scores episodes, and the trainer that trains on the policy's tokens only."""
from __future__ import annotations

import asyncio
import json
import time
from fractions import Fraction

import pytest

from areal_core.engine.protocol import SamplingParams
from areal_core.errors import ConfigError, PluginError
from areal_core.workflows import (
    EpisodeRunner,
    ToolResult,
    ToolSpec,
    calculator,
    call_format,
    chat_suffix,
    choose_workflow,
    episode_trajectory,
    run_tool,
)
from areal_core.workflows.tools import format_number, truncate

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# -- the calculator ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("expression, expected", [
    ("4821*613", "2955273"), ("1/3 + 1/6", "0.5"), ("1/3", "1/3"), ("-(2**10) // 3", "-342"), ("7 % 3", "1"),
    ("0.1 + 0.2", "0.3"), ("2^8", "256"), ("12345678901234567890 * 98765432109876543210",
                                           str(12345678901234567890 * 98765432109876543210)),
])
def test_the_calculator_is_exact(expression, expected):
    assert calculator(expression) == ToolResult(output=expected)


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('id')", "not arithmetic"), ("open('/etc/passwd')", "not arithmetic"),
    ("(1).__class__", "not arithmetic"), ("x + 1", "not arithmetic"), ("1/0", "division by zero"),
    ("9**9**9", "exponents"), ("10**5000", "digits"), ("2 +", "cannot evaluate"), ("", "empty"),
    ("1" * 600, "longer than"), ("1e400", "cannot evaluate"), ("True + 1", "not arithmetic"),
])
def test_the_calculator_refuses_what_is_not_bounded_arithmetic(expression, message):
    result = calculator(expression)
    assert result.error is not None and message in result.error and result.output == ""


def test_numbers_print_exactly():
    assert [format_number(Fraction(n, d)) for n, d in [(5, 1), (-1, 8), (1, 3), (123, 100)]] == ["5", "-0.125", "1/3",
                                                                                                 "1.23"]


# -- running tools -----------------------------------------------------------------------------------------
def _spec(fn, name="t"):
    return ToolSpec(name, fn, "tests")


def test_a_tool_that_raises_hangs_floods_or_returns_junk_gives_an_error_result(testkit_in_process):
    from areal_core.workflows import tool_registry

    tools = tool_registry()

    async def main():
        started = time.monotonic()
        hung = await run_tool(tools.get("hangs"), "", timeout_s=0.3, max_output_chars=100)
        waited = time.monotonic() - started
        return (await run_tool(tools.get("raises"), "1+", timeout_s=2, max_output_chars=100), hung, waited,
                await run_tool(tools.get("floods"), "", timeout_s=5, max_output_chars=100),
                await run_tool(tools.get("junk"), "", timeout_s=2, max_output_chars=100),
                await run_tool(tools.get("echo"), "hi", timeout_s=2, max_output_chars=100))

    raised, hung, waited, flooded, junk, echoed = asyncio.run(main())
    assert raised.error == "tool 'raises' failed: ValueError: bad arguments '1+'"
    assert hung.error == "tool 'hangs' timed out after 0.3s" and waited < 2
    assert flooded.error is None and len(flooded.output) <= 100 and flooded.details["output_cut"] > 4_000_000
    assert "characters cut" in flooded.output
    assert junk.error == "tool 'junk' returned int; expected str or ToolResult"
    assert echoed == ToolResult(output="HI", details={"time_s": echoed.details["time_s"]})
    assert tools.get("echo").version == "0.0.7" and tools.get("echo").plugin == "testkit"


def test_truncation_keeps_both_ends():
    text, cut = truncate("A" * 50 + "B" * 50 + "Traceback: the end", 60)
    assert len(text) <= 60 and text.startswith("A") and text.endswith("the end") and cut > 0


def test_an_error_result_shows_the_output_before_the_error():
    assert ToolResult(output="partial\n", error="timed out").text == "partial\nerror: timed out"
    assert ToolResult(error="boom").text == "error: boom"


# -- call formats ------------------------------------------------------------------------------------------
def test_calls_are_found_in_each_format_and_malformed_calls_are_named():
    xml, fenced = call_format("xml", "t"), call_format("fenced", "t")
    assert xml.find('I will compute <tool name="calculator">6*7</tool>').arguments == "6*7"
    assert xml.find('<tool name="calculator">6*7</tool>').name == "calculator"
    assert xml.find("the answer is 42") is None
    assert "malformed tool call" in xml.find('<tool nam="calculator">6*7</tool>')
    call = fenced.find("Let me run it:\n```python\nprint(6*7)\n```\n")
    assert (call.name, call.arguments) == ("python", "print(6*7)")
    assert fenced.find("```python\nprint(1)") is None  # no closing fence: not a call
    # an engine stops on the token completing the stop string, which may carry more (BPE merges ">" with "\n")
    assert xml.find('<tool name="calculator">6*7</tool>\n').arguments == "6*7"
    assert xml.find('<tool name="calculator">6*7</tool>.').arguments == "6*7"
    # an earlier mention of the opening tag is not part of the arguments
    assert xml.find('I use <tool name="calculator"> here: <tool name="calculator">6*7</tool>').arguments == "6*7"
    custom = call_format({"pattern": r"CALC\[(?P<args>[^\]]*)\]", "stop": "]", "tool": "calculator"}, "t")
    call = custom.find("so CALC[2+2]")
    assert (call.name, call.arguments, custom.stop) == ("calculator", "2+2", ("]",))
    either = call_format({"pattern": r"A(?P<args>\d)|B(?P<other>\d)", "stop": "!", "tool": "calculator"}, "t")
    assert either.find("A1 and then an answer") is None  # the call must end the turn, in every alternative


@pytest.mark.parametrize("value, message", [
    ("yaml", "expected one of xml, fenced"), ({"pattern": "(", "stop": "x"}, "does not compile"),
    ({"pattern": "(?P<args>.*)", "stop": "x"}, "needs a group"), ({"pattern": "(?P<name>a)(?P<args>b)", "stop": []}, "stop"),
    ({"pattern": "(?P<args>b)"}, "keys pattern, stop"),
])
def test_a_bad_call_format_is_a_config_error(value, message):
    with pytest.raises(ConfigError, match=message):
        call_format(value, "task t")


# -- choosing a workflow -----------------------------------------------------------------------------------
def _task(tmp_path, rows, **spec):
    from areal_core.tasks import Task, task_spec_from_dict

    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = {"name": "t", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
            "reward": {"name": "arithmetic"}, **spec}
    return Task(task_spec_from_dict(data, "t"), tmp_path)


def test_workflow_choices_are_checked_before_a_run(tmp_path, testkit_in_process):
    rows = [{"id": "a", "question": "1+1=", "reference": "2"}]
    assert choose_workflow(_task(tmp_path, rows)).name == "single_turn"
    choice = choose_workflow(_task(tmp_path, rows, workflow={"name": "tool_calls", "options": {"max_turns": 2}}))
    assert (choice.name, sorted(choice.tools), choice.options) == ("tool_calls", ["calculator"], {"max_turns": 2})
    assert choice.manifest()["tools"]["calculator"]["plugin"] == "builtin-workflows"
    for workflow, message in [({"name": "nope"}, "no workflow named 'nope'"),
                              ({"name": "tool_calls", "options": {"tools": ["abacus"]}}, "no tool named 'abacus'"),
                              ({"name": "tool_calls", "options": {"max_turns": 0}}, "max_turns=0"),
                              ({"name": "tool_calls", "options": {"call_format": "yaml"}}, "call_format 'yaml'"),
                              ({"name": "feedback", "options": {"attempts": "3"}}, "attempts")]:
        with pytest.raises(ConfigError, match=message):
            choose_workflow(_task(tmp_path, rows, workflow=workflow))
    # training may run another workflow than the task's (the no-tool baseline): the task's options stay behind
    assert choose_workflow(_task(tmp_path, rows, workflow={"name": "tool_calls", "options": {"max_turns": 2}}),
                           name="single_turn").options == {}


def test_a_workflow_that_is_not_async_is_refused_naming_the_plugin():
    from areal_core.workflows.registry import make_workflow_spec

    with pytest.raises(PluginError, match="plugin 'p': workflow 'w' must be an async function"):
        make_workflow_spec("p", "w", lambda ctx: None)


# -- chat templates ----------------------------------------------------------------------------------------
def test_a_tool_message_is_appended_with_the_templates_turn_markers():
    from areal_core.engine.model import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    text = chat_suffix(tokenizer, "tool", "42")
    assert text == "<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    specials = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")}
    assert sum(i in specials for i in ids) == 4  # the markers are single special tokens, not their characters


# -- episodes against a real engine and a real trainer forward pass ----------------------------------------
@pytest.fixture(scope="module")
def bpe_model_dir(tmp_path_factory, data_dir):
    """A tiny random Qwen2 model with a byte-level BPE tokenizer trained here on GSM8K questions: unlike the
    character tokenizer, its text re-tokenises differently from the tokens a policy sampled."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    text = [json.loads(line)["question"] for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:400]]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    core.train_from_iterator(text, trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<pad>",
                                        additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    directory = tmp_path_factory.mktemp("bpe-model")
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


def _trainer_logprobs(model_dir, trajectories, shared_prompts):
    import torch

    from areal_core.engine.model import load_model
    from areal_core.rl.trainer import build_microbatch, microbatch_logprobs

    model = load_model(model_dir)
    with torch.no_grad():
        mb = build_microbatch(trajectories, list(range(len(trajectories))), 0, torch.device("cpu"), shared_prompts)
        return microbatch_logprobs(model, mb, 1.0)[0], mb


def test_trainer_logprobs_equal_the_engines_on_a_multi_turn_episode_that_would_retokenise_differently(
        bpe_model_dir, tmp_path, testkit_in_process):
    """Three policy turns with a user message and a tool result between them (chat template markers as
    tokens): the trainer's recomputed log-probs of the policy's tokens equal what the engine returned, and the
    loss mask covers exactly the policy's tokens, although the episode's text re-tokenises to other tokens."""
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.model import load_tokenizer
    from areal_core.rewards import RewardService, RewardServiceConfig

    rows = [{"id": "q", "question": "Natalia sold clips to 48 of her friends in April.", "reference": "X"}]
    task = _task(tmp_path, rows, prompt={"messages": [{"role": "user", "content": "{{ question }}"}]},
                 reward={"name": "shout"},
                 workflow={"name": "scripted", "options": {"tools": ["echo"], "script": ["Try again, please.",
                                                                                         "tool:echo:it is 12 o'clock"]}})
    tokenizer = load_tokenizer(bpe_model_dir)

    async def run():
        async with LocalEngine(bpe_model_dir, max_seq_len=512) as engine, \
                RewardService(RewardServiceConfig(workers=1)) as rewards:
            runner = EpisodeRunner(task, engine, tokenizer, rewards, workflow=choose_workflow(task), reward_options={},
                                   max_new_tokens=24)
            return await asyncio.gather(*(runner.run(rows[0], SamplingParams(temperature=1.0, seed=s), f"p0.{s}")
                                          for s in range(2)))

    episodes = asyncio.run(run())
    trajectories = [episode_trajectory(e, trajectory_id=f"p0.{i}", task="t", sample_id="q", group_id="p0",
                                       workflow="scripted") for i, e in enumerate(episodes)]
    for trajectory in trajectories:
        roles = [t["role"] for t in trajectory.turns]
        assert roles == ["assistant", "user", "assistant", "tool", "assistant"]
        assert trajectory.reward.error is None and trajectory.episode["tool_calls"] == 1
        assert "IT IS 12 O'CLOCK" in trajectory.turns[3]["text"]
        for turn in trajectory.turns:
            assert set(trajectory.loss_mask[turn["start"]:turn["end"]]) == {int(turn["role"] == "assistant")}
        full = trajectory.prompt_token_ids + trajectory.output_token_ids
        retokenised = tokenizer(tokenizer.decode(full), add_special_tokens=False)["input_ids"]
        assert retokenised != full  # the text of this episode does not give back its tokens
    for shared in (False, True):
        logprobs, mb = _trainer_logprobs(bpe_model_dir, trajectories, shared)
        for row, trajectory in enumerate(trajectories):
            p = len(trajectory.prompt_token_ids)
            mask = mb.response[row, p - 1: p - 1 + len(trajectory.output_token_ids)]
            assert mask.tolist() == [float(m) for m in trajectory.loss_mask]
            trainer = logprobs[row, p - 1: p - 1 + len(trajectory.output_token_ids)]
            policy = [i for i, m in enumerate(trajectory.loss_mask) if m]
            engine = [trajectory.output_logprobs[i] for i in policy]
            assert max(abs(float(trainer[i]) - e) for i, e in zip(policy, engine)) < 1e-4


def test_sampled_lengths_draws_a_log_normal_with_the_asked_mean_and_p99():
    from areal_core.workflows.builtin import lognormal_parameters, sampled_length

    options = {"lengths": {"mean": 300, "p99": 2000, "max": 100_000}}
    draws = sorted(sampled_length(options, f"g{i}.{j}", 100_000) for i in range(2500) for j in range(8))
    mean, p99 = sum(draws) / len(draws), draws[int(0.99 * len(draws))]
    assert abs(mean - 300) / 300 < 0.05 and abs(p99 - 2000) / 2000 < 0.1   # 20,000 fixed draws: no flakiness
    assert sampled_length({**options, "seed": 1}, "g0.0", 100_000) != sampled_length(options, "g0.0", 100_000)
    assert max(sampled_length({"lengths": {"mean": 300, "p99": 2000, "max": 512}}, f"g{i}", 4096)
               for i in range(500)) == 512
    mu, sigma = lognormal_parameters(300, 300)
    assert sigma == 0 and round(mu, 9) == round(__import__("math").log(300), 9)


@pytest.mark.parametrize("options, message", [
    ({}, "lengths must be"), ({"lengths": {"p99": 10}}, "lengths must be"),
    ({"lengths": {"mean": 10, "p99": 1000}}, "p99 <= 15.0 x mean"), ({"lengths": {"mean": 10, "p99": 5}}, "mean <= p99"),
    ({"lengths": {"mean": 0}}, "numbers >= 1"), ({"lengths": {"mean": 10}, "colour": 1}, "unknown workflow option"),
    ({"lengths": {"mean": 10, "prompt_share": -0.1}}, r"prompt_share must be a number in \[0, 1\]"),
    ({"lengths": {"mean": 10, "prompt_share": True}}, "prompt_share must be")])
def test_sampled_lengths_refuses_options_that_describe_no_log_normal(options, message):
    from areal_core.workflows.builtin import check_sampled_lengths

    with pytest.raises(ConfigError, match=message):
        check_sampled_lengths(options, "task t")
