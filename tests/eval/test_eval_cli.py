"""`areal eval` end to end on real data with replayed responses: HumanEval canonical solutions, MATH-500
reference solutions; stored runs are recognised when the same eval runs again; bad input is one clear line."""
from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from eval_support import read_details, read_metrics, write_replay


def test_humaneval_canonical_solutions_replayed_score_pass_at_1_of_one(areal, eval_env, data_dir, tmp_path, sandbox_image):
    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        problems = [json.loads(line) for line in f]
    replay = tmp_path / "canonical.jsonl"
    replay.write_text("".join(json.dumps({"task_id": p["task_id"], "response": p["canonical_solution"]}) + "\n"
                              for p in problems))
    out = tmp_path / "evals"
    run = areal("eval", "--model", f"replay:{replay}", "--tasks", "humaneval", "--output-dir", str(out),
                "--reward-option", f"image={sandbox_image}", env=eval_env)
    assert run.returncode == 0, run.stderr
    metrics = read_metrics(out, "canonical", "humaneval")["metrics"]
    assert metrics["pass@1"] == 1.0 and metrics["pass@1_se"] == 0.0
    assert (metrics["problems"], metrics["correct"], metrics["errors"]) == (164, 164, 0)
    assert "maj@1" not in metrics  # code is not answer-based: nothing to vote on
    details = read_details(out, "canonical", "humaneval")
    assert [d["prompt_id"] for d in details] == [p["task_id"] for p in problems]
    assert {d["verdict"] for d in details} == {"correct"}
    assert "humaneval: 164 correct, 0 wrong, 0 verifier errors" in run.stdout


def test_math500_reference_solutions_replayed_are_right_but_for_one_with_two_boxed_answers(areal, eval_env, data_dir, tmp_path):
    """The worked solutions of MATH-500 as responses: the verifier extracts each one's boxed answer and
    compares it with the reference answer. 499 of 500 agree. The one that does not is
    test/number_theory/459.json, whose solution boxes the same distance twice, `\\boxed{15\\frac{39}{40}}`
    and `\\boxed{\\frac{639}{40}}`: the verifier reads both boxes as a two-valued answer to a one-valued
    question, so it is wrong (a judgement, not a verifier error)."""
    rows = [json.loads(line) for line in (data_dir / "math500" / "test.jsonl").read_text().splitlines()]
    replay = tmp_path / "reference-solutions.jsonl"
    replay.write_text("".join(json.dumps({"unique_id": r["unique_id"], "response": r["solution"]}) + "\n" for r in rows))
    out = tmp_path / "evals"
    run = areal("eval", "--model", f"replay:{replay}", "--tasks", "math500", "--output-dir", str(out), env=eval_env)
    assert run.returncode == 0, run.stderr
    metrics = read_metrics(out, "reference-solutions", "math500")["metrics"]
    assert (metrics["problems"], metrics["correct"], metrics["wrong"], metrics["errors"]) == (500, 499, 1, 0)
    assert metrics["accuracy"] == metrics["pass@1"] == 0.998
    [wrong] = [d for d in read_details(out, "reference-solutions", "math500") if d["verdict"] == "wrong"]
    assert wrong["prompt_id"] == "test/number_theory/459.json"
    assert wrong["extracted"] == "15\\frac{39}{40}, \\frac{639}{40}" and wrong["details"]["reference"] == "\\frac{639}{40}"
    assert "math500: 499 correct, 1 wrong, 0 verifier errors" in run.stdout


def test_grading_modes_lenient_for_evals_strict_on_request_recorded_and_shown(areal, eval_env, data_dir, tmp_path):
    """MATH-500 answered the way Minerva-style models write (no box): an eval grades them leniently
    by default and they are right; graded strictly (as training grades: a box, as the prompt asks,
    or nothing) they are not. The two are separate runs; each manifest records its mode and the
    leaderboard shows it."""
    rows = [json.loads(line) for line in (data_dir / "math500" / "test.jsonl").read_text().splitlines()][:20]
    replay = tmp_path / "minerva.jsonl"
    replay.write_text("".join(json.dumps({"unique_id": r["unique_id"],
                                          "response": f"Working... Final Answer: The final answer is ${r['answer']}$. "
                                                      "I hope it is correct.<|im_start|>user"}) + "\n" for r in rows))
    out = tmp_path / "evals"
    lenient = areal("eval", "--model", f"replay:{replay}", "--tasks", "math500", "--limit", "20",
                    "--output-dir", str(out), env=eval_env)
    assert lenient.returncode == 0, lenient.stderr
    assert read_metrics(out, "minerva", "math500")["metrics"]["correct"] == 20
    strict = areal("eval", "--model", f"replay:{replay}", "--tasks", "math500", "--limit", "20",
                   "--grading", "strict", "--output-dir", str(out), env=eval_env)
    assert strict.returncode == 0, strict.stderr
    assert read_metrics(out, "minerva", "math500")["metrics"]["correct"] == 0
    with sqlite3.connect(eval_env["AREAL_EVAL_DB"]) as conn:
        manifests = {run_id: json.loads(m) for run_id, m in conn.execute("select id, manifest from runs order by id")}
    assert [(m["reward"]["mode"], m["reward"]["options"]["extract"]) for m in manifests.values()] == [
        ("lenient", "lenient"), ("strict", "strict")]
    board = json.loads(areal("leaderboard", "--format", "json", env=eval_env).stdout)
    [shown] = [m["tasks"]["math500"] for m in board["models"]]
    assert shown["grading"] == manifests[shown["run_id"]]["reward"]["mode"]
    assert shown["grading"] == "lenient"  # models are ranked graded alike: lenient, the eval default
    markdown = areal("leaderboard", "--format", "markdown", env=eval_env).stdout
    assert "| grading |" in markdown and "| lenient |" in markdown and "| strict |" not in markdown
    strict_board = json.loads(areal("leaderboard", "--format", "json", "--grading", "strict", env=eval_env).stdout)
    assert [m["tasks"]["math500"]["grading"] for m in strict_board["models"]] == ["strict"]


