"""An answer string -> a typed answer: a scalar, a relation, a tuple/list/set, an interval, a matrix,
a multiple-choice letter, a numeral in some base, or plain text.

The string is first cleaned (math delimiters, spacing macros, `\\left`/`\\right`, units, currency,
percent and degree signs, thousands separators, repeating decimals), then split at its top level
(outside all brackets) into its structure; each leaf is parsed to SymPy by `areal_math.latex`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Union

import sympy
from sympy import Expr, Integer, Rational

from areal_math.latex import GREEK, LatexParseError, ParseState, parse_expression

MAX_ANSWER_CHARS = 3000


# --- typed answers ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scalar:
    """One number or expression. `places` is set when the text is a single decimal literal (the number
    of digits after its point); `approx` when any decimal literal appears in it."""

    expr: Expr
    places: int | None = None
    approx: bool = False
    percent: bool = False
    degrees: bool = False
    huge: bool = False


@dataclass(frozen=True)
class Relation:
    """`lhs op rhs`, op in =, <, <=, >, >=, != (a chain `a < x < b` keeps all parts)."""

    parts: tuple[Scalar, ...]
    ops: tuple[str, ...]


@dataclass(frozen=True)
class Seq:
    """Several values. kind: "tuple" (ordered, parenthesised), "list" (bare comma list, unordered),
    "set" (braces or ±, unordered). `hedge` marks a list joined by words like "or"."""

    items: tuple["Answer", ...]
    kind: str
    open_: str = ""
    close: str = ""
    hedge: bool = False


@dataclass(frozen=True)
class IntervalSet:
    """A union of intervals: each (start, end, left_closed, right_closed)."""

    pieces: tuple[tuple[Scalar, Scalar, bool, bool], ...]


@dataclass(frozen=True)
class MatrixAnswer:
    rows: tuple[tuple[Scalar, ...], ...]


@dataclass(frozen=True)
class Choice:
    letter: str


@dataclass(frozen=True)
class BaseNumeral:
    digits: str
    base: int


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Empty:
    reason: str = "empty answer"


Answer = Union[Scalar, Relation, Seq, IntervalSet, MatrixAnswer, Choice, BaseNumeral, Text, Empty]


@dataclass
class Notes:
    percent: bool = False
    degrees: bool = False
    units: list[str] = field(default_factory=list)


# --- cleaning --------------------------------------------------------------------------------------
_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": "\\times ", "\u22c5": "\\cdot ", "\u00b7": "\\cdot ",
    "\u00f7": "\\div ", "\u221a": "\\sqrt", "\u03c0": "\\pi ", "\u2264": "\\leq ", "\u2265": "\\geq ",
    "\u2260": "\\neq ", "\u221e": "\\infty ", "\u00b0": "^\\circ", "\u222a": "\\cup ", "\u2208": "\\in ",
    "\u00b1": "\\pm ", "\u2009": " ", "\u00a0": " ", "\u202f": " ", "\u2032": "'",
}
_TEXT_CMDS = ("text", "textbf", "textit", "textrm", "textnormal", "mathrm", "mathbf", "mathit", "mbox",
              "hbox", "operatorname", "mathsf", "boldsymbol", "bm", "textsf", "texttt", "emph", "mathtt")
UNIT_WORDS = {
    "cm", "mm", "km", "m", "meter", "meters", "metre", "metres", "centimeter", "centimeters", "kilometer",
    "kilometers", "millimeter", "millimeters", "in", "inch", "inches", "ft", "foot", "feet", "yard", "yards",
    "yd", "mile", "miles", "mi", "mph", "kph", "unit", "units", "sq", "square", "cubic", "g", "gram", "grams",
    "kg", "kilogram", "kilograms", "mg", "lb", "lbs", "pound", "pounds", "ounce", "ounces", "oz", "ton", "tons",
    "l", "liter", "liters", "litre", "litres", "ml", "gallon", "gallons", "cup", "cups", "s", "sec", "second",
    "seconds", "min", "mins", "minute", "minutes", "h", "hr", "hrs", "hour", "hours", "day", "days", "week",
    "weeks", "month", "months", "year", "years", "dollar", "dollars", "cent", "cents", "usd", "euro", "euros",
    "degree", "degrees", "deg", "radian", "radians", "rad", "percent", "point", "points", "way", "ways",
    "students", "people", "persons", "times", "page", "pages", "items", "pieces",
}
# Units whose spellings are known, by what they measure: two answers that state different ones (15 cm^2
# and 15 cm^3, 5 m and 5 cm) differ; a spelling not listed here is never judged.
_UNIT_BASES = {
    "mm": ("millimeter", "millimeters", "millimetre", "millimetres"), "cm": ("centimeter", "centimeters",
    "centimetre", "centimetres"), "m": ("meter", "meters", "metre", "metres"), "km": ("kilometer", "kilometers",
    "kilometre", "kilometres"), "in": ("inch", "inches"), "ft": ("foot", "feet"), "yd": ("yard", "yards"),
    "mi": ("mile", "miles"), "g": ("gram", "grams"), "kg": ("kilogram", "kilograms"), "mg": ("milligram", "milligrams"),
    "lb": ("lbs", "pound", "pounds"), "dollar": ("dollars", "usd"), "cent": ("cents",), "oz": ("ounce", "ounces"), "l": ("liter", "liters", "litre", "litres"),
    "ml": ("milliliter", "milliliters", "millilitre", "millilitres"), "s": ("sec", "second", "seconds"),
    "min": ("mins", "minute", "minutes"), "h": ("hr", "hrs", "hour", "hours"), "day": ("days",), "week": ("weeks",),
    "year": ("years",), "month": ("months",),
}
_UNIT_CANONICAL = {alias: base for base, aliases in _UNIT_BASES.items() for alias in (base, *aliases)}
_UNIT_PARTS = re.compile(r"^(?:(square|sq\.?|cubic)\s+)?([A-Za-z]+)\.?\s*(?:\^\s*\{?\s*([23])\s*\}?)?$")


def unit_signature(units: list[str]) -> frozenset[tuple[str, int]] | None:
    """The units an answer states, as (base unit, power) pairs; None when there are none or one of them
    is not a known spelling (then units are not compared)."""
    signature = set()
    for unit in units:
        m = _UNIT_PARTS.match(unit.strip())
        base = _UNIT_CANONICAL.get(m.group(2).lower()) if m else None
        if base is None:
            return None
        power = int(m.group(3)) if m.group(3) else {"square": 2, "sq": 2, "sq.": 2, "cubic": 3}.get((m.group(1) or "").lower(), 1)
        signature.add((base, power))
    return frozenset(signature) or None


_UNIT_PHRASE = re.compile(
    r"^(?:(?:square|sq\.?|cubic)\s+)?(?P<w>[A-Za-z]+)\.?(?:\s*(?:\^\s*\{?\s*[23]\s*\}?|[23]))?\.?$"
)
_SCALE_WORDS = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_MATH_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "pi", "abs", "arcsin",
               "arccos", "arctan", "sinh", "cosh", "tanh", "gcd", "lcm", "max", "min", "floor", "ceil",
               "infty", "infinity", "inf", "oo", "asin", "acos", "atan", "frac", "dfrac", "tfrac", "binom",
               "cdot", "times", "div", "pm", "mp", "leq", "geq", "neq", "le", "ge", "ne", "lt", "gt",
               "approx", "cup", "cap", "in", "left", "right", "begin", "end", "pmatrix", "bmatrix", "array",
               "matrix", "vmatrix", "lfloor", "rfloor", "lceil", "rceil", "vert", "lvert", "rvert",
               "langle", "rangle", "circ", "overline", "boxed", "fbox", "mathrm", "text", "mbox",
               "displaystyle", "quad", "qquad", "sqrt", "dbinom", "tbinom", "cfrac", "setminus",
               "varepsilon", "vartheta", "varphi", "imath", "ldots", "cdots", "dots", "infin"} | GREEK
_HEDGE_SPLIT = re.compile(r"(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|;|\\text\{\s*(?:or|and)\s*\}|\\(?:lor|vee)(?![A-Za-z])")


def _match_brace(s: str, open_at: int) -> int:
    """Index of the brace closing the one at `open_at`, or -1."""
    depth = 0
    i = open_at
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _replace_text_commands(s: str, notes: Notes) -> str:
    """`\\text{...}` and friends: a unit word inside goes away; other content stays as plain words."""
    pattern = re.compile(r"\\(" + "|".join(_TEXT_CMDS) + r")\s*\{")
    for _ in range(50):
        m = pattern.search(s)
        if not m:
            break
        start, brace = m.start(), m.end() - 1
        end = _match_brace(s, brace)
        if end < 0:
            s = s[:start] + s[brace + 1:]
            continue
        content = s[brace + 1:end]
        stripped = content.strip()
        word = _UNIT_PHRASE.match(stripped)
        if word and word.group("w").lower() in UNIT_WORDS and re.search(r"[\d}]\s*$", s[:start]):
            notes.units.append(stripped)
            if word.group("w").lower() in ("degree", "degrees", "deg"):
                notes.degrees = True
            content = " "
            power = re.match(r"\s*\^\s*\{?\s*[23]\s*\}?", s[end + 1:])  # cm^2 after \text{ cm}
            if power:
                notes.units[-1] += power.group(0)
                end += power.end()
        elif m.group(1) in ("text", "textbf", "textit", "textrm", "mbox", "textnormal", "hbox", "textsf", "texttt", "emph"):
            content = f" {content} " if stripped else " "
        s = s[:start] + content + s[end + 1:]
    return s


def _repeating_decimals(s: str) -> str:
    """`0.\\overline{3}` / `0.1\\overline{6}` -> an exact fraction."""
    def repl(m: re.Match[str]) -> str:
        whole, fixed, rep = m.group(1) or "0", m.group(2) or "", m.group(3)
        if len(fixed) + len(rep) > 40:
            return m.group(0)
        value = Integer(int(whole)) + (Rational(int(fixed), 10 ** len(fixed)) if fixed else 0)
        value += Rational(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        return f"\\frac{{{value.p}}}{{{value.q}}}"

    return re.sub(r"(\d*)\.(\d*)\\overline\{(\d+)\}", repl, s)


def _strip_outer_delimiters(s: str) -> str:
    for _ in range(5):
        t = s.strip()
        for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if t.startswith(a) and t.endswith(b) and len(t) >= len(a) + len(b):
                t = t[len(a):len(t) - len(b)]
                break
        if t == s.strip():
            return t
        s = t
    return s.strip()


def clean(text: str) -> tuple[str, Notes]:
    """Normalise an answer string; returns the cleaned string and what was removed."""
    notes = Notes()
    s = text
    for k, v in _UNICODE.items():
        if k in s:
            s = s.replace(k, v)
    s = _strip_outer_delimiters(s)
    # `\\frac` written with an escaped backslash (a reference copied from a string literal)
    s = re.sub(r"\\\\(?=(?:left|right|frac|dfrac|tfrac|sqrt|pi|cdot|infty|text|begin|end|boxed)(?![A-Za-z]))", r"\\", s)
    s = re.sub(r"\\(?:boxed|fbox)\s*\{", r"{", s)
    s = s.replace("\\$", " ").replace("$", " ")
    s = re.sub(r"\\(?:d|t|c)frac(?![A-Za-z])", r"\\frac", s)
    s = re.sub(r"\\(?:d|t)binom(?![A-Za-z])", r"\\binom", s)
    s = re.sub(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg)(?![A-Za-z])\s*\.?", "", s)
    s = re.sub(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)(?![A-Za-z])", " ", s)
    # a matrix in brackets, \left[\begin{array}{cc} ... \end{array}\right], is the matrix
    s = re.sub(r"^\s*[\[(]\s*(\\begin\{(array|[pbvBV]?matrix)\}.*\\end\{\2\})\s*[\])]\s*$", r"\1", s, flags=re.S)

    s = re.sub(r"\s*\\!\s*", "", s)  # negative thin space, as in 10,\!080
    s = re.sub(r"(?<=\d)\s*\\[,:;]\s*(?=\d{3}(?!\d))", "", s)  # 1\,000 as a thousands separator
    s = re.sub(r"\\(?:,|;|:|>|quad|qquad|enspace|thinspace|medspace|thickspace)(?![A-Za-z])", " ", s)
    s = s.replace("~", " ")
    s = s.replace("\\lt", "<").replace("\\gt", ">")
    # degrees: inside a trig function they become radians, elsewhere a note on the whole answer
    if re.search(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])", s):
        s = re.sub(r"(\d+(?:\.\d+)?)\s*\^\s*\{?\s*\\circ\s*\}?", r"{(\1\\pi/180)}", s)
    new = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree(?![A-Za-z])", " ", s)
    if new != s:
        notes.degrees = True
        s = new
    # percent
    new = re.sub(r"\\?%", " ", s)
    if new != s:
        notes.percent = True
        s = new
    s = _replace_text_commands(s, notes)
    if re.search(r"\bdegrees?\b", s) and re.search(r"\d", s):
        notes.degrees = True
        s = re.sub(r"\bdegrees?\b", " ", s)
    if re.search(r"\bpercent\b", s):
        notes.percent = True
        s = re.sub(r"\bpercent\b", " ", s)
    s = _repeating_decimals(s)
    s = re.sub(r"(?<=\d)\s*\{\s*,\s*\}\s*(?=\d{3}(?!\d))", "", s)  # 10{,}000 and 14 {, }916
    s = re.sub(r"\{\s*,\s*\}", ",", s)
    s = re.sub(r"(?<![\d.])\d{1,3}(?: \d{3})+(?![\d.])", lambda m: m.group(0).replace(" ", ""), s)  # 1 000 000
    s = _strip_trailing_units(s, notes)
    s = re.sub(r"[\s.]+$", "", s)  # a full stop after the answer
    s = re.sub(r"\s+", " ", s).strip()
    return s, notes


def _strip_trailing_units(s: str, notes: Notes) -> str:
    """`18 dollars`, `15 cm^2`, `864 square inches` -> the number. Only after something numeric, and
    only words that are not math (a single letter like `x` is a variable, not a unit)."""
    for _ in range(3):
        m = re.search(r"(?<=[\d}\s)])\s*((?:(?:square|sq\.?|cubic)\s+)?([A-Za-z]{2,})\.?(?:\s*\^\s*\{?\s*[23]\s*\}?)?)\s*\.?\s*$", s)
        if not m:
            break
        word = m.group(2)
        head = s[:m.start()]
        scale = _SCALE_WORDS.get(word.lower())
        if scale is not None:  # 1.5 million is a number, not 1.5 with a unit
            if re.search(r"\d\s*$", head):
                s = f"{head} \\times 10^{{{scale}}}"
            break
        if word.lower() in _MATH_WORDS or not re.search(r"\d", head) or head.rstrip().endswith("\\"):
            break
        if word.lower() not in UNIT_WORDS and len(word) < 3:
            break
        if word.lower() in ("or", "and"):
            break
        notes.units.append(m.group(1))
        s = head
    return s


# --- top-level structure ---------------------------------------------------------------------------
def _split_top(s: str, seps: re.Pattern[str]) -> list[str]:
    """Split at separators that are outside all brackets, braces, `\\{...\\}`, `\\langle...\\rangle`
    and environments. A closing bracket of the other kind (the `]` of `(0, 1]`) closes the group."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if s.startswith("\\{", i) or s.startswith("\\langle", i):
                depth += 1
            elif s.startswith("\\}", i) or s.startswith("\\rangle", i):
                depth -= 1
            elif s.startswith("\\begin", i):
                depth += 1
            elif s.startswith("\\end", i):
                depth -= 1
            if depth == 0 and i >= start:
                m = seps.match(s, i)
                if m and m.end() > i:
                    parts.append(s[start:i])
                    start = i = m.end()
                    continue
            j = i + 1
            while j < len(s) and s[j].isalpha():
                j += 1
            i = max(j, i + 2) if j == i + 1 else j
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                # a half-open interval like (0, 1] closes with the other kind of bracket
                depth = 0
        elif depth == 0:
            m = seps.match(s, i)
            if m and m.end() > i:
                parts.append(s[start:i])
                start = i = m.end()
                continue
        i += 1
    parts.append(s[start:])
    return parts


def _brackets_balance(s: str) -> bool:
    depth = 0
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


_COMMA = re.compile(r",")
_UNION = re.compile(r"\\cup(?![A-Za-z])|\bU\b")
_REL = re.compile(r"<=|>=|!=|=|<|>|\\(?:leq|le|geq|ge|neq|ne|leqslant|geqslant|approx|equiv)(?![A-Za-z])")
_IN = re.compile(r"\\in(?![A-Za-z])")
_PM = re.compile(r"\\(?:pm|mp)(?![A-Za-z])|\+-|\+/-")
_THOUSANDS = re.compile(r"^\s*-?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*$")
# After "(C)": another choice standing alone ("(C) (or maybe (A))", "(C) or B"), not "(C) P(A) = 0.3".
_OTHER_CHOICE = re.compile(r"(?<![A-Za-z\\])\(\s*[A-E]\s*\)|\b(?:or|maybe|perhaps|possibly|either)\s+\(?[A-E]\b")
_CHOICE = re.compile(r"^\(\s*([A-Ea-e])\s*\)(?:\s.*)?$|^([A-E])\s*[).:]?$")
_BASE_NUMERAL = re.compile(r"^\s*\{?([0-9][0-9A-Za-z]*)\}?_\s*\{?\s*(\d{1,2})\s*\}?\s*$")
_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}$", re.S)
_REL_OPS = {"<=": "<=", ">=": ">=", "!=": "!=", "=": "=", "<": "<", ">": ">", "\\leq": "<=", "\\le": "<=",
            "\\leqslant": "<=", "\\geq": ">=", "\\ge": ">=", "\\geqslant": ">=", "\\neq": "!=", "\\ne": "!=",
            "\\approx": "=", "\\equiv": "="}


