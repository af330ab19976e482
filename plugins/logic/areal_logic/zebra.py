"""Zebra (Einstein) puzzles: houses in a row, each attribute value in exactly one house, clues pin them down.

The solver is a small constraint solver of our own: a domain (bit mask of houses) per attribute value,
propagation of the clues (arc consistency on each binary clue, all-different per attribute: a placed
value leaves its house to no other value, a house only one value can take gets it), then depth-first
search on the smallest domain, counting solutions up to a limit. The generator draws a random solution,
adds random true clues until the solver finds exactly one solution, then (``minimal``) drops every clue
whose removal keeps the solution unique, in random order.

Clue types (``clue_types`` option): ``at`` (X lives in house k), ``not_at``, ``same`` (X is Y),
``not_same``, ``left`` (X lives directly left of Y), ``left_of`` (somewhere to the left), ``next_to``,
``one_between`` (one house between X and Y).

Answers: one line (or JSON key, or table row) per house, beginning with ``House k`` (or, in a table row,
the number k), followed by that house's values, e.g. ``House 1: Name=Alice, Color=red, Pet=dog``. Every
value found after a house mark belongs to that house; values are matched as whole words, any case.

Scoring (reward ``zebra``):

* every value in its house, no value in two houses, no house with two values of one attribute -> 1.0;
* a complete grid with some value in the wrong house -> 0, or ``format_score``;
* a value in two houses or two values of an attribute in one house (conflict) -> 0;
* values missing (incomplete) or none found -> 0 (no ``format_score``);
* ``partial_credit``: fraction of the houses x attributes cells that are right.
"""
from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import Any, Iterator, Sequence

from areal_core import RewardResult
from areal_core.errors import ConfigError, InputError

from areal_logic.answers import (CONFLICT, INCOMPLETE, UNPARSEABLE, Rejection, excerpt, prepare, rejected,
                                 split_options, verdict)
from areal_logic.splits import check_split, in_heldout

# Attribute -> (values, how a clue refers to the holder of a value). Values are single words, distinct
# across all attributes, so a word in an answer names exactly one (attribute, value).
ATTRIBUTES: dict[str, tuple[tuple[str, ...], str]] = {
    "Name": (("Alice", "Bob", "Carol", "David", "Eric", "Frank", "Grace", "Henry"), "{v}"),
    "Color": (("red", "green", "blue", "yellow", "white", "purple", "orange", "pink"), "the person in the {v} house"),
    "Pet": (("dog", "cat", "bird", "fish", "horse", "rabbit", "turtle", "hamster"), "the person who keeps a {v}"),
    "Drink": (("tea", "coffee", "milk", "water", "juice", "soda", "cocoa", "lemonade"), "the person who drinks {v}"),
    "Nationality": (("Brit", "Swede", "Dane", "German", "Norwegian", "Spaniard", "Italian", "Japanese"), "the {v}"),
    "Hobby": (("chess", "painting", "reading", "gardening", "cycling", "hiking", "knitting", "cooking"),
              "the person who enjoys {v}"),
    "Sport": (("tennis", "soccer", "golf", "swimming", "baseball", "hockey", "rugby", "cricket"),
              "the person who plays {v}"),
    "Music": (("jazz", "rock", "pop", "classical", "blues", "metal", "reggae", "folk"), "the person who listens to {v}"),
}
CLUE_TYPES = ("at", "not_at", "same", "not_same", "left", "left_of", "next_to", "one_between")
MAX_HOUSES = 6

# Relations between the houses i, j (0-based) of the two values of a binary clue.
_RELATIONS = {
    "same": lambda i, j: i == j,
    "not_same": lambda i, j: i != j,
    "left": lambda i, j: i + 1 == j,
    "left_of": lambda i, j: i < j,
    "next_to": lambda i, j: abs(i - j) == 1,
    "one_between": lambda i, j: abs(i - j) == 2,
}

Var = tuple[str, str]  # (attribute, value)
Clue = tuple  # ("at", var, house) | ("not_at", var, house) | (relation, var, var)


