"""LaTeX or plain-text math -> SymPy, by a small recursive-descent parser that never calls `eval`.

Why not an existing parser: SymPy's own LaTeX parsers are pinned to one ANTLR runtime version (antlr
backend) or Earley-based (lark backend, 20-400 ms per expression measured here) and know no sets,
intervals, `\\pm`, percent or degree signs; latex2sympy2_extended (what math-verify uses) is ANTLR-based
(1-50 ms per expression here); and `sympy.parse_expr` runs `eval` on its input, which a reward must never
do with model output. So this module tokenises the answer and builds SymPy objects directly (under 1 ms for
a typical answer); everything mathematical (arithmetic, radicals, trig, logs, factorials) is SymPy's.

Guards keep every construction cheap: a power or factorial whose value would exceed ``MAX_BITS``, and a
constant raised to (or a trig function of) a number beyond 2^``MAX_ARG_BITS``, is kept unevaluated and
the result is flagged ``huge`` (the comparer then only accepts identical trees); integer literals longer
than ``MAX_DIGITS`` and nesting deeper than ``MAX_DEPTH`` are rejected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import mpmath
import sympy
from sympy import Expr, Integer, Rational

MAX_BITS = 400_000  # ~120,000 decimal digits: beyond this a power or factorial stays unevaluated
MAX_DIGITS = 20_000  # longest integer literal read
MAX_DEPTH = 60  # deepest nesting of groups
MAX_FACTORIAL = 3_000


class LatexParseError(ValueError):
    """The text is not a mathematical expression this parser understands."""


@dataclass
class ParseState:
    """Facts gathered while parsing one expression."""

    decimal_places: list[int] = field(default_factory=list)  # one entry per decimal literal
    huge: bool = False  # some power/factorial was too large to evaluate
    numbers: int = 0  # number literals seen
    tokens: int = 0


# --- symbols and vocabulary ------------------------------------------------------------------------
GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta", "iota",
    "kappa", "lambda", "mu", "nu", "xi", "omicron", "rho", "varrho", "sigma", "varsigma", "tau", "upsilon",
    "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma",
    "Upsilon", "Phi", "Psi", "Omega",
}
_UNARY_FUNCS = {
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec, "csc": sympy.csc,
    "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan, "arccot": sympy.acot,
    "arcsec": sympy.asec, "arccsc": sympy.acsc, "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan,
    "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "coth": sympy.coth,
    "exp": sympy.exp, "ln": sympy.log, "log": sympy.log, "lg": None,
    "sqrt": sympy.sqrt, "abs": sympy.Abs, "floor": sympy.floor, "ceil": sympy.ceiling,
}
_INVERSE = {"sin": "arcsin", "cos": "arccos", "tan": "arctan", "cot": "arccot", "sec": "arcsec", "csc": "arccsc"}
_MULTI_FUNCS = {"gcd": sympy.gcd, "lcm": sympy.lcm, "max": sympy.Max, "min": sympy.Min}
# Words read as one token in plain text (`sqrt(2)`, `pi/2`); anything else splits into letters.
PLAIN_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "iota", "kappa", "lambda", "sigma",
               "upsilon", "omega", "phi"}
PLAIN_WORDS = sorted(set(_UNARY_FUNCS) | set(_MULTI_FUNCS) | PLAIN_GREEK | {"pi", "infinity", "infty", "inf", "oo"},
                     key=len, reverse=True)
_RELATIONS = {"=": "=", "<": "<", ">": ">", "leq": "<=", "le": "<=", "leqslant": "<=", "geq": ">=",
              "ge": ">=", "geqslant": ">=", "neq": "!=", "ne": "!=", "lt": "<", "gt": ">",
              "approx": "=", "equiv": "="}


# --- tokens --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tok:
    kind: str  # num, id, cmd, word, op, end
    text: str
    space_before: bool = False


_NUM_RE = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_SCI_RE = re.compile(r"[eE]([+-]?\d{1,4})(?![A-Za-z])")
_SPACE_CMDS = {"quad", "qquad", "displaystyle", "textstyle", "limits", "nolimits", "left", "right",
               "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "middle",
               "mathrm", "mathit", "mathbf", "boldsymbol", "mathsf", "text", "textrm", "textit",
               "textbf", "mbox", "operatorname", "ensuremath", "hbox"}


def tokenize(text: str) -> list[Tok]:
    """Split cleaned LaTeX/plain math into tokens. Letters are single-letter ids except the
    plain-text words in PLAIN_WORDS; `\\name` is a command; numbers keep their decimal point."""
    toks: list[Tok] = []
    i, n = 0, len(text)
    space = False
    while i < n:
        c = text[i]
        if c.isspace():
            space = True
            i += 1
            continue
        if c == "\\":
            if i + 1 < n and text[i + 1] == "\\":
                toks.append(Tok("op", "\\\\", space))
                i += 2
            elif i + 1 < n and text[i + 1].isalpha():
                j = i + 1
                while j < n and text[j].isalpha():
                    j += 1
                name = text[i + 1:j]
                i = j
                if name in _SPACE_CMDS:
                    space = True
                    continue
                toks.append(Tok("cmd", name, space))
            elif i + 1 < n:
                sym = text[i + 1]
                i += 2
                if sym in "{}|":
                    toks.append(Tok("op", "\\" + sym, space))
                elif sym in ",;:! ":
                    space = True
                    continue
                else:
                    toks.append(Tok("op", sym, space))
            else:
                i += 1
                continue
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m = _NUM_RE.match(text, i)
            assert m is not None
            num = m.group(0)
            i = m.end()
            if num.endswith("."):  # "5." at the end of a sentence is the integer 5
                num = num[:-1]
                i -= 1
                if i < n and text[i] == ".":
                    i += 1
            toks.append(Tok("num", num, space))
            sci = _SCI_RE.match(text, i)
            if sci:
                exp_digits = sci.group(1)
                toks += [Tok("op", "*"), Tok("num", "10"), Tok("op", "^"), Tok("op", "{")]
                if exp_digits.startswith("-"):
                    toks.append(Tok("op", "-"))
                toks += [Tok("num", exp_digits.lstrip("+-")), Tok("op", "}")]
                i = sci.end()
        elif c.isalpha():
            j = i
            while j < n and text[j].isalpha():
                j += 1
            run = text[i:j]
            k = 0
            while k < len(run):
                for word in PLAIN_WORDS:
                    if run.startswith(word, k) and len(word) > 1 and (k + len(word) == len(run) or word != "e"):
                        toks.append(Tok("word", word, space))
                        k += len(word)
                        break
                else:
                    toks.append(Tok("id", run[k], space))
                    k += 1
                space = False
            i = j
        elif c == "*" and text.startswith("**", i):
            toks.append(Tok("op", "^", space))
            i += 2
        elif c in "<>" and text.startswith("=", i + 1):
            toks.append(Tok("op", c + "=", space))
            i += 2
        elif c == "!" and text.startswith("=", i + 1):
            toks.append(Tok("op", "!=", space))
            i += 2
        else:
            toks.append(Tok("op", c, space))
            i += 1
        space = False
    toks.append(Tok("end", ""))
    return toks


# --- guarded construction -----------------------------------------------------------------------
def _int_from_digits(digits: str) -> int:
    if len(digits) > MAX_DIGITS:
        raise LatexParseError(f"a number with {len(digits)} digits is too long")
    value = 0
    for start in range(0, len(digits), 4000):  # int() refuses > 4300 digits at once (Python 3.11+)
        chunk = digits[start:start + 4000]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def _magnitude_bits(x: Expr) -> float | None:
    """log2 of |x| for a rational, None when unknown."""
    if isinstance(x, Rational):
        p, q = abs(int(x.p)), int(x.q)
        return max(p.bit_length(), q.bit_length())
    return None


MAX_ARG_BITS = 1_000  # |x| above 2^1000 as an exponent of a constant or a trig argument stays unevaluated


def _log2_abs(x: Expr) -> float | None:
    """About log2(|x|) for a number, None when unknown. Cheap: exact for rationals, else 5 digits."""
    if x.is_Rational:
        return float(abs(int(x.p)).bit_length() - int(x.q).bit_length())
    if not x.is_number or x.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return None
    try:
        value = x.evalf(5)._to_mpmath(20)
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    if value == 0:
        return float("-inf")
    return float(mpmath.mag(value))


class Parser:
    """Precedence climbing over tokens: relation < additive < multiplicative/implicit < unary < power."""

    def __init__(self, tokens: list[Tok], state: ParseState) -> None:
        self.toks = tokens
        self.pos = 0
        self.state = state
        self.depth = 0
        self.abs_depth = 0

    # -- token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.pos]

    def peek(self, offset: int = 1) -> Tok:
        return self.toks[min(self.pos + offset, len(self.toks) - 1)]

    def next(self) -> Tok:
        tok = self.toks[self.pos]
        if tok.kind != "end":
            self.pos += 1
        return tok

    def at(self, kind: str, text: str | None = None) -> bool:
        tok = self.tok
        return tok.kind == kind and (text is None or tok.text == text)

    def at_op(self, *texts: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in texts

    def expect_op(self, text: str) -> None:
        if not self.at_op(text):
            raise LatexParseError(f"expected {text!r}, found {self.tok.text or 'the end'!r}")
        self.next()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LatexParseError("expression nested too deeply")

    def leave(self) -> None:
        self.depth -= 1

    # -- builders that refuse to evaluate huge values
    def build_pow(self, base: Expr, exp: Expr) -> Expr:
        if self.state.huge:
            return sympy.Pow(base, exp, evaluate=False)
        if exp.is_Integer and base.is_Rational:
            bits = _magnitude_bits(base)
            if bits is not None and bits > 1 and abs(int(exp)) * bits > MAX_BITS:
                self.state.huge = True
                return sympy.Pow(base, exp, evaluate=False)
        if exp.is_Rational and base.is_number and not exp.is_Integer:
            if abs(exp.p) > 10_000 or exp.q > 10_000:
                self.state.huge = True
                return sympy.Pow(base, exp, evaluate=False)
        if exp.is_Rational and abs(exp) > 10_000 and base.free_symbols:
            self.state.huge = True
            return sympy.Pow(base, exp, evaluate=False)
        if base.is_number and exp.is_number and not (base.is_Rational and exp.is_Rational) and base not in (0, 1, -1):
            bits = _log2_abs(exp)  # e^{10^{100000}}: evaluating it needs 100000 digits of precision
            if bits is not None and bits > MAX_ARG_BITS:
                self.state.huge = True
                return sympy.Pow(base, exp, evaluate=False)
        return sympy.Pow(base, exp)

    def build(self, fn: Any, *args: Expr) -> Expr:
        if self.state.huge:
            return fn(*args, evaluate=False)
        return fn(*args)

    def mul(self, a: Expr, b: Expr) -> Expr:
        return sympy.Mul(a, b, evaluate=not self.state.huge)

    def add(self, a: Expr, b: Expr) -> Expr:
        return sympy.Add(a, b, evaluate=not self.state.huge)

    def div(self, a: Expr, b: Expr) -> Expr:
        if b == 0 and not self.state.huge:
            return sympy.nan if a == 0 else sympy.zoo
        return self.mul(a, self.build_pow(b, Integer(-1)))

    def factorial(self, x: Expr) -> Expr:
        if x.is_Integer and (int(x) > MAX_FACTORIAL or self.state.huge):
            self.state.huge = True
            return sympy.factorial(x, evaluate=False)
        if x.is_Integer and int(x) < 0:
            return sympy.zoo
        if not x.is_Integer:  # SymPy's assumption queries on gamma of odd arguments can take seconds
            bits = _log2_abs(x) if x.is_number else None
            if bits is not None and bits > 12:
                self.state.huge = True
            return sympy.factorial(x, evaluate=False)
        return self.build(sympy.factorial, x)

    # -- grammar
    def parse(self) -> Expr:
        expr = self.additive()
        if not self.at("end"):
            raise LatexParseError(f"unexpected {self.tok.text!r}")
        return expr

    def additive(self) -> Expr:
        left = self.multiplicative()
        while self.at_op("+", "-"):
            op = self.next().text
            right = self.multiplicative()
            left = self.add(left, right if op == "+" else self.mul(Integer(-1), right))
        return left

    def starts_atom(self) -> bool:
        tok = self.tok
        if tok.kind in ("num", "id", "word"):
            return True
        if tok.kind == "cmd":
            return tok.text not in ("cdot", "times", "div", "cup", "cap", "in", "pm", "mp", "to",
                                    "rfloor", "rceil", "rvert", "rangle", "end", "setminus", "ast", "star",
                                    "ldots", "cdots", "dots") and tok.text not in _RELATIONS
        if tok.kind == "op":
            if tok.text in ("(", "{", "\\{", "["):
                return True
            if tok.text == "|":
                return self.abs_depth == 0
        return False

    def multiplicative(self) -> Expr:
        left = self.unary()
        while True:
            tok = self.tok
            if (tok.kind == "op" and tok.text in ("*", "/")) or (tok.kind == "cmd" and tok.text in ("cdot", "times", "div", "ast")):
                self.next()
                right = self.unary()
                left = self.div(left, right) if tok.text in ("/", "div") else self.mul(left, right)
            elif self.starts_atom():
                if self.tok.kind == "num" and self.pos > 0 and self.toks[self.pos - 1].kind == "num":
                    # `5 0` is not 5*0: two numbers side by side are a typo or a trick, not a product
                    raise LatexParseError("two numbers side by side")
                right = self.power()
                left = self.mul(left, right)
            else:
                return left

    def unary(self) -> Expr:
        if self.at_op("-"):
            self.next()
            return self.mul(Integer(-1), self.unary())
        if self.at_op("+"):
            self.next()
            return self.unary()
        return self.power()

    def power(self) -> Expr:
        base = self.postfix(self.atom())
        if self.at_op("^"):
            self.next()
            exp = self.exponent()
            base = self.build_pow(base, exp)
            base = self.postfix(base)
        return base

    def postfix(self, x: Expr) -> Expr:
        while self.at_op("!"):
            self.next()
            x = self.factorial(x)
        while self.at_op("'"):
            self.next()
        return x

    def exponent(self) -> Expr:
        self.enter()
        try:
            if self.at_op("{"):
                return self.group("{", "}")
            if self.at_op("-"):
                self.next()
                return self.mul(Integer(-1), self.exponent())
            if self.at_op("+"):
                self.next()
                return self.exponent()
            return self.postfix(self.atom(in_exponent=True))
        finally:
            self.leave()

    def group(self, open_: str, close: str) -> Expr:
        self.expect_op(open_)
        self.enter()
        saved_abs, self.abs_depth = self.abs_depth, 0
        inner = self.additive()
        self.abs_depth = saved_abs
        self.leave()
        self.expect_op(close)
        return inner

    def arg(self) -> Expr:
        """One macro argument: a braced group or a single token (`\\frac12` reads 1 and 2)."""
        tok = self.tok
        if tok.kind == "op" and tok.text == "{":
            return self.group("{", "}")
        if tok.kind == "num" and len(tok.text) > 1 and "." not in tok.text:
            self.toks[self.pos] = Tok("num", tok.text[1:], False)
            self.state.numbers += 1
            return Integer(int(tok.text[0]))
        if tok.kind in ("num", "id", "cmd", "word"):
            return self.atom()
        raise LatexParseError(f"expected an argument, found {tok.text or 'the end'!r}")

    def int_arg(self) -> int | None:
        """The integer in the next argument when it is a plain integer, without consuming it."""
        tok = self.tok
        if tok.kind == "op" and tok.text == "{":
            if self.peek().kind == "num" and "." not in self.peek().text and self.peek(2).kind == "op" and self.peek(2).text == "}":
                return int(self.peek().text) if len(self.peek().text) < 30 else None
            return None
        if tok.kind == "num" and "." not in tok.text:
            return int(tok.text[0])
        return None

    def number(self, tok: Tok, in_exponent: bool) -> Expr:
        text = tok.text
        self.state.numbers += 1
        if "." in text:
            whole, frac = text.split(".")
            self.state.decimal_places.append(len(frac))
            value: Expr = Rational(_int_from_digits((whole or "0") + frac), 10 ** len(frac)) if frac else Integer(_int_from_digits(whole))
        else:
            value = Integer(_int_from_digits(text))
        # A subscript base: 204_5 is the numeral 204 in base 5.
        if self.at_op("_") and "." not in text:
            save = self.pos
            self.next()
            base_tok = self.next()
            if base_tok.kind == "op" and base_tok.text == "{":
                base_tok = self.next()
                if not self.at_op("}"):
                    raise LatexParseError("malformed base subscript")
                self.next()
            if base_tok.kind != "num" or not base_tok.text.isdigit() or not 2 <= int(base_tok.text) <= 36:
                self.pos = save
                raise LatexParseError("malformed base subscript")
            try:
                value = Integer(int(text, int(base_tok.text)))
            except ValueError:
                raise LatexParseError(f"{text} is not a numeral in base {base_tok.text}") from None
        # A mixed number: 137\frac{1}{2} is 137 + 1/2 (only a proper fraction of integers).
        elif not in_exponent and "." not in text and self.at("cmd", "frac"):
            save = self.pos
            self.next()
            num = self.int_arg()
            if num is not None:
                num_expr = self.arg()
                den = self.int_arg()
                if den is not None:
                    den_expr = self.arg()
                    if 0 <= int(num_expr) < int(den_expr):
                        return value + Rational(int(num_expr), int(den_expr))
            self.pos = save
        return value

    def atom(self, in_exponent: bool = False) -> Expr:
        self.enter()
        try:
            return self._atom(in_exponent)
        finally:
            self.leave()

    def _atom(self, in_exponent: bool) -> Expr:
        tok = self.next()
        self.state.tokens += 1
        if tok.kind == "num":
            return self.number(tok, in_exponent)
        if tok.kind == "id":
            return self.symbol(tok.text)
        if tok.kind == "word":
            return self.word(tok.text)
        if tok.kind == "op":
            if tok.text == "(":
                self.pos -= 1
                return self.group("(", ")")
            if tok.text == "[":
                self.pos -= 1
                return self.group("[", "]")
            if tok.text == "{":
                self.pos -= 1
                return self.group("{", "}")
            if tok.text == "\\{":
                self.pos -= 1
                return self.group("\\{", "\\}")
            if tok.text == "|" and self.abs_depth == 0:
                self.abs_depth += 1
                inner = self.additive()
                self.abs_depth -= 1
                self.expect_op("|")
                return self.build(sympy.Abs, inner)
            raise LatexParseError(f"unexpected {tok.text!r}")
        if tok.kind == "cmd":
            return self.command(tok.text)
        raise LatexParseError("unexpected end of expression")

    def symbol(self, name: str) -> Expr:
        if name == "e" and not self.at_op("_"):
            return sympy.E
        if name == "i" and not self.at_op("_"):
            return sympy.I
        if self.at_op("_"):
            self.next()
            sub = self.subscript_text()
            return sympy.Symbol(f"{name}_{sub}")
        return sympy.Symbol(name)

    def subscript_text(self) -> str:
        if self.at_op("{"):
            self.next()
            parts = []
            depth = 1
            while not self.at("end"):
                tok = self.next()
                if tok.kind == "op" and tok.text == "{":
                    depth += 1
                elif tok.kind == "op" and tok.text == "}":
                    depth -= 1
                    if depth == 0:
                        break
                parts.append(tok.text)
            return "".join(parts)
        tok = self.next()
        if tok.kind == "end":
            raise LatexParseError("empty subscript")
        return tok.text[0] if tok.kind == "num" else tok.text

    def word(self, word: str) -> Expr:
        if word == "pi":
            return sympy.pi
        if word in ("infinity", "infty", "inf", "oo"):
            return sympy.oo
        if word in PLAIN_GREEK:
            return sympy.Symbol(word)
        return self.function(word)

    def command(self, name: str) -> Expr:
        if name in ("frac", "cfrac", "dfrac", "tfrac"):
            num = self.arg()
            den = self.arg()
            return self.div(num, den)
        if name in ("binom", "dbinom", "tbinom", "choose"):
            n_, k_ = self.arg(), self.arg()
            if n_.is_Integer and int(n_) > 100_000:
                self.state.huge = True
                return sympy.binomial(n_, k_, evaluate=False)
            if not (n_.is_Integer and k_.is_Integer):
                return sympy.binomial(n_, k_, evaluate=False)
            return self.build(sympy.binomial, n_, k_)
        if name == "sqrt":
            index: Expr | None = None
            if self.at_op("["):
                index = self.group("[", "]")
            radicand = self.arg()
            if index is None:
                return self.build_pow(radicand, Rational(1, 2))
            return self.build_pow(radicand, self.div(Integer(1), index))
        if name in ("pi", "uppi"):
            return sympy.pi
        if name in ("infty", "infinity", "inf"):
            return sympy.oo
        if name in ("imath", "jmath"):
            return sympy.I
        if name in GREEK:
            return sympy.Symbol(name.replace("var", "") if name.startswith("var") else name)
        if name in _UNARY_FUNCS or name in _MULTI_FUNCS or name in ("arg", "det"):
            return self.function(name)
        if name in ("lfloor", "lceil"):
            close = "rfloor" if name == "lfloor" else "rceil"
            inner = self.additive()
            if not self.at("cmd", close):
                raise LatexParseError(f"missing \\{close}")
            self.next()
            return self.build(sympy.floor if name == "lfloor" else sympy.ceiling, inner)
        if name in ("lvert", "vert", "lVert", "Vert"):
            inner = self.additive()
            if not (self.at("cmd") and self.tok.text in ("rvert", "vert", "rVert", "Vert")):
                raise LatexParseError("missing closing \\vert")
            self.next()
            return self.build(sympy.Abs, inner)
        if name == "boxed" or name == "fbox":
            return self.arg()
        if name == "overline":
            return self.arg()  # conjugate/bar notation; repeating decimals are rewritten before parsing
        if name == "exp":
            return self.function("exp")
        raise LatexParseError(f"unsupported command \\{name}")

    def function(self, name: str) -> Expr:
        """`\\sin x`, `\\sin(2x)`, `\\sin^2 x`, `\\sin^{-1} x`, `\\log_2 8`, `sqrt(2)`, `\\gcd(a, b)`."""
        power: Expr | None = None
        base: Expr | None = None
        if name in ("log", "lg") and self.at_op("_"):
            self.next()
            base = self.arg()
        if self.at_op("^"):
            self.next()
            power = self.exponent()
            if power == -1 and name in _INVERSE:
                name, power = _INVERSE[name], None
        if name in _MULTI_FUNCS:
            if not self.at_op("("):
                raise LatexParseError(f"\\{name} needs parenthesised arguments")
            self.next()
            args = [self.additive()]
            while self.at_op(","):
                self.next()
                args.append(self.additive())
            self.expect_op(")")
            if any(a.free_symbols for a in args) and name in ("gcd", "lcm"):
                raise LatexParseError(f"{name} of symbolic arguments")
            value = _MULTI_FUNCS[name](*args) if name in ("max", "min") else _reduce(_MULTI_FUNCS[name], args)
        else:
            if self.at_op("("):
                arg = self.group("(", ")")
            elif self.at_op("{"):
                arg = self.group("{", "}")
            elif self.at_op("[") and name == "sqrt":
                arg = self.group("[", "]")
            else:
                arg = self.function_arg()
            if name == "lg":
                value = sympy.log(arg, 10)
            elif name in ("arg", "det"):
                raise LatexParseError(f"unsupported function {name}")
            elif name == "log" and base is not None:
                value = self.build(sympy.log, arg, base)
            elif name == "sqrt":
                value = self.build_pow(arg, Rational(1, 2))
            elif name == "exp":
                value = self.build_pow(sympy.E, arg)
            else:
                fn = _UNARY_FUNCS[name]
                bits = _log2_abs(arg) if arg.is_number and name not in ("ln", "log", "sqrt", "abs", "floor", "ceil") else None
                if bits is not None and bits > MAX_ARG_BITS:  # sin(10^{100000}) needs 100000 digits of pi
                    self.state.huge = True
                    value = fn(arg, evaluate=False)
                else:
                    value = self.build(fn, arg)
        if power is not None:
            value = self.build_pow(value, power)
        return value

    def function_arg(self) -> Expr:
        """An unparenthesised argument: a product of simple factors (`\\sin 2x` is sin(2x))."""
        if self.at_op("-"):
            self.next()
            return self.mul(Integer(-1), self.function_arg())
        value = self.power()
        while self.tok.kind in ("num", "id") or (self.tok.kind == "cmd" and (self.tok.text in GREEK or self.tok.text in ("pi", "frac", "sqrt"))):
            value = self.mul(value, self.power())
        return value


def _reduce(fn: Any, args: list[Expr]) -> Expr:
    value = args[0]
    for a in args[1:]:
        value = fn(value, a)
    return value


def parse_expression(text: str, state: ParseState | None = None) -> tuple[Expr, ParseState]:
    """Parse one cleaned expression (no top-level commas or relations) to SymPy."""
    state = state or ParseState()
    tokens = tokenize(text)
    if len(tokens) == 1:
        raise LatexParseError("empty expression")
    if len(tokens) > 1000:
        raise LatexParseError("expression too long")
    parser = Parser(tokens, state)
    try:
        expr = parser.parse()
    except RecursionError:
        raise LatexParseError("expression nested too deeply") from None
    except (TypeError, AttributeError, ZeroDivisionError, OverflowError) as exc:
        raise LatexParseError(f"cannot build expression: {type(exc).__name__}: {exc}") from None
    if not isinstance(expr, Expr):
        raise LatexParseError(f"not an expression: {type(expr).__name__}")
    return expr, state


__all__ = ["LatexParseError", "ParseState", "parse_expression", "tokenize", "MAX_BITS"]
