"""Knights and Knaves: knights always tell the truth, knaves always lie; who is which?

Statements are trees in the s-expression form of the K&K data (AlphaPav/mem-kk-logic, used by Logic-RL)::

    ('telling-truth', i)   person i is a knight       ('lying', i)   person i is a knave
    ('not', S)  ('and', S, S, ...)  ('or', S, S, ...)  ('->', S, S)  ('<=>', S, S)

Person p saying S means ``knight(p) <=> S``. With n <= 8 people the solver simply tries all 2**n
assignments (on truth tables, `solve`; or statement by statement, `solve_by_enumeration`), so "exactly one
solution" is proved by enumeration, not assumed.

Answers name each person with a role: "(1) Amelia is a knight", "Amelia: knave", "Amelia and Evelyn are
knights", "Knaves: Penelope", "Amelia is not a knight" (= knave), a JSON object or a markdown table.
Scoring (reward ``knights_knaves``):

* every person given the right role, none given two roles -> 1.0 (text around the roles is ignored,
  and so are role claims about names that are not in the puzzle);
* one or more people with the wrong role (complete answer) -> 0, or ``format_score``;
* a person with no role (incomplete answer) -> 0 (not well formed, so no ``format_score``);
* a person given both roles (conflict, e.g. hedging) -> 0 whatever the options;
* ``partial_credit``: people with the right role / all people (a missing person counts as wrong;
  a conflict scores 0).
"""
from __future__ import annotations

import ast
import itertools
import random
import re
from functools import lru_cache
from typing import Any, Iterator, Sequence

from areal_core import RewardResult
from areal_core.errors import ConfigError, InputError

from areal_logic.answers import (CONFLICT, INCOMPLETE, UNPARSEABLE, Rejection, excerpt, prepare, rejected,
                                 split_options, verdict)
from areal_logic.splits import check_split, in_heldout

Statement = tuple  # nested tuples, see module docstring
LEAVES = ("telling-truth", "lying")
OPERATORS = ("not", "and", "or", "->", "<=>")
MAX_PEOPLE = 8

NAMES = (
    "Aiden", "Amelia", "Aurora", "Benjamin", "Caleb", "Charlotte", "Chloe", "Daniel", "David", "Elijah",
    "Emily", "Emma", "Ethan", "Evelyn", "Gabriel", "Harper", "Henry", "Isabella", "Jack", "Jacob",
    "James", "Liam", "Lily", "Logan", "Lucas", "Luke", "Mason", "Matthew", "Mia", "Michael", "Noah",
    "Oliver", "Olivia", "Owen", "Penelope", "Riley", "Samuel", "Scarlett", "Sebastian", "Sofia",
    "Sophia", "Victoria", "William", "Zoey", "Abigail", "Alexander", "Avery", "Ella", "Jackson", "Aria",
)


# --- statements ------------------------------------------------------------------------------
def evaluate(statement: Statement, assignment: Sequence[bool]) -> bool:
    """Truth of a statement when assignment[i] is True iff person i is a knight."""
    op = statement[0]
    if op == "telling-truth":
        return assignment[statement[1]]
    if op == "lying":
        return not assignment[statement[1]]
    if op == "not":
        return not evaluate(statement[1], assignment)
    if op == "and":
        return all(evaluate(s, assignment) for s in statement[1:])
    if op == "or":
        return any(evaluate(s, assignment) for s in statement[1:])
    if op == "->":
        return (not evaluate(statement[1], assignment)) or evaluate(statement[2], assignment)
    if op == "<=>":
        return evaluate(statement[1], assignment) == evaluate(statement[2], assignment)
    raise ValueError(f"unknown operator {op!r}")


def solve_by_enumeration(statements: Sequence[Statement]) -> list[tuple[bool, ...]]:
    """Every assignment (True = knight) under which each person's statement is true iff they are a
    knight, by evaluating every statement under every one of the 2**n assignments."""
    n = len(statements)
    return [assignment for assignment in itertools.product((True, False), repeat=n)
            if all(evaluate(s, assignment) == assignment[p] for p, s in enumerate(statements))]