# --- solving ---------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _support_tables(n: int) -> dict[tuple[str, bool], tuple[int, ...]]:
    """[(relation, reverse)][mask of y's houses] = the houses x can be in: those i with some j in the
    mask such that relation(i, j) holds (reverse: relation(j, i), to revise y from x)."""
    tables = {}
    for rel, fn in _RELATIONS.items():
        for reverse in (False, True):
            table = []
            for mask in range(1 << n):
                allowed = 0
                for i in range(n):
                    if any(mask >> j & 1 and (fn(j, i) if reverse else fn(i, j)) for j in range(n)):
                        allowed |= 1 << i
                table.append(allowed)
            tables[(rel, reverse)] = tuple(table)
    return tables


class Puzzle:
    """Houses 0..n-1; `attributes` maps each attribute to its n values."""

    def __init__(self, n: int, attributes: dict[str, list[str]]) -> None:
        self.n = n
        self.attributes = attributes
        self.vars: list[Var] = [(a, v) for a, values in attributes.items() for v in values]
        self.index = {var: k for k, var in enumerate(self.vars)}
        self.groups = [[self.index[(a, v)] for v in values] for a, values in attributes.items()]
        self.full = (1 << n) - 1
        self._support = _support_tables(n)

    def initial(self, clues: Sequence[Clue]) -> list[int] | None:
        domains = [self.full] * len(self.vars)
        for clue in clues:
            if clue[0] == "at":
                domains[self.index[clue[1]]] &= 1 << clue[2]
            elif clue[0] == "not_at":
                domains[self.index[clue[1]]] &= ~(1 << clue[2])
        return domains

    def propagate(self, domains: list[int], binary: Sequence[tuple[str, int, int]]) -> bool:
        """Shrink domains to a fixpoint; False on contradiction."""
        changed = True
        while changed:
            changed = False
            for rel, x, y in binary:
                new_x = domains[x] & self._support[(rel, False)][domains[y]]
                new_y = domains[y] & self._support[(rel, True)][domains[x]]
                if new_x != domains[x] or new_y != domains[y]:
                    if not new_x or not new_y:
                        return False
                    domains[x], domains[y] = new_x, new_y
                    changed = True
            for group in self.groups:
                placed = 0
                for k in group:
                    d = domains[k]
                    if d & (d - 1) == 0:
                        if d & placed:
                            return False
                        placed |= d
                seen_once, seen_twice = 0, 0
                for k in group:
                    d = domains[k]
                    if d & (d - 1):
                        new = d & ~placed
                        if new != d:
                            if not new:
                                return False
                            domains[k] = d = new
                            changed = True
                    seen_twice |= seen_once & d
                    seen_once |= d
                if seen_once != self.full:
                    return False
                hidden = seen_once & ~seen_twice
                if hidden:
                    for k in group:
                        d = domains[k]
                        if d & hidden and d & (d - 1):
                            domains[k] = d & hidden
                            if domains[k] & (domains[k] - 1):
                                return False  # one value would need two houses of its own
                            changed = True
        return True

    def solve(self, clues: Sequence[Clue], limit: int = 2) -> list[dict[Var, int]]:
        """Up to `limit` solutions, each mapping every (attribute, value) to its house (0-based)."""
        domains = self.initial(clues)
        binary = [(c[0], self.index[c[1]], self.index[c[2]]) for c in clues if c[0] in _RELATIONS]
        solutions: list[dict[Var, int]] = []

        def search(domains: list[int]) -> None:
            if not self.propagate(domains, binary):
                return
            best, best_size = -1, self.n + 1
            for k, d in enumerate(domains):
                size = bin(d).count("1")
                if 1 < size < best_size:
                    best, best_size = k, size
            if best < 0:
                solutions.append({var: domains[k].bit_length() - 1 for k, var in enumerate(self.vars)})
                return
            d = domains[best]
            while d and len(solutions) < limit:
                bit = d & -d
                d ^= bit
                branch = list(domains)
                branch[best] = bit
                search(branch)

        search(domains)
        return solutions

    def holds(self, clue: Clue, houses: dict[Var, int]) -> bool:
        if clue[0] == "at":
            return houses[clue[1]] == clue[2]
        if clue[0] == "not_at":
            return houses[clue[1]] != clue[2]
        return _RELATIONS[clue[0]](houses[clue[1]], houses[clue[2]])


