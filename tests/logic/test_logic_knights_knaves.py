"""Knights and Knaves: generator, solver, answer parser and reward, against the real Logic-RL test sets."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_logic import knights_knaves as kk

PROPERTY = settings(deadline=None, max_examples=150)


def role(knight: bool) -> str:
    return "knight" if knight else "knave"


def answer_lines(names, solution, flip=(), drop=()) -> str:
    return "\n".join(f"({i + 1}) {name} is a {role(knight != (i in flip))}"
                     for i, (name, knight) in enumerate(zip(names, solution)) if i not in drop)


# --- the real data ---------------------------------------------------------------------------
def test_logic_rl_tasks_hold_100_puzzles_each_with_names_and_solutions(kk_samples):
    for n, samples in kk_samples.items():
        assert len(samples) == 100
        assert all(len(s["names"]) == n and len(s["solution"]) == n for s in samples)
        assert len({s["id"] for s in samples}) == 100


def test_every_logic_rl_puzzle_has_exactly_its_reference_solution(kk_samples):
    for n, samples in kk_samples.items():
        for sample in samples:
            statements = kk.parse_statements(sample["statements"], n)
            assert kk.solve(statements) == [tuple(sample["solution"])], sample["id"]


@pytest.mark.parametrize("style", ["solution_text_format", "solution_text"])
def test_reference_answers_of_all_500_logic_rl_puzzles_score_one(kk_samples, style):
    scored = 0
    for samples in kk_samples.values():
        for sample in samples:
            for response in (f"<think>checked</think>\n<answer>\n{sample[style]}\n</answer>", sample[style]):
                result = kk.reward(sample, response)
                assert (result.score, result.correct) == (1.0, True), (sample["id"], result.details)
                scored += 1
    assert scored == 1000


def test_one_person_flipped_scores_zero_or_the_documented_partial_and_format_scores(kk_samples):
    for n, samples in kk_samples.items():
        for sample in samples[:20]:
            flipped = f"<answer>{answer_lines(sample['names'], sample['solution'], flip={n - 1})}</answer>"
            binary = kk.reward(sample, flipped)
            assert (binary.score, binary.correct, binary.details["failure"]) == (0.0, False, "wrong")
            assert sample["names"][n - 1] in binary.details["reason"]
            assert kk.reward(sample, flipped, partial_credit=True).score == pytest.approx((n - 1) / n)
            assert kk.reward(sample, flipped, format_score=0.1).score == pytest.approx(0.1)


def test_missing_person_is_incomplete_no_format_score_but_partial_credit_counts_the_rest(kk_samples):
    for n, samples in kk_samples.items():
        for sample in samples[:20]:
            missing = f"<answer>{answer_lines(sample['names'], sample['solution'], drop={0})}</answer>"
            result = kk.reward(sample, missing, format_score=0.1)
            assert (result.score, result.details["failure"]) == (0.0, "incomplete")
            assert sample["names"][0] in result.details["reason"]
            assert kk.reward(sample, missing, partial_credit=True).score == pytest.approx((n - 1) / n)


def test_extra_text_around_the_answer_is_ignored(kk_samples):
    sample = kk_samples[5][7]
    body = answer_lines(sample["names"], sample["solution"])
    for response in (
        f"Let me think.\n<answer>\nAfter checking every case:\n{body}\nThat is my final answer.\n</answer>",
        f"<answer>{body}</answer>\nI hope this helps!",
        f"<answer>{body}\n(6) Zoey is a knight</answer>",  # a name not in the puzzle is ignored
    ):
        assert kk.reward(sample, response).score == 1.0, response


def test_giving_a_person_both_roles_is_a_conflict_that_scores_zero_whatever_the_options(kk_samples):
    sample = kk_samples[4][3]
    name = sample["names"][2]
    hedge = f"<answer>{answer_lines(sample['names'], sample['solution'])}\n{name} is a {role(not sample['solution'][2])}</answer>"
    result = kk.reward(sample, hedge, partial_credit=True, format_score=0.5)
    assert (result.score, result.details["failure"]) == (0.0, "conflict")
    assert name in result.details["reason"]


def test_unparseable_answer_scores_zero_with_a_reason(kk_samples):
    result = kk.reward(kk_samples[3][0], "<answer>I am not sure.</answer>", format_score=0.2)
    assert (result.score, result.details["failure"]) == (0.0, "unparseable")


# --- answer styles -----------------------------------------------------------------------------
def styled(names, solution, style: int, rng: random.Random) -> str:
    pairs = list(zip(names, solution))
    knights = [n for n, k in pairs if k]
    knaves = [n for n, k in pairs if not k]
    if style == 0:
        return ", ".join(f"{n} is a {role(k)}" for n, k in pairs)
    if style == 1:
        return "\n".join(f"- **{n}**: {role(k).capitalize()}" for n, k in pairs)
    if style == 2:
        return f"Knights: {', '.join(knights) or 'none'}\nKnaves: {', '.join(knaves) or 'none'}"
    if style == 3:
        return "{" + ", ".join(f'"{n}": "{role(k)}"' for n, k in pairs) + "}"
    if style == 4:
        return "\n".join(f"{n} is not a {role(not k)}." for n, k in pairs)
    if style == 5:
        return "| Name | Role |\n|---|---|\n" + "\n".join(f"| {n} | {role(k)} |" for n, k in pairs)
    parts = []
    for group, word in ((knights, "knight"), (knaves, "knave")):
        if len(group) == 1:
            parts.append(f"{group[0]} is a {word}")
        elif group:
            parts.append(f"{', '.join(group[:-1])} and {group[-1]} are {word}s")
    rng.shuffle(parts)
    return "; ".join(parts) + "."


@PROPERTY
@given(n=st.integers(2, 8), seed=st.integers(0, 10**6), style=st.integers(0, 6))
def test_every_supported_answer_style_of_the_right_assignment_scores_one(n, seed, style):
    rng = random.Random(seed)
    names = rng.sample(kk.NAMES, n)
    solution = [rng.random() < 0.5 for _ in range(n)]
    sample = {"names": names, "solution": solution}
    result = kk.reward(sample, f"<answer>{styled(names, solution, style, rng)}</answer>")
    assert result.score == 1.0, (style, result.details)


@PROPERTY
@given(n=st.integers(2, 8), seed=st.integers(0, 10**6), style=st.integers(0, 6), data=st.data())
def test_any_wrong_assignment_scores_zero_and_partial_credit_is_the_fraction_right(n, seed, style, data):
    rng = random.Random(seed)
    names = rng.sample(kk.NAMES, n)
    solution = [rng.random() < 0.5 for _ in range(n)]
    flips = data.draw(st.sets(st.integers(0, n - 1), min_size=1))
    answered = [k != (i in flips) for i, k in enumerate(solution)]
    sample = {"names": names, "solution": solution}
    response = f"<answer>{styled(names, answered, style, rng)}</answer>"
    assert kk.reward(sample, response).score == 0.0
    assert kk.reward(sample, response, partial_credit=True).score == pytest.approx((n - len(flips)) / n)


def test_a_name_inside_a_reported_claim_is_not_taken_for_the_speaker():
    found = kk.parse_answer("Amelia says that Evelyn is a knave. Amelia is a knight.", ["Amelia", "Evelyn"])
    assert found == {"Amelia": True, "Evelyn": False}


def test_names_match_whole_words_only():
    assert kk.parse_answer("Ann is a knight, Anna is a knave", ["Ann", "Anna"]) == {"Ann": True, "Anna": False}


def test_one_letter_names_are_not_confused_with_the_article_a():
    sample = {"names": ["A", "B", "C"], "solution": [True, False, True]}
    for text in ("A is a knight, B is a knave, C is a knight", "A and C are knights; B is a knave.",
                 "(1) A is a knight\n(2) B is a knave\n(3) C is a knight"):
        assert kk.reward(sample, f"<answer>{text}</answer>").score == 1.0, text
    assert kk.reward(sample, "<answer>B is a knight, A is a knave, C is a knight</answer>").score == 0.0


@pytest.mark.parametrize("sample, field", [
    ({"names": ["Mary Ann", "Bob"], "solution": [True, False]}, "'names'"),
    ({"names": ["Amelia", "amelia"], "solution": [True, False]}, "'names'"),
    ({"names": ["Amelia", "Bob"], "solution": [True]}, "'solution'"),
    ({"names": ["Amelia", "Bob"], "solution": [1, 0]}, "'solution'"),
])
def test_a_malformed_sample_is_an_input_error_naming_the_field(sample, field):
    from areal_core.errors import InputError

    with pytest.raises(InputError, match=field):
        kk.reward(sample, "Amelia is a knight")


def test_the_data_sets_role_words_are_used_when_a_sample_carries_them():
    sample = {"names": ["Amelia", "Evelyn"], "solution": [True, False],
              "knight_knave": {"knight": "sage", "knave": "fool"}}
    assert kk.reward(sample, "<answer>Amelia is a sage, Evelyn is a fool</answer>").score == 1.0
    assert kk.reward(sample, "<answer>Amelia is a knight, Evelyn is a knave</answer>").score == 0.0


# --- hostile answers -------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("response, failure", [
    ("A" * (1 << 20), "too_long"),                                              # 1 MB response
    ("<answer>" + "Amelia is a knight. " * 60_000 + "</answer>", "too_long"),   # 1.2 MB inside the tag
    ("<answer>\u0410melia is a knight, Evelyn is a knave</answer>", "suspicious_character"),  # Cyrillic A
    ("<answer>Amelia is a kn\u0456ght, Evelyn is a knave</answer>", "suspicious_character"),  # Cyrillic i
    ("<answer>Ame\u200blia is a knight, Evelyn is a knave</answer>", "suspicious_character"),  # zero width
    ("<answer>Amelia is a knight\x00, Evelyn is a knave</answer>", "suspicious_character"),
    ("<answer>Amelia is a knight, Evelyn is a knave", "no_answer"),               # unclosed tag
])
def test_hostile_answers_are_rejected_with_score_zero_and_a_reason(response, failure):
    sample = {"names": ["Amelia", "Evelyn"], "solution": [True, False]}
    result = kk.reward(sample, response, partial_credit=True, format_score=0.5)
    assert (result.score, result.correct, result.error) == (0.0, False, None)
    assert result.details["failure"] == failure
    assert result.details["reason"]


def test_answer_just_under_the_answer_limit_is_still_read():
    sample = {"names": ["Amelia", "Evelyn"], "solution": [True, False]}
    padding = " " * (20_000 - len("Amelia is a knight, Evelyn is a knave"))
    assert kk.reward(sample, f"<answer>Amelia is a knight, Evelyn is a knave{padding}</answer>").score == 1.0


# --- generation and solving ------------------------------------------------------------------
@pytest.mark.parametrize("depth", [1, 2])
def test_generated_puzzles_have_exactly_one_solution_across_seeds_and_sizes(depth):
    checked = 0
    for people in range(2, 9):
        for seed in range(3):
            for row in kk.generate(seed, 40, people=people, depth=depth, width=3):
                statements = kk.parse_statements(row["statements"], people)
                # Proved by the statement-by-statement enumeration, independent of the truth-table solver.
                assert kk.solve_by_enumeration(statements) == [tuple(row["solution"])]
                assert len(row["names"]) == people == row["people"]
                assert kk.reward(row, f"<answer>{row['solution_text_format']}</answer>").score == 1.0
                checked += 1
    assert checked == 7 * 3 * 40


@PROPERTY
@given(seed=st.integers(0, 10**9), n=st.integers(1, 6), depth=st.integers(0, 3))
def test_truth_table_solver_agrees_with_plain_enumeration_on_random_statements(seed, n, depth):
    rng = random.Random(seed)
    statements = tuple(kk._random_statement(rng, n, depth, 3, kk.OPERATORS) for _ in range(n))
    assert kk.solve(statements) == kk.solve_by_enumeration(statements)


def test_generation_is_deterministic_by_seed_and_differs_between_seeds():
    first = list(kk.generate(7, 30, people=[2, 8]))
    assert first == list(kk.generate(7, 30, people=[2, 8]))
    assert first != list(kk.generate(8, 30, people=[2, 8]))
    assert {row["people"] for row in first} > {4}


def test_train_and_test_splits_never_share_a_puzzle():
    train = {row["statements"] for row in kk.generate(0, 1500, people=3, split="train")}
    test = {row["statements"] for row in kk.generate(0, 300, people=3, split="test")}
    assert train and test and not train & test


def test_quiz_names_every_inhabitant_and_tells_what_each_said():
    row = next(kk.generate(3, 1, people=5))
    for name in row["names"]:
        assert row["quiz"].count(name) >= 2  # introduced, and speaking
    assert row["quiz"].endswith("So who is a knight and who is a knave?")


@pytest.mark.parametrize("options, message", [
    ({"people": 9}, "between 2 and 8"),
    ({"people": [5, 3]}, "between 2 and 8"),
    ({"depth": 0}, "depth"),
    ({"ops": ["xor"]}, "ops"),
    ({"split": "dev"}, "split"),
])
def test_bad_generator_options_are_config_errors_naming_the_option(options, message):
    from areal_core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        list(kk.generate(0, 1, **options))