@lru_cache(maxsize=None)
def _knight_tables(n: int) -> tuple[int, ...]:
    """Truth tables over all 2**n assignments (bit a = assignment number a, in itertools.product order):
    table i has bit a set when person i is a knight in assignment a."""
    return tuple(sum(1 << a for a in range(1 << n) if not a >> (n - 1 - i) & 1) for i in range(n))


def _table(statement: Statement, knights: tuple[int, ...], full: int) -> int:
    op = statement[0]
    if op == "telling-truth":
        return knights[statement[1]]
    if op == "lying":
        return full ^ knights[statement[1]]
    parts = [_table(s, knights, full) for s in statement[1:]]
    if op == "not":
        return full ^ parts[0]
    if op == "and":
        result = full
        for part in parts:
            result &= part
        return result
    if op == "or":
        result = 0
        for part in parts:
            result |= part
        return result
    if op == "->":
        return (full ^ parts[0]) | parts[1]
    if op == "<=>":
        return full ^ (parts[0] ^ parts[1])
    raise ValueError(f"unknown operator {op!r}")


def solve(statements: Sequence[Statement]) -> list[tuple[bool, ...]]:
    """Same answer as `solve_by_enumeration`, computed on truth tables: each statement becomes a 2**n-bit
    integer, and the solutions are the bits where every person's knighthood equals their statement."""
    n = len(statements)
    knights = _knight_tables(n)
    full = (1 << (1 << n)) - 1
    consistent = full
    for p, statement in enumerate(statements):
        consistent &= full ^ (knights[p] ^ _table(statement, knights, full))
    return [tuple(not a >> (n - 1 - i) & 1 for i in range(n)) for a in range(1 << n) if consistent >> a & 1]


def _check_statement(node: Any, n: int, where: str) -> Statement:
    if not isinstance(node, tuple) or not node or node[0] not in LEAVES + OPERATORS:
        raise InputError(f"{where}: {node!r} is not a statement "
                         f"(expected a tuple starting with one of {', '.join(LEAVES + OPERATORS)})")
    op = node[0]
    if op in LEAVES:
        if len(node) != 2 or not isinstance(node[1], int) or not 0 <= node[1] < n:
            raise InputError(f"{where}: {node!r} must name a person index between 0 and {n - 1}")
        return node
    arity_ok = {"not": len(node) == 2, "->": len(node) == 3, "<=>": len(node) == 3}.get(op, len(node) >= 3)
    if not arity_ok:
        raise InputError(f"{where}: operator {op!r} has the wrong number of operands in {node!r}")
    return (op, *(_check_statement(child, n, where) for child in node[1:]))


def parse_statements(text: str, n: int) -> tuple[Statement, ...]:
    """The K&K data's `statements` column (a Python literal of tuples), checked for shape."""
    if len(text) > 100_000:
        raise InputError(f"statements: {len(text):,} characters is too long for a puzzle")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise InputError(f"statements {excerpt(text, 80)!r}: not a literal of tuples ({type(exc).__name__})") from None
    if not isinstance(value, tuple) or len(value) != n:
        got = len(value) if isinstance(value, tuple) else type(value).__name__
        raise InputError(f"statements: expected one statement per person ({n}), got {got}")
    return tuple(_check_statement(s, n, "statements") for s in value)


def format_statements(statements: Sequence[Statement]) -> str:
    return repr(tuple(statements))


# --- generation ------------------------------------------------------------------------------
def _random_statement(rng: random.Random, n: int, depth: int, width: int, ops: Sequence[str]) -> Statement:
    if depth <= 0 or rng.random() < 0.2:
        return (rng.choice(LEAVES), rng.randrange(n))
    op = rng.choice(ops)
    if op == "not":  # negate a leaf only: "not not" and "not (A and B)" read badly
        return ("not", (rng.choice(LEAVES), rng.randrange(n)))
    arity = rng.randint(2, width) if op in ("and", "or") else 2
    children: list[Statement] = []
    for _ in range(20 * arity):  # distinct operands: "A is a knave or A is a knave" says nothing new
        child = _random_statement(rng, n, depth - 1, width, ops)
        if child not in children:
            children.append(child)
            if len(children) == arity:
                break
    if len(children) < 2:  # too few people to tell operands apart (n = 1)
        return (rng.choice(LEAVES), rng.randrange(n))
    return (op, *children)


