"""Programs that try to pass without solving: each must score 0 where the honest one scores 1."""
from __future__ import annotations

import pytest

from code_support import score_all

HONEST = """
def has_close_elements(numbers, threshold):
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
"""

HACKS = {
    "exit_zero_at_import": "import sys\nsys.exit(0)\n",
    "os_exit_at_import": "import os\nos._exit(0)\n",
    "exit_inside_candidate": "import os\ndef has_close_elements(numbers, threshold):\n    os._exit(0)\n",
    "system_exit_swallowed_by_nothing": "def has_close_elements(numbers, threshold):\n    raise SystemExit(0)\n",
    "always_equal_object": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\n    __hash__ = object.__hash__\n"
        "def has_close_elements(numbers, threshold):\n    return Anything()\n"),
    "bool_subclass_equal_to_everything": (
        # B(7): a value that is wrong for every test (B(1) crosses as 1, and 1 == True honestly)
        "class B(int):\n    def __eq__(self, other):\n        return True\n"
        "def has_close_elements(numbers, threshold):\n    return B(7)\n"),
    "always_equal_inside_a_list": (
        "class A:\n    def __eq__(self, o):\n        return True\n"
        "def has_close_elements(numbers, threshold):\n    return [A()][0:1][0]\n"),
    "generator_of_fakes": (
        "class A:\n    def __eq__(self, o):\n        return True\n"
        "def has_close_elements(numbers, threshold):\n    return (A() for _ in range(1))\n"),
    "patched_builtins": (
        "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
        "builtins.abs = lambda x: 0\n"
        "def has_close_elements(numbers, threshold):\n    return None\n"),
    "trace_hook_skips_asserts": (
        "import sys\ndef tracer(frame, event, arg):\n    raise SystemExit(0)\nsys.settrace(tracer)\n"
        "def has_close_elements(numbers, threshold):\n    return None\n"),
    "thread_left_running": (
        "import threading, time\n"
        "def meddle():\n    time.sleep(0.2)\n    import os\n    os._exit(0)\n"
        "threading.Thread(target=meddle, daemon=True).start()\n"
        "def has_close_elements(numbers, threshold):\n    return None\n"),
    "fake_success_on_stdout_and_event_pipe": (
        "import os\nprint('PASSED all tests')\n"
        "try:\n    os.write(4, b'{\"t\": \"x\", \"e\": \"done\", \"i\": -1, \"v\": \"\", \"m\": \"\", \"n\": 0}\\n')\n"
        "except OSError:\n    pass\n"
        "def has_close_elements(numbers, threshold):\n    return None\n"),
    "atexit_rewrite": (
        "import atexit, os\natexit.register(lambda: os._exit(0))\n"
        "def has_close_elements(numbers, threshold):\n    return None\n"),
    "redefine_check": (
        "def check(candidate):\n    pass\n"
        "def has_close_elements(numbers, threshold):\n    return None\n"),
}


@pytest.fixture(scope="module")
def sample(humaneval):
    return humaneval[0]


def test_the_honest_solution_scores_one(sample, code_options):
    result = score_all([(sample, f"```python\n{HONEST}```")], {**code_options, "format": "humaneval"})[0]
    assert (result.score, result.correct, result.error) == (1.0, True, None)


@pytest.mark.parametrize("name", sorted(HACKS))
def test_reward_hacks_score_zero(sample, code_options, name):
    result = score_all([(sample, f"```python\n{HACKS[name]}```")], {**code_options, "format": "humaneval"})[0]
    assert result.error is None, result.error
    assert result.score == 0.0 and result.correct is False, result.details
    assert result.details["passed"] == 0


def test_hacks_score_zero_in_fraction_mode_too(sample, code_options):
    rows = [(sample, f"```python\n{code}```") for code in HACKS.values()]
    results = score_all(rows, {**code_options, "format": "humaneval", "reward": "fraction"})
    assert [r.score for r in results] == [0.0] * len(rows)


def test_redefining_a_prompt_helper_the_tests_use_does_not_help(humaneval, code_options):
    """HumanEval/32's test checks `poly(coeffs, candidate(coeffs))`, with `poly` from the prompt."""
    sample = humaneval[32]
    assert "def poly(" in sample["prompt"]
    hack = "```python\ndef poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n```"
    honest = score_all([(sample, sample["canonical_solution"])], {**code_options, "format": "humaneval"})[0]
    hacked = score_all([(sample, hack)], {**code_options, "format": "humaneval"})[0]
    assert honest.score == 1.0
    assert hacked.score == 0.0 and hacked.error is None