def stored(db) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("select id, status, settings from runs order by id").fetchall()


def test_an_identical_eval_is_recognised_and_reported_from_the_store(areal, eval_env, tmp_path):
    replay = write_replay(tmp_path / "half.jsonl", "arithmetic-test", limit=10, n=4, right=lambda i, j: (i + j) % 2 == 0)
    out = tmp_path / "evals"
    args = ("eval", "--model", f"replay:{replay}", "--tasks", "arithmetic-test", "--limit", "10", "--output-dir", str(out))
    first = areal(*args, env=eval_env)
    assert first.returncode == 0, first.stderr
    assert read_metrics(out, "half", "arithmetic-test")["metrics"]["pass@1"] == 0.5
    assert read_metrics(out, "half", "arithmetic-test")["metrics"]["pass@4"] == 1.0

    again = areal(*args, "--k", "2", env=eval_env)
    assert again.returncode == 0, again.stderr
    assert "arithmetic-test: identical eval already in the store as run #1" in again.stdout
    reported = read_metrics(out, "half", "arithmetic-test")
    assert reported["run_id"] == 1 and reported["metrics"]["pass@2"] == pytest.approx(1 - 1 / 6)  # C(2,2)/C(4,2)
    assert [(run_id, status, json.loads(settings)["k"]) for run_id, status, settings in stored(eval_env["AREAL_EVAL_DB"])] == [
        (1, "finished", [1, 2, 4])]  # the new k is kept with the run

    forced = areal(*args, "--force", env=eval_env)
    assert forced.returncode == 0 and "identical eval already" not in forced.stdout
    write_replay(replay, "arithmetic-test", limit=10, n=1, right=lambda i, j: True)  # the file changed: a new model
    changed = areal(*args, env=eval_env)
    assert changed.returncode == 0 and "identical eval already" not in changed.stdout
    assert [row[0] for row in stored(eval_env["AREAL_EVAL_DB"])] == [1, 2, 3]
    manifest = read_metrics(out, "half", "arithmetic-test")["manifest"]
    assert set(manifest) >= {"model_ref", "model_hash", "task_spec_hash", "dataset_hash", "plugins", "settings", "seed",
                             "date", "code_version", "key"}
    assert manifest["plugins"]["arithmetic"] == "0.1.0" and manifest["settings"]["temperature"] is None


@pytest.mark.parametrize("args, message", [
    (["--model", "replay:{bad_id}"], "bad_id.jsonl:2: id='1+1' is not a problem of task 'arithmetic-test'"),
    (["--model", "replay:{no_response}"], "no_response.jsonl:1: missing field 'response'"),
    (["--model", "replay:{partial}"], "no responses for 490 of the 500 problems of task 'arithmetic-test'"),
    (["--model", "replay:{partial}", "--n", "4"], "--n does not apply to replayed responses"),
    (["--model", "replay:{partial}", "--top-k", "5"], "--top-k does not apply to replayed responses"),
    (["--model", "replay:{partial}", "--limit", "10", "--k", "2"], "--k 2: every k must be between 1 and n=1"),
    (["--model", "{tmp}"], "is not a Hugging Face model directory (no config.json)"),
    (["--model", "http://host:1"], "'http' is not an engine backend; expected a model directory, NAME:DIR, "
                                   "NAME://HOST:PORT (NAME: local, server, sglang) or replay:FILE.jsonl"),
    (["--model", "sglang://host"], "expected sglang://HOST:PORT"),
    (["--model", "replay:{partial}", "--tasks", "nosuchtask"], "no task named 'nosuchtask' is registered"),
])
def test_bad_input_is_one_clear_line_and_stores_nothing(areal, eval_env, tmp_path, args, message):
    write_replay(tmp_path / "partial.jsonl", "arithmetic-test", limit=10, n=1, right=lambda i, j: True)
    (tmp_path / "bad_id.jsonl").write_text(
        (tmp_path / "partial.jsonl").read_text().splitlines()[0] + "\n" + json.dumps({"id": "1+1", "response": "2"}) + "\n")
    (tmp_path / "no_response.jsonl").write_text(json.dumps({"id": "1+1"}) + "\n")
    names = {"bad_id": tmp_path / "bad_id.jsonl", "no_response": tmp_path / "no_response.jsonl",
             "partial": tmp_path / "partial.jsonl", "tmp": tmp_path}
    full = [a.format(**names) for a in args]
    if "--tasks" not in full:
        full += ["--tasks", "arithmetic-test"]
    run = areal("eval", *full, env=eval_env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not list((tmp_path / "evals").glob("*/*")) if (tmp_path / "evals").exists() else True
    if (tmp_path / "evals.sqlite").exists():
        assert stored(tmp_path / "evals.sqlite") == []