def _scalar(text: str, notes: Notes) -> Scalar:
    text = text.strip()
    if not text:
        raise LatexParseError("empty expression")
    if _PM.search(text):
        raise LatexParseError("± inside a scalar")
    expr, state = parse_expression(text, ParseState())
    places = None
    if len(state.decimal_places) == 1 and state.numbers == 1 and re.fullmatch(r"[-+]?\s*\{?\s*(?:\d+\.\d*|\.\d+)\s*\}?", text):
        places = state.decimal_places[0]
    if expr.has(sympy.nan):
        raise LatexParseError("undefined value")
    return Scalar(expr, places=places, approx=bool(state.decimal_places), percent=notes.percent,
                  degrees=notes.degrees, huge=state.huge)


def _expand_pm(text: str) -> list[str] | None:
    """`1 \\pm \\sqrt{19}` -> ['1 + \\sqrt{19}', '1 - \\sqrt{19}'] (every ± both ways, at most 2 of them)."""
    m = _PM.search(text)
    if not m:
        return None
    if len(_PM.findall(text)) > 2:
        raise LatexParseError("too many ± signs")
    out: list[str] = []
    for sign in ("+", "-"):
        rest = text[:m.start()] + sign + text[m.end():]
        more = _expand_pm(rest)
        out += more if more else [rest]
    return out


