"""End to end through the installed `areal` command: plugins, tasks with sizes, and scoring JSONL files."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from areal_logic import countdown, knights_knaves, sudoku, zebra

ENV = {"AREAL_PLUGINS": "logic", "OMP_NUM_THREADS": "1"}


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summary(stdout: str) -> dict[str, float]:
    match = re.search(r"scored (\d+) rows with reward '(\w+)': mean score ([\d.]+)(?:, correct (\d+)/(\d+))?, errors (\d+)", stdout)
    assert match, stdout
    rows, _, mean, correct, judged, errors = match.groups()
    return {"rows": int(rows), "mean": float(mean), "correct": int(correct or 0), "judged": int(judged or 0), "errors": int(errors)}


def test_areal_plugins_lists_the_logic_plugin_with_its_rewards_and_generators(areal):
    result = areal("plugins", "--json", env=ENV)
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    logic = plugins["logic"]
    assert logic["error"] is None and logic["distribution"] == "areal-logic"
    for family in ("knights_knaves", "countdown", "sudoku", "zebra"):
        assert f"reward:{family}" in logic["provides"] and f"generator:{family}" in logic["provides"]


def test_areal_tasks_lists_every_family_with_its_size(areal, data_dir):
    result = areal("tasks", "--json", env={**ENV, "AREAL_DATA_DIR": str(data_dir)}, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    expected = {f"knights_knaves_{n}ppl": 100 for n in range(3, 8)}
    expected.update({"knights_knaves": 2000, "knights_knaves-test": 500, "countdown": 2000, "countdown-test": 500,
                     "sudoku_4x4": 2000, "sudoku_4x4-test": 500, "sudoku_9x9": 100, "sudoku_9x9-test": 100,
                     "zebra": 500, "zebra-test": 200})
    assert {name: rows[name]["size"] for name in expected} == expected
    assert {rows[name]["reward"] for name in expected} == {"knights_knaves", "countdown", "sudoku", "zebra"}
    assert all(rows[name]["available"] for name in expected)


def family_rows():
    """Per family: generated samples with right, wrong and hostile responses, and the expected scores."""
    kk_rows = list(knights_knaves.generate(11, 6, people=[3, 6]))
    cd_rows = list(countdown.generate(11, 6, count=4))
    sd_rows = list(sudoku.generate(11, 6, grid_size=4))
    zb_rows = list(zebra.generate(11, 6, houses=3, attributes=3))

    def kk_flip(row):
        names, sol = row["names"], row["solution"]
        return "<answer>" + knights_knaves.solution_text(names, [not sol[0]] + sol[1:]) + "</answer>"

    def grid(row, text):
        return "<answer>\n" + "\n".join(" ".join(text[r * 4:(r + 1) * 4]) for r in range(4)) + "\n</answer>"

    def table(rows):
        return "<answer>" + "\n".join(f"House {h + 1}: " + ", ".join(house.values()) for h, house in enumerate(rows)) + "</answer>"

    return {
        "knights_knaves": [
            *({**r, "response": f"<think>..</think><answer>{r['solution_text_format']}</answer>"} for r in kk_rows[:3]),
            {**kk_rows[3], "response": kk_flip(kk_rows[3])},
            {**kk_rows[4], "response": "<answer>" + "Amelia is a knight " * 70_000 + "</answer>"},
            {**kk_rows[5], "response": "<answer>" + kk_rows[5]["solution_text_format"].replace("a", "\u0430") + "</answer>"},
        ],
        "countdown": [
            *({**r, "response": f"<answer>{r['solution']}</answer>"} for r in cd_rows[:3]),
            {**cd_rows[3], "response": f"<answer>{'+'.join(map(str, cd_rows[3]['numbers']))}0</answer>"},
            {**cd_rows[4], "response": "<answer>9**9**9**9</answer>"},
            {**cd_rows[5], "response": "<answer>" + "(" * 5000 + "1" + ")" * 5000 + "</answer>"},
        ],
        "sudoku": [
            *({**r, "response": grid(r, r["solution"])} for r in sd_rows[:3]),
            {**sd_rows[3], "response": grid(sd_rows[3], sd_rows[3]["solution"][::-1])},
            {**sd_rows[4], "response": "<answer>" + "1" * (1 << 20) + "</answer>"},
            {**sd_rows[5], "response": "<answer>\uff11\uff12\uff13\uff14</answer>"},
        ],
        "zebra": [
            *({**r, "response": table(r["solution"])} for r in zb_rows[:3]),
            {**zb_rows[3], "response": table(zb_rows[3]["solution"][::-1])},
            {**zb_rows[4], "response": "House 1: " + "{" * 300_000},
            {**zb_rows[5], "response": table(zb_rows[5]["solution"]).replace("e", "\u0435")},
        ],
    }


@pytest.mark.parametrize("family", ["knights_knaves", "countdown", "sudoku", "zebra"])
def test_areal_score_scores_a_jsonl_file_with_each_family_reward(areal, tmp_path, family):
    rows = family_rows()[family]
    source = write_jsonl(tmp_path / f"{family}.jsonl", rows)
    output = tmp_path / f"{family}.scored.jsonl"
    result = areal("score", "--reward", family, "--input", str(source), "--output", str(output),
                   "--workers", "1", "--timeout", "20", env=ENV)
    assert result.returncode == 0, result.stderr
    assert summary(result.stdout) == {"rows": 6, "mean": 0.5, "correct": 3, "judged": 6, "errors": 0}
    scored = read_jsonl(output)
    assert [r["score"] for r in scored] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # the wrong answer is judged wrong; the hostile ones are rejected with a reason, not errors
    assert scored[3]["details"]["failure"] in ("wrong", "conflict")
    assert all(r["details"]["reason"] and r["error"] is None for r in scored[4:])


def test_areal_score_passes_reward_options(areal, tmp_path):
    rows = [row for row in family_rows()["knights_knaves"][:4]]
    source = write_jsonl(tmp_path / "kk.jsonl", rows)
    output = tmp_path / "kk.scored.jsonl"
    result = areal("score", "--reward", "knights_knaves", "--input", str(source), "--output", str(output),
                   "--workers", "1", "--option", "partial_credit=true", env=ENV)
    assert result.returncode == 0, result.stderr
    flipped = read_jsonl(output)[3]
    assert flipped["score"] == pytest.approx(1 - 1 / len(flipped["names"])) and flipped["correct"] is False

    bad = areal("score", "--reward", "knights_knaves", "--input", str(source), "--workers", "1",
                "--option", "partial=true", env=ENV)
    assert bad.returncode == 0
    assert summary(bad.stdout)["errors"] == 4 and "unknown option 'partial'" in bad.stdout


def test_all_500_logic_rl_reference_answers_score_one_through_areal_score(areal, tmp_path, kk_samples):
    rows = [{"id": s["id"], "names": s["names"], "solution": s["solution"],
             "response": f"<think>...</think><answer>{s['solution_text_format']}</answer>"}
            for samples in kk_samples.values() for s in samples]
    source = write_jsonl(tmp_path / "kk500.jsonl", rows)
    result = areal("score", "--reward", "knights_knaves", "--input", str(source), "--workers", "2", env=ENV)
    assert result.returncode == 0, result.stderr
    assert summary(result.stdout) == {"rows": 500, "mean": 1.0, "correct": 500, "judged": 500, "errors": 0}


def test_areal_score_names_the_line_that_lacks_a_required_field(areal, tmp_path):
    source = write_jsonl(tmp_path / "bad.jsonl", [{"numbers": [1, 2], "target": 3, "response": "1+2"},
                                                  {"numbers": [1, 2], "response": "1+2"}])
    result = areal("score", "--reward", "countdown", "--input", str(source), env=ENV)
    assert result.returncode == 2
    assert f"{source}:2: missing field 'target' required by reward 'countdown'" in result.stderr
