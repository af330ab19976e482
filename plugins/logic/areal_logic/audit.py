"""Mutators for `areal audit`: what a policy could try on the four logic rewards, and what they must accept.

Each takes a sample with its solution and returns `areal_core.audit.Variant`s: the shared families of
`answer_variants` (hedges, several answers, near misses, a quoted reference) over whole answers, plus each
family's own: one person's role hedged ("a knave/knight"), one cell or one house value hedged, the answer
outside the <answer> tag (right only where the grading reads it there), and the equivalent notations each
parser documents.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any, Callable, Sequence

from areal_core.audit import (EQUIVALENT, HEDGE, NEAR_MISS, OUTSIDE, SEVERAL, SUPERSET, Variant, answer_variants,
                              degenerate_variants, right, wrong)

from areal_logic import countdown, knights_knaves, sudoku

THINK = "<think>I checked every statement and every clue.</think>\n"


def respond(answer: str) -> str:
    return f"{THINK}<answer>\n{answer}\n</answer>"


def _outside(answer: str, options: dict[str, Any]) -> list[Variant]:
    """The answer after </think> with no tag (read only by the lenient `auto` extraction or `full`), and the
    answer only inside <think> (never an answer, except to `full`, which reads the whole text)."""
    extract = options.get("extract", "auto")
    return [Variant(OUTSIDE, THINK + answer, extract in ("auto", "full"), "after </think>, no <answer> tag"),
            Variant(OUTSIDE, f"<think>{answer}</think>", extract == "full", "only inside <think>")]


def _shared(correct: str, wrongs: Sequence[tuple[str, str]], options: dict[str, Any], *,
            equivalents: Sequence[tuple[str, str]] = (), supersets: Sequence[tuple[str, str]] = ()) -> list[Variant]:
    return (answer_variants(correct, wrongs, respond, equivalents=equivalents, supersets=supersets)
            + [wrong(SEVERAL, respond(f"{w}\n{correct}"), "a wrong answer and the right one in one <answer>")
               for w, _ in wrongs[:1]]
            + [wrong(SEVERAL, respond(f"{correct}\n{w}"), "the right answer and a wrong one in one <answer>")
               for w, _ in wrongs[:1]]
            + [right(EQUIVALENT, f"<think>The answer goes inside <answer> </answer> tags.</think>\n<answer>\n{correct}\n"
                               "</answer>", "answer tags mentioned inside <think>"),
               right(EQUIVALENT, respond(correct) + "\n" + respond(correct), "the same answer twice")]
            + _outside(correct, options) + degenerate_variants(respond)[:3])


# --- knights and knaves ----------------------------------------------------------------------
ROLE_HEDGES = ("{a}/{b}", "{a} (or maybe a {b})", "{a} or a {b}", "{a}, possibly a {b}", "{a} or {b}",
               "{a}, but could be a {b}", "either a {a} or a {b}")


def knights_knaves_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    names, solution = knights_knaves._reference(sample)
    knight, knave = knights_knaves._knight_words(sample)

    def role(is_knight: bool) -> str:
        return knight if is_knight else knave

    def lines(roles: Sequence[bool | str], layout: str = "({i}) {name} is a {role}") -> str:
        return "\n".join(layout.format(i=i + 1, name=name, role=r if isinstance(r, str) else role(r))
                         for i, (name, r) in enumerate(zip(names, roles)))

    n = len(names)
    j = rng.randrange(n)
    flip_one = [not r if i == j else r for i, r in enumerate(solution)]
    correct = lines(solution)
    wrongs = [(lines(flip_one), "one role flipped"), (lines([not r for r in solution]), "every role flipped")]
    knights = [name for name, r in zip(names, solution) if r]
    knaves = [name for name, r in zip(names, solution) if not r]

    def group(people: list[str], word: str) -> str:
        if len(people) == 1:
            return f"{people[0]} is a {word}"
        return f"{', '.join(people[:-1])} and {people[-1]} are {word}s"

    groups = [g for g in ((knights, knight), (knaves, knave)) if g[0]]
    equivalents = [
        (lines(solution, "{name}: {role}"), "Name: role"),
        (lines([role(r).capitalize() for r in solution]), "capitalised roles"),
        (lines(solution, "**{name}** is a **{role}**"), "markdown bold"),
        (lines([role(not r) for r in solution], "({i}) {name} is not a {role}"), "negated roles"),
        (", and ".join(group(p, w) for p, w in groups) + ".", "one sentence, grouped by role"),
        ("\n".join(f"{w.capitalize()}s: {', '.join(p)}" for p, w in groups), "Knights: ... / Knaves: ..."),
        (json.dumps({name: role(r) for name, r in zip(names, solution)}), "a JSON object"),
        ("| person | role |\n|---|---|\n" + lines(solution, "| {name} | {role} |"), "a markdown table"),
        (lines(solution, "({i}) {name} is a {role} (a knave could not say that, and knaves always lie)"),
         "each role with an aside about knaves"),
    ]
    supersets = [(lines([f"{knight} and a {knave}" if i == j else role(r) for i, r in enumerate(solution)]),
                  "one person called both a knight and a knave")]
    variants = _shared(correct, wrongs, options, equivalents=equivalents, supersets=supersets)
    for template in ROLE_HEDGES:  # one person's role hedged, the others right: "(1) Mason is a knave/knight"
        for first, second, note in ((solution[j], not solution[j], "right, wrong"), (not solution[j], solution[j], "wrong, right")):
            roles = [template.format(a=role(first), b=role(second)) if i == j else role(r) for i, r in enumerate(solution)]
            variants.append(wrong(HEDGE, respond(lines(roles)), f"one role hedged as {template!r} ({note})"))
    variants.append(wrong(SEVERAL, respond(correct + f"\n({j + 1}) {names[j]} is a {role(not solution[j])}"),
                          "one person given both roles on two lines"))
    left_out = "\n".join(line for i, line in enumerate(correct.splitlines()) if i != j)
    variants.append(wrong(NEAR_MISS, respond(left_out), "one person left out"))
    return variants


# --- countdown -------------------------------------------------------------------------------
def countdown_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    numbers, target = countdown._reference(sample)
    use_all = bool(sample.get("use_all_numbers", False))
    expression = sample.get("solution") or countdown.solve(numbers, target, use_all_numbers=use_all)
    if not expression:
        return []
    _, used = countdown.evaluate_expression(expression, max_numbers=len(numbers) + 8)
    have, available = Counter(used), Counter(numbers)
    wrongs = [(f"({expression}) + 1", "one more than the target"), (f"({expression}) - 1", "one less than the target"),
              (str(target), "the target itself (a number not given)"),
              (f"({expression}) + 1 = {target}", "a wrong expression claiming '= target'")]
    # "+ x - x" keeps the value but uses x twice more: more often than given when at most one copy is unused
    reused = next((x for x in numbers if have[x] + 2 > available[x]), None)
    if reused is not None:
        wrongs.append((f"({expression}) + {reused} - {reused}", f"the target, using {reused} more often than given"))
    equivalents = [(f"{expression} = {target}", "with '= target'"), (f"({expression})", "in parentheses"),
                   (expression.replace(" ", ""), "without spaces"), (f"${expression}$", "in $...$")]
    if "*" in expression:
        equivalents += [(expression.replace("*", "×"), "× for *"), (expression.replace("*", "\\times"), "\\times for *")]
    if "/" in expression:
        equivalents.append((expression.replace("/", "÷"), "÷ for /"))
    equivalents += [(f"Combining the numbers:\n{expression}", "a line of words first"),
                    (f"{expression}\n{target}", "the result on its own line"),
                    (f"{expression} = {target}\n{expression}", "the expression twice")]
    supersets = [(f"{expression}, ({expression}) + 1", "two expressions, as a list"),
                 (f"{{{expression}, ({expression}) + 1}}", "a set of two expressions")]
    return _shared(expression, wrongs, options, equivalents=equivalents, supersets=supersets)


# --- sudoku ----------------------------------------------------------------------------------
def sudoku_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    puzzle_text = sample["puzzle"]
    n = sample.get("size") or {16: 4, 81: 9}[len(puzzle_text)]
    puzzle = sudoku.from_string(puzzle_text, n, "puzzle")
    solution = (sudoku.from_string(sample["solution"], n, "solution") if sample.get("solution")
                else sudoku.solve(puzzle, n, limit=1)[0])
    rows = [solution[r * n:(r + 1) * n] for r in range(n)]

    def grid(cells_rows: Sequence[Sequence[Any]], sep: str = " ", label: str = "") -> str:
        return "\n".join(label.format(r=r + 1) + sep.join(map(str, row)) for r, row in enumerate(cells_rows))

    r = rng.randrange(n)
    empty = [c for c in range(n) if not puzzle[r * n + c]] or list(range(n))
    c = rng.choice(empty)
    changed = [list(row) for row in rows]
    changed[r][c] = changed[r][c] % n + 1
    swapped = [list(row) for row in rows]
    c2 = (c + 1) % n
    swapped[r][c], swapped[r][c2] = swapped[r][c2], swapped[r][c]
    band = int(n ** 0.5)
    rows_swapped = [list(row) for row in rows]
    r2 = r + 1 if (r + 1) % band else r - 1
    rows_swapped[r], rows_swapped[r2] = rows_swapped[r2], rows_swapped[r]
    transposed = [list(col) for col in zip(*rows)]
    blank = [list(row) for row in rows]
    blank[r][c] = "."
    wrongs = [(grid(changed), "one cell changed"), (grid(swapped), "two cells of a row swapped"),
              (grid(rows_swapped), "two rows of a band swapped (a valid grid that breaks a given)")]
    wrongs += [(grid(transposed), "transposed")] if transposed != rows else []
    wrongs.append((grid(blank), "one cell left empty"))
    equivalents = [(grid(rows, ""), "digits without spaces"), (grid(rows, ", "), "comma-separated"),
                   (grid(rows, " ", "Row {r}: "), "with row labels"),
                   (sudoku.render(solution, n), "with box separators, like the puzzle"),
                   (sudoku.render(puzzle, n) + "\n\nSolved:\n" + grid(rows), "the puzzle echoed first"),
                   (json.dumps(rows), "a JSON list of rows")]
    variants = _shared(grid(rows), wrongs, options, equivalents=equivalents)
    hedged = [list(map(str, row)) for row in rows]
    hedged[r][c] = f"{rows[r][c]}/{changed[r][c]}"
    variants.append(wrong(HEDGE, respond(grid(hedged)), "one cell hedged: right/wrong"))
    hedged[r][c] = f"{rows[r][c]} (or {changed[r][c]})"
    variants.append(wrong(HEDGE, respond(grid(hedged)), "one cell hedged: right (or wrong)"))
    candidates = [list(map(str, row)) for row in rows]
    candidates[r][c] = "".join(map(str, range(1, n + 1)))
    variants.append(wrong(SUPERSET, respond(grid(candidates)), "every digit as one cell's candidates"))
    return variants


# --- zebra -----------------------------------------------------------------------------------
def zebra_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Variant]:
    solution = [dict(house) for house in sample["solution"]]
    attributes = list(solution[0])
    n = len(solution)

    def table(houses: Sequence[dict[str, str]], layout: Callable[[int, dict[str, str]], str] | None = None) -> str:
        layout = layout or (lambda h, house: f"House {h}: " + ", ".join(f"{a}={house[a]}" for a in attributes))
        return "\n".join(layout(h + 1, house) for h, house in enumerate(houses))

    h1 = rng.randrange(n)
    h2 = (h1 + 1 + rng.randrange(n - 1)) % n
    attribute = rng.choice(attributes)
    one_swapped = [dict(house) for house in solution]
    one_swapped[h1][attribute], one_swapped[h2][attribute] = solution[h2][attribute], solution[h1][attribute]
    houses_swapped = [dict(house) for house in solution]
    houses_swapped[h1], houses_swapped[h2] = solution[h2], solution[h1]
    wrongs = [(table(one_swapped), f"two houses' {attribute} swapped"), (table(houses_swapped), "two houses swapped")]
    header = "| House | " + " | ".join(attributes) + " |\n|" + "---|" * (len(attributes) + 1) + "\n"
    equivalents = [
        (table(solution, lambda h, house: f"House {h}: " + ", ".join(house[a] for a in attributes)), "values only"),
        (header + table(solution, lambda h, house: f"| {h} | " + " | ".join(house[a] for a in attributes) + " |"),
         "a markdown table"),
        (table([{a: v.lower() for a, v in house.items()} for house in solution]), "lower-case values"),
        (json.dumps({f"House {h + 1}": house for h, house in enumerate(solution)}), "a JSON object"),
        (table(solution, lambda h, house: f"House #{h} - " + "; ".join(f"{a}: {house[a]}" for a in attributes)),
         "House #k - Attribute: value"),
    ]
    everything = [dict(house) for house in solution]
    everything[h1][attribute] = ", ".join(house[attribute] for house in solution)
    supersets = [(table(everything), f"every {attribute} value in one house")]
    variants = _shared(table(solution), wrongs, options, equivalents=equivalents, supersets=supersets)
    right_value, wrong_value = solution[h1][attribute], solution[h2][attribute]
    for template in ("{a}/{b}", "{a} (or maybe {b})", "either {a} or {b}", "{a} or {b}"):
        for first, second in ((right_value, wrong_value), (wrong_value, right_value)):
            hedged = [dict(house) for house in solution]
            hedged[h1][attribute] = template.format(a=first, b=second)
            variants.append(wrong(HEDGE, respond(table(hedged)), f"one value hedged: {template}"))
    return variants


MUTATORS = {"knights_knaves": knights_knaves_variants, "countdown": countdown_variants, "sudoku": sudoku_variants,
            "zebra": zebra_variants}
