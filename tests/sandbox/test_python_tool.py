"""The `python` tool against the real Docker sandbox: hostile programs a model might write in a tool call get a
result to read (an error saying what happened), within their limits, and nothing reaches the host; an episode
that makes such calls goes on to its next turn."""
from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import pytest

from areal_sandbox.tool import program_traceback, tool_config
from sandbox_support import assert_host_clean

LIMITS = {"timeout_s": 2.0, "pool_size": 1, "memory_mb": 128, "output_bytes": 4096}


@pytest.fixture
def python_tool(sandbox_image, plugin_dirs, monkeypatch):
    from areal_core.plugins import reset_plugin_manager
    from areal_core.workflows import tool_registry

    monkeypatch.syspath_prepend(str(plugin_dirs["testkit"]))
    monkeypatch.setenv("AREAL_PLUGINS", "testkit,arithmetic,sandbox")
    monkeypatch.setenv("AREAL_SANDBOX_SECRET", "hunter2")  # the host's environment never enters the sandbox
    reset_plugin_manager()
    yield tool_registry().get("python"), {**LIMITS, "image": sandbox_image}
    reset_plugin_manager()


def call(tool, options, program, timeout_s=30):
    from areal_core.workflows import run_tool

    started = time.monotonic()
    result = asyncio.run(run_tool(tool, program, timeout_s=timeout_s, max_output_chars=500, options=options))
    return result, time.monotonic() - started


def test_an_honest_program_prints_and_a_crash_reads_as_its_own_traceback(python_tool):
    tool, options = python_tool
    result, _ = call(tool, options, "print(sum(range(10)))")
    assert (result.output, result.error) == ("45\n", None)
    assert tool.plugin == "sandbox" and "+" in tool.version
    result, _ = call(tool, options, "x = 1\nprint('before')\nraise KeyError('k')\n")
    assert result.error is None and result.output.startswith("before\nTraceback (most recent call last):\n")
    assert 'File "<program>", line 3' in result.output and "KeyError: 'k'" in result.output
    assert "/opt/areal/harness" not in result.output  # the sandbox's own frames are left out


