"""What all four logic rewards share: extraction modes, strict format, screening, options, registration."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_logic import answers, countdown, knights_knaves, sudoku, zebra

PROPERTY = settings(deadline=None, max_examples=200)

KK = {"names": ["Amelia", "Evelyn"], "solution": [True, False]}
RIGHT = "Amelia is a knight, Evelyn is a knave"
WRONG = "Amelia is a knave, Evelyn is a knight"


def test_auto_extraction_prefers_the_answer_tag_then_boxed_then_text_after_think():
    assert answers.extract_answer(f"<answer>{RIGHT}</answer> again <answer> {RIGHT}\n</answer>", "auto")[1] == "answer_tag"
    assert answers.extract_answer(r"so \boxed{a{b}c} and \boxed{a{b}c}", "auto") == ("a{b}c", "boxed")
    assert answers.extract_answer(f"<think>{WRONG}</think>{RIGHT}", "auto") == (RIGHT, "after_think")
    assert answers.extract_answer(RIGHT, "auto") == (RIGHT, "full")


@pytest.mark.parametrize("response", [
    f"<answer>{WRONG}</answer> then <answer>{RIGHT}</answer>",
    f"<answer>{RIGHT}</answer> then <answer>{WRONG}</answer>",
    f"\\boxed{{{RIGHT}}} or \\boxed{{{WRONG}}}",
])
def test_several_different_final_answers_are_a_conflict_in_any_order(response):
    result = knights_knaves.reward(KK, response)
    assert (result.score, result.details["failure"]) == (0.0, "conflict")
    assert "different answers" in result.details["reason"]


@pytest.mark.parametrize("response, mode, reason", [
    (RIGHT, "answer_tag", "no <answer>"),
    (RIGHT, "boxed", "no \\boxed"),
    (f"<answer>{RIGHT}", "auto", "not closed"),
    (r"\boxed{" + RIGHT, "auto", "no matching closing brace"),
    ("<think>all reasoning</think>   ", "auto", "no text after </think>"),
])
def test_extraction_failures_say_what_is_missing(response, mode, reason):
    result = knights_knaves.reward(KK, response, extract=mode)
    assert (result.score, result.details["failure"]) == (0.0, "no_answer")
    assert reason in result.details["reason"]


def test_full_mode_reads_the_whole_response_even_with_tags():
    assert knights_knaves.reward(KK, f"<answer>{RIGHT}</answer>", extract="full").score == 1.0


@pytest.mark.parametrize("response, ok", [
    (f"<think>x</think><answer>{RIGHT}</answer>", True),
    (f"x</think>\n<answer>{RIGHT}</answer>", True),          # the prompt opened <think>
    (f"<answer>{RIGHT}</answer>", False),
    (f"<think>x</think><answer>{RIGHT}</answer><answer>{RIGHT}</answer>", False),
    (f"<answer>{RIGHT}</answer><think>x</think>", False),
    (f"<think>a</think><think>b</think><answer>{RIGHT}</answer>", False),
])
def test_strict_format_requires_one_think_then_one_answer(response, ok):
    result = knights_knaves.reward(KK, response, strict_format=True)
    assert result.score == (1.0 if ok else 0.0), result.details
    assert knights_knaves.reward(KK, response).score == 1.0  # without strict_format only the last answer counts


@PROPERTY
@given(ch=st.characters(min_codepoint=0x80, categories=["Lu", "Ll", "Lo", "Nd", "No", "Mn", "Cf"]))
def test_any_non_ascii_letter_digit_mark_or_format_character_in_the_answer_is_rejected_by_name(ch):
    result = knights_knaves.reward(KK, f"<answer>Amelia is a knight{ch}, Evelyn is a knave</answer>")
    assert (result.score, result.details["failure"]) == (0.0, "suspicious_character")
    assert f"U+{ord(ch):04X}" in result.details["reason"]


def test_non_ascii_outside_the_answer_and_harmless_symbols_inside_it_are_fine():
    reasoning = "<think>Пусть Амелия — рыцарь… 推理 ✓</think>"
    assert knights_knaves.reward(KK, f"{reasoning}<answer>Amelia → knight — Evelyn → knave ✓</answer>").score == 1.0


@pytest.mark.parametrize("reward", [knights_knaves.reward, countdown.reward, sudoku.reward, zebra.reward])
def test_every_family_rejects_a_one_megabyte_response_before_reading_it(reward):
    samples = {knights_knaves.reward: KK, countdown.reward: {"numbers": [1, 2], "target": 3},
               sudoku.reward: {"puzzle": "0" * 16}, zebra.reward: {"solution": [{"Name": "Alice"}, {"Name": "Bob"}]}}
    result = reward(samples[reward], "<answer>" + "1" * (1 << 20) + "</answer>")
    assert (result.score, result.details["failure"]) == (0.0, "too_long")
    assert "max_response_chars" in result.details["reason"]


def test_size_limits_are_options():
    long_answer = f"<answer>{RIGHT}{' ' * 30_000}</answer>"
    assert knights_knaves.reward(KK, long_answer).details["failure"] == "too_long"
    assert knights_knaves.reward(KK, long_answer, max_answer_chars=50_000).score == 1.0
    assert knights_knaves.reward(KK, long_answer, max_response_chars=1000).details["failure"] == "too_long"


@pytest.mark.parametrize("options, message", [
    ({"partial": True}, "unknown option 'partial'; valid options: "),
    ({"format_score": 1.0}, "format_score must be a number in [0, 1)"),
    ({"format_score": "high"}, "format_score"),
    ({"partial_credit": "yes"}, "partial_credit must be true or false"),
    ({"extract": "xml"}, "extract must be one of auto, answer_tag, boxed, full"),
    ({"max_answer_chars": 0}, "max_answer_chars must be a positive integer"),
])
def test_bad_options_are_config_errors_naming_the_reward_and_option(options, message):
    from areal_core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        knights_knaves.reward(KK, RIGHT, **options)
    assert message in str(info.value) and "'knights_knaves'" in str(info.value)


def test_family_options_are_known_only_to_their_family():
    from areal_core.errors import ConfigError

    assert countdown.reward({"numbers": [1, 2], "target": 3}, "1 + 2", integer_steps=True).score == 1.0
    with pytest.raises(ConfigError, match="unknown option 'integer_steps'"):
        sudoku.reward({"puzzle": "0" * 16}, "1234", integer_steps=True)


def test_the_four_rewards_and_generators_are_registered_by_the_logic_plugin(logic_only):
    from areal_core.rewards import reward_registry
    from areal_core.tasks import generator_registry

    rewards = reward_registry()
    for name, fields in [("knights_knaves", ("names", "solution")), ("countdown", ("numbers", "target")),
                         ("sudoku", ("puzzle",)), ("zebra", ("solution",))]:
        spec = rewards.get(name)
        assert (spec.plugin, spec.required_fields) == ("logic", fields) and spec.description
        assert generator_registry().get(name).plugin == "logic"


def test_a_bad_option_reaches_the_caller_as_a_verifier_error_not_a_wrong_answer(logic_only):
    from areal_core.rewards import reward_registry
    from areal_core.rewards import call_reward

    result = call_reward(reward_registry().get("knights_knaves"), KK, RIGHT, {"format_scor": 0.1})
    assert result.error is not None and "unknown option 'format_scor'" in result.error and result.correct is None


def test_generated_tasks_render_prompts_from_their_rows(logic_only):
    from areal_core.tasks import get_task

    for name in ("knights_knaves-test", "countdown-test", "sudoku_4x4-test", "zebra-test"):
        task = get_task(name)
        sample = task.samples()[0]
        prompt = task.render_prompt(sample)
        assert prompt[0]["role"] == "user" and "<answer>" in prompt[0]["content"], name
    countdown_prompt = get_task("countdown-test").render_prompt(get_task("countdown-test").samples()[0])[0]["content"]
    assert "at most once" in countdown_prompt
