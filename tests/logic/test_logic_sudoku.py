"""Sudoku: unique solutions (checked against a brute force over all 288 4x4 grids), grid parsing, rules."""
from __future__ import annotations

import itertools
import json
import random
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_logic import sudoku as sd

PROPERTY = settings(deadline=None, max_examples=100)


@lru_cache(maxsize=None)
def all_4x4_grids() -> tuple[tuple[int, ...], ...]:
    """Every valid 4x4 grid, by enumerating rows (independent of the plugin's solver)."""
    perms = list(itertools.permutations(range(1, 5)))
    grids = []
    for rows in itertools.product(perms, repeat=4):
        if any(len({row[c] for row in rows}) != 4 for c in range(4)):
            continue
        boxes = [{rows[r][c] for r in rr for c in cc} for rr in ((0, 1), (2, 3)) for cc in ((0, 1), (2, 3))]
        if all(len(b) == 4 for b in boxes):
            grids.append(tuple(d for row in rows for d in row))
    return tuple(grids)


def as_lines(grid, n, sep=" "):
    return "\n".join(sep.join(str(d) for d in grid[r * n:(r + 1) * n]) for r in range(n))


def test_there_are_288_valid_4x4_grids_and_the_solver_finds_them_all():
    assert len(all_4x4_grids()) == 288
    assert sorted(tuple(g) for g in sd.solve([0] * 16, 4, limit=1000)) == sorted(all_4x4_grids())


@pytest.mark.parametrize("clues", [4, 5, 6, 8, 10])
def test_generated_4x4_puzzles_have_exactly_one_solution_by_brute_force(clues):
    grids = all_4x4_grids()
    checked = 0
    for seed in range(4):
        for row in sd.generate(seed, 60, grid_size=4, clues=clues):
            puzzle = sd.from_string(row["puzzle"], 4, "puzzle")
            fits = [g for g in grids if all(p in (0, d) for p, d in zip(puzzle, g))]
            assert fits == [tuple(sd.from_string(row["solution"], 4, "solution"))], row
            assert row["clues"] == sum(1 for d in puzzle if d) >= clues
            checked += 1
    assert checked == 240


@pytest.mark.parametrize("clues", [26, 30, 40])
def test_generated_9x9_puzzles_have_exactly_one_solution_which_obeys_the_rules(clues):
    for row in sd.generate(1, 12, grid_size=9, clues=clues):
        puzzle = sd.from_string(row["puzzle"], 9, "puzzle")
        solution = sd.from_string(row["solution"], 9, "solution")
        assert sd.solve(puzzle, 9, limit=5) == [solution]
        assert sd.is_valid_solution(solution, puzzle, 9) is None
        assert row["clues"] >= clues


