"""Countdown: reach the target with the given numbers and + - * / (each number at most / exactly once).

The model's expression is never given to ``eval``. A tokenizer accepts only ASCII whole numbers, the
operators + - * / (and their typographic forms − × ÷ ·) and parentheses (brackets and braces too); a
recursive-descent parser with a nesting limit evaluates it exactly with `fractions.Fraction` while it
parses (so a long chain like 1+1+...+1 never builds a deep tree). Powers (``**``, ``^``: rejected by the
tokenizer, before any arithmetic), unary minus, decimals, names and calls are rejected with a reason; an
expression can hold at most 8 numbers more than the puzzle gives, each of at most 12 digits, so
magnitudes stay bounded.

Scoring (reward ``countdown``):

* the expression's exact value equals the target and it uses the puzzle's numbers as the rule says
  (``use_all_numbers``: each exactly once; otherwise each at most once) -> 1.0;
* a valid expression with the wrong value, or numbers used against the rule -> 0, or ``format_score``;
* not an expression (text, powers, ...) or dividing by zero -> 0;
* ``partial_credit``: when the numbers obey the rule, ``max(0, 1 - |value - target| / |target|)``
  (closeness to the target; never 1 for a wrong value); otherwise 0.

"Exactly one solution" does not apply to Countdown: many expressions reach a target, and the verifier
accepts any of them. The generator builds each puzzle from an expression over its numbers (whole,
positive intermediate results), so every puzzle is solvable; `solve` independently finds a solution.
"""
from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction
from typing import Any, Iterator, Sequence

from areal_core import RewardResult
from areal_core.errors import ConfigError, InputError

from areal_logic.answers import (CONFLICT, UNPARSEABLE, Rejection, excerpt, prepare, rejected, split_options, verdict)
from areal_logic.splits import check_split, in_heldout

MAX_EXPRESSION_CHARS = 1_000
MAX_NUMBER_DIGITS = 12
_OPERATORS = {"+": "+", "-": "-", "*": "*", "/": "/", "\u2212": "-", "\u00d7": "*", "\u00f7": "/", "\u00b7": "*"}


