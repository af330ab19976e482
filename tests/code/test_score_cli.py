"""`areal score --reward code` end to end (real CLI process, real sandbox) and the task specs."""
from __future__ import annotations

import json

import pytest

PLUGINS = {"AREAL_PLUGINS": "code,sandbox"}


def test_areal_score_runs_code_rewards_end_to_end(areal, tmp_path, humaneval, mbpp, codeforces, sandbox_image):
    rows = [
        {**{k: humaneval[0][k] for k in ("task_id", "prompt", "test", "entry_point")},
         "response": humaneval[0]["canonical_solution"]},
        {**{k: humaneval[2][k] for k in ("task_id", "prompt", "test", "entry_point")},
         "response": "```python\ndef truncate_number(number):\n    return 0.5\n```"},
        {"task_id": mbpp[0]["task_id"], "test_list": mbpp[0]["test_list"], "test_imports": [],
         "response": f"Sure:\n```python\n{mbpp[0]['code']}\n```"},
        {"tests": codeforces[0]["tests"], "response": "```python\nimport sys\nsys.exit(0)\n```"},
        {"tests": codeforces[0]["tests"], "response": "Let me think about it."},
    ]
    source = tmp_path / "responses.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "scored.jsonl"
    run = areal("score", "--reward", "code", "--input", str(source), "--output", str(output), "--workers", "2",
                "--option", f"image={sandbox_image}", env=PLUGINS)
    assert run.returncode == 0, run.stderr
    assert "scored 5 rows with reward 'code': mean score 0.4000, correct 2/5, errors 0" in run.stdout
    scored = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["score"] for r in scored] == [1.0, 0.0, 1.0, 0.0, 0.0]
    assert scored[0]["details"]["verdicts"] == {"passed": 7}
    assert scored[1]["details"]["verdicts"]["wrong_answer"] >= 1
    assert scored[2]["details"]["extracted"] == "block"
    assert scored[3]["details"]["tests"][0]["verdict"] == "wrong_answer"
    assert scored[4]["details"]["extracted"] == "raw" and scored[4]["details"]["verdicts"] == {"runtime_error": 1}
    assert "does not compile" in scored[4]["details"]["tests"][0]["message"]


def test_a_row_the_reward_cannot_read_is_an_error_naming_the_field(areal, tmp_path, sandbox_image):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"prompt": "def f():\n", "test": "def check(c): pass", "response": "x"}) + "\n")
    run = areal("score", "--reward", "code", "--input", str(source), "--option", "format=humaneval",
                "--option", f"image={sandbox_image}", env=PLUGINS)
    assert run.returncode == 0, run.stderr
    assert "errors 1" in run.stdout and "no field 'entry_point'" in run.stdout


def test_a_missing_image_is_reported_with_the_fix(areal, tmp_path, docker_engine):
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps({"tests": [{"input": "", "output": "1"}], "response": "print(1)"}) + "\n")
    run = areal("score", "--reward", "code", "--input", str(source), "--option", "image=areal-sandbox:absent",
                env=PLUGINS)
    assert "errors 1" in run.stdout
    assert "areal sandbox build-image --tag areal-sandbox:absent" in run.stdout


@pytest.mark.parametrize("task, size", [("humaneval", 164), ("mbpp", 427), ("codeforces_stdio", 408),
                                        ("code_contests_sample", 20), ("leetcode_functional", 200)])
def test_code_task_specs_load_their_data_and_name_the_code_reward(task, size, data_dir):
    from areal_core.tasks import task_registry
    from areal_core.tasks import Task

    spec = task_registry().get(task)
    assert spec.reward.name == "code"
    loaded = Task(spec, data_dir)
    samples = loaded.samples()
    assert len(samples) == size
    prompt = loaded.render_prompt(samples[0])
    assert "```python" in prompt[0]["content"] or "python" in prompt[0]["content"]
    from areal_code.formats import detect_format

    assert detect_format(samples[0]) == spec.reward.options["format"]
