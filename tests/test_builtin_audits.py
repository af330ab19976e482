"""Every built-in reward passes `areal audit` on its real data set: no false positives in any family, at most
1% false negatives. (The code reward's audit, which needs the Docker sandbox, is in tests/code.) Sample counts
keep CI quick; bench/RESULTS.md has the full data sets' figures."""
from __future__ import annotations

import json

import pytest

AUDITS = [
    ("knights_knaves_3ppl", None, 100), ("knights_knaves_7ppl", None, 100), ("knights_knaves-test", "lenient", 100),
    ("countdown-test", None, 100), ("countdown-test", "lenient", 100), ("sudoku_4x4-test", None, 100),
    ("sudoku_9x9-test", None, 50), ("zebra-test", None, 100), ("zebra-test", "lenient", 50),
    ("arithmetic-test", None, 200), ("arithmetic-longtail-test", None, 100),
    ("math500", None, 150), ("math500", "lenient", 150), ("gsm8k", None, 150), ("gsm8k", "lenient", 100),
    ("aime24", None, 0), ("aime25", "lenient", 0), ("amc23", None, 0),
]


@pytest.mark.parametrize("task, grading, n", AUDITS, ids=[f"{t}-{g or 'train'}" for t, g, _ in AUDITS])
def test_builtin_reward_passes_its_audit(task, grading, n, areal, data_dir, tmp_path):
    report_path = tmp_path / "audit.json"
    args = ["--data-dir", str(data_dir), "audit", "--task", task, "--n", str(n), "--output", str(report_path)]
    result = areal(*args, *(["--grading", grading] if grading else []))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(report_path.read_text())
    totals = report["totals"]
    assert report["passed"] and totals["false_positives"] == 0 and totals["false_negative_rate"] <= 0.01
    assert totals["errors"] == 0 and totals["timeouts"] == 0
    # every family the issue names was tried
    expected = {"hedge", "several_answers", "superset", "near_miss", "quoted_reference", "outside_tag", "degenerate",
                "reference", "equivalent"}
    assert expected <= set(report["families"]), sorted(report["families"])
    assert all(report["families"][f]["must_be_wrong"] + report["families"][f]["must_be_right"] > 0 for f in expected)
