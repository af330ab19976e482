"""Sudoku, 4x4 (2x2 boxes) and 9x9 (3x3 boxes), every generated puzzle with exactly one solution.

Grids are strings of n*n digits, row by row, ``0`` for an empty cell. The solver is depth-first search
over bit masks (most constrained cell first) that counts solutions up to a limit; the generator fills a
random complete grid with it, then empties cells in random order, keeping a cell empty only while the
solver still finds exactly one solution, until ``clues`` givens remain (or no further cell can go).

Answers are grids: n lines of n digits (spaces, ``|``, ``+``, ``-``, commas and brackets between them
are ignored; a "Row 3:" label is dropped): the last n such lines are the answer (several different
complete grids are a hedge, rejected as a conflict; the same grid twice, or the puzzle echoed before
it, is one answer); or, failing that, all
n*n digits of the answer in reading order (a JSON list of lists, one long line). ``0``, ``.`` and ``_``
mark cells left empty.

Scoring (reward ``sudoku``) checks the rules, not a stored answer:

* a complete grid that keeps every given and has each digit once per row, column and box -> 1.0;
* a complete grid that breaks a rule -> 0, or ``format_score``;
* empty cells (incomplete) or no grid -> 0 (no ``format_score``);
* ``partial_credit``: fraction of the puzzle's empty cells filled as in its solution (from the sample's
  ``solution`` field, else solved here); 0 when the answer changes a given.
"""
from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import Any, Iterator, Sequence

from areal_core import RewardResult
from areal_core.errors import ConfigError, InputError

from areal_logic.answers import (CONFLICT, INCOMPLETE, UNPARSEABLE, Rejection, excerpt, prepare, rejected, split_options,
                                 verdict)
from areal_logic.splits import check_split, in_heldout

BOXES = {4: (2, 2), 9: (3, 3)}


@lru_cache(maxsize=None)
def units(n: int) -> tuple[tuple[int, ...], ...]:
    """The 3n units (n rows, n columns, n boxes) as tuples of cell indices."""
    br, bc = BOXES[n]
    rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
    cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
    boxes = [tuple((R + r) * n + C + c for r in range(br) for c in range(bc))
             for R in range(0, n, br) for C in range(0, n, bc)]
    return tuple(rows + cols + boxes)


def _check_size(n: Any, where: str) -> int:
    if n not in BOXES:
        raise ConfigError(f"{where}: grid size must be 4 or 9, got {n!r}")
    return n