# --- generation ------------------------------------------------------------------------------
def _refer(var: Var) -> str:
    return ATTRIBUTES[var[0]][1].format(v=var[1])


def render_clue(clue: Clue) -> str:
    kind = clue[0]
    x = _refer(clue[1])
    if kind == "at":
        text = f"{x} lives in house {clue[2] + 1}"
    elif kind == "not_at":
        text = f"{x} does not live in house {clue[2] + 1}"
    else:
        y = _refer(clue[2])
        text = {
            "same": f"{x} is {y}",
            "not_same": f"{x} is not {y}",
            "left": f"{x} lives directly left of {y}",
            "left_of": f"{x} lives somewhere to the left of {y}",
            "next_to": f"{x} and {y} live next to each other",
            "one_between": f"there is one house between {x} and {y}",
        }[kind]
    return text[0].upper() + text[1:] + "."


def _random_clue(rng: random.Random, puzzle: Puzzle, houses: dict[Var, int], types: Sequence[str]) -> Clue | None:
    kind = rng.choice(types)
    x = rng.choice(puzzle.vars)
    if kind == "at":
        return ("at", x, houses[x])
    if kind == "not_at":
        others = [h for h in range(puzzle.n) if h != houses[x]]
        return ("not_at", x, rng.choice(others))
    candidates = [y for y in puzzle.vars if y != x and _RELATIONS[kind](houses[x], houses[y])]
    if kind in ("same", "not_same"):  # "X is (not) Y" only says something for two different attributes
        candidates = [y for y in candidates if y[0] != x[0]]
    if not candidates:
        return None
    return (kind, x, rng.choice(candidates))


def random_solution(rng: random.Random, n: int,
                    attribute_names: Sequence[str]) -> tuple[dict[str, list[str]], dict[Var, int]]:
    """(attribute -> its n values, (attribute, value) -> house): random values, randomly placed."""
    attributes = {a: sorted(rng.sample(ATTRIBUTES[a][0], n), key=ATTRIBUTES[a][0].index) for a in attribute_names}
    houses: dict[Var, int] = {}
    for a, values in attributes.items():
        order = list(range(n))
        rng.shuffle(order)
        for value, house in zip(values, order):
            houses[(a, value)] = house
    return attributes, houses


def solution_table(attributes: dict[str, list[str]], houses: dict[Var, int], n: int) -> list[dict[str, str]]:
    return [{a: next(v for v in values if houses[(a, v)] == h) for a, values in attributes.items()} for h in range(n)]


def make_clues(rng: random.Random, puzzle: Puzzle, houses: dict[Var, int], types: Sequence[str],
               minimal: bool = True) -> list[Clue]:
    """Random true clues until the solution is unique; then (minimal) without the redundant ones."""
    n = puzzle.n
    clues: list[Clue] = []
    for _ in range(100_000):
        clue = _random_clue(rng, puzzle, houses, types)
        if clue is None or clue in clues:
            continue
        clues.append(clue)
        if len(puzzle.solve(clues, limit=2)) == 1:
            break
    else:
        raise ConfigError(f"generator 'zebra': clue types {', '.join(types)} did not pin down a {n}-house puzzle")
    if minimal:
        for clue in rng.sample(clues, len(clues)):
            rest = [c for c in clues if c != clue]
            if len(puzzle.solve(rest, limit=2)) == 1:
                clues = rest
    rng.shuffle(clues)
    return clues


def render_puzzle(puzzle: Puzzle, clues: Sequence[Clue]) -> str:
    lines = [
        f"There are {puzzle.n} houses in a row, numbered 1 to {puzzle.n} from left to right. Each house is "
        "home to one person, and each person has exactly one value of each attribute below; no two people "
        "share a value.",
        "",
    ]
    for a, values in puzzle.attributes.items():
        lines.append(f"- {a}: {', '.join(values)}")
    lines += ["", "Clues:"]
    lines += [f"{k}. {render_clue(c)}" for k, c in enumerate(clues, start=1)]
    return "\n".join(lines)


