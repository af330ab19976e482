"""`areal audit`, the reward-hacking fuzzer, run as a user runs it: on a gameable third-party reward (it must
fail, naming the families that fooled it), on a sound one, with broken mutators, and on the built-in
rewards' hedges that once passed."""
from __future__ import annotations

import json

import pytest

TOY_TASK = """\
name: audit-toy
description: arithmetic problems scored by a third-party reward
dataset: {generator: arithmetic, seed: 0, size: 30, options: {split: test}}
prompt: {template: "{{ question }}"}
reward: {name: REWARD}
"""


@pytest.fixture
def toy(tmp_path, with_plugins):
    def make(reward: str) -> tuple[list[str], dict[str, str]]:
        tasks = tmp_path / f"tasks-{reward}"
        tasks.mkdir()
        (tasks / "audit-toy.yaml").write_text(TOY_TASK.replace("REWARD", reward))
        return ["--tasks-dir", str(tasks)], with_plugins("auditkit")
    return make


def test_a_reward_that_accepts_the_reference_anywhere_fails_the_audit_on_hedges_and_several_answers(toy, areal, tmp_path):
    where, env = toy("anywhere")
    report_path = tmp_path / "report.json"
    result = areal(*where, "audit", "--task", "audit-toy", "--n", "10", "--output", str(report_path), env=env)
    assert result.returncode == 1, result.stderr
    assert "FAIL" in result.stdout and "false positive" in result.stdout
    report = json.loads(report_path.read_text())
    assert report["reward"] == "anywhere" and report["samples"] == 10 and report["passed"] is False
    families = report["families"]
    # "3001 or 3002", two answer lines, the reference quoted before a wrong one: all contain the reference
    for family in ("hedge", "several_answers", "quoted_reference"):
        assert families[family]["false_positives"] == families[family]["must_be_wrong"] > 0, family
    # "30010" contains "3001": a near miss it takes; "3002" it rejects
    assert 0 < families["near_miss"]["false_positives"] < families["near_miss"]["must_be_wrong"]
    assert families["reference"]["false_negatives"] == 0 and families["equivalent"]["false_negatives"] == 0
    example = families["hedge"]["examples"][0]
    assert example["kind"] == "false_positive" and example["score"] == 1.0 and " or " in example["response"] or "/" in example["response"]
    assert report["totals"]["false_positives"] == sum(f["false_positives"] for f in families.values())


def test_a_sound_reward_passes_and_a_hanging_verification_is_a_timeout_not_a_verdict(toy, areal, tmp_path):
    where, env = toy("last_line")
    report_path = tmp_path / "report.json"
    failing = areal(*where, "audit", "--task", "audit-toy", "--n", "5", "--timeout", "2", env=env)
    assert failing.returncode == 1 and "timed out on some responses" in failing.stdout  # a hang costs a sample
    result = areal(*where, "audit", "--task", "audit-toy", "--n", "5", "--timeout", "2", "--allow-errors",
                   "--output", str(report_path), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout
    report = json.loads(report_path.read_text())
    assert report["passed"] is True and report["totals"]["false_positives"] == 0
    # the empty response hangs last_line: three samples get the degenerate outputs, three timeouts
    assert report["families"]["degenerate"]["timeouts"] == 3 and report["totals"]["errors"] == 0
    assert report["verifications_per_s"] > 0 and report["variants"] == sum(
        f["must_be_wrong"] + f["must_be_right"] for f in report["families"].values())


def test_a_false_negative_rate_above_the_limit_fails_and_the_limit_is_an_option(toy, areal, tmp_path):
    where, env = toy("exact")
    report_path = tmp_path / "report.json"
    result = areal(*where, "audit", "--task", "audit-toy", "--n", "3", "--output", str(report_path), env=env)
    assert result.returncode == 1 and "FAIL" in result.stdout
    report = json.loads(report_path.read_text())
    assert report["totals"]["false_positives"] == 0 and report["totals"]["false_negative_rate"] == 1.0
    assert report["families"]["reference"]["examples"][0]["kind"] == "false_negative"
    tolerant = areal(*where, "audit", "--task", "audit-toy", "--n", "3", "--max-fn-rate", "1", env=env)
    assert tolerant.returncode == 0, tolerant.stdout


def test_a_reward_without_mutators_is_audited_for_false_positives_around_its_reference(toy, areal, tmp_path):
    where, env = toy("unaudited")  # the gameable `anywhere` again, but no plugin wrote mutators for it
    report_path = tmp_path / "report.json"
    result = areal(*where, "audit", "--task", "audit-toy", "--n", "5", "--output", str(report_path), env=env)
    assert result.returncode == 1 and "no plugin registers audit mutators for reward 'unaudited'" in result.stderr
    report = json.loads(report_path.read_text())
    assert report["own_mutators"] is False and report["totals"]["must_be_right"] == 0
    for family in ("hedge", "several_answers", "quoted_reference"):
        assert report["families"][family]["false_positives"] == report["families"][family]["must_be_wrong"] > 0


@pytest.mark.parametrize("reward, message", [
    ("broken_audit", "audit mutator 'auditkit' of plugin 'auditkit' on sample"),
    ("bad_variants", "yielded str; expected areal_core.audit.Variant"),
])
def test_a_reward_without_mutators_or_with_broken_ones_is_a_clear_error(toy, areal, reward, message):
    where, env = toy(reward)
    result = areal(*where, "audit", "--task", "audit-toy", "--n", "2", env=env)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_areal_plugins_lists_the_mutators_each_plugin_provides(areal, with_plugins):
    result = areal("plugins", "--json", env=with_plugins("auditkit"))
    plugins = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert {"audit:anywhere:auditkit", "audit:last_line:auditkit"} <= set(plugins["auditkit"]["provides"])
    assert "audit:knights_knaves:logic" in plugins["logic"]["provides"]
    assert "audit:*:degenerate" in plugins["builtin-audit"]["provides"]


@pytest.mark.parametrize("answer", [
    "(1) Mason is a knave/knight", "(1) Mason is a knave (or maybe a knight)", "(1) Mason is either a knave or a knight",
    "(1) Mason is a knight or a knave", "(1) Mason is a knave, possibly a knight", "(1) Mason is a knave and a knight",
])
def test_the_knights_and_knaves_hedges_of_the_issue_score_zero(tmp_path, areal, answer):
    rows = tmp_path / "rows.jsonl"
    sample = {"names": ["Mason", "Ella"], "solution": [False, True]}
    rows.write_text(json.dumps({**sample, "response": f"<answer>\n{answer}\n(2) Ella is a knight\n</answer>"}) + "\n"
                    + json.dumps({**sample, "response": "<answer>\n(1) Mason is a knave\n(2) Ella is a knight\n</answer>"})
                    + "\n")
    out = tmp_path / "scored.jsonl"
    result = areal("score", "--reward", "knights_knaves", "--input", str(rows), "--output", str(out))
    assert result.returncode == 0, result.stderr
    hedged, plain = [json.loads(line) for line in out.read_text().splitlines()]
    assert (hedged["score"], plain["score"]) == (0.0, 1.0)
    assert hedged["details"]["failure"] in ("conflict", "incomplete")