def _items(text: str, notes: Notes) -> list[Answer]:
    """Comma-separated items inside a tuple, list or set; ± expands into two items."""
    parts = _split_top(text, _COMMA) or [text]
    items: list[Answer] = []
    for part in parts:
        part = part.strip()
        if not part:
            raise LatexParseError("empty item in a list")
        expanded = _expand_pm(part)
        if expanded:
            items += [_single(p, notes) for p in expanded]
        else:
            items.append(_single(part, notes))
    return items


def _enclosed(s: str, open_: str, close: str) -> bool:
    """True when `s` is one bracketed group from its first to its last character."""
    if not (s.startswith(open_) and s.endswith(close)):
        return False
    depth = 0
    i = 0
    body_end = len(s) - len(close)
    while i < len(s):
        if s.startswith("\\{", i) or s.startswith("\\langle", i):
            depth += 1
            i += 2 if s.startswith("\\{", i) else 7
            continue
        if s.startswith("\\}", i) or s.startswith("\\rangle", i):
            depth -= 1
            i += 2 if s.startswith("\\}", i) else 7
            if depth == 0 and i < len(s):
                return False
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and i < body_end:
                return False
        i += 1
    return True


def _single(text: str, notes: Notes) -> Answer:
    """One item: a relation, a bracketed tuple/interval/set, a matrix, or a scalar."""
    s = text.strip()
    if not s:
        raise LatexParseError("empty expression")
    m = _MATRIX.match(s)
    if m:
        rows = []
        for row in re.split(r"\\\\", m.group(2)):
            if not row.strip():
                continue
            rows.append(tuple(_scalar(cell, notes) for cell in row.split("&")))
        if not rows or len({len(r) for r in rows}) != 1:
            raise LatexParseError("ragged matrix")
        return MatrixAnswer(tuple(rows))
    in_parts = _split_top(s, _IN)
    if in_parts and len(in_parts) == 2 and in_parts[1].strip():
        return _single(in_parts[1], notes)
    pm_parts = _split_top(s, _PM)
    if pm_parts and len(pm_parts) > 1:
        return Seq(tuple(_single(p, notes) for p in _expand_pm(s) or []), "set")
    union = _split_top(s, _UNION)
    if union and len(union) > 1:
        pieces = []
        for part in union:
            piece = _single(part, notes)
            if isinstance(piece, IntervalSet):
                pieces += list(piece.pieces)
            elif isinstance(piece, Seq) and piece.kind == "tuple" and len(piece.items) == 2 and all(isinstance(x, Scalar) for x in piece.items):
                a, b = piece.items
                pieces.append((a, b, piece.open_ == "[", piece.close == "]"))  # type: ignore[arg-type]
            elif isinstance(piece, Seq) and piece.kind == "set":
                for item in piece.items:
                    if not isinstance(item, Scalar):
                        raise LatexParseError("unsupported union member")
                    pieces.append((item, item, True, True))
            else:
                raise LatexParseError("a union of something that is not an interval")
        return IntervalSet(tuple(pieces))
    rel_parts = _split_top(s, _REL)
    if rel_parts and len(rel_parts) > 1:
        ops = tuple(_REL_OPS[o] for o in _REL.findall(_rel_ops_text(s)))
        if len(ops) != len(rel_parts) - 1:
            raise LatexParseError("malformed relation")
        return Relation(tuple(_scalar(p, notes) for p in rel_parts), ops)
    # bracketed groups
    for open_, close in (("\\{", "\\}"), ("\\langle", "\\rangle")):
        if _enclosed(s, open_, close):
            body = s[len(open_):len(s) - len(close)]
            if not body.strip():
                return Seq((), "set", open_, close)
            items = _items(body, notes)
            return Seq(tuple(items), "set" if open_ == "\\{" else "tuple", open_, close)
    if s[0] in "([" and s[-1] in ")]":
        body = s[1:-1]
        inner = _split_top(body, _COMMA)
        if inner and len(inner) > 1 and _brackets_balance(body):
            items = _items(body, notes)
            return Seq(tuple(items), "tuple", s[0], s[-1])
    base = _BASE_NUMERAL.match(s)
    if base:
        digits, b = base.group(1), int(base.group(2))
        if 2 <= b <= 36:
            try:
                int(digits, b)
            except ValueError:
                pass
            else:
                return BaseNumeral(digits.upper().lstrip("0") or "0", b)
    return _scalar(s, notes)


