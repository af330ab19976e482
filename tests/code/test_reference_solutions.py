"""Golden checks on the real data sets: reference solutions pass, empty bodies fail, in the sandbox."""
from __future__ import annotations

from code_support import SOLUTIONS, score_all


def test_every_humaneval_canonical_solution_passes(humaneval, code_options):
    rows = [(sample, sample["canonical_solution"]) for sample in humaneval]
    results = score_all(rows, {**code_options, "format": "humaneval"})
    failures = {s["task_id"]: r.details.get("tests") or r.error for (s, _), r in zip(rows, results) if not r.correct}
    assert len(humaneval) == 164
    assert failures == {}
    assert all(r.error is None and r.score == 1.0 for r in results)
    # Every argument and every result crossed between the two processes as data.
    assert [s["task_id"] for (s, _), r in zip(rows, results) if r.details.get("stand_ins")] == []


def test_humaneval_with_an_empty_body_passes_nothing(humaneval, code_options):
    rows = [(sample, "    return None\n") for sample in humaneval]
    rows += [(sample, "    pass\n") for sample in humaneval[::8]]
    results = score_all(rows, {**code_options, "format": "humaneval"})
    assert all(r.error is None for r in results)
    assert [s["task_id"] for (s, _), r in zip(rows, results) if r.score != 0.0] == []
    # Fraction mode still sees the few asserts that expect None (e.g. `longest([]) == None`).
    fraction = score_all([(humaneval[12], "    return None\n")], {**code_options, "reward": "fraction"})[0]
    assert 0.0 < fraction.score < 1.0 and fraction.correct is False


def test_mbpp_reference_code_passes(mbpp, code_options):
    """A third of the 427 problems (every third, plus task 123) keeps the suite short; the whole
    set passes too (scored with `areal score`; see sandbox/README.md). Task 123's reference
    (amicable numbers below 9999, quadratic) needs several CPU-seconds, over the default 6 s limit
    on a loaded machine, so the limit is raised."""
    assert len(mbpp) == 427
    chosen = mbpp[::3] + [s for s in mbpp if s["task_id"] == 123]
    rows = [(sample, sample["code"]) for sample in chosen]
    results = score_all(rows, {**code_options, "format": "mbpp", "timeout": 60, "total_timeout": 90})
    failures = {s["task_id"]: (r.error or r.details["verdicts"]) for (s, _), r in zip(rows, results) if not r.correct}
    assert failures == {}


def test_mbpp_results_that_are_not_data_pass_as_stand_ins(mbpp, code_options):
    """The only problems of the three sets whose reference returns something that is not data:
    three regex tasks return a ``re.Match``, which the tests only test for truth."""
    chosen = [s for s in mbpp if s["task_id"] in (737, 787, 794)]
    results = score_all([(s, s["code"]) for s in chosen], {**code_options, "format": "mbpp"})
    assert [(r.correct, r.details.get("stand_ins")) for r in results] == [(True, 2), (True, 2), (True, 1)]
    # A wrong regex still fails: its None or its match is judged by the tests, not by the program.
    wrong = score_all([(chosen[0], "import re\ndef check_str(string):\n    return re.search('.', string)\n")],
                      {**code_options, "format": "mbpp"})[0]
    assert wrong.correct is False and wrong.details["verdicts"] == {"passed": 2, "wrong_answer": 1}


def test_leetcode_reference_solutions_pass(leetcode, code_options):
    """Every fourth of the 200 problems (all 200 pass too; see sandbox/README.md)."""
    assert len(leetcode) == 200
    rows = [(sample, sample["solutions"]) for sample in leetcode[::4]]
    results = score_all(rows, {**code_options, "format": "leetcode"})
    failures = [i * 4 for i, r in enumerate(results) if not r.correct]
    assert failures == []


def test_handwritten_contest_solutions_pass_every_case(code_contests, codeforces, code_options):
    """The contest sets ship no reference solutions; these were written for the tests."""
    rows = []
    for index in (3, 19):
        code = (SOLUTIONS / f"code_contests_{index}.py").read_text()
        rows.append((code_contests[index], f"My solution:\n```python\n{code}```\nDone."))
    rows.append((codeforces[0], f"```python\n{(SOLUTIONS / 'codeforces_0.py').read_text()}```"))
    results = score_all(rows, {**code_options, "format": "stdio", "total_timeout": 60})
    assert [r.error for r in results] == [None] * len(rows)
    assert [r.details["passed"] == r.details["total"] for r in results] == [True] * len(rows)
    assert sum(r.details["total"] for r in results) == 102 + 101 + 1  # every case ran, not a sample
    assert all(r.correct and r.score == 1.0 for r in results)


def test_a_wrong_contest_solution_fails_with_per_case_verdicts(code_contests, code_options):
    sample = code_contests[3]
    wrong = "```python\nprint(0)\n```"
    strict = score_all([(sample, wrong)], {**code_options, "format": "stdio"})[0]
    assert strict.score == 0.0 and strict.correct is False
    assert strict.details["verdicts"]["wrong_answer"] == 1 and strict.details["verdicts"]["skipped"] > 0
    partial = score_all([(sample, wrong)], {**code_options, "format": "stdio", "reward": "fraction",
                                             "total_timeout": 60})[0]
    counts = partial.details["verdicts"]
    assert 0.0 < partial.score < 1.0
    assert partial.score == partial.details["passed"] / partial.details["total"]
    assert set(counts) == {"passed", "wrong_answer"}