# --- the expression language -----------------------------------------------------------------
def tokenize(text: str) -> list[tuple[str, Any, int]]:
    """[(kind, value, position)] with kind in num / op / ( / ); Rejection naming the first bad character."""
    tokens: list[tuple[str, Any, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
        elif "0" <= ch <= "9":
            j = i
            while j < n and "0" <= text[j] <= "9":
                j += 1
            if j - i > MAX_NUMBER_DIGITS:
                raise Rejection(UNPARSEABLE, f"the number at position {i} has {j - i} digits; "
                                             f"puzzle numbers have at most {MAX_NUMBER_DIGITS}")
            if j < n and text[j] in ".,":
                if j + 1 < n and "0" <= text[j + 1] <= "9":
                    raise Rejection(UNPARSEABLE, f"the number at position {i} is not a whole number; "
                                                 "only the puzzle's whole numbers are allowed")
            tokens.append(("num", int(text[i:j]), i))
            i = j
        elif ch == "*" and i + 1 < n and text[i + 1] == "*" or ch == "^":
            raise Rejection(UNPARSEABLE, f"powers ({'**' if ch == '*' else '^'} at position {i}) are not allowed; "
                                         "use + - * / and parentheses")
        elif ch in _OPERATORS:
            tokens.append(("op", _OPERATORS[ch], i))
            i += 1
        elif ch in "()":
            tokens.append((ch, ch, i))
            i += 1
        elif ch in "[]{}":
            tokens.append(("(" if ch in "[{" else ")", ch, i))
            i += 1
        else:
            raise Rejection(UNPARSEABLE, f"unexpected {ch!r} at position {i}; "
                                         "an answer is whole numbers, + - * / and parentheses")
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := NUM | '(' expr ')'"""

    def __init__(self, tokens: list[tuple[str, Any, int]], max_depth: int, max_numbers: int, integer_steps: bool) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.max_depth = max_depth
        self.max_numbers = max_numbers
        self.integer_steps = integer_steps
        self.numbers: list[int] = []

    def peek(self) -> tuple[str, Any, int] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expr(self) -> Fraction:
        value = self.term()
        while (token := self.peek()) is not None and token[0] == "op" and token[1] in "+-":
            self.pos += 1
            value = self.apply(token, value, self.term())
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while (token := self.peek()) is not None and token[0] == "op" and token[1] in "*/":
            self.pos += 1
            value = self.apply(token, value, self.factor())
        return value

    def factor(self) -> Fraction:
        token = self.peek()
        if token is None:
            raise Rejection(UNPARSEABLE, "the expression ends where a number or '(' was expected")
        kind, value, position = token
        if kind == "num":
            self.pos += 1
            self.numbers.append(value)
            if len(self.numbers) > self.max_numbers:
                raise Rejection(UNPARSEABLE, f"the expression holds more than {self.max_numbers} numbers; "
                                             "a puzzle answer needs no more than the puzzle gives")
            return Fraction(value)
        if kind == "(":
            self.depth += 1
            if self.depth > self.max_depth:
                raise Rejection(UNPARSEABLE, f"parentheses nest deeper than {self.max_depth} levels (option max_depth)")
            self.pos += 1
            result = self.expr()
            closing = self.peek()
            if closing is None or closing[0] != ")":
                where = f"at position {closing[2]}" if closing else "at the end"
                raise Rejection(UNPARSEABLE, f"missing ')' {where} for the '(' at position {position}")
            self.pos += 1
            self.depth -= 1
            return result
        if kind == "op" and value == "-":
            raise Rejection(UNPARSEABLE, f"unary minus at position {position} is not allowed; subtract instead")
        raise Rejection(UNPARSEABLE, f"expected a number or '(' at position {position}, found {value!r}")

    def apply(self, token: tuple[str, Any, int], left: Fraction, right: Fraction) -> Fraction:
        op, position = token[1], token[2]
        if op == "+":
            result = left + right
        elif op == "-":
            result = left - right
        elif op == "*":
            result = left * right
        else:
            if right == 0:
                raise Rejection(UNPARSEABLE, f"division by zero at position {position}")
            result = left / right
        if self.integer_steps and (result.denominator != 1 or result <= 0):
            raise Rejection(UNPARSEABLE, f"the step at position {position} gives {result}; "
                                         "the rule integer_steps asks for positive whole numbers")
        return result


def evaluate_expression(text: str, max_numbers: int, max_depth: int = 16,
                        integer_steps: bool = False) -> tuple[Fraction, list[int]]:
    """(exact value, numbers used in order) of an expression; Rejection with a reason otherwise."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise Rejection(UNPARSEABLE, f"the expression is {len(text):,} characters; "
                                     f"at most {MAX_EXPRESSION_CHARS:,} are read")
    tokens = tokenize(text)
    if not tokens:
        raise Rejection(UNPARSEABLE, "the answer holds no expression")
    parser = _Parser(tokens, max_depth, max_numbers, integer_steps)
    value = parser.expr()
    if parser.pos != len(tokens):
        kind, token_value, position = tokens[parser.pos]
        what = "a number" if kind == "num" else repr(token_value)
        hint = " (a missing operator?)" if kind in ("num", "(") else ""
        raise Rejection(UNPARSEABLE, f"unexpected {what} at position {position}{hint}")
    return value, parser.numbers


_LATEX = (("\\times", "*"), ("\\cdot", "*"), ("\\div", "/"), ("\\left", ""), ("\\right", ""), ("$", ""))


def _lines(answer: str) -> list[str]:
    for latex, plain in _LATEX:
        answer = answer.replace(latex, plain)
    return [line.strip() for line in answer.strip().splitlines() if line.strip()]


def _split_claim(line: str) -> tuple[str, str | None]:
    """An answer line as (expression, claimed value): 'EXPR = N' -> ('EXPR', 'N'); end punctuation dropped."""
    line = line.rstrip(".?! ")
    if line.count("=") == 1:
        text, claimed = line.split("=")
        return text.strip(), claimed.strip().rstrip(".")
    if line.count("=") > 1:
        raise Rejection(UNPARSEABLE, "the answer has more than one '='; give one expression")
    return line, None


def _expression_part(lines: list[str], target: int | None = None) -> tuple[str, str | None]:
    """The expression of an answer, dropping a trailing '= target' and end punctuation: the last line when the
    answer has several (the reasoning may precede it), or the line before a last line that only states the
    target. The LaTeX commands times, cdot, div, left and right (and $ signs) are read as the plain operators
    and parentheses (`_lines`)."""
    if target is not None and len(lines) > 1 and lines[-1].lstrip("= ").rstrip(".") == str(target):
        lines = lines[:-1]  # "(25 - 5) * 4" then "80": the result, not another expression
    return _split_claim(lines[-1] if lines else "")


def _attempts(lines: list[str], final: tuple[Any, list[int]], target: int, limits: dict[str, int]) -> list[str]:
    """The lines before the final one that are other answers to the puzzle, not steps: a bare expression
    ("25 * 4 - 5", "Alternatively: 25 * 4 - 5"), or one claiming a value it does not have, whose value or
    numbers differ from the final expression's. A step states its own value ("25 - 5 = 20"); the target alone
    is the result."""
    others = []
    for line in lines[:-1]:
        text = line.rsplit(":", 1)[-1] if ":" in line else line
        try:
            expression, claimed = _split_claim(text)
            if not expression or expression == str(target):
                continue
            value, used = evaluate_expression(expression, **limits)
        except Rejection:
            continue  # words: reasoning, not an answer
        if claimed is not None and claimed == str(value):
            continue
        if (value, sorted(used)) != (final[0], sorted(final[1])):
            others.append(expression)
    return others


# --- solving and generating ------------------------------------------------------------------
def solve(numbers: Sequence[int], target: int, use_all_numbers: bool = False, integer_steps: bool = True,
          max_states: int = 2_000_000) -> str | None:
    """An expression reaching `target`, or None. Depth-first over pairs, memoising dead multisets.

    Exhaustive for the default sizes; raises RuntimeError when it would visit more than `max_states`.
    """
    target_f = Fraction(target)
    dead: set[tuple[Fraction, ...]] = set()
    visited = 0

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        nonlocal visited
        visited += 1
        if visited > max_states:
            raise RuntimeError(f"countdown solver gave up after {max_states} states")
        if not use_all_numbers or len(items) == 1:
            for value, text in items:
                if value == target_f:
                    return text
        if len(items) == 1:
            return None
        key = tuple(sorted(v for v, _ in items))
        if key in dead:
            return None
        for i, j in _pairs(len(items)):
            (a, ta), (b, tb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k != i and k != j]
            candidates = [(a + b, f"({ta} + {tb})"), (a * b, f"({ta} * {tb})"),
                          (a - b, f"({ta} - {tb})"), (b - a, f"({tb} - {ta})")]
            if b != 0:
                candidates.append((a / b, f"({ta} / {tb})"))
            if a != 0:
                candidates.append((b / a, f"({tb} / {ta})"))
            for value, text in candidates:
                if integer_steps and (value.denominator != 1 or value <= 0):
                    continue
                found = search(rest + [(value, text)])
                if found is not None:
                    return found
        dead.add(key)
        return None

    found = search([(Fraction(x), str(x)) for x in numbers])
    if found is not None and found.startswith("(") and found.endswith(")"):
        found = found[1:-1]
    return found


def _pairs(n: int) -> Iterator[tuple[int, int]]:
    for i in range(n):
        for j in range(i + 1, n):
            yield i, j


def _build(rng: random.Random, numbers: list[int]) -> tuple[int, str]:
    """Combine all `numbers`, in random order, by random operations whose results are positive whole
    numbers; return (value, expression). Using every number keeps puzzles solvable under both rules."""
    items = [(x, str(x)) for x in rng.sample(numbers, len(numbers))]
    while len(items) > 1:
        (a, ta), (b, tb) = items.pop(rng.randrange(len(items))), items.pop(rng.randrange(len(items)))
        options = [(a + b, f"{ta} + {tb}"), (a * b, f"{_wrap(ta)} * {_wrap(tb)}")]
        if a > b:
            options.append((a - b, f"{ta} - {_wrap(tb)}"))
        if b > a:
            options.append((b - a, f"{tb} - {_wrap(ta)}"))
        if b > 1 and a % b == 0:
            options.append((a // b, f"{_wrap(ta)} / {_wrap(tb)}"))
        if a > 1 and b % a == 0:
            options.append((b // a, f"{_wrap(tb)} / {_wrap(ta)}"))
        value, text = rng.choice(options)
        items.append((value, f"({text})"))
    value, text = items[0]
    return value, text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _wrap(text: str) -> str:
    return text if text.isdigit() or (text.startswith("(") and text.endswith(")")) else f"({text})"


def generate(seed: int, size: int, count: int | Sequence[int] = 4, max_number: int = 100,
             min_target: int = 10, max_target: int = 1000, use_all_numbers: bool = False,
             split: str = "train", heldout_fraction: float = 0.1,
             max_tries: int = 100_000) -> Iterator[dict[str, Any]]:
    """Yield `size` solvable puzzles.

    count:      how many numbers (2-8), or [min, max] drawn per puzzle.
    max_number: numbers are drawn from 1..max_number (repeats allowed).
    min_target / max_target: target range; a target equal to one of the numbers is never used.
    use_all_numbers: the puzzle's rule (carried in each row): use every number exactly once.
    """
    if isinstance(count, int) and not isinstance(count, bool):
        lo, hi = count, count
    elif isinstance(count, (list, tuple)) and len(count) == 2 and all(isinstance(c, int) for c in count):
        lo, hi = count
    else:
        raise ConfigError(f"generator 'countdown': count must be an integer or [min, max], got {count!r}")
    if not 2 <= lo <= hi <= 8:
        raise ConfigError(f"generator 'countdown': count must be between 2 and 8, got {count!r}")
    if not isinstance(max_number, int) or not 2 <= max_number <= 10**6:
        raise ConfigError(f"generator 'countdown': max_number must be an integer between 2 and 1000000, "
                          f"got {max_number!r}")
    if not isinstance(min_target, int) or not isinstance(max_target, int) or not 1 <= min_target <= max_target:
        raise ConfigError(f"generator 'countdown': need 1 <= min_target <= max_target, "
                          f"got {min_target!r}, {max_target!r}")
    check_split("countdown", split, heldout_fraction)
    rng = random.Random(f"areal-logic:countdown:{seed}:{split}")
    produced = 0
    while produced < size:
        for _ in range(max_tries):
            n = rng.randint(lo, hi)
            numbers = [rng.randint(1, max_number) for _ in range(n)]
            target, expression = _build(rng, numbers)
            if not min_target <= target <= max_target or target in numbers:
                continue
            if in_heldout(f"{sorted(numbers)}->{target}", heldout_fraction) == (split == "test"):
                break
        else:
            raise ConfigError(f"generator 'countdown': no puzzle with a target in [{min_target}, {max_target}] "
                              f"found in {max_tries} tries")
        produced += 1
        yield {
            "id": f"countdown-{split}-{seed}-{produced - 1}",
            "numbers": numbers,
            "target": target,
            "use_all_numbers": use_all_numbers,
            "solution": expression,
        }


# --- the reward ------------------------------------------------------------------------------
_FAMILY_OPTIONS = {"use_all_numbers": None, "integer_steps": False, "max_depth": 16}


def _reference(sample: dict[str, Any]) -> tuple[list[int], int]:
    numbers, target = sample.get("numbers"), sample.get("target")
    if (not isinstance(numbers, list) or not numbers
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in numbers)):
        raise InputError("countdown: sample field 'numbers' must be a non-empty list of integers, "
                         f"got {excerpt(repr(numbers), 80)}")
    if isinstance(target, float) and target.is_integer():
        target = int(target)
    if not isinstance(target, int) or isinstance(target, bool):
        raise InputError(f"countdown: sample field 'target' must be an integer, got {target!r}")
    return numbers, target


def reward(sample: dict[str, Any], response: str, **options: Any) -> RewardResult:
    """Reward ``countdown``: needs sample fields ``numbers`` and ``target`` (and ``use_all_numbers``,
    default false, unless the option of that name overrides it). Options ``integer_steps`` (every
    intermediate result a positive whole number, the TV-show rule) and ``max_depth`` (parenthesis nesting)."""
    opts, own = split_options("countdown", options, _FAMILY_OPTIONS)
    numbers, target = _reference(sample)
    use_all = own["use_all_numbers"] if own["use_all_numbers"] is not None else bool(sample.get("use_all_numbers", False))
    if not isinstance(own["max_depth"], int) or own["max_depth"] < 1:
        raise ConfigError(f"reward 'countdown': option max_depth must be a positive integer, got {own['max_depth']!r}")
    try:
        answer, source = prepare(response, opts)
        lines = _lines(answer)
        expression, claimed = _expression_part(lines, target)
        # A few numbers more than given still read as an answer (wrong, but well formed); far more is noise.
        limits = {"max_numbers": len(numbers) + 8, "max_depth": own["max_depth"],
                  "integer_steps": bool(own["integer_steps"])}
        value, used = evaluate_expression(expression, **limits)
        others = _attempts(lines, (value, used), target, limits)
        if others:  # several answers: a hedge, whichever comes last
            raise Rejection(CONFLICT, f"the answer gives {len(others) + 1} different expressions "
                                      f"({excerpt(others[0], 40)!r} and {excerpt(expression, 40)!r}); give one")
    except Rejection as rejection:
        return rejected(rejection)
    details: dict[str, Any] = {"extracted": excerpt(answer), "source": source, "expression": expression,
                               "value": str(value), "numbers_used": used, "target": target}
    if claimed is not None:
        details["claimed"] = excerpt(claimed, 40)
    have, want = Counter(used), Counter(numbers)
    extra = have - want
    if extra:
        reason = (f"the expression uses {', '.join(map(str, sorted(extra.elements())))} beyond the numbers given "
                  f"({', '.join(map(str, numbers))})")
        return verdict(opts, correct=False, well_formed=True, fraction=0.0, reason=reason, **details)
    unused = want - have
    if use_all and unused:
        reason = f"the rule is to use every number exactly once; unused: {', '.join(map(str, sorted(unused.elements())))}"
        return verdict(opts, correct=False, well_formed=True, fraction=0.0, reason=reason, **details)
    if value != target:
        closeness = max(0.0, 1.0 - float(abs(value - target)) / max(abs(target), 1))
        return verdict(opts, correct=False, well_formed=True, fraction=min(closeness, 0.999),
                       reason=f"the expression equals {value}, not {target}", **details)
    return verdict(opts, correct=True, well_formed=True, fraction=1.0, **details)
