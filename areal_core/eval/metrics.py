"""Leaderboard metrics from per-sample verdicts: pass@k, avg@n, maj@k, accuracy, with standard errors.

Every metric is a mean over the N problems of a per-problem value x_i, and its standard error is the
standard error of that mean over problems,

    SE = sqrt( sum_i (x_i - mean)^2 / (N (N - 1)) ),

since the benchmark's problems, not the samples of one problem, are the independent draws.

A verifier error (the reward raised, hung or crashed) counts as "not correct" in every metric, the
conservative reading: the answer was never shown to be right. Errors are reported as their own count,
apart from wrong answers, so a broken verifier is never mistaken for a weak model.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

from areal_core.errors import InputError
from areal_core.eval.records import EvalSample


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct among n samples (Chen et al. 2021, eq. 1):

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

    The product form never builds the huge binomials. When n - c < k every k-subset holds a correct
    sample, so pass@k = 1."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise InputError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_and_se(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, standard error of the mean); the error is None for fewer than two values."""
    count = len(values)
    if count == 0:
        raise InputError("a metric needs at least one problem, got none")
    mean = math.fsum(values) / count
    if count < 2:
        return mean, None
    variance = math.fsum((v - mean) ** 2 for v in values) / (count - 1)
    return mean, math.sqrt(variance / count)


_SPACING = re.compile(r"\\[,;:! ]|\\(?:left|right|displaystyle)(?![A-Za-z])|\s+")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def normalise_answer(text: str) -> str:
    """The form answers are grouped by for majority voting: `$\\dfrac{1}{2}$.` and `\\frac{1}{2}` vote
    together, `1,000` and `1000.0` too, and case is ignored. Deliberately shallow (no algebra): answers
    the verifier would call equal, such as `1/2` and `0.5`, may still vote apart."""
    answer = _SPACING.sub("", text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").lower()
    previous = None
    while answer != previous:  # `$x$.`, `x.$`: peel dollars and a final full stop until none is left
        previous, answer = answer, answer.strip("$").rstrip(".")
    if _THOUSANDS.match(answer):
        answer = answer.replace(",", "")
    try:
        number = float(answer)
    except ValueError:
        return answer
    if math.isfinite(number):
        return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)
    return answer


def majority_is_correct(votes: Sequence[tuple[str | None, bool]]) -> bool:
    """maj@k of one problem, over its first k samples given as (extracted answer, judged correct):
    the most frequent normalised answer wins (a sample without an answer abstains; a tie goes to the
    answer given first) and is correct when the first sample that gave it was judged correct."""
    counts: Counter[str] = Counter()
    verdict: dict[str, bool] = {}
    for answer, correct in votes:
        if answer is None:
            continue
        key = normalise_answer(answer)
        counts[key] += 1
        verdict.setdefault(key, correct)
    if not counts:
        return False
    winner, _ = counts.most_common(1)[0]  # most_common keeps first-seen order among equal counts
    return verdict[winner]


def aggregate(samples: Iterable[EvalSample], k: Sequence[int] = (1,), *, answer_based: bool = False,
              greedy: bool = False) -> dict[str, Any]:
    """The metrics of one eval from its samples (any order).

    counts:       problems, samples, n (samples per problem, the smallest if they differ), correct,
                  wrong, errors (verifier failures), unjudged (rewards that only score)
    accuracy:     correct / samples (what `areal train` reports as held-out accuracy)
    mean_score:   mean reward
    pass@k:       unbiased estimator above, for each requested k <= n
    avg@n:        mean share of correct samples per problem, i.e. pass@1 estimated from all n samples
    maj@k:        majority vote over extracted answers, for each requested k > 1 (answer-based tasks)
    greedy_accuracy: when decoding is greedy with n = 1
    Each mean comes with `<name>_se`, its standard error over problems."""
    by_problem: dict[str, list[EvalSample]] = defaultdict(list)
    total = 0
    for sample in samples:
        by_problem[sample.prompt_id].append(sample)
        total += 1
    if not by_problem:
        raise InputError("no samples to aggregate")
    problems = [sorted(group, key=lambda s: s.sample_index) for group in by_problem.values()]
    n = min(len(group) for group in problems)
    verdicts = Counter(s.verdict for group in problems for s in group)
    metrics: dict[str, Any] = {
        "problems": len(problems), "samples": total, "n": n, "correct": verdicts["correct"],
        "wrong": verdicts["wrong"], "errors": verdicts["error"], "unjudged": verdicts["scored"],
        "accuracy": verdicts["correct"] / total,
    }

    def add(name: str, values: list[float]) -> None:
        metrics[name], metrics[f"{name}_se"] = mean_and_se(values)

    add("mean_score", [math.fsum(s.score for s in group) / len(group) for group in problems])
    correct_counts = [(len(group), sum(s.correct is True and s.error is None for s in group)) for group in problems]
    for size in sorted(set(k)):
        if size > n:
            raise InputError(f"pass@{size} needs at least {size} samples per problem; the eval has n={n}")
        add(f"pass@{size}", [pass_at_k(count, correct, size) for count, correct in correct_counts])
    add(f"avg@{n}", [correct / count for count, correct in correct_counts])
    if answer_based:
        for size in sorted(value for value in set(k) if value > 1):
            add(f"maj@{size}", [float(majority_is_correct(
                [(s.extracted if s.error is None else None, s.correct is True) for s in group[:size]]))
                for group in problems])
    if greedy and n == 1:
        add("greedy_accuracy", [float(s.correct is True and s.error is None) for group in problems for s in group])
    return metrics
