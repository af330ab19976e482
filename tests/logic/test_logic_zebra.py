"""Zebra puzzles: uniqueness (against a brute force over every assignment), clues, answer parsing, scoring."""
from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_logic import zebra as zb

PROPERTY = settings(deadline=None, max_examples=100)

# The clue relations written out again here, independently of the plugin's propagation tables.
HOLDS = {
    "at": lambda i, k: i == k, "not_at": lambda i, k: i != k, "same": lambda i, j: i == j,
    "not_same": lambda i, j: i != j, "left": lambda i, j: j == i + 1, "left_of": lambda i, j: i < j,
    "next_to": lambda i, j: abs(i - j) == 1, "one_between": lambda i, j: abs(i - j) == 2,
}


def brute_force(row) -> list[list[dict[str, str]]]:
    """Every table (house -> attribute -> value) that satisfies all the row's constraints."""
    n, attributes = row["houses"], row["attributes"]
    names = list(attributes)
    found = []
    for perms in itertools.product(*(itertools.permutations(attributes[a]) for a in names)):
        house_of = {(a, v): h for a, perm in zip(names, perms) for h, v in enumerate(perm)}
        ok = True
        for kind, x, y in row["constraints"]:
            i = house_of[tuple(x)]
            j = y if kind in ("at", "not_at") else house_of[tuple(y)]
            if not HOLDS[kind](i, j):
                ok = False
                break
        if ok:
            found.append([{a: perm[h] for a, perm in zip(names, perms)} for h in range(n)])
    return found


def lines_answer(table) -> str:
    return "\n".join(f"House {h + 1}: " + ", ".join(f"{a}={v}" for a, v in house.items()) for h, house in enumerate(table))


@pytest.mark.parametrize("houses, attributes, count", [(2, 2, 100), (3, 2, 200), (3, 3, 200), (4, 2, 100), (4, 3, 8)])
def test_generated_puzzles_have_exactly_one_solution_by_brute_force(houses, attributes, count):
    for row in zb.generate(houses * 10 + attributes, count, houses=houses, attributes=attributes):
        assert brute_force(row) == [row["solution"]], row["puzzle"]


@pytest.mark.parametrize("houses, attributes", [(5, 3), (5, 5), (6, 4)])
def test_larger_puzzles_are_unique_for_the_solver_and_their_solution_meets_every_clue(houses, attributes):
    for row in zb.generate(0, 5, houses=houses, attributes=attributes):
        puzzle = zb.Puzzle(houses, row["attributes"])
        clues = zb.constraints_from_sample(row["constraints"])
        solutions = puzzle.solve(clues, limit=5)
        assert len(solutions) == 1
        table = zb.solution_table(row["attributes"], solutions[0], houses)
        assert table == row["solution"]
        assert zb.reward(row, f"<answer>{lines_answer(table)}</answer>").score == 1.0


def test_minimal_clue_sets_lose_uniqueness_when_any_clue_is_dropped():
    for row in zb.generate(1, 10, houses=4, attributes=3, minimal=True):
        puzzle = zb.Puzzle(4, row["attributes"])
        clues = zb.constraints_from_sample(row["constraints"])
        for k in range(len(clues)):
            assert len(puzzle.solve(clues[:k] + clues[k + 1:], limit=2)) == 2


def test_solver_matches_brute_force_on_random_clue_sets_with_several_solutions():
    rng = random.Random(4)
    for _ in range(60):
        row = next(zb.generate(rng.randrange(10**6), 1, houses=3, attributes=3, minimal=True))
        kept = rng.sample(row["constraints"], max(1, len(row["constraints"]) - 2))
        partial = {**row, "constraints": kept}
        expected = brute_force(partial)
        puzzle = zb.Puzzle(3, row["attributes"])
        found = puzzle.solve(zb.constraints_from_sample(kept), limit=10_000)
        tables = [zb.solution_table(row["attributes"], s, 3) for s in found]
        assert sorted(map(json.dumps, tables)) == sorted(map(json.dumps, expected))


def test_clues_mention_the_values_they_constrain_and_the_prompt_lists_the_attributes():
    row = next(zb.generate(2, 1, houses=5, attributes=4))
    for (kind, x, y), text in zip(row["constraints"], row["clues"]):
        assert x[1] in text and (str(y + 1) in text if kind in ("at", "not_at") else y[1] in text)
        assert text in row["puzzle"]
    for attribute, values in row["attributes"].items():
        assert f"- {attribute}: {', '.join(values)}" in row["puzzle"]


def test_generation_is_deterministic_by_seed_and_splits_share_no_solution():
    assert list(zb.generate(9, 10)) == list(zb.generate(9, 10))
    assert list(zb.generate(9, 10)) != list(zb.generate(10, 10))
    train = {json.dumps(r["solution"]) for r in zb.generate(0, 300, houses=3, attributes=2, split="train")}
    test = {json.dumps(r["solution"]) for r in zb.generate(0, 50, houses=3, attributes=2, split="test")}
    assert not train & test


