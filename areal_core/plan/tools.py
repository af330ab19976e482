"""Tool-using workflows on the simulated cluster (`areal plan`). The workflow's own code runs every episode (the
production tool_calls workflow: its call parsing, its limits, `run_tool`'s timeouts, the results appended to the
episode); what the policy and the tools would do is drawn from a tool model:

    calls per episode      a run's tool_calls_hist, or Poisson with mean `calls` for a parametric model
    a call's seconds       a run's tool_seconds_quantiles, or a log-normal (`seconds` its mean, `p99`), or `seconds`
                           exactly when no p99 is given
    a result's tokens      a run's tool_result_tokens_mean, or `result_tokens`

A run directory gives it with its lengths (`areal plan --lengths RUN_DIR` of a tool-using run; such a run also logs
its policy turns' lengths, turn_length_hist, and those are what the engine is asked for); `--tools
calls=N,seconds=S[,p99=S][,result_tokens=N]` gives it, or overrides the run's.

The simulated engine (plan/engine.py) ends a turn with a call, written in the workflow's call format (xml or
fenced) with the run's tokenizer, while the episode has calls left (its turn's request carries the format's stop
strings); the simulated tools sleep their drawn seconds on the virtual clock and answer a text of about the drawn
number of tokens. Every draw is reproducible from its request id (and `seed`).
"""
from __future__ import annotations

import asyncio
import collections
import math
import random
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from areal_core.engine.protocol import GenerateRequest
from areal_core.errors import ConfigError
from areal_core.plan.engine import SIMULATED_TOKEN
from areal_core.plan.workload import Histogram, Quantiles, Workload, _rows, _whole, cumulative_weights, pick_part
from areal_core.workflows.builtin import DEFAULT_RESULT_FORMAT, lognormal_parameters
from areal_core.workflows.episode import chat_suffix, decode_response
from areal_core.workflows.runtime import current_episode
from areal_core.workflows.tools import CallFormat, ToolCall, ToolSpec, call_format as call_format_of

TOOL_SOURCES = "a run directory of `areal train` with a tool-using workflow, or calls=N,seconds=S[,p99=S][,result_tokens=N]"
CALL_TEXT = {"xml": '<tool name="{tool}">{args}</tool>', "fenced": "```{tool}\n{args}\n```\n"}   # BUILTIN_FORMATS'
_TURN = re.compile(r"^(?P<episode>.*)\.t(?P<turn>\d+)$")   # EpisodeContext.generate's request id of a later turn


class EmpiricalSeconds(Quantiles):
    """Seconds known at probabilities (0 and 1 included), linear between them; a draw is not rounded."""

    def draw(self, u: float) -> float:  # type: ignore[override]
        return self.value(u)


@dataclass(frozen=True)
class LogNormalSeconds:
    mean_s: float
    p99_s: float

    def draw(self, u: float) -> float:
        mu, sigma = lognormal_parameters(self.mean_s, self.p99_s)
        return math.exp(mu + sigma * NormalDist().inv_cdf(min(max(u, 1e-12), 1 - 1e-12)))

    @property
    def mean(self) -> float:
        return self.mean_s


@dataclass(frozen=True)
class ToolUse:
    """How often an episode calls a tool, how long a call takes, how much its result adds (module docstring)."""

    source: str
    calls: Histogram                                          # calls per episode
    seconds: tuple[tuple[float, Any], ...] = ()               # (weight, EmpiricalSeconds | LogNormalSeconds)
    fixed_seconds: float = 0.0                                # every call's, without a distribution
    result_tokens: float = 0.0
    seed: int = 0
    _cumulative: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cumulative", cumulative_weights(self.seconds))

    def calls_in(self, episode: str) -> int:
        """How many tool calls the episode with request id `episode` makes."""
        return self.calls.draw(random.Random(zlib.crc32(f"calls {episode}".encode()) ^ self.seed).random())

    def seconds_of(self, call: str) -> float:
        """The seconds call `call` (any key naming it) takes."""
        if not self.seconds:
            return self.fixed_seconds
        rng = random.Random(zlib.crc32(f"seconds {call}".encode()) ^ self.seed)
        return max(0.0, pick_part(self.seconds, self._cumulative, rng.random()).draw(rng.random()))

    @property
    def mean_seconds(self) -> float:
        if not self.seconds:
            return self.fixed_seconds
        return sum(w * part.mean for w, part in self.seconds) / self._cumulative[-1]

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "calls_mean": self.calls.mean, "calls_max": self.calls.max,
                "call_rate": 1 - self.calls.cdf(0), "seconds_mean": self.mean_seconds,
                "result_tokens": self.result_tokens}

    def describe(self) -> str:
        s = self.summary()
        return (f"tool calls as in {s['source']}: {s['calls_mean']:.2f} an episode (at most {s['calls_max']}; "
                f"{s['call_rate']:.0%} of episodes call one), {s['seconds_mean']:.3g} s a call, "
                f"{s['result_tokens']:.0f} tokens a result")