def _check_attributes(attributes: Any) -> list[str]:
    if isinstance(attributes, int) and not isinstance(attributes, bool):
        if not 2 <= attributes <= len(ATTRIBUTES):
            raise ConfigError(f"generator 'zebra': attributes must be between 2 and {len(ATTRIBUTES)}, got {attributes}")
        return list(ATTRIBUTES)[:attributes]
    if (isinstance(attributes, (list, tuple)) and len(attributes) >= 2 and len(set(attributes)) == len(attributes)
            and all(a in ATTRIBUTES for a in attributes)):
        return list(attributes)
    raise ConfigError(f"generator 'zebra': attributes must be a count (2-{len(ATTRIBUTES)}) or a list of distinct names "
                      f"from {', '.join(ATTRIBUTES)}, got {attributes!r}")


def generate(seed: int, size: int, houses: int = 4, attributes: int | Sequence[str] = 3,
             clue_types: Sequence[str] = CLUE_TYPES, minimal: bool = True, split: str = "train",
             heldout_fraction: float = 0.1) -> Iterator[dict[str, Any]]:
    """Yield `size` puzzles with exactly one solution.

    houses: 2-6.  attributes: how many (Name, Color, Pet, ... in that order) or a list of names.
    clue_types: which clue kinds to draw.  minimal: drop redundant clues (harder puzzles).
    """
    if not isinstance(houses, int) or not 2 <= houses <= MAX_HOUSES:
        raise ConfigError(f"generator 'zebra': houses must be between 2 and {MAX_HOUSES}, got {houses!r}")
    names = _check_attributes(attributes)
    types = tuple(clue_types)
    if not types or any(t not in CLUE_TYPES for t in types):
        raise ConfigError(f"generator 'zebra': clue_types must be a non-empty list of {', '.join(CLUE_TYPES)}, "
                          f"got {list(types)!r}")
    if not set(types) & {"at", "not_at", "left", "left_of"}:
        raise ConfigError("generator 'zebra': clue_types need one of at, not_at, left or left_of; "
                          "with only symmetric clues a puzzle and its mirror image both fit")
    check_split("zebra", split, heldout_fraction)
    rng = random.Random(f"areal-logic:zebra:{seed}:{split}")
    produced = 0
    while produced < size:
        attributes, placement = random_solution(rng, houses, names)
        table = solution_table(attributes, placement, houses)
        # Split by the solution (before the costly clue search): train and test never share a solution.
        if in_heldout(repr(table), heldout_fraction) != (split == "test"):
            continue
        puzzle = Puzzle(houses, attributes)
        clues = make_clues(rng, puzzle, placement, types, minimal)
        text = render_puzzle(puzzle, clues)
        produced += 1
        yield {
            "id": f"zebra-{split}-{seed}-{produced - 1}",
            "puzzle": text,
            "houses": houses,
            "attributes": puzzle.attributes,
            "clues": [render_clue(c) for c in clues],
            "constraints": [[c[0], list(c[1]), c[2] if isinstance(c[2], int) else list(c[2])] for c in clues],
            "solution": table,
            "example": f"House 1: {', '.join(f'{a}=...' for a in puzzle.attributes)}",
        }


def constraints_from_sample(constraints: Any) -> list[Clue]:
    """The JSON form of clues in a generated row back to solver clues."""
    clues = []
    for item in constraints:
        kind, x, y = item
        clues.append((kind, tuple(x), y if isinstance(y, int) else tuple(y)))
    return clues


# --- answers ---------------------------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z]+|\d+|\n")
_ROW_START = re.compile(r"^[\s|*#>\-]*(?:house\s*#?\s*)?(\d+)\b", re.IGNORECASE)