@lru_cache(maxsize=None)
def _positions(n: int) -> tuple[tuple[tuple[int, int, int], ...], tuple[int, ...]]:
    """(row, column, box) of each cell, and the number of set bits of every n-bit mask."""
    br, bc = BOXES[n]
    positions = tuple((cell // n, cell % n, (cell // n) // br * (n // bc) + (cell % n) // bc) for cell in range(n * n))
    return positions, tuple(bin(mask).count("1") for mask in range(1 << n))


def solve(grid: Sequence[int], n: int, limit: int = 2, rng: random.Random | None = None) -> list[list[int]]:
    """Up to `limit` solutions of `grid` (0 = empty), by depth-first search on the most constrained cell,
    with the digits taken in each row, column and box kept as bit masks. With `rng`, candidates are
    tried in random order (used to make random complete grids)."""
    positions, popcount = _positions(n)
    full = (1 << n) - 1
    cells = list(grid)
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    for cell, digit in enumerate(cells):
        if digit:
            bit = 1 << (digit - 1)
            r, c, b = positions[cell]
            if (rows[r] | cols[c] | boxes[b]) & bit:
                return []  # the givens already clash
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
    empties = [cell for cell, digit in enumerate(cells) if not digit]
    solutions: list[list[int]] = []

    def search() -> None:
        best, best_free, best_count = -1, 0, n + 1
        for cell in empties:
            if cells[cell] == 0:
                r, c, b = positions[cell]
                free = full & ~(rows[r] | cols[c] | boxes[b])
                count = popcount[free]
                if count < best_count:
                    best, best_free, best_count = cell, free, count
                    if count <= 1:
                        break
        if best < 0:
            solutions.append(list(cells))
            return
        if best_count == 0:
            return
        digits = [d for d in range(1, n + 1) if best_free >> (d - 1) & 1]
        if rng is not None:
            rng.shuffle(digits)
        r, c, b = positions[best]
        for digit in digits:
            bit = 1 << (digit - 1)
            cells[best] = digit
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            search()
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[b] &= ~bit
            cells[best] = 0
            if len(solutions) >= limit:
                return

    search()
    return solutions


def is_valid_solution(answer: Sequence[int], puzzle: Sequence[int], n: int) -> str | None:
    """None when `answer` is a complete grid that keeps the givens and obeys the rules; else why not."""
    all_units = units(n)
    for cell, (given, value) in enumerate(zip(puzzle, answer)):
        if given and given != value:
            return f"changes the given {given} at row {cell // n + 1}, column {cell % n + 1}"
    digits = set(range(1, n + 1))
    names = ["row"] * n + ["column"] * n + ["box"] * n
    for index, unit in enumerate(all_units):
        values = [answer[c] for c in unit]
        if set(values) != digits:
            repeated = sorted({v for v in values if values.count(v) > 1})
            return f"{names[index]} {index % n + 1} repeats {', '.join(map(str, repeated))}"
    return None


def to_string(grid: Sequence[int]) -> str:
    return "".join(map(str, grid))


def from_string(text: str, n: int, field: str) -> list[int]:
    if not isinstance(text, str) or len(text) != n * n or any(ch not in "0123456789." for ch in text):
        raise InputError(f"sudoku: sample field {field!r} must be a string of {n * n} digits (0 or . for empty), "
                         f"got {excerpt(repr(text), 100)}")
    grid = [0 if ch == "." else int(ch) for ch in text]
    if any(d > n for d in grid):
        raise InputError(f"sudoku: sample field {field!r} has a digit above {n}")
    return grid


def render(grid: Sequence[int], n: int) -> str:
    """The grid as text for a prompt: '.' for empty cells, box borders drawn."""
    br, bc = BOXES[n]
    lines = []
    for r in range(n):
        if r and r % br == 0:
            lines.append("-+-".join(["-" * (2 * bc - 1)] * (n // bc)))
        row = []
        for c in range(n):
            if c and c % bc == 0:
                row.append("|")
            value = grid[r * n + c]
            row.append(str(value) if value else ".")
        lines.append(" ".join(row))
    return "\n".join(lines)


# --- generation ------------------------------------------------------------------------------
DEFAULT_CLUES = {4: 6, 9: 30}


def random_grid(rng: random.Random, n: int) -> list[int]:
    """A random complete grid."""
    return solve([0] * (n * n), n, limit=1, rng=rng)[0]


def carve(rng: random.Random, solution: Sequence[int], n: int, clues: int) -> list[int]:
    """Empty the cells of a complete grid in random order, each only while the solution stays unique,
    until `clues` givens remain or no further cell can be emptied."""
    puzzle = list(solution)
    order = list(range(n * n))
    rng.shuffle(order)
    remaining = n * n
    for cell in order:
        if remaining <= clues:
            break
        digit = puzzle[cell]
        puzzle[cell] = 0
        if len(solve(puzzle, n, limit=2)) == 1:
            remaining -= 1
        else:
            puzzle[cell] = digit
    return puzzle


def generate(seed: int, size: int, grid_size: int = 4, clues: int | None = None, split: str = "train",
             heldout_fraction: float = 0.1) -> Iterator[dict[str, Any]]:
    """Yield `size` puzzles with exactly one solution.

    grid_size: 4 or 9.  clues: how many givens to keep (default 6 for 4x4, 30 for 9x9; fewer is harder).
    The removal stops early when no further cell can be emptied; the row's ``clues`` is the real count.
    """
    n = _check_size(grid_size, "generator 'sudoku'")
    if clues is None:
        clues = DEFAULT_CLUES[n]
    if not isinstance(clues, int) or not 0 <= clues <= n * n:
        raise ConfigError(f"generator 'sudoku': clues must be an integer between 0 and {n * n}, got {clues!r}")
    check_split("sudoku", split, heldout_fraction)
    rng = random.Random(f"areal-logic:sudoku:{n}:{seed}:{split}")
    produced = 0
    while produced < size:
        solution = random_grid(rng, n)
        # Split by the solution grid (before the costly carving): train and test never share a solution.
        if in_heldout(to_string(solution), heldout_fraction) != (split == "test"):
            continue
        puzzle = carve(rng, solution, n, clues)
        produced += 1
        br, bc = BOXES[n]
        yield {
            "id": f"sudoku{n}-{split}-{seed}-{produced - 1}",
            "size": n,
            "box": f"{br}x{bc}",
            "puzzle": to_string(puzzle),
            "solution": to_string(solution),
            "clues": sum(1 for d in puzzle if d),
            "grid": render(puzzle, n),
        }


# --- answers ---------------------------------------------------------------------------------
_LABEL = re.compile(r"^\s*(?:row\s*\d+\s*[:.)\-]?|r\d+\s*[:.)\-]?|\d+\s*[:)])", re.IGNORECASE)
_CELL = re.compile(r"[0-9._]")
_LETTER = re.compile(r"[A-Za-z]")


def _cells(text: str) -> list[int]:
    return [0 if ch in "._" else int(ch) for ch in _CELL.findall(text)]


def parse_grid(answer: str, n: int) -> list[int]:
    """The n*n cells of an answer grid (0 = left empty); Rejection when there is no grid, or when the answer
    holds several complete grids that differ (rows of n cells in blocks, or a grid on one line)."""
    rows: list[list[int]] = []
    blocks: list[list[list[int]]] = [[]]  # runs of consecutive rows; a line of words or a blank line ends one
    complete: set[tuple[int, ...]] = set()
    for line in answer.splitlines():
        line = _LABEL.sub("", line, count=1)
        cells = _cells(line)
        if len(cells) == n * n and 0 not in cells:
            complete.add(tuple(cells))  # a grid on one line: "[[4,3,1,2],[1,2,3,4],...]" or "or: 4312 1234 ..."
        if _LETTER.search(line) or not line.strip() or (cells and len(cells) != n):
            blocks.append([])
        elif len(cells) == n:
            rows.append(cells)
            blocks[-1].append(cells)
    for block in blocks:  # each run in grids of n rows from its end (the puzzle echoed first has empty cells)
        for end in range(len(block), n - 1, -n):
            grid = tuple(d for row in block[end - n:end] for d in row)
            if 0 not in grid:
                complete.add(grid)
    if len(complete) > 1:
        raise Rejection(CONFLICT, f"the answer holds {len(complete)} different complete grids; give one final grid")
    if len(rows) >= n:
        grid = [d for row in rows[-n:] for d in row]
    else:
        grid = _cells(answer)
        if len(grid) != n * n:
            raise Rejection(UNPARSEABLE, f"no {n}x{n} grid in the answer: found {len(rows)} rows of {n} cells and "
                                         f"{len(grid)} cells in all (expected {n} rows of {n} digits)")
    if any(d > n for d in grid):
        raise Rejection(UNPARSEABLE, f"the grid holds a digit above {n}")
    return grid


def reward(sample: dict[str, Any], response: str, **options: Any) -> RewardResult:
    """Reward ``sudoku``: needs sample field ``puzzle`` (and ``size``, default from the puzzle length;
    ``solution`` is used for partial credit when present)."""
    opts, _ = split_options("sudoku", options, {})
    puzzle_text = sample.get("puzzle")
    n = sample.get("size") or {16: 4, 81: 9}.get(len(puzzle_text) if isinstance(puzzle_text, str) else -1)
    if n not in BOXES:
        raise InputError(f"sudoku: sample field 'size' must be 4 or 9 (or 'puzzle' 16 or 81 digits long), got {n!r}")
    puzzle = from_string(puzzle_text, n, "puzzle")
    try:
        answer, source = prepare(response, opts)
        grid = parse_grid(answer, n)
    except Rejection as rejection:
        return rejected(rejection)
    details: dict[str, Any] = {"extracted": excerpt(answer), "source": source, "grid": to_string(grid)}

    def fraction() -> float | None:
        if not opts.partial_credit:
            return None
        if "solution" in sample:
            solution = from_string(sample["solution"], n, "solution")
        else:
            found = solve(puzzle, n, limit=1)
            if not found:
                return None
            solution = found[0]
        if any(given and given != value for given, value in zip(puzzle, grid)):
            return 0.0
        empty = [cell for cell, given in enumerate(puzzle) if not given]
        return sum(grid[c] == solution[c] for c in empty) / len(empty) if empty else 0.0

    blanks = sum(1 for d in grid if d == 0)
    if blanks:
        return verdict(opts, correct=False, well_formed=False, fraction=fraction(), failure=INCOMPLETE,
                       reason=f"the grid leaves {blanks} cells empty", **details)
    problem = is_valid_solution(grid, puzzle, n)
    if problem:
        return verdict(opts, correct=False, well_formed=True, fraction=fraction(), reason=f"the grid {problem}", **details)
    return verdict(opts, correct=True, well_formed=True, fraction=1.0, **details)