def load_tool_use(source: str | Path, seed: int = 0) -> ToolUse:
    """The tool model SOURCE names: a run directory (or its metrics.jsonl) or calls=N,seconds=S,... (module docstring)."""
    text = str(source)
    path = Path(text)
    if "=" in text and not path.exists():
        return parametric_tools(text, seed)
    metrics = path / "metrics.jsonl" if path.is_dir() else path
    if not metrics.is_file():
        raise ConfigError(f"tools {text}: no such run directory or metrics.jsonl; expected {TOOL_SOURCES}")
    use = tools_from_run(metrics, seed)
    if use is None:
        raise ConfigError(f"tools {text}: no step made a tool call (a run without a tool-using workflow, its policy "
                          f"never called one, or made before tool calls were logged); expected {TOOL_SOURCES}")
    return use


def parametric_tools(text: str, seed: int = 0) -> ToolUse:
    values: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in ("calls", "seconds", "p99", "result_tokens"):
            raise ConfigError(f"tools {text}: unknown key {key!r}; expected {TOOL_SOURCES}")
        try:
            values[key] = float(value)
        except ValueError:
            raise ConfigError(f"tools {text}: {key}={value!r} is not a number") from None
        if not math.isfinite(values[key]) or values[key] < 0:
            raise ConfigError(f"tools {text}: {key} must be a number >= 0, got {value}")
    if values.get("calls", 0) > 100:
        raise ConfigError(f"tools {text}: calls={values['calls']:g} an episode; at most 100 are simulated")
    if "calls" not in values or "seconds" not in values:
        raise ConfigError(f"tools {text}: calls and seconds are needed; expected {TOOL_SOURCES}")
    seconds: tuple[tuple[float, Any], ...] = ()
    if "p99" in values:
        if values["seconds"] <= 0:
            raise ConfigError(f"tools {text}: a p99 needs seconds > 0")
        try:
            lognormal_parameters(values["seconds"], values["p99"])
        except ValueError as exc:
            raise ConfigError(f"tools {text}: {exc}") from None
        seconds = ((1.0, LogNormalSeconds(values["seconds"], values["p99"])),)
    return ToolUse(source="parameters", calls=poisson(values["calls"]), seconds=seconds,
                   fixed_seconds=values["seconds"], result_tokens=values.get("result_tokens", 0.0), seed=seed)


def poisson(mean: float, resolution: int = 1_000_000) -> Histogram:
    """Calls per episode, Poisson with this mean, as counts of `resolution` episodes (the far tail left out)."""
    counts, probability, cumulative, k = [], math.exp(-mean), 0.0, 0
    while cumulative < 1 - 1 / resolution:
        counts.append((k, round(probability * resolution)))
        cumulative += probability
        k += 1
        probability *= mean / k
    return Histogram.of(counts)


def tools_from_run(metrics: Path, seed: int = 0) -> ToolUse | None:
    """A run's tool calls pooled over its steps; None when no step logs tool_calls_hist or made a call."""
    calls: list[tuple[int, int]] = []
    seconds: list[tuple[float, EmpiricalSeconds]] = []
    results = weight = 0.0
    for where, row in _rows(metrics):
        if not isinstance(row, dict) or "tool_calls_hist" not in row:
            continue
        pairs = row["tool_calls_hist"]
        if not (isinstance(pairs, list) and pairs and all(
                isinstance(p, list) and len(p) == 2 and all(_whole(v) and v >= 0 for v in p) for p in pairs)):
            raise ConfigError(f"tools {where}: tool_calls_hist must be [[calls, episodes], ...] of whole numbers, "
                              f"got {pairs!r:.80}")
        calls += [(int(c), int(n)) for c, n in pairs]
        made = sum(c * n for c, n in pairs)
        quantiles = row.get("tool_seconds_quantiles")
        if made and quantiles is not None:
            ok = isinstance(quantiles, list) and len(quantiles) >= 2 and all(
                isinstance(q, list) and len(q) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            for v in q) for q in quantiles)
            p = [q[0] for q in quantiles] if ok else []
            v = [q[1] for q in quantiles] if ok else []
            if not (ok and p[0] == 0 and p[-1] == 1 and v[0] >= 0 and all(a < b for a, b in zip(p, p[1:]))
                    and all(a <= b for a, b in zip(v, v[1:]))):
                raise ConfigError(f"tools {where}: tool_seconds_quantiles must be [[p, seconds], ...] from p = 0 to "
                                  f"1, both increasing, got {quantiles!r:.80}")
            seconds.append((made, EmpiricalSeconds(tuple(map(float, p)), tuple(map(float, v)))))
        if made and isinstance(row.get("tool_result_tokens_mean"), (int, float)):
            results += made * row["tool_result_tokens_mean"]
            weight += made
    if not any(c for c, n in calls if n):   # no step made a call (a feedback run, an untrained policy)
        return None
    return ToolUse(source=str(metrics.parent), calls=Histogram.of(calls), seconds=tuple(seconds),
                   result_tokens=results / weight if weight else 0.0, seed=seed)