def test_solver_counts_the_two_solutions_of_a_deadly_rectangle():
    solution = sd.from_string(next(sd.generate(0, 1, grid_size=9))["solution"], 9, "solution")
    for r1, r2 in ((r1, r2) for r1 in range(9) for r2 in range(r1 + 1, 9) if r1 // 3 == r2 // 3):
        for c1, c2 in ((c1, c2) for c1 in range(9) for c2 in range(c1 + 1, 9) if c1 // 3 != c2 // 3):
            a, b = solution[r1 * 9 + c1], solution[r1 * 9 + c2]
            if solution[r2 * 9 + c1] == b and solution[r2 * 9 + c2] == a:
                puzzle = list(solution)
                for r, c in ((r1, c1), (r1, c2), (r2, c1), (r2, c2)):
                    puzzle[r * 9 + c] = 0
                assert len(sd.solve(puzzle, 9, limit=10)) == 2
                return
    pytest.fail("no swappable rectangle in this grid; pick another seed")


def test_generation_is_deterministic_by_seed_and_splits_share_no_solution():
    assert list(sd.generate(5, 20, grid_size=4)) == list(sd.generate(5, 20, grid_size=4))
    assert list(sd.generate(5, 5, grid_size=9)) != list(sd.generate(6, 5, grid_size=9))
    train = {r["solution"] for r in sd.generate(0, 600, grid_size=4, split="train")}
    test = {r["solution"] for r in sd.generate(0, 100, grid_size=4, split="test")}
    assert not train & test


def test_prompt_grid_shows_givens_and_dots():
    row = next(sd.generate(0, 1, grid_size=9))
    assert sd.parse_grid(row["grid"], 9) == sd.from_string(row["puzzle"], 9, "puzzle")
    assert row["grid"].count(".") == 81 - row["clues"]


# --- answers -----------------------------------------------------------------------------------
@st.composite
def grid_text(draw, grid, n):
    style = draw(st.integers(0, 5))
    if style == 0:
        return as_lines(grid, n, sep=draw(st.sampled_from(["", " ", ", ", "  "])))
    if style == 1:
        return json.dumps([grid[r * n:(r + 1) * n] for r in range(n)], indent=draw(st.sampled_from([None, 2])))
    if style == 2:
        return "".join(map(str, grid))
    if style == 3:
        return "\n".join(f"Row {r + 1}: " + " ".join(map(str, grid[r * n:(r + 1) * n])) for r in range(n))
    if style == 4:
        return sd.render(grid, n)
    echo = sd.render([d if i % 3 else 0 for i, d in enumerate(grid)], n)  # the puzzle echoed first
    return f"{echo}\n\nSolved:\n{as_lines(grid, n)}"


@PROPERTY
@given(seed=st.integers(0, 10**6), n=st.sampled_from([4, 9]), data=st.data())
def test_every_supported_grid_layout_of_the_solution_scores_one(seed, n, data):
    row = next(sd.generate(seed, 1, grid_size=n, clues=30 if n == 9 else 6))
    grid = sd.from_string(row["solution"], n, "solution")
    text = data.draw(grid_text(grid, n))
    result = sd.reward(row, f"<answer>\n{text}\n</answer>")
    assert result.score == 1.0, (text, result.details)


def test_any_valid_completion_scores_one_even_when_the_puzzle_has_several():
    empty = {"puzzle": "0" * 16, "size": 4}
    for grid in all_4x4_grids()[::37]:
        assert sd.reward(empty, f"<answer>{as_lines(grid, 4)}</answer>").score == 1.0


def test_a_rule_break_is_wrong_with_format_score_and_partial_credit_counts_right_empty_cells():
    row = next(sd.generate(2, 1, grid_size=4, clues=6))
    solution = sd.from_string(row["solution"], 4, "solution")
    puzzle = sd.from_string(row["puzzle"], 4, "puzzle")
    empty = [i for i, d in enumerate(puzzle) if not d]
    broken = list(solution)
    broken[empty[0]] = solution[empty[0]] % 4 + 1
    answer = f"<answer>{as_lines(broken, 4)}</answer>"
    result = sd.reward(row, answer)
    assert (result.score, result.details["failure"]) == (0.0, "wrong") and "repeats" in result.details["reason"]
    assert sd.reward(row, answer, format_score=0.1).score == pytest.approx(0.1)
    assert sd.reward(row, answer, partial_credit=True).score == pytest.approx((len(empty) - 1) / len(empty))


def test_changing_a_given_is_wrong_and_earns_no_partial_credit():
    row = next(sd.generate(2, 1, grid_size=4, clues=6))
    puzzle = sd.from_string(row["puzzle"], 4, "puzzle")
    given_cell = next(i for i, d in enumerate(puzzle) if d)
    # relabel two digits: still a valid grid, but the givens change
    a = puzzle[given_cell]
    b = a % 4 + 1
    swapped = [b if d == a else a if d == b else d for d in sd.from_string(row["solution"], 4, "solution")]
    result = sd.reward(row, f"<answer>{as_lines(swapped, 4)}</answer>", partial_credit=True)
    assert result.score == 0.0 and "changes the given" in result.details["reason"]


def test_an_incomplete_grid_gets_no_format_score_but_partial_credit_for_its_right_cells():
    row = next(sd.generate(3, 1, grid_size=9, clues=30))
    solution = sd.from_string(row["solution"], 9, "solution")
    puzzle = sd.from_string(row["puzzle"], 9, "puzzle")
    empty = [i for i, d in enumerate(puzzle) if not d]
    partial = list(solution)
    for cell in empty[:10]:
        partial[cell] = 0
    answer = f"<answer>{sd.render(partial, 9)}</answer>"
    result = sd.reward(row, answer, format_score=0.1)
    assert (result.score, result.details["failure"]) == (0.0, "incomplete")
    assert sd.reward(row, answer, partial_credit=True).score == pytest.approx((len(empty) - 10) / len(empty))
    # without a stored solution the reward solves the puzzle itself for the partial credit
    no_solution = {k: v for k, v in row.items() if k != "solution"}
    assert sd.reward(no_solution, answer, partial_credit=True).score == pytest.approx((len(empty) - 10) / len(empty))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, failure", [
    ("no idea", "unparseable"),
    ("1 2 3\n4 5 6", "unparseable"),
    ("5" * 1_100_000, "too_long"),
    ("\uff11 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1", "suspicious_character"),
    ("1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 9", "unparseable"),
])
def test_hostile_or_malformed_grids_score_zero_with_a_reason(answer, failure):
    row = {"puzzle": "1000000000000000", "size": 4}
    result = sd.reward(row, f"<answer>{answer}</answer>", partial_credit=True, format_score=0.5)
    assert (result.score, result.details["failure"]) == (0.0, failure)
    assert result.details["reason"]


def test_a_sample_with_a_malformed_puzzle_is_an_input_error_naming_the_field():
    from areal_core.errors import InputError

    with pytest.raises(InputError, match="'puzzle'"):
        sd.reward({"puzzle": "12x4", "size": 4}, "1234")
    with pytest.raises(InputError, match="size"):
        sd.reward({"puzzle": "123"}, "1234")


def test_bad_generator_options_are_config_errors():
    from areal_core.errors import ConfigError

    with pytest.raises(ConfigError, match="grid size must be 4 or 9"):
        list(sd.generate(0, 1, grid_size=5))
    with pytest.raises(ConfigError, match="clues"):
        list(sd.generate(0, 1, grid_size=4, clues=17))


def test_random_layouts_do_not_confuse_rows_with_labels():
    rng = random.Random(0)
    grid = list(all_4x4_grids()[rng.randrange(288)])
    text = "\n".join(f"{r + 1}) " + " | ".join(map(str, grid[r * 4:(r + 1) * 4])) for r in range(4))
    assert sd.parse_grid(text, 4) == grid