def _rel_ops_text(s: str) -> str:
    """The string with bracketed parts blanked, so relation operators inside them are not counted."""
    out = []
    depth = 0
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        out.append(c if depth == 0 else " ")
    return "".join(out)


def _looks_like_text(s: str) -> bool:
    """Words of three or more letters that are not math vocabulary mean prose, not an expression."""
    bare = re.sub(r"\\[A-Za-z]+", " ", s)
    for word in re.findall(r"[A-Za-z]{3,}", bare):
        if word.lower() not in _MATH_WORDS:
            return True
    return False


def normalize_text(s: str) -> str:
    """Plain-text form for comparing word answers: lower case, no LaTeX wrappers, articles or punctuation."""
    s = re.sub(r"\\(?:" + "|".join(_TEXT_CMDS) + r")\s*\{", "{", s)
    s = re.sub(r"\\[,;:! ]", " ", s)
    s = s.replace("$", " ").replace("{", " ").replace("}", " ").replace("\\", " ")
    s = re.sub(r"[^\w\s+\-*/=<>^().,]", " ", s.lower())
    s = re.sub(r"^\s*(?:the|a|an)\s+", "", s)
    s = re.sub(r"[\s.,;:!]+$", "", s)
    s = re.sub(r"^[\s.,;:!]+", "", s)
    return re.sub(r"\s+", " ", s).strip()