def tools_of(lengths: Any) -> ToolUse | None:
    """The tool model that comes with a workload: a tool-using run's, when `lengths` is drawn from one."""
    if isinstance(lengths, Workload) and lengths.kind == "run":
        return tools_from_run(Path(lengths.source) / "metrics.jsonl", lengths.seed)
    return None


def split_turn(rid: str) -> tuple[str, int]:
    """(the episode's request id, the turn) of a generation's request id."""
    match = _TURN.match(rid)
    return (match["episode"], int(match["turn"])) if match else (rid, 0)


def call_texts(call_format: Any, fmt: CallFormat, tool: str) -> list[str]:
    """Texts a simulated turn may end with to call `tool`: the built-in format's call, else a few guesses for a
    format of the workflow's own (the first the format reads back as a call of `tool` is taken)."""
    if isinstance(call_format, str):
        return [CALL_TEXT[call_format].format(tool=tool, args="1")]
    stop = fmt.stop[0]
    return [f"1{stop}", f"{tool}(1){stop}", f"{tool} 1{stop}", f"{tool}: 1{stop}", f"<{tool}>1{stop}"]


class CallWriter:
    """What a simulated turn ends with: the ids of a tool call in the workflow's call format while its episode has
    calls left (the turn asked to stop on the format's stop strings), else nothing (a final answer). The tools are
    called in the order the workflow lists them, round and round."""

    def __init__(self, use: ToolUse, call_format: Any, tools: list[str], tokenizer: Any) -> None:
        fmt = call_format_of(call_format, "workflow option call_format")
        self.use, self.stop = use, fmt.stop
        self.calls: list[list[int]] = []
        for tool in tools:
            for text in call_texts(call_format, fmt, tool):
                ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
                found = fmt.find(decode_response(tokenizer, [SIMULATED_TOKEN] * 3 + ids))
                if isinstance(found, ToolCall) and found.name == tool:
                    self.calls.append(ids)
                    break
            else:
                raise ConfigError(f"areal plan cannot write a call of tool {tool!r} in call_format {call_format!r} "
                                  f"that the workflow reads back (tried {', '.join(map(repr, call_texts(call_format, fmt, tool)))}): "
                                  "plan with call_format=xml, which costs the same tokens to within a few")
        self.longest = max(map(len, self.calls))
        # a format that reads any text as a call (bench_agentic's: every turn is one): the workflow's limits, not the
        # drawn calls, decide how many an episode makes, as in a real run
        self.any_turn_calls = isinstance(fmt.find(decode_response(tokenizer, [SIMULATED_TOKEN] * 4)), ToolCall)

    def __call__(self, request: GenerateRequest) -> list[int] | None:
        if not any(stop in request.sampling_params.stop for stop in self.stop):
            return None
        episode, turn = split_turn(request.rid)
        if turn >= self.use.calls_in(episode):
            return None
        return self.calls[turn % len(self.calls)]


class SimulatedTools:
    """The workflow's tools as ToolSpecs that take their drawn seconds on the virtual clock and answer about the
    drawn number of tokens (less what the workflow wraps a result in: `overhead_tokens`)."""

    def __init__(self, use: ToolUse, names: list[str], tokenizer: Any, overhead_tokens: int = 0) -> None:
        self.use, self.calls = use, collections.Counter()
        self.text = filler(tokenizer, max(0, round(use.result_tokens) - overhead_tokens))
        self.specs = {name: ToolSpec(name=name, fn=self._call, plugin="areal plan (simulated)",
                                     description=f"simulated {name}") for name in names}

    async def _call(self, arguments: str, **options: Any) -> str:
        episode = current_episode.get() or ""   # the same episode's k-th call takes the same seconds in every scenario
        self.calls[episode] += 1
        await asyncio.sleep(self.use.seconds_of(f"{episode}#{self.calls[episode]}"))
        return self.text


def filler(tokenizer: Any, tokens: int) -> str:
    """A text of about `tokens` tokens for this tokenizer."""
    if tokens <= 0:
        return ""
    for unit in (" 0", "0 ", " x", "x", "0"):
        per_unit = len(tokenizer(unit * 64, add_special_tokens=False)["input_ids"]) / 64
        if per_unit > 0:
            return (unit * max(1, round(tokens / per_unit))).strip() or unit
    return ""


def result_overhead(tokenizer: Any, options: dict[str, Any], chat: bool) -> int:
    """The tokens the tool_calls workflow adds around a result's text (its result_format, a chat turn's markers)."""
    template = options.get("result_format") or ("{output}" if chat else DEFAULT_RESULT_FORMAT)
    text = template.replace("{output}", "")
    if chat:
        text = chat_suffix(tokenizer, options.get("tool_role", "tool"), text)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0
