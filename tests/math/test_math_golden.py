"""The labelled golden set: every case must get exactly its label (see math_golden_cases.py)."""
from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
from math_golden_cases import CASES, EQUIVALENT_REFERENCES, Case

from areal_math import verify

CATEGORIES = {
    "integer", "fraction", "decimal", "exact", "radical", "constant", "function", "percent", "degrees", "units",
    "currency", "complex", "expression", "equation", "inequality", "interval", "tuple", "set", "plusminus",
    "matrix", "choice", "text", "base", "infinity", "extraction", "think", "hedge", "huge", "gsm8k", "aime", "amc",
}


def _id(case: Case) -> str:
    return f"{case.category}:{case.reference!s:.25}|{case.response[-30:]}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_golden_case_gets_its_label(case: Case) -> None:
    result = verify(case.reference, case.response)
    if case.expected == "error":
        assert result.error is not None and result.score == 0.0, (case.reason, result)
    else:
        assert result.error is None, (case.reason, result)
        assert result.correct is case.expected, (case.reason, result.details)
        assert result.score == (1.0 if case.expected else 0.0)


def test_golden_set_is_large_and_covers_every_category() -> None:
    counts = Counter(c.category for c in CASES)
    assert len(CASES) >= 300
    assert set(counts) == CATEGORIES
    assert all(counts[c] >= 4 for c in CATEGORIES), counts
    # both verdicts in the categories where a wrong verdict would be easy to miss
    for category in ("fraction", "interval", "tuple", "set", "matrix", "choice", "text", "equation", "hedge"):
        verdicts = {c.expected for c in CASES if c.category == category}
        assert {True, False} <= verdicts, category
    assert all(c.reason.strip() for c in CASES)
    assert len({(c.reference, c.response) for c in CASES}) == len(CASES), "duplicate cases"


@lru_cache(maxsize=None)
def _rows(data_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (data_dir / name / "test.jsonl").read_text().splitlines() if line.strip()]


def _real_reference(data_dir: Path, source: str):
    dataset, key = source.split(":", 1)
    if dataset == "math500":
        return {r["unique_id"]: r["answer"] for r in _rows(data_dir, "math500")}[key]
    if dataset == "gsm8k":
        row = {str(r["idx"]): r for r in _rows(data_dir, "gsm8k")}[key]
        return row["answer"].split("####")[-1].strip()
    return {str(r["id"]): r["answer"] for r in _rows(data_dir, dataset)}[key]


def test_golden_references_are_copied_from_the_real_data_sets(data_dir: Path) -> None:
    real = [c for c in CASES if c.source != "synthetic"]
    assert len(real) >= 0.8 * len(CASES)
    for case in real:
        assert _real_reference(data_dir, case.source) == case.reference, case.source


def test_equivalent_reference_pairs_are_real_math500_answers(data_dir: Path) -> None:
    answers = {r["answer"] for r in _rows(data_dir, "math500")}
    for (a, b), reason in EQUIVALENT_REFERENCES:
        assert a in answers and b in answers and a < b and reason