@lru_cache(maxsize=4096)
def parse_answer(text: str) -> Answer:
    """Parse an extracted answer (or a reference). Never raises: what is not math becomes Text."""
    if text is None or not str(text).strip():
        return Empty()
    raw = str(text)
    if len(raw) > MAX_ANSWER_CHARS:
        return Text(normalize_text(raw[:MAX_ANSWER_CHARS]))
    s, notes = clean(raw)
    if not s or not re.search(r"[0-9A-Za-z\\]", s):
        return Empty()
    # hedged / joined answers: "5 or 6", "x = 1 and x = 2", "(C) or (D)"
    hedge = _split_top(s, _HEDGE_SPLIT)
    if hedge and len(hedge) > 1:
        parts = [p.strip(" ,") for p in hedge if p.strip(" ,")]
        try:
            items = tuple(_parse_one(p, notes) for p in parts)
        except MemoryError:
            raise
        except Exception:  # not parseable as math (SymPy raises many types on odd input)
            return Text(normalize_text(raw))
        return Seq(items, "list", hedge=True)
    choice = _CHOICE.match(s)
    if choice and _OTHER_CHOICE.search(s[choice.end(1) + 1:] if choice.group(1) else ""):
        return Text(normalize_text(raw))  # "(C) (or maybe (A))": two choices, no answer
    if choice:
        return Choice((choice.group(1) or choice.group(2)).upper())
    try:
        return _parse_one(s, notes)
    except MemoryError:
        raise
    except Exception:  # not parseable as math (SymPy raises many types on odd input)
        return Text(normalize_text(raw))