@pytest.mark.parametrize("options, message", [
    ({"houses": 7}, "houses"), ({"attributes": 1}, "attributes"), ({"attributes": ["Name", "Planet"]}, "attributes"),
    ({"clue_types": ["same", "next_to"]}, "mirror image"), ({"clue_types": ["nearby"]}, "clue_types"),
])
def test_bad_generator_options_are_config_errors(options, message):
    from areal_core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        list(zb.generate(0, 1, **options))


# --- answers -----------------------------------------------------------------------------------
def answer_in_style(table, style: int) -> str:
    if style == 0:
        return lines_answer(table)
    if style == 1:
        return json.dumps({"solution": {f"House {h + 1}": house for h, house in enumerate(table)}})
    if style == 2:
        return json.dumps({f"House {h + 1}": house for h, house in enumerate(table)}, indent=2)
    if style == 3:
        header = "| House | " + " | ".join(table[0]) + " |\n|---|" + "---|" * len(table[0])
        return header + "\n" + "\n".join(f"| {h + 1} | " + " | ".join(house.values()) + " |" for h, house in enumerate(table))
    if style == 4:
        return "\n".join(f"- House #{h + 1}: " + ", ".join(v.upper() for v in house.values()) for h, house in enumerate(table))
    return "\n".join(f"In house {h + 1} lives {house.get('Name', '')}; " + " and ".join(f"the {a.lower()} is {v}" for a, v in house.items())
                     for h, house in enumerate(table))


@PROPERTY
@given(seed=st.integers(0, 10**6), houses=st.integers(2, 5), attributes=st.integers(2, 5), style=st.integers(0, 5))
def test_every_supported_answer_layout_of_the_solution_scores_one(seed, houses, attributes, style):
    row = next(zb.generate(seed, 1, houses=houses, attributes=attributes))
    result = zb.reward(row, f"<answer>\n{answer_in_style(row['solution'], style)}\n</answer>")
    assert result.score == 1.0, (style, result.details)


@PROPERTY
@given(seed=st.integers(0, 10**6), style=st.integers(0, 5))
def test_swapping_two_houses_of_one_attribute_is_wrong_and_partial_credit_counts_cells(seed, style):
    row = next(zb.generate(seed, 1, houses=4, attributes=3))
    table = [dict(h) for h in row["solution"]]
    attribute = list(table[0])[1]
    table[0][attribute], table[3][attribute] = table[3][attribute], table[0][attribute]
    answer = f"<answer>{answer_in_style(table, style)}</answer>"
    assert zb.reward(row, answer).score == 0.0
    assert zb.reward(row, answer, format_score=0.1).score == pytest.approx(0.1)
    assert zb.reward(row, answer, partial_credit=True).score == pytest.approx(10 / 12)


def test_a_value_in_two_houses_or_two_values_in_one_cell_is_a_conflict():
    row = next(zb.generate(0, 1, houses=3, attributes=2))
    table = row["solution"]
    name = table[0]["Name"]
    doubled = lines_answer(table) + f"\nHouse 2: Name={name}"
    result = zb.reward(row, f"<answer>{doubled}</answer>", partial_credit=True)
    assert (result.score, result.details["failure"]) == (0.0, "conflict") and name in result.details["reason"]


def test_a_missing_house_is_incomplete_with_partial_credit_for_the_rest():
    row = next(zb.generate(0, 1, houses=4, attributes=3))
    answer = f"<answer>{lines_answer(row['solution'][:3])}</answer>"
    result = zb.reward(row, answer, format_score=0.1)
    assert (result.score, result.details["failure"]) == (0.0, "incomplete")
    assert zb.reward(row, answer, partial_credit=True).score == pytest.approx(9 / 12)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, failure", [
    ("I could not solve it.", "unparseable"),
    ("House 9: Name=Alice", "unparseable"),
    ("House 1: " + "Alice " * 300_000, "too_long"),
    ("House 1: Name=\u0391lice", "suspicious_character"),   # Greek capital alpha
    ("House 1: Name=Alice\u202e", "suspicious_character"),  # right-to-left override
])
def test_hostile_or_malformed_answers_score_zero_with_a_reason(answer, failure):
    row = next(zb.generate(0, 1, houses=3, attributes=2))
    result = zb.reward(row, f"<answer>{answer}</answer>", partial_credit=True, format_score=0.5)
    assert (result.score, result.details["failure"]) == (0.0, failure)
    assert result.details["reason"]


def test_a_malformed_solution_field_is_an_input_error():
    from areal_core.errors import InputError

    with pytest.raises(InputError, match="'solution'"):
        zb.reward({"solution": "Alice"}, "House 1: Alice")
