"""The code reward passes `areal audit` in every format, run in the real Docker sandbox: perturbed, stub and
exiting programs fail, output near misses fail, and the solution in other fences and whitespace passes.
Sample counts keep CI quick; bench/RESULTS.md has the full data sets' figures."""
from __future__ import annotations

import json

import pytest

AUDITS = [("humaneval", 20), ("mbpp", 20), ("leetcode_functional", 15), ("codeforces_stdio", 20),
          ("code_contests_sample", 3)]


@pytest.mark.parametrize("task, n", AUDITS, ids=[t for t, _ in AUDITS])
def test_code_reward_passes_its_audit(task, n, areal, data_dir, sandbox_image, tmp_path):
    report_path = tmp_path / "audit.json"
    result = areal("--data-dir", str(data_dir), "audit", "--task", task, "--n", str(n), "--option", f"image={sandbox_image}", "--timeout", "60",
                   "--output", str(report_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(report_path.read_text())
    totals, families = report["totals"], report["families"]
    assert report["passed"] and totals["false_positives"] == 0 and totals["false_negative_rate"] <= 0.01
    assert totals["errors"] == 0 and totals["timeouts"] == 0
    assert families["reference"]["false_negatives"] <= 1  # MBPP 123's own solution runs past the timeout here
    assert {"reference", "equivalent", "near_miss", "several_answers", "quoted_reference", "outside_tag", "forgery",
            "degenerate"} <= set(families)
    assert families["forgery"]["must_be_wrong"] >= 2 * n