def _parse_one(s: str, notes: Notes) -> Answer:
    if _looks_like_text(s):
        raise LatexParseError("prose")
    if _THOUSANDS.match(s):
        return _scalar(s.replace(",", ""), notes)
    parts = _split_top(s, _COMMA)
    if parts and len(parts) > 1:
        parts = _merge_thousands(parts)
        if len(parts) > 1:
            items = _items(",".join(parts), notes)
            return Seq(tuple(items), "list")
        s = parts[0]
    if _THOUSANDS.match(s):
        return _scalar(s.replace(",", ""), notes)
    return _single(s, notes)


def _merge_thousands(parts: list[str]) -> list[str]:
    """['1', '000', '000'] came from `1,000,000`: glue digit groups back together."""
    out: list[str] = []
    for part in parts:
        if out and re.fullmatch(r"\d{3}(?:\.\d+)?", part) and re.search(r"(?:^|[^\d.])\d{1,3}$", out[-1]) and not part.startswith(" "):
            out[-1] = out[-1] + part
        else:
            out.append(part)
    return out


__all__ = ["Answer", "Scalar", "Relation", "Seq", "IntervalSet", "MatrixAnswer", "Choice", "BaseNumeral",
           "Text", "Empty", "parse_answer", "clean", "normalize_text"]
