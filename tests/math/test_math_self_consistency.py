"""Self-consistency on the real data: a reference boxed as the response is correct, and references that
differ mathematically are not. The rates are printed (run with -s to see them); the target is 100%."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from math_golden_cases import EQUIVALENT_REFERENCES

from areal_math import reference_text, verify

DATASETS = {  # name: (file, how to read the reference of a row)
    "math500": ("math500/test.jsonl", lambda r: r["answer"]),
    "gsm8k": ("gsm8k/test.jsonl", lambda r: r["answer"].split("####")[-1].strip()),
    "aime24": ("aime24/test.jsonl", lambda r: r["answer"]),
    "aime25": ("aime25/test.jsonl", lambda r: r["answer"]),
    "amc23": ("amc23/test.jsonl", lambda r: r["answer"]),
}


def references(data_dir: Path, name: str) -> list:
    path, read = DATASETS[name]
    return [read(json.loads(line)) for line in (data_dir / path).read_text().splitlines() if line.strip()]


def respond(answer: str) -> str:
    return f"Let me work through this step by step. ... So the final answer is $\\boxed{{{answer}}}$."


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_reference_verifies_against_itself_boxed(data_dir: Path, name: str) -> None:
    refs = references(data_dir, name)
    failures = []
    for ref in refs:
        result = verify(ref, respond(reference_text(ref)))
        if result.correct is not True:
            failures.append((ref, result))
    print(f"\n{name}: self-consistency {len(refs) - len(failures)}/{len(refs)} "
          f"({(len(refs) - len(failures)) / len(refs):.2%})")
    assert not failures


def test_math500_distinct_references_are_equal_only_when_listed_as_equivalent(data_dir: Path) -> None:
    """Every pair (a, b), a < b, of distinct MATH-500 answers: verify(a, boxed b) is correct exactly for
    the pairs in EQUIVALENT_REFERENCES (each listed with the reason it is the same answer)."""
    refs = sorted(set(references(data_dir, "math500")))
    expected = {pair for pair, _ in EQUIVALENT_REFERENCES}
    judged_equal, errors, pairs = set(), [], 0
    for i, a in enumerate(refs):
        for b in refs[i + 1:]:
            pairs += 1
            result = verify(a, respond(b))
            if result.error is not None:
                errors.append((a, b, result.error))
            elif result.correct:
                judged_equal.add((a, b))
    print(f"\nmath500: {pairs} pairs of distinct references, {len(judged_equal)} judged equal "
          f"({len(expected)} expected), {len(errors)} errors")
    assert not errors
    assert judged_equal - expected == set(), "judged equal but different"
    assert expected - judged_equal == set(), "equivalent but judged different"


@pytest.mark.parametrize("name", ["gsm8k", "aime24", "aime25", "amc23"])
def test_integer_references_with_different_values_never_verify(data_dir: Path, name: str) -> None:
    """These answers are integers; two of them differ exactly when their integer values differ (read
    here with int(), independently of the verifier). Each reference against the next 25 distinct values."""
    values = sorted({int(float(str(r).replace(",", ""))) for r in references(data_dir, name)})
    texts = {}
    for ref in references(data_dir, name):
        texts.setdefault(int(float(str(ref).replace(",", ""))), ref)
    wrong, pairs = [], 0
    for i, v in enumerate(values):
        for w in values[i + 1:i + 26]:
            pairs += 1
            for ref, other in ((texts[v], texts[w]), (texts[w], texts[v])):
                result = verify(ref, respond(reference_text(other)))
                if result.correct is not False or result.error is not None:
                    wrong.append((ref, other, result))
    print(f"\n{name}: {2 * pairs} ordered pairs of different values, {len(wrong)} judged equal or failed")
    assert not wrong
