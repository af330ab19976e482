"""The math task specs shipped in tasks/: they load the real data, normalise the answer types and
render a prompt asking for \\boxed{}; their references verify against themselves."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from areal_core.tasks import task_registry
from areal_core.tasks import Task
from areal_math import verify

EXPECTED = {"gsm8k": 1319, "math500": 500, "aime24": 30, "aime25": 30, "amc23": 40}


@pytest.mark.parametrize("name, size", list(EXPECTED.items()))
def test_task_loads_real_samples_with_text_references_and_a_boxed_prompt(data_dir: Path, name: str, size: int) -> None:
    spec = task_registry().get(name)
    assert spec.reward.name == "math"
    task = Task(spec, data_dir)
    samples = task.samples()
    assert len(samples) == size
    assert all(isinstance(s["reference"], str) and s["reference"].strip() for s in samples)
    assert len({s["id"] for s in samples}) == size
    prompt = task.render_prompt(samples[0])
    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    assert samples[0]["question"] in text and "\\boxed{}" in text
    for sample in samples:
        assert verify(sample["reference"], f"... the answer is $\\boxed{{{sample['reference']}}}$.").correct is True


def test_answer_types_are_normalised_to_the_text_a_model_would_write(data_dir: Path) -> None:
    refs = {name: Task(task_registry().get(name), data_dir).samples() for name in ("gsm8k", "aime25", "amc23", "aime24")}
    assert refs["gsm8k"][0]["reference"] == "18"  # from "...\n#### 18"
    assert refs["aime25"][0]["reference"] == "70"  # stored as int
    assert refs["amc23"][0]["reference"] == "27"  # stored as 27.0
    assert refs["aime24"][7]["reference"] == "025"  # stored as text with a leading zero
    gsm_raw = [json.loads(line) for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()]
    assert all(s["reference"] == r["answer"].split("####")[-1].strip() for s, r in zip(refs["gsm8k"], gsm_raw))


def test_areal_tasks_lists_the_math_tasks_with_their_sizes(areal, data_dir: Path) -> None:
    done = areal("--data-dir", str(data_dir), "tasks", "--json", env={"AREAL_PLUGINS": "math"})
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    for name, size in EXPECTED.items():
        assert rows[name]["size"] == size and rows[name]["reward"] == "math" and rows[name]["available"]
