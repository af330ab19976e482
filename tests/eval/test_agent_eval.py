"""`areal eval` of a multi-turn, tool-using workflow: the episode runs through the engine and the tools, the
per-sample JSONL keeps the whole transcript with its turn boundaries, the manifest records the workflow, its
options and the tools' versions, and the leaderboard page shows a transcript."""
from __future__ import annotations

import yaml

from tests.eval.eval_support import read_details, read_metrics

TASK = {
    "name": "agent-arith",
    "dataset": {"generator": "arithmetic", "seed": 0, "size": 6, "options": {"digits": 2, "split": "test"}},
    "prompt": {"template": "{{ question }}"},
    "reward": {"name": "arithmetic"},
    "workflow": {"name": "scripted", "options": {"tools": ["echo", "calculator"], "max_new_tokens": 4,
                                                 "script": ["tool:echo:look it up", "tool:calculator:6*7"]}},
    "eval": {"n": 2, "k": [1, 2], "temperature": 1.0, "max_new_tokens": 4},
}


def test_an_eval_of_a_tool_using_workflow_keeps_transcripts_and_records_the_tools(areal, eval_env, tiny_model,
                                                                                  tmp_path, with_plugins):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "agent.yaml").write_text(yaml.safe_dump(TASK))
    env = {**eval_env, **with_plugins("testkit"), "AREAL_TASKS_PATH": str(tasks)}
    out = tmp_path / "evals"
    run = areal("eval", "--model", str(tiny_model), "--tasks", "agent-arith", "--output-dir", str(out), env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    model = tiny_model.name
    samples = read_details(out, model, "agent-arith")
    assert len(samples) == 12
    for sample in samples:
        turns = sample["transcript"]
        assert [t["role"] for t in turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
        assert turns[1]["text"] == "LOOK IT UP" and turns[3]["text"] == "42" and turns[3]["tool"] == "calculator"
        assert [t["start"] for t in turns[1:]] == [t["end"] for t in turns[:-1]]  # contiguous turn boundaries
        assert sample["response"] == turns[-1]["text"]
        assert sample["details"]["episode"]["tool_calls"] == 2
    metrics = read_metrics(out, model, "agent-arith")
    assert metrics["metrics"]["tool_call_rate"] == 1.0 and metrics["metrics"]["tool_calls_mean"] == 2.0
    workflow = metrics["manifest"]["workflow"]
    assert workflow["name"] == "scripted" and workflow["plugin"] == "testkit"
    assert workflow["options"]["script"] == TASK["workflow"]["options"]["script"]
    assert workflow["tools"] == {"calculator": {"plugin": "builtin-workflows", "version": workflow["tools"]["calculator"]["version"]},
                                 "echo": {"plugin": "testkit", "version": "0.0.7"}}
    again = areal("eval", "--model", str(tiny_model), "--tasks", "agent-arith", "--output-dir", str(out), env=env)
    assert "identical eval already in the store" in again.stdout  # the transcripts came back from the store whole
    assert read_details(out, model, "agent-arith") == samples

    page = tmp_path / "board.html"
    shown = areal("leaderboard", "--format", "html", "--output", str(page), env=env)
    assert shown.returncode == 0, shown.stderr
    html = page.read_text()
    assert "transcript: 5 turns" in html and "LOOK IT UP" in html and 'class="turn turn-tool"' in html


def test_a_workflow_with_options_it_rejects_fails_before_anything_runs(areal, eval_env, tiny_model, tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    bad = {**TASK, "workflow": {"name": "tool_calls", "options": {"tools": ["abacus"]}}}
    (tasks / "agent.yaml").write_text(yaml.safe_dump(bad))
    run = areal("eval", "--model", str(tiny_model), "--tasks", "agent-arith", "--output-dir", str(tmp_path / "o"),
                env={**eval_env, "AREAL_TASKS_PATH": str(tasks)})
    assert run.returncode != 0
    assert "no tool named 'abacus' is registered" in run.stderr and "Traceback" not in run.stderr