@pytest.mark.parametrize("name, program, expected", [
    # The loop gets a wide wall-clock allowance: its CPU-time limit must stop it even on a crowded machine.
    ("loop", "while True:\n    pass\n", "ran past its time limit (used more than 2s of CPU time)"),
    ("sleep", "import time\ntime.sleep(60)\n", "ran past its time limit (no exit within 4s of wall-clock time)"),
    ("fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "error"),
    ("memory", "x = bytearray(1 << 30)\n", "ran out of memory (128 MB)"),
    ("flood", "while True:\n    print('y' * 1000)\n", "printed more than 4096 bytes"),
    ("network", "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)\n", "Network is unreachable"),
    ("secrets", "import os\nprint(sorted(k for k in os.environ if 'SECRET' in k), os.environ.get('HOME'))\n",
     "[] /work"),
])
def test_hostile_tool_calls_become_results_and_leave_the_host_clean(python_tool, docker_engine, name, program, expected):
    from areal_sandbox.docker_backend import shared_sandbox

    tool, options = python_tool
    if name == "loop":
        options = {**options, "wall_factor": 10.0}
    result, elapsed = call(tool, options, program)
    assert expected in result.text, (name, result.text)
    assert elapsed < LIMITS["timeout_s"] * tool_config(options).wall_factor + 8, f"{name} took {elapsed:.1f}s"
    assert_host_clean(shared_sandbox(tool_config(options)), docker_engine)
    assert call(tool, options, "print('still honest')")[0].output == "still honest\n"


def test_host_writes_and_daemons_do_not_outlive_the_call(python_tool, docker_engine, tmp_path):
    from areal_sandbox.docker_backend import shared_sandbox

    tool, options = python_tool
    marker = tmp_path / f"from-tool-{uuid.uuid4().hex}"
    program = (f"import os, time\nfor path in [{str(marker)!r}, '/etc/owned', '/root/owned']:\n"
               "    try:\n        open(path, 'w').write('owned')\n    except OSError as e:\n        print(type(e).__name__)\n"
               "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(3600)\n    os._exit(0)\n"
               "print('parent done')\n")
    result, _ = call(tool, options, program)
    assert "parent done" in result.output and not marker.exists() and not os.path.exists("/etc/owned")
    time.sleep(0.5)
    assert_host_clean(shared_sandbox(tool_config(options)), docker_engine)
    survivors = call(tool, options, "import os\nprint([p for p in os.listdir('/proc') if p.isdigit() and int(p) != "
                                    "os.getpid() and b'supervisor.py' not in open(f'/proc/{p}/cmdline','rb').read()])")
    assert survivors[0].output == "[]\n"


def test_an_episode_whose_tool_calls_are_hostile_goes_on_to_its_next_turns(python_tool, tmp_path):
    from areal_core.engine.local import LocalEngine
    from areal_core.engine.model import init_model
    from areal_core.rewards import RewardService, RewardServiceConfig
    from areal_core.tasks import Task, task_spec_from_dict
    from areal_core.workflows import EpisodeRunner, choose_workflow
    from areal_core.engine.protocol import SamplingParams

    _, options = python_tool
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "a", "question": "1+1=", "reference": "2"}) + "\n")
    # The fork bomb swallows its fork errors, so only a limit ends it: one that lets fork() raise can instead exit
    # with its own traceback (a result, not an error) when it meets the pids limit before the CPU limit.
    script = ["tool:python:while True: pass",
              "tool:python:import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
              "tool:python:print(6*7)"]
    spec = task_spec_from_dict({"name": "t", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
                                "reward": {"name": "arithmetic"},
                                "workflow": {"name": "scripted", "options": {"tools": ["python"], "script": script,
                                                                             "max_new_tokens": 3, "tool_timeout_s": 20, "max_tool_output_chars": 60,
                                                                             "tool_options": {"python": options}}}}, "t")
    task = Task(spec, tmp_path)
    model = init_model(tmp_path / "model", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, intermediate_size=64)

    async def run():
        async with LocalEngine(model) as engine, RewardService(RewardServiceConfig(workers=1)) as rewards:
            runner = EpisodeRunner(task, engine, engine.tokenizer, rewards, workflow=choose_workflow(task),
                                   reward_options={}, max_new_tokens=3)
            return await runner.run({"id": "a", "question": "1+1=", "reference": "2"}, SamplingParams(seed=1), "e.0")

    episode = asyncio.run(run())
    tools = [t for t in episode.turns if t["role"] == "tool"]
    assert [t["error"] for t in tools] == [True, True, False] and tools[2]["text"] == "42\n"
    assert episode.generations == 4 and episode.reward.error is None


def test_tracebacks_without_a_program_frame_are_kept_whole():
    assert program_traceback("plain stderr\n") == "plain stderr\n"
    text = 'Traceback (most recent call last):\n  File "/opt/x.py", line 1\n  File "<program>", line 2\nE: e\n'
    assert program_traceback(text) == 'Traceback (most recent call last):\n  File "<program>", line 2\nE: e\n'


def test_tool_options_a_tool_rejects_fail_before_a_run_naming_the_option(python_tool, tmp_path):
    from areal_core.errors import ConfigError
    from areal_core.tasks import Task, task_spec_from_dict
    from areal_core.workflows import choose_workflow

    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "a", "question": "1+1=", "reference": "2"}) + "\n")

    def task(tool_options):
        return Task(task_spec_from_dict({
            "name": "t", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
            "reward": {"name": "arithmetic"}, "workflow": {"name": "tool_calls", "options": {
                "tools": ["python"], "call_format": "fenced", "tool_options": tool_options}}}, "t"), tmp_path)

    assert choose_workflow(task({"python": {"timeout_s": 3}})).tools["python"].plugin == "sandbox"
    for options, message in [({"python": {"timeout": 3}}, "tool_options.python: python tool: unknown option 'timeout'"),
                             ({"python": {"memory_mb": "lots"}}, "option memory_mb='lots' is not a int"),
                             ({"calculator": {}}, "the workflow calls no tool 'calculator'")]:
        with pytest.raises(ConfigError, match=message):
            choose_workflow(task(options))
