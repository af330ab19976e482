"""Is a parsed answer mathematically the same as the reference?

Scalars are compared in this order, cheapest first:

1. **exact**: identical SymPy trees after SymPy's automatic canonicalisation. Integers and rationals are
   exact Python integers, so `1/2004!` and `1/2006!` differ, however small both are.
2. **symbolic**: `expand`, `cancel`, `radsimp` of the difference, then `simplify(a - b) == 0` when the
   expression is small. Before the expensive steps both sides are evaluated at a few points (30 digits):
   values that clearly differ end the comparison early.
3. **numeric identity**: when SymPy cannot simplify the difference to zero, both sides are evaluated at
   40 significant digits (at four generic points when there are free symbols); they are equal when they
   agree to 30 significant digits everywhere. This is an equality test, not a tolerance: a near miss
   (even 1 part in 10^20) fails.
4. **decimal tolerance**, only when one side is a decimal approximation: a decimal `d` with `k` digits
   after the point matches an exact value `v` when `|d - v| < 10^-k` (d is v rounded or truncated) and
   `|d - v| <= rel_tol * |v|`. An integer, and any value that `k` decimals can write exactly (0.25),
   must be written exactly. `strict=True` turns this step off.

Values too large to evaluate (see `areal_math.latex`) are equal only when identical; anything else about
them is a `VerifierFailure`, reported as an error rather than a verdict.

Structured answers compare part by part: tuples in order, bare lists and sets in any order (as
multisets), intervals with their open/closed ends, matrices element-wise, equations up to a non-zero
factor (`y=2x+3` is `y-2x-3=0`), inequalities up to a positive factor or as the interval they describe,
`x = 3` against `3`. A list answering a single-valued reference is wrong (a hedge), whatever it holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mpmath
import sympy
from sympy import Expr, Rational

from areal_math.answer import (
    Answer,
    BaseNumeral,
    Choice,
    Empty,
    IntervalSet,
    MatrixAnswer,
    Relation,
    Scalar,
    Seq,
    Text,
)


class VerifierFailure(Exception):
    """The comparison itself could not be done (a value too large to evaluate, a SymPy failure)."""


@dataclass(frozen=True)
class Options:
    rel_tol: float = 1e-4
    strict: bool = False


@dataclass(frozen=True)
class Outcome:
    equal: bool
    method: str  # how equality was established, or why not


NO = Outcome(False, "different")
_PROBES = [Rational(6180339, 10_000_000), Rational(-13247, 10_000), Rational(22360679, 10_000_000),
           Rational(-5772156, 10_000_000), Rational(31622, 10_000), Rational(-7071067, 10_000_000)]
_MAX_SIMPLIFY_OPS = 60
_MAX_ITEMS = 64


# --- numbers ---------------------------------------------------------------------------------------
def _evaluate(expr: Expr, digits: int, point: int = 0, symbols: tuple[sympy.Symbol, ...] = ()) -> mpmath.mpc | None:
    """The value of `expr` with its free symbols set to probe point number `point`; None if not a
    finite number. `symbols` fixes which probe value each symbol gets (pass the union of both sides,
    so that `R` and `r` get different values)."""
    subs = {}
    order = symbols or tuple(sorted(expr.free_symbols, key=lambda s: s.name))
    for k, sym in enumerate(order):
        if sym in expr.free_symbols:
            subs[sym] = _PROBES[(k + point) % len(_PROBES)] + Rational(point, 7)
    try:
        value = expr.evalf(digits, subs=subs) if subs else expr.evalf(digits)
        if value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo) or value.free_symbols:
            return None
        result = value._to_mpmath(int(digits * 3.33) + 10)
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError, RecursionError,
            NotImplementedError, KeyError):
        return None
    return mpmath.mpc(result)


def _close(a: mpmath.mpc, b: mpmath.mpc, rel: mpmath.mpf) -> bool:
    scale = max(abs(a), abs(b))
    if scale == 0:
        return True
    return abs(a - b) <= rel * scale


def _size_ok(expr: Expr) -> bool:
    """Small enough that expand/simplify will not blow up."""
    if sympy.count_ops(expr, visual=False) > _MAX_SIMPLIFY_OPS:
        return False
    for p in expr.atoms(sympy.Pow):
        if p.exp.is_Number and abs(p.exp) > 12 and p.base.free_symbols and isinstance(p.base, sympy.Add):
            return False
    return True


def _symbols(*exprs: Expr) -> tuple[sympy.Symbol, ...]:
    return tuple(sorted(set().union(*(e.free_symbols for e in exprs)), key=lambda s: s.name))


def _numbers_differ(x: Expr, y: Expr) -> bool | None:
    """True when numeric evaluation shows x != y, False when they agree at all probes, None if unknown."""
    symbols = _symbols(x, y)
    points = 3 if symbols else 1
    unknown = False
    for point in range(points):
        vx, vy = _evaluate(x, 30, point, symbols), _evaluate(y, 30, point, symbols)
        if vx is None or vy is None:
            unknown = True
            continue
        if not _close(vx, vy, mpmath.mpf(10) ** -20):
            return True
    return None if unknown else False


def _numeric_identity(x: Expr, y: Expr) -> bool:
    symbols = _symbols(x, y)
    points = 4 if symbols else 1
    for point in range(points):
        vx, vy = _evaluate(x, 40, point + 1, symbols), _evaluate(y, 40, point + 1, symbols)
        if vx is None or vy is None or not _close(vx, vy, mpmath.mpf(10) ** -30):
            return False
    return True


def _is_zero_symbolically(diff: Expr) -> bool:
    if diff == 0:
        return True
    if not _size_ok(diff):
        return False
    for step in (sympy.expand, sympy.cancel, sympy.radsimp, sympy.simplify):
        try:
            if step(diff) == 0:
                return True
        except (TypeError, ValueError, AttributeError, NotImplementedError, ZeroDivisionError,
                RecursionError, sympy.PolynomialError):
            continue
    return False


def _bad(expr: Expr) -> bool:
    return bool(expr.has(sympy.nan, sympy.zoo))


def _infinite(expr: Expr) -> bool:
    return bool(expr.has(sympy.oo, -sympy.oo, sympy.zoo))


def _decimal_tolerance(a: Scalar, b: Scalar, opts: Options) -> Outcome:
    if opts.strict or not (a.approx or b.approx) or a.huge or b.huge:
        return NO
    if a.expr.free_symbols or b.expr.free_symbols or _infinite(a.expr) or _infinite(b.expr):
        return NO
    # d: the less precise decimal; v: the other side.
    if a.places is not None and (b.places is None or a.places < b.places):
        d, v = a, b
    elif b.places is not None and (a.places is None or b.places < a.places):
        d, v = b, a
    elif a.places is not None and b.places is not None:
        return NO  # two decimals with as many digits each, and they differ
    else:
        d, v = (a, b) if a.approx else (b, a)
    if v.expr.is_Integer:
        return Outcome(False, "an integer must be given exactly")
    vd, vv = _evaluate(d.expr, 40), _evaluate(v.expr, 40)
    if vd is None or vv is None or vv == 0:
        return NO
    err = abs(vd - vv)
    if d.places is not None:
        k = d.places
        if v.expr.is_Rational and (v.expr * 10 ** k).is_Integer:
            return Outcome(False, f"the exact value has at most {k} decimals, so {k} decimals must match it exactly")
        if err >= mpmath.mpf(10) ** -k:
            return Outcome(False, f"not the value rounded to {k} decimals")
    if err <= mpmath.mpf(opts.rel_tol) * abs(vv):
        return Outcome(True, f"decimal approximation within rel_tol={opts.rel_tol:g}")
    return Outcome(False, f"decimal approximation off by more than rel_tol={opts.rel_tol:g}")


def _scalar_core(a: Scalar, b: Scalar, opts: Options) -> Outcome:
    x, y = a.expr, b.expr
    if a.huge or b.huge:
        if x == y:
            return Outcome(True, "identical (too large to evaluate)")
        raise VerifierFailure("a value is too large to evaluate (a huge power, factorial or function argument); "
                              "only identical expressions can be compared")
    if _bad(x) or _bad(y):  # 1/0, 0/0: never a correct answer, not even to itself
        return Outcome(False, "undefined value")
    if x == y:
        return Outcome(True, "exact")
    if _infinite(x) or _infinite(y):
        return Outcome(False, "infinite value")
    if x.is_Rational and y.is_Rational:
        return _decimal_tolerance(a, b, opts)
    differ = _numbers_differ(x, y)
    if differ:
        return _decimal_tolerance(a, b, opts)
    try:
        diff = x - y
    except (TypeError, ValueError):
        return NO
    if _is_zero_symbolically(diff):
        return Outcome(True, "symbolic")
    if differ is False and _numeric_identity(x, y):
        return Outcome(True, "numeric identity (30 digits)")
    return _decimal_tolerance(a, b, opts)


def scalar_equal(a: Scalar, b: Scalar, opts: Options) -> Outcome:
    out = _scalar_core(a, b, opts)
    if out.equal or opts.strict:
        return out
    # 25% against 0.25; 30 degrees against pi/6
    if a.percent != b.percent:
        p, q = (a, b) if a.percent else (b, a)
        alt = _scaled(p, Rational(1, 100))
        if _scalar_core(alt, q, opts).equal:
            return Outcome(True, "percent as a fraction")
    if a.degrees != b.degrees:
        p, q = (a, b) if a.degrees else (b, a)
        alt = _scaled(p, sympy.pi / 180)
        if _scalar_core(alt, q, opts).equal:
            return Outcome(True, "degrees as radians")
    return out


def _scaled(s: Scalar, factor: Expr) -> Scalar:
    return Scalar(s.expr * factor, places=None, approx=s.approx, huge=s.huge)


# --- relations -------------------------------------------------------------------------------------
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}


def _single_symbol(s: Scalar) -> sympy.Symbol | None:
    return s.expr if isinstance(s.expr, sympy.Symbol) else None


def _relation_to_intervals(r: Relation) -> IntervalSet | None:
    """`x > 5`, `5 < x`, `-2 <= x <= 7`, `x \\in ...` for one variable and constant bounds."""
    parts, ops = r.parts, r.ops
    if any(op in ("=", "!=") for op in ops):
        return None
    if len(parts) == 2:
        for absval, bound, op in ((parts[0], parts[1], ops[0]), (parts[1], parts[0], _FLIP[ops[0]])):
            # |x| < c
            if isinstance(absval.expr, sympy.Abs) and isinstance(absval.expr.args[0], sympy.Symbol) and not bound.expr.free_symbols:
                neg = Scalar(-bound.expr, approx=bound.approx)
                if op in ("<", "<="):
                    return IntervalSet(((neg, bound, op == "<=", op == "<="),))
                inf, ninf = Scalar(sympy.oo), Scalar(-sympy.oo)
                return IntervalSet(((ninf, neg, False, op == ">="), (bound, inf, op == ">=", False)))
        sym = _single_symbol(parts[0])
        if sym is not None and not parts[1].expr.free_symbols:
            return _bound(parts[1], ops[0])
        sym = _single_symbol(parts[1])
        if sym is not None and not parts[0].expr.free_symbols:
            return _bound(parts[0], _FLIP[ops[0]])
        return None
    if len(parts) == 3 and _single_symbol(parts[1]) is not None:
        lo, hi = parts[0], parts[2]
        if lo.expr.free_symbols or hi.expr.free_symbols:
            return None
        if ops[0] in ("<", "<=") and ops[1] in ("<", "<="):
            return IntervalSet(((lo, hi, ops[0] == "<=", ops[1] == "<="),))
        if ops[0] in (">", ">=") and ops[1] in (">", ">="):
            return IntervalSet(((hi, lo, ops[1] == ">=", ops[0] == ">="),))
    return None


def _bound(value: Scalar, op: str) -> IntervalSet:
    """The set {x : x op value}."""
    inf = Scalar(sympy.oo)
    ninf = Scalar(-sympy.oo)
    if op == ">":
        return IntervalSet(((value, inf, False, False),))
    if op == ">=":
        return IntervalSet(((value, inf, True, False),))
    if op == "<":
        return IntervalSet(((ninf, value, False, False),))
    return IntervalSet(((ninf, value, False, True),))


def _relation_equal(r1: Relation, r2: Relation, opts: Options) -> Outcome:
    s1, s2 = _relation_to_intervals(r1), _relation_to_intervals(r2)
    if s1 is not None and s2 is not None:
        return _intervals_equal(s1, s2, opts)
    if len(r1.parts) != 2 or len(r2.parts) != 2:
        if len(r1.parts) == len(r2.parts) and r1.ops == r2.ops:
            for p, q in zip(r1.parts, r2.parts):
                if not scalar_equal(p, q, opts).equal:
                    return NO
            return Outcome(True, "chain part by part")
        return NO
    (a1, b1), (a2, b2) = r1.parts, r2.parts
    op1, op2 = r1.ops[0], r2.ops[0]
    if op1 in (">", ">="):
        a1, b1, op1 = b1, a1, _FLIP[op1]
    if op2 in (">", ">="):
        a2, b2, op2 = b2, a2, _FLIP[op2]
    if op1 != op2:
        return Outcome(False, "different relation")
    # y = ... against y = ...: compare right-hand sides (keeps decimal tolerance available)
    if op1 == "=":
        for (l1, r1_), (l2, r2_) in (((a1, b1), (a2, b2)), ((b1, a1), (b2, a2)), ((a1, b1), (b2, a2)), ((b1, a1), (a2, b2))):
            s1_, s2_ = _single_symbol(l1), _single_symbol(l2)
            if s1_ is not None and s1_ == s2_ and not r1_.expr.has(s1_) and not r2_.expr.has(s2_):
                out = scalar_equal(r1_, r2_, opts)
                if out.equal:
                    return Outcome(True, f"equation, {out.method}")
    if a1.huge or b1.huge or a2.huge or b2.huge:
        raise VerifierFailure("a value in the equation is too large to evaluate")
    d1 = a1.expr - b1.expr
    d2 = a2.expr - b2.expr
    if d1 == 0 or d2 == 0:
        return Outcome(d1 == d2, "trivial relation")
    ratio = _constant_ratio(d1, d2)
    if ratio is None:
        return Outcome(False, "different relation")
    if op1 in ("<", "<=") and not ratio > 0:
        return Outcome(False, "inequality reversed")
    return Outcome(True, "same relation up to a constant factor")


def _constant_ratio(d1: Expr, d2: Expr) -> mpmath.mpf | None:
    """The constant c with d1 = c*d2, or None."""
    try:
        if _size_ok(d1) and _size_ok(d2):
            ratio = sympy.cancel(d1 / d2)
            if ratio.is_number and ratio != 0 and not _bad(ratio):
                value = _evaluate(ratio, 20)
                if value is not None and value.imag == 0:
                    return value.real
    except (TypeError, ValueError, ZeroDivisionError, sympy.PolynomialError, RecursionError):
        pass
    values = []
    symbols = _symbols(d1, d2)
    for point in range(4):
        v1, v2 = _evaluate(d1, 30, point, symbols), _evaluate(d2, 30, point, symbols)
        if v1 is None or v2 is None or v2 == 0:
            return None
        values.append(v1 / v2)
    first = values[0]
    if first == 0 or first.imag != 0 or any(not _close(v, first, mpmath.mpf(10) ** -20) for v in values[1:]):
        return None
    return first.real


# --- sets, intervals, sequences, matrices ----------------------------------------------------------
def _to_intervals(ans: Answer) -> IntervalSet | None:
    if isinstance(ans, IntervalSet):
        return ans
    if isinstance(ans, Seq) and ans.kind == "tuple" and len(ans.items) == 2 and all(isinstance(i, Scalar) for i in ans.items):
        if ans.open_ in "([" and ans.close in ")]":
            a, b = ans.items
            return IntervalSet(((a, b, ans.open_ == "[", ans.close == "]"),))  # type: ignore[arg-type]
    if isinstance(ans, Relation):
        return _relation_to_intervals(ans)
    if isinstance(ans, Seq) and ans.kind == "list" and ans.items and all(isinstance(i, Relation) for i in ans.items):
        # `x < 2 or x > 3`: a union
        sets = [_relation_to_intervals(i) for i in ans.items]  # type: ignore[arg-type]
        if all(s is not None for s in sets):
            return IntervalSet(tuple(p for s in sets for p in s.pieces))  # type: ignore[union-attr]
    return None


def _canonical(pieces: IntervalSet) -> list[tuple[Scalar, Scalar, bool, bool]] | None:
    """Merge overlapping pieces and order them, via SymPy sets; None when endpoints are symbolic."""
    approx = any(p[0].approx or p[1].approx for p in pieces.pieces)
    if any(p[0].huge or p[1].huge for p in pieces.pieces):
        raise VerifierFailure("an interval endpoint is too large to evaluate")
    if any(p[0].expr.free_symbols or p[1].expr.free_symbols for p in pieces.pieces):
        return None
    sets = []
    for a, b, lc, rc in pieces.pieces:
        if a.expr.is_extended_real is False or b.expr.is_extended_real is False:
            return None
        try:
            sets.append(sympy.Interval(a.expr, b.expr, not lc, not rc))
        except (TypeError, ValueError):
            return None
    union = sympy.Union(*sets)
    args = union.args if isinstance(union, sympy.Union) else (union,)
    out: list[tuple[Scalar, Scalar, bool, bool]] = []
    for piece in args:
        if isinstance(piece, sympy.Interval):
            out.append((Scalar(piece.start, approx=approx), Scalar(piece.end, approx=approx),
                        not piece.left_open, not piece.right_open))
        elif isinstance(piece, sympy.FiniteSet):
            out += [(Scalar(e, approx=approx), Scalar(e, approx=approx), True, True) for e in piece.args]
        elif piece is sympy.S.EmptySet:
            continue
        else:
            return None
    return out


def _intervals_equal(s1: IntervalSet, s2: IntervalSet, opts: Options) -> Outcome:
    c1, c2 = _canonical(s1), _canonical(s2)
    if c1 is None or c2 is None:
        c1, c2 = list(s1.pieces), list(s2.pieces)
        return _match_unordered(c1, c2, lambda p, q: _piece_equal(p, q, opts), "intervals")
    if len(c1) != len(c2):
        return Outcome(False, "different number of intervals")
    for p, q in zip(c1, c2):
        if not _piece_equal(p, q, opts):
            return Outcome(False, "different interval")
    return Outcome(True, "same intervals")


def _piece_equal(p: tuple[Scalar, Scalar, bool, bool], q: tuple[Scalar, Scalar, bool, bool], opts: Options) -> bool:
    def closed_end(value: Scalar, closed: bool) -> bool:
        return closed and not _infinite(value.expr)

    if closed_end(p[0], p[2]) != closed_end(q[0], q[2]) or closed_end(p[1], p[3]) != closed_end(q[1], q[3]):
        return False
    return scalar_equal(p[0], q[0], opts).equal and scalar_equal(p[1], q[1], opts).equal


def _match_unordered(xs: list, ys: list, eq: Callable[[object, object], bool], what: str) -> Outcome:
    if len(xs) != len(ys):
        return Outcome(False, f"{len(ys)} {what} where {len(xs)} were expected")
    if len(xs) > _MAX_ITEMS:
        raise VerifierFailure(f"too many {what} to compare ({len(xs)})")
    unused = list(range(len(ys)))
    for x in xs:
        for j in unused:
            if eq(x, ys[j]):
                unused.remove(j)
                break
        else:
            return Outcome(False, f"{what} differ")
    return Outcome(True, f"same {what} (any order)")


def _seq_equal(ref: Seq, ans: Seq, opts: Options) -> Outcome:
    def eq(x: object, y: object) -> bool:
        return equivalent(x, y, opts).equal  # type: ignore[arg-type]

    # interval notation on either side: compare as sets of reals
    if (ref.kind == "tuple" and ans.kind == "tuple" and len(ref.items) == 2 == len(ans.items)
            and (ref.open_ + ref.close != "()" or ans.open_ + ans.close != "()")):
        s1, s2 = _to_intervals(ref), _to_intervals(ans)
        if s1 is not None and s2 is not None:
            return _intervals_equal(s1, s2, opts)
    if ref.kind == "tuple" and ans.kind in ("tuple", "list"):
        if ans.kind != "tuple":
            # (a, b) may be a point or an interval; a bare list of values is neither
            return Outcome(False, "a list of values where a parenthesised tuple was expected")
        if len(ref.items) != len(ans.items):
            return Outcome(False, f"{len(ans.items)} components where {len(ref.items)} were expected")
        for x, y in zip(ref.items, ans.items):
            if not eq(x, y):
                return Outcome(False, "components differ (order matters)")
        return Outcome(True, "same components in order")
    if ref.kind == "tuple" and ans.kind == "set":
        return Outcome(False, "a set where an ordered tuple was expected")
    if ans.kind == "tuple" and opts.strict and ref.kind != "tuple":
        return Outcome(False, "an ordered tuple where a set was expected")
    return _match_unordered(list(ref.items), list(ans.items), eq, "values")


def _matrix_cells(m: MatrixAnswer) -> list[Scalar]:
    return [c for row in m.rows for c in row]


def _matrix_equal(ref: MatrixAnswer, ans: Answer, opts: Options) -> Outcome:
    if isinstance(ans, MatrixAnswer):
        if len(ref.rows) != len(ans.rows) or len(ref.rows[0]) != len(ans.rows[0]):
            return Outcome(False, "different matrix shape")
        cells = zip(_matrix_cells(ref), _matrix_cells(ans))
    elif isinstance(ans, Seq) and ans.kind == "tuple" and not opts.strict and (len(ref.rows) == 1 or len(ref.rows[0]) == 1):
        flat = _matrix_cells(ref)
        if len(flat) != len(ans.items) or not all(isinstance(i, Scalar) for i in ans.items):
            return Outcome(False, "different vector length")
        cells = zip(flat, ans.items)  # type: ignore[arg-type]
    else:
        return Outcome(False, "expected a matrix")
    for x, y in cells:
        if not scalar_equal(x, y, opts).equal:
            return Outcome(False, "matrix entries differ")
    return Outcome(True, "same matrix entries")


# --- dispatch --------------------------------------------------------------------------------------
def _eq_value(r: Relation) -> Scalar | None:
    """`x = 3` -> 3: an equation whose left side is one variable (or whose sides are all constants
    that agree, like `2+3=5`) stands for its value."""
    if all(op == "=" for op in r.ops):
        if len(r.parts) == 2:
            lhs, rhs = r.parts
            if _single_symbol(lhs) is not None and not rhs.expr.has(lhs.expr):
                return rhs
            if _single_symbol(rhs) is not None and not lhs.expr.has(rhs.expr) and lhs.expr.is_number:
                return lhs
        if all(not p.expr.free_symbols and not p.huge for p in r.parts):
            last = r.parts[-1]
            if all(scalar_equal(p, last, Options(strict=True)).equal for p in r.parts[:-1]):
                return last
    return None


def equivalent(ref: Answer, ans: Answer, opts: Options = Options()) -> Outcome:
    """Compare a parsed answer with the parsed reference."""
    if isinstance(ans, Empty):
        return Outcome(False, ans.reason)
    if isinstance(ref, Empty):
        raise VerifierFailure("the reference answer is empty")
    if isinstance(ref, Choice):
        letter = _choice_letter(ans)
        return Outcome(letter == ref.letter, "choice letter" if letter == ref.letter else "different choice")
    if isinstance(ans, Choice):
        return Outcome(False, "a choice letter where a value was expected")
    if isinstance(ref, Text) or isinstance(ans, Text):
        if isinstance(ref, Text) and isinstance(ans, Text):
            return Outcome(ref.text == ans.text, "same text" if ref.text == ans.text else "different text")
        return Outcome(False, "text against a mathematical answer")
    if isinstance(ref, BaseNumeral) or isinstance(ans, BaseNumeral):
        return _base_equal(ref, ans)
    if isinstance(ref, MatrixAnswer):
        return _matrix_equal(ref, ans, opts)
    if isinstance(ans, MatrixAnswer):
        if isinstance(ref, Seq):
            return _matrix_equal(ans, ref, opts)
        return Outcome(False, "a matrix where a value was expected")
    if isinstance(ref, Relation) and isinstance(ans, Relation):
        return _relation_equal(ref, ans, opts)
    if isinstance(ref, Relation) or isinstance(ans, Relation):
        rel, other = (ref, ans) if isinstance(ref, Relation) else (ans, ref)
        assert isinstance(rel, Relation)
        value = _eq_value(rel)
        if value is not None:
            return equivalent(value, other, opts) if rel is ref else equivalent(ref, value, opts)
        as_set = _relation_to_intervals(rel)
        other_set = _to_intervals(other)
        if as_set is not None and other_set is not None:
            return _intervals_equal(as_set, other_set, opts)
        return Outcome(False, "a relation against a value")
    if isinstance(ref, IntervalSet) or isinstance(ans, IntervalSet):
        s1, s2 = _to_intervals(ref), _to_intervals(ans)
        if s1 is None or s2 is None:
            return Outcome(False, "an interval against something else")
        return _intervals_equal(s1, s2, opts)
    if isinstance(ref, Seq) and isinstance(ans, Seq):
        return _seq_equal(ref, ans, opts)
    if isinstance(ref, Seq):
        if len(ref.items) == 1 and not opts.strict:
            return equivalent(ref.items[0], ans, opts)
        return Outcome(False, f"one value where {len(ref.items)} were expected")
    if isinstance(ans, Seq):
        if len(ans.items) == 1 and not opts.strict and not ans.hedge:
            return equivalent(ref, ans.items[0], opts)
        kind = "a hedged answer" if ans.hedge else f"{len(ans.items)} values"
        return Outcome(False, f"{kind} for a single-valued answer")
    assert isinstance(ref, Scalar) and isinstance(ans, Scalar)
    return scalar_equal(ref, ans, opts)


def _choice_letter(ans: Answer) -> str | None:
    if isinstance(ans, Choice):
        return ans.letter
    if isinstance(ans, Scalar) and isinstance(ans.expr, sympy.Symbol) and ans.expr.name in "ABCDE":
        return ans.expr.name
    if isinstance(ans, Scalar) and ans.expr == sympy.E:
        return "E"
    return None


def _base_equal(ref: Answer, ans: Answer) -> Outcome:
    if isinstance(ref, BaseNumeral) and isinstance(ans, BaseNumeral):
        ok = ref.base == ans.base and ref.digits == ans.digits
        return Outcome(ok, "same numeral" if ok else "different numeral")
    if isinstance(ref, BaseNumeral):
        # the response may leave out the subscript: 204 for 204_5
        if isinstance(ans, Scalar) and ans.expr.is_Integer and 0 <= ans.expr < 10 ** 60 and str(ans.expr) == ref.digits:
            return Outcome(True, f"numeral digits (base {ref.base} implied)")
        return Outcome(False, "different numeral")
    assert isinstance(ans, BaseNumeral)
    if isinstance(ref, Scalar) and ref.expr.is_Integer and int(ans.digits, ans.base) == ref.expr:
        return Outcome(True, f"base-{ans.base} numeral of the same number")
    return Outcome(False, "different number")


__all__ = ["Options", "Outcome", "VerifierFailure", "equivalent", "scalar_equal"]