def _render(statement: Statement, names: Sequence[str], top: bool = True) -> str:
    op = statement[0]
    if op == "telling-truth":
        return f"{names[statement[1]]} is a knight"
    if op == "lying":
        return f"{names[statement[1]]} is a knave"
    if op == "not":
        child = statement[1]
        if child[0] in LEAVES:
            return f"{names[child[1]]} is not a {'knight' if child[0] == 'telling-truth' else 'knave'}"
        return f"it is not the case that {_render(child, names, False)}"
    parts = [_render(s, names, False) for s in statement[1:]]
    if op in ("and", "or"):
        text = f" {op} ".join(parts) if len(parts) == 2 else ", ".join(parts[:-1]) + f", {op} {parts[-1]}"
    elif op == "->":
        text = f"if {parts[0]} then {parts[1]}"
    else:
        text = f"{parts[0]} if and only if {parts[1]}"
    return text if top else f"({text})"


_SAYINGS = (
    '{name} says, "{claim}."', "{name} tells you that {claim}.", '{name} claims that {claim}.',
    '"{Claim}," says {name}.', "According to {name}, {claim}.", '{name} was heard saying, "{Claim}."',
)


def render_quiz(names: Sequence[str], statements: Sequence[Statement], rng: random.Random) -> str:
    people = ", ".join(names[:-1]) + f", and {names[-1]}" if len(names) > 2 else " and ".join(names)
    lines = [
        "A very special island is inhabited only by knights and knaves. Knights always tell the truth, "
        f"and knaves always lie. You meet {len(names)} inhabitants: {people}."
    ]
    for p, statement in enumerate(statements):
        claim = _render(statement, names)
        lines.append(rng.choice(_SAYINGS).format(name=names[p], claim=claim, Claim=claim[0].upper() + claim[1:]))
    lines.append("So who is a knight and who is a knave?")
    return " ".join(lines)


def solution_text(names: Sequence[str], solution: Sequence[bool]) -> str:
    """The reference answer, in the data set's `solution_text_format` layout."""
    return "\n".join(f"({i + 1}) {name} is a {'knight' if knight else 'knave'}"
                     for i, (name, knight) in enumerate(zip(names, solution)))