def parse_answer(answer: str, attributes: dict[str, list[str]], n: int) -> dict[int, dict[str, str]]:
    """{house (1-based): {attribute: value}} from the answer; Rejection on conflicts."""
    lookup = {v.lower(): (a, v) for a, values in attributes.items() for v in values}
    table: dict[int, dict[str, str]] = {}
    where: dict[tuple[str, str], int] = {}
    house = None  # a house mark carries over to the following lines (JSON spread over lines) until a blank line
    for line in answer.splitlines():
        if not line.strip():
            house = None
            continue
        match = _ROW_START.match(line)
        if match and ("house" in line[:match.end()].lower() or line.lstrip().startswith("|")):
            house = int(match.group(1))
            if not 1 <= house <= n:
                raise Rejection(UNPARSEABLE, f"the answer names house {house}; there are houses 1 to {n}")
            line = line[match.end():]
        tokens = _WORD.findall(line)
        k = 0
        while k < len(tokens):
            low = tokens[k].lower()
            if low == "house" and k + 1 < len(tokens) and tokens[k + 1].isdigit():
                house = int(tokens[k + 1])
                if not 1 <= house <= n:
                    raise Rejection(UNPARSEABLE, f"the answer names house {house}; there are houses 1 to {n}")
                k += 2
                continue
            if low in lookup and house is not None:
                attribute, value = lookup[low]
                if where.get((attribute, value), house) != house:
                    raise Rejection(CONFLICT, f"the answer puts {value} in house {where[(attribute, value)]} "
                                              f"and in house {house}")
                current = table.setdefault(house, {})
                if current.get(attribute, value) != value:
                    raise Rejection(CONFLICT, f"the answer gives house {house} two {attribute} values: "
                                              f"{current[attribute]} and {value}")
                current[attribute] = value
                where[(attribute, value)] = house
            k += 1
    return table


def _reference(sample: dict[str, Any]) -> tuple[list[dict[str, str]], dict[str, list[str]]]:
    solution = sample.get("solution")
    if (not isinstance(solution, list) or not solution
            or not all(isinstance(h, dict) and h and all(isinstance(v, str) for v in h.values()) for h in solution)):
        raise InputError("zebra: sample field 'solution' must be a list of houses, each an object attribute -> value, "
                         f"got {excerpt(repr(solution), 100)}")
    keys = set(solution[0])
    if any(set(h) != keys for h in solution):
        raise InputError("zebra: every house in sample field 'solution' must have the same attributes")
    attributes = {a: [h[a] for h in solution] for a in solution[0]}
    words = [v.lower() for values in attributes.values() for v in values]
    if len(set(words)) != len(words) or not all(re.fullmatch(r"[A-Za-z]+", w) for w in words):
        raise InputError("zebra: the values in sample field 'solution' must be distinct single words")
    return solution, attributes


def reward(sample: dict[str, Any], response: str, **options: Any) -> RewardResult:
    """Reward ``zebra``: needs sample field ``solution`` (a list of houses, each attribute -> value)."""
    opts, _ = split_options("zebra", options, {})
    solution, attributes = _reference(sample)
    n = len(solution)
    try:
        answer, source = prepare(response, opts)
        table = parse_answer(answer, attributes, n)
    except Rejection as rejection:
        return rejected(rejection)
    cells = n * len(attributes)
    right = sum(table.get(h + 1, {}).get(a) == v for h, house in enumerate(solution) for a, v in house.items())
    filled = sum(len(values) for values in table.values())
    details: dict[str, Any] = {"extracted": excerpt(answer), "source": source,
                               "parsed": {str(h): table[h] for h in sorted(table)}}
    if not filled:
        return verdict(opts, correct=False, well_formed=False, fraction=0.0, failure=UNPARSEABLE,
                       reason="no 'House k' line with values was found in the answer", **details)
    if filled < cells:
        return verdict(opts, correct=False, well_formed=False, fraction=right / cells, failure=INCOMPLETE,
                       reason=f"the answer places {filled} of the {cells} values", **details)
    if right < cells:
        return verdict(opts, correct=False, well_formed=True, fraction=right / cells,
                       reason=f"{cells - right} of the {cells} values are in the wrong house", **details)
    return verdict(opts, correct=True, well_formed=True, fraction=1.0, **details)
