"""Tools a workflow lets the model call, how their calls are written, and how a call is run safely.

A tool is a function of its argument text, registered by a plugin (`register_tools`):

    fn(arguments: str, **options) -> str | ToolResult          (or async def)

Whatever happens inside it, `run_tool` returns a ToolResult the model can read: a malformed call, an unknown
tool, an exception, a call past its timeout and a flood of output all become an error *result* (the episode
goes on), never an exception that ends the episode or the run. Output is cut to a limit, keeping both ends.
"""
from __future__ import annotations

import ast
import asyncio
import contextvars
import inspect
import operator
import re
import threading
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from areal_core.errors import ConfigError


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: `output` (what the model reads), `error` when the call failed (the message
    the model reads instead), and facts for the transcript (`details`)."""

    output: str = ""
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """What the model reads: the output, then the error (a program's output before it timed out stays)."""
        if self.error is None:
            return self.output
        return (self.output.rstrip("\n") + "\n" if self.output.strip() else "") + f"error: {self.error}"


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: its name, function, the plugin that provides it, its version (recorded with evals), and
    the check of its options."""

    name: str
    fn: Callable[..., Any]
    plugin: str
    description: str = ""
    version: str = ""
    check: Callable[[dict[str, Any]], Any] | None = None  # raises on options the tool rejects (before a run)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def truncate(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to `limit` characters keeping both ends (a traceback's last line matters most), and how many
    characters were left out."""
    if len(text) <= limit:
        return text, 0
    marker = "\n...[{} characters cut]...\n"
    keep = max(0, limit - len(marker.format(len(text))))
    head, tail = text[: keep // 2], text[len(text) - (keep - keep // 2):] if keep else ""
    cut = len(text) - len(head) - len(tail)
    return head + marker.format(cut) + tail, cut


async def run_tool(spec: ToolSpec, arguments: str, *, timeout_s: float, max_output_chars: int,
                   options: dict[str, Any] | None = None) -> ToolResult:
    """Call a tool under its timeout; every failure is a ToolResult with `error` set. A sync tool runs in a
    thread of its own; past its timeout it is abandoned (the built-in `python` tool is also killed by its
    sandbox), so a hung tool costs a thread, never the episode."""
    clock = asyncio.get_running_loop()   # virtual under `areal plan` (plan/clock.py)
    started = clock.time()
    try:
        if spec.is_async:
            value = await asyncio.wait_for(spec.fn(arguments, **(options or {})), timeout_s)
        else:
            value = await asyncio.wait_for(_in_thread(spec.fn, arguments, options or {}), timeout_s)
    except asyncio.TimeoutError:
        return ToolResult(error=f"tool {spec.name!r} timed out after {timeout_s:g}s",
                          details={"timed_out": True, "time_s": round(clock.time() - started, 3)})
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - a tool may raise anything, SystemExit included
        message, _ = truncate(f"{type(exc).__name__}: {exc}", max_output_chars)
        return ToolResult(error=f"tool {spec.name!r} failed: {message}",
                          details={"time_s": round(clock.time() - started, 3)})
    if isinstance(value, str):
        value = ToolResult(output=value)
    elif not isinstance(value, ToolResult):
        return ToolResult(error=f"tool {spec.name!r} returned {type(value).__name__}; expected str or ToolResult")
    output, cut = truncate(value.output, max_output_chars)
    error = truncate(value.error, max_output_chars)[0] if value.error is not None else None
    details = {**value.details, "time_s": round(clock.time() - started, 3)}
    if cut:
        details["output_cut"] = cut
    return ToolResult(output=output, error=error, details=details)


def _in_thread(fn: Callable[..., Any], arguments: str, options: dict[str, Any]) -> "asyncio.Future[Any]":
    """`fn(arguments, **options)` in a daemon thread (an executor's worker could not be abandoned at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            value, ok = fn(arguments, **options), True
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting episode
            value, ok = exc, False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop closed while the tool ran
            pass

    context = contextvars.copy_context()   # the episode's (workflows/runtime.py's current_episode), as a task's
    threading.Thread(target=context.run, args=(work,), name="areal-tool", daemon=True).start()
    return future


# -- how calls are written ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str


@dataclass(frozen=True)
class CallFormat:
    """How a model writes a tool call: a regex with groups `name` (optional: `tool` names the one tool) and
    `args`, and the stop strings that end the generation right after a call."""

    pattern: str
    stop: tuple[str, ...]
    tool: str | None = None
    describe: str = ""

    def find(self, text: str) -> ToolCall | None | str:
        """The call the turn ends with; None when the turn holds none (a final answer); a message when it tried
        to call (it stopped on a stop string) but the call is malformed. The turn is read up to its first stop
        string: an engine stops on the token that completes it, which may carry more text (BPE merges `>` with
        a newline)."""
        ends = [text.index(s) + len(s) for s in self.stop if s in text]
        stopped = bool(ends)
        if stopped:
            text = text[: min(ends)]
        match = None
        for match in re.finditer(self.pattern, text, re.DOTALL):
            pass
        if match is not None:
            name = match.groupdict().get("name") or self.tool
            return ToolCall(name or "", match.group("args"))
        if stopped:
            return f"malformed tool call; write {self.describe}"
        return None


BUILTIN_FORMATS = {
    "xml": CallFormat(r'<tool name="(?P<name>[^"]*)">(?P<args>(?:(?!<tool ).)*?)</tool>\s*\Z', ("</tool>",),
                      describe='<tool name="NAME">ARGUMENTS</tool>'),
    # A fenced block: the language names the tool (python, calculator); the stop string needs the newline after
    # the closing fence, which the opening fence (```python) never has.
    "fenced": CallFormat(r"```(?P<name>[A-Za-z_]\w*)[ \t]*\n(?P<args>.*?)\n?```\s*\Z", ("```\n",),
                         describe="```TOOL\\nARGUMENTS\\n```"),
}


def call_format(value: Any, where: str) -> CallFormat:
    """The call format a workflow's `call_format` option names: "xml", "fenced", or {pattern, stop, tool}."""
    if isinstance(value, str):
        if value not in BUILTIN_FORMATS:
            raise ConfigError(f"{where}: call_format {value!r}: expected one of {', '.join(BUILTIN_FORMATS)} "
                              "or {pattern, stop, tool}")
        return BUILTIN_FORMATS[value]
    if not isinstance(value, dict) or not {"pattern", "stop"} <= set(value) or set(value) - {"pattern", "stop", "tool"}:
        raise ConfigError(f"{where}: call_format must be a name or a mapping with keys pattern, stop (and tool)")
    try:
        groups = re.compile(value["pattern"]).groupindex
    except re.error as exc:
        raise ConfigError(f"{where}: call_format.pattern does not compile: {exc}") from None
    if "args" not in groups or ("name" not in groups and not value.get("tool")):
        raise ConfigError(f"{where}: call_format.pattern needs a group (?P<args>...) and (?P<name>...) or a `tool`")
    stop = value["stop"]
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    if not stop or not all(isinstance(s, str) and s for s in stop):
        raise ConfigError(f"{where}: call_format.stop must be one or more non-empty strings")
    pattern = f"(?:{value['pattern']})" + r"\s*\Z"  # the call ends the turn (read up to its stop string)
    return CallFormat(pattern, stop, value.get("tool"), describe=f"a call matching {value['pattern']!r}")


# -- the calculator ----------------------------------------------------------------------------------------
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION_CHARS = 500
MAX_RESULT_DIGITS = 1000


class CalculatorError(ValueError):
    pass


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > 64 * 1024:
                raise CalculatorError("exponents must be whole numbers up to 65536")
            if left.numerator and abs(right) * max(len(str(left.numerator)), len(str(left.denominator))) > 4 * MAX_RESULT_DIGITS:
                raise CalculatorError(f"the result would have more than {MAX_RESULT_DIGITS} digits")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        value = Fraction(_BINARY[type(node.op)](left, right))
        if len(str(value.numerator)) > MAX_RESULT_DIGITS or len(str(value.denominator)) > MAX_RESULT_DIGITS:
            raise CalculatorError(f"the result has more than {MAX_RESULT_DIGITS} digits")
        return value
    raise CalculatorError(f"not arithmetic: {ast.dump(node)[:80]}; use numbers, + - * / // % ** and parentheses")


def format_number(value: Fraction) -> str:
    """Exact: an integer, a terminating decimal, or p/q."""
    if value.denominator == 1:
        return str(value.numerator)
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    if denominator != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = abs(value.numerator) * 10**places // value.denominator
    digits = str(scaled).rjust(places + 1, "0")
    return ("-" if value < 0 else "") + digits[:-places] + "." + digits[-places:]


# What a model writes may be Python the compiler warns about ("12and 3": invalid decimal literal); the calculator
# refuses it with an error result, so the warning would only be noise on the run's stderr.
_CALCULATOR_SOURCE = "<calculator>"
warnings.filterwarnings("ignore", category=SyntaxWarning, module=_CALCULATOR_SOURCE)


def calculator(arguments: str, **options: Any) -> ToolResult:
    """Exact arithmetic on rationals (no `eval`): numbers, + - * / // % **, unary signs and parentheses."""
    expression = arguments.strip()
    if not expression:
        return ToolResult(error="empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        return ToolResult(error=f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*").replace("÷", "/"), _CALCULATOR_SOURCE,
                         mode="eval")
        return ToolResult(output=format_number(_evaluate(tree)))
    except (SyntaxError, CalculatorError, ValueError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc) or type(exc).__name__
        return ToolResult(error=f"cannot evaluate {expression[:60]!r}: {message}")