def _people_range(people: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(people, int) and not isinstance(people, bool):
        lo = hi = people
    elif isinstance(people, (list, tuple)) and len(people) == 2 and all(isinstance(p, int) for p in people):
        lo, hi = people
    else:
        raise ConfigError(f"generator 'knights_knaves': people must be an integer or [min, max], got {people!r}")
    if not 2 <= lo <= hi <= MAX_PEOPLE:
        raise ConfigError(f"generator 'knights_knaves': people must be between 2 and {MAX_PEOPLE}, got {people!r}")
    return lo, hi


def generate(seed: int, size: int, people: int | Sequence[int] = 3, depth: int = 1, width: int = 2,
             ops: Sequence[str] = OPERATORS, split: str = "train", heldout_fraction: float = 0.1,
             max_tries: int = 10_000) -> Iterator[dict[str, Any]]:
    """Yield `size` puzzles, each with exactly one solution (checked by `solve`).

    people: number of inhabitants, or [min, max] drawn per puzzle (2-8).
    depth:  operator nesting depth of each statement (1: "A is a knight and B is a knave"; 2: one level
            of parenthesised sub-statements).  width: most operands of and/or (2-4).
    ops:    operators to draw from.  split / heldout_fraction: disjoint train and test puzzles.
    """
    lo, hi = _people_range(people)
    if not 1 <= depth <= 3:
        raise ConfigError(f"generator 'knights_knaves': depth must be 1, 2 or 3, got {depth!r}")
    if not 2 <= width <= 4:
        raise ConfigError(f"generator 'knights_knaves': width must be between 2 and 4, got {width!r}")
    ops = tuple(ops)
    if not ops or any(op not in OPERATORS for op in ops):
        raise ConfigError(f"generator 'knights_knaves': ops must be a non-empty list of {', '.join(OPERATORS)}, "
                          f"got {list(ops)!r}")
    check_split("knights_knaves", split, heldout_fraction)
    rng = random.Random(f"areal-logic:knights_knaves:{seed}:{split}")
    produced = 0
    while produced < size:
        n = rng.randint(lo, hi)
        for _ in range(max_tries):
            statements = tuple(_random_statement(rng, n, depth, width, ops) for _ in range(n))
            if in_heldout(format_statements(statements), heldout_fraction) != (split == "test"):
                continue  # the other split's puzzle: skip it before paying for the solve
            solutions = solve(statements)
            if len(solutions) == 1:
                break
        else:
            raise ConfigError(f"generator 'knights_knaves': no uniquely solvable puzzle for {n} people in {max_tries} tries")
        names = rng.sample(NAMES, n)
        solution = list(solutions[0])
        produced += 1
        yield {
            "id": f"kk-{split}-{seed}-{produced - 1}",
            "quiz": render_quiz(names, statements, rng),
            "names": names,
            "solution": solution,
            "solution_text_format": solution_text(names, solution),
            "statements": format_statements(statements),
            "people": n,
        }


# --- answers ---------------------------------------------------------------------------------
_TOKEN = re.compile(r"[A-Za-z]+|\d+|\n|[^\sA-Za-z\d]")
# Words and signs that may stand between names and their role ("Amelia is definitely a knight").
_LINKS = frozenset("""is are was were be a an must would also definitely indeed surely both all the as
                      therefore thus so then either : - = > | ( ) → ⇒ – — ~""".split())
_NEGATIONS = frozenset(("not", "isn", "aren", "wasn", "weren", "never", "no"))
_LIST_JOINERS = frozenset((",", "and", "&"))
_IGNORED = frozenset(('"', "'", "*", "`", "_", "#", "“", "”", "‘", "’"))
_CLAUSE_BREAKS = frozenset((".", ";", "\n", "!", "?"))
# A hedge: "a knave (or maybe a knight)", "a knave/knight", "a knight? No, a knave", "a knight. Or a knave."
# After a role word, a hedge word (with only fillers around it) makes the next role word about the same
# names: a conflict. A role word that starts a clause of its own ("a knave would lie", "knaves always lie")
# is about knaves in general, not a second role.
_HEDGE_WORDS = frozenset("""or either maybe perhaps possibly probably likely might may could / ? but otherwise
                            else""".split())  # and "and" ("a knight and a knave"), "No," ("? No, a knave")
_HEDGE_FILLERS = frozenset("a an is be ( ) , - – — % also".split())
_SUBJECT_VERBS = frozenset("""would could can cannot always never must will lies lie tells tell says say is are
                              does do wouldn couldn""".split())


def parse_answer(answer: str, names: Sequence[str], knight: str = "knight", knave: str = "knave") -> dict[str, bool]:
    """Map each person named in the answer to True (knight) / False (knave).

    A linear scan over words: names collect until a role word assigns them ("A, B and C are knights");
    a role word followed by ':' assigns the names after it ("Knaves: A, B"); "not" flips the role; any
    other word between a name and a role drops the name ("Amelia says Evelyn is a knave" -> Evelyn).
    Raises Rejection(conflict) when a person is given both roles.
    """
    # A name that is also a small word ("A", "An", "No") must match in its own case: "B is a knight".
    small_words = _LINKS | _NEGATIONS | _LIST_JOINERS
    by_lower = {name.lower(): name for name in names if name.lower() not in small_words}
    exact = {name: name for name in names if name.lower() in small_words}
    roles = {knight.lower(): True, knight.lower() + "s": True, knave.lower(): False, knave.lower() + "s": False}
    tokens = [t for t in _TOKEN.findall(answer) if t not in _IGNORED]
    found: dict[str, bool] = {}

    def assign(name: str, role: bool) -> None:
        if found.get(name, role) != role:
            raise Rejection(CONFLICT, f"the answer calls {name} both a {knight} and a {knave}")
        found[name] = role

    pending: list[str] = []
    assigned: list[str] = []  # the names the last role word gave a role, while only hedges and fillers follow
    hedged = False          # a hedge word came after that role word
    after_break = False     # a clause ended after it: only a hedge word ("Or maybe a knave.") goes on
    linked = False          # a link word came after the pending names
    negated = False
    role_first: bool | None = None
    for index, token in enumerate(tokens):
        low = token.lower()
        following = tokens[index + 1].lower() if index + 1 < len(tokens) else ""
        if after_break and low not in _CLAUSE_BREAKS:  # "a knight... or a knave": the dots go on
            after_break = False
            if low not in _HEDGE_WORDS:
                assigned = []
        if low in by_lower or token in exact:
            name = by_lower.get(low) or exact[token]
            assigned = []
            if role_first is not None:
                assign(name, role_first)
            elif linked:  # "Amelia is Evelyn..." - start over from this name
                pending, linked, negated = [name], False, False
            else:
                pending.append(name)
        elif low in roles:
            role = roles[low] != negated
            if pending:
                for name in pending:
                    assign(name, role)
                assigned, hedged = pending, False
            elif following in (":", "=", "-", "–", "—"):
                role_first = role
            elif assigned and hedged and not low.endswith("s") and following not in _SUBJECT_VERBS:
                for name in assigned:  # "Mason is a knave/knight": the second role word is about Mason too
                    assign(name, role)
            else:
                assigned = []
            pending, linked, negated = [], False, False
        elif assigned and not pending and (low in _HEDGE_WORDS or low in ("and", "&")
                                           or (low == "no" and following in (",", "."))):
            hedged = True
        elif assigned and not pending and (low in _HEDGE_FILLERS or low.isdigit()):
            continue
        elif low in _NEGATIONS:
            negated = True
            linked = True
        elif low in _LIST_JOINERS and not linked:
            continue
        elif low in _LINKS or low in _LIST_JOINERS or (low == "t" and negated):
            linked, assigned = True, []
        elif low in _CLAUSE_BREAKS:
            pending, linked, negated, role_first = [], False, False, None
            after_break = bool(assigned)
        else:
            pending, linked, negated, assigned = [], False, False, []
    return found


def _knight_words(sample: dict[str, Any]) -> tuple[str, str]:
    words = sample.get("knight_knave")
    if isinstance(words, dict) and isinstance(words.get("knight"), str) and isinstance(words.get("knave"), str):
        return words["knight"], words["knave"]
    return "knight", "knave"


def _reference(sample: dict[str, Any]) -> tuple[list[str], list[bool]]:
    names, solution = sample.get("names"), sample.get("solution")
    if (not isinstance(names, list) or not names
            or not all(isinstance(n, str) and re.fullmatch(r"[A-Za-z]+", n) for n in names)
            or len({n.lower() for n in names}) != len(names)):
        raise InputError("knights_knaves: sample field 'names' must be a list of distinct one-word names "
                         f"(ASCII letters), got {excerpt(repr(names), 80)}")
    if not isinstance(solution, list) or len(solution) != len(names) or not all(isinstance(s, bool) for s in solution):
        raise InputError(f"knights_knaves: sample field 'solution' must be a list of {len(names)} booleans "
                         f"(true = knight), got {excerpt(repr(solution), 80)}")
    return names, solution


def reward(sample: dict[str, Any], response: str, **options: Any) -> RewardResult:
    """Reward ``knights_knaves``: needs sample fields ``names`` and ``solution`` (True = knight)."""
    opts, _ = split_options("knights_knaves", options, {})
    names, solution = _reference(sample)
    knight, knave = _knight_words(sample)
    expected = dict(zip(names, solution))
    try:
        answer, source = prepare(response, opts)
        found = parse_answer(answer, names, knight, knave)
    except Rejection as rejection:
        return rejected(rejection)
    details: dict[str, Any] = {
        "extracted": excerpt(answer), "source": source,
        "parsed": {name: (knight if role else knave) for name, role in found.items()},
    }
    if not found:
        return verdict(opts, correct=False, well_formed=False, fraction=0.0, failure=UNPARSEABLE,
                       reason=f"the answer gives no role to any of {', '.join(names)}", **details)
    right = sum(found.get(name) == role for name, role in expected.items())
    fraction = right / len(names)
    missing = [name for name in names if name not in found]
    if missing:
        return verdict(opts, correct=False, well_formed=False, fraction=fraction, failure=INCOMPLETE,
                       reason=f"the answer gives no role to {', '.join(missing)}", **details)
    wrong = [name for name in names if found[name] != expected[name]]
    if wrong:
        return verdict(opts, correct=False, well_formed=True, fraction=fraction,
                       reason=f"wrong role for {', '.join(wrong)}", **details)
    return verdict(opts, correct=True, well_formed=True, fraction=1.0, **details)
