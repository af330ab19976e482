"""Response lengths for a simulated run (`areal plan --lengths SOURCE`): a length model for the simulated servers
(plan/engine.py's LengthModel) built from what a user has at hand:

    a run directory      an `areal train` run: its metrics.jsonl logs each step's lengths (response_length_hist,
                         or response_length_quantiles at larger batches: rl/run.py's length_distribution); the
                         model draws from every step pooled, each weighted by its responses. A multi-turn run's
                         policy turns (turn_length_hist / _quantiles), each a request to the engine, are taken
                         instead, and its tool calls come with them (plan/tools.py's tools_of)
    a file of responses  JSONL or a JSON list: rows with a response text ("response", "completion", "output",
                         "text"; or plain strings), counted in tokens by the run's tokenizer; `areal eval`'s
                         <task>.samples.jsonl (a multi-turn sample's transcript gives each policy turn's tokens);
                         rows that are whole numbers are lengths as they are (a file of one length a line)
    mean=N,p99=N,max=N   the parametric long tail: a log-normal with that mean and 99th percentile, cut at max
                         (the sampled_lengths workflow's draws, the same per request)

How alike the answers to one prompt run (`prompt_share`, the share of the log-length variance a prompt decides: 0
independent, 1 equal) decides how long a group holds its slot when prompts in flight are capped: a run's is its
steps' response_length_prompt_share, a parametric one's `prompt_share=F` (default 0).

Each request's length is drawn reproducibly from its request id (and `seed`), so every scenario of a plan meets the
same lengths; a draw over the run's max_new_tokens is cut at it, as a real engine cuts it (finish_reason length).
"""
from __future__ import annotations

import bisect
import itertools
import json
import math
import random
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Iterable, Iterator, Protocol

from areal_core.errors import ConfigError
from areal_core.workflows.builtin import correlated_normal, group_key, lognormal_parameters, sampled_length

TEXT_FIELDS = ("response", "completion", "output", "text")
SOURCES = ("a run directory of `areal train` (its metrics.jsonl), a file of responses or of lengths (JSONL, "
           "JSON), or mean=N,p99=N,max=N[,prompt_share=F]")


class Distribution(Protocol):
    def draw(self, u: float) -> int:
        """The length at probability u in [0, 1) (the inverse CDF)."""

    def cdf(self, tokens: int) -> float:
        """P(a draw <= tokens)."""

    @property
    def mean(self) -> float: ...

    @property
    def max(self) -> int: ...


@dataclass(frozen=True)
class Histogram:
    """Lengths exactly: each value with its count (a weight: a pooled histogram's need not be whole)."""

    values: tuple[int, ...]          # increasing
    cumulative: tuple[float, ...]    # counts of values[:i + 1]

    @classmethod
    def of(cls, counts: Iterable[tuple[int, float]]) -> "Histogram":
        merged: dict[int, float] = {}
        for tokens, count in counts:
            merged[tokens] = merged.get(tokens, 0) + count
        values = tuple(sorted(v for v in merged if merged[v] > 0))
        running, cumulative = 0, []
        for v in values:
            running += merged[v]
            cumulative.append(running)
        return cls(values, tuple(cumulative))

    @property
    def count(self) -> float:
        return self.cumulative[-1]

    def draw(self, u: float) -> int:
        return self.values[min(bisect.bisect_right(self.cumulative, u * self.count), len(self.values) - 1)]

    def cdf(self, tokens: int) -> float:
        i = bisect.bisect_right(self.values, tokens)
        return self.cumulative[i - 1] / self.count if i else 0.0

    @property
    def mean(self) -> float:
        before = (0, *self.cumulative[:-1])
        return sum(v * (c - b) for v, c, b in zip(self.values, self.cumulative, before)) / self.count

    @property
    def max(self) -> int:
        return self.values[-1]


@dataclass(frozen=True)
class Quantiles:
    """Lengths known at probabilities (0 and 1 included), linear between them, a draw rounded to a whole token."""

    probabilities: tuple[float, ...]   # increasing, from 0 to 1
    values: tuple[float, ...]          # non-decreasing

    def value(self, u: float) -> float:
        """The value at probability u, linear between the known ones."""
        p, q = self.probabilities, self.values
        i = min(max(bisect.bisect_right(p, u) - 1, 0), len(p) - 2)
        return q[i] + (q[i + 1] - q[i]) * (u - p[i]) / (p[i + 1] - p[i])

    def draw(self, u: float) -> int:
        return round(self.value(u))

    def cdf(self, tokens: int) -> float:
        y, p, q = tokens + 0.5, self.probabilities, self.values   # a draw is rounded: <= tokens when below + 0.5
        if y < q[0]:
            return 0.0
        if y >= q[-1]:
            return 1.0
        i = bisect.bisect_right(q, y) - 1   # q[i] <= y < q[i + 1]
        return p[i] + (p[i + 1] - p[i]) * (y - q[i]) / (q[i + 1] - q[i])

    @property
    def mean(self) -> float:
        p, q = self.probabilities, self.values
        return sum((p[i + 1] - p[i]) * (q[i] + q[i + 1]) / 2 for i in range(len(p) - 1))

    @property
    def max(self) -> int:
        return round(self.values[-1])


@dataclass(frozen=True)
class LogNormal:
    """The parametric long tail, as the sampled_lengths workflow draws it."""

    mean_tokens: float
    p99_tokens: float
    max_tokens: int | None
    prompt_share: float = 0.0

    def length(self, rid: str, limit: int, seed: int) -> int:
        lengths = {"mean": self.mean_tokens, "p99": self.p99_tokens, "prompt_share": self.prompt_share,
                   **({"max": self.max_tokens} if self.max_tokens else {})}
        return sampled_length({"lengths": lengths, "seed": seed}, rid, limit)


@dataclass(frozen=True)
class Workload:
    """A length model (plan/engine.py's LengthModel: `workload(request_id, prompt_tokens, max_new_tokens)`) and
    where it came from. An empirical one draws a part (a step of a run) by its weight, then a length from it."""

    source: str
    kind: str                                      # "run", "responses" or "parametric"
    parts: tuple[tuple[float, Distribution], ...] = ()
    tail: LogNormal | None = None
    seed: int = 0
    rewards: dict[str, float] | None = None      # a run's: its reward rate and share of uniform groups (run_rewards)
    prompt_share: float = 0.0                     # an empirical one's: how alike one prompt's answers run
    trained_share: float | None = None            # a run's: the share of its responses its step loop trained on
    trained_lengths: TrainedLengths | None = None     # a run's: the lengths of the sequences its step loop trained
    _cumulative: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cumulative", cumulative_weights(self.parts))

    def __call__(self, rid: str, prompt_tokens: int, max_new_tokens: int) -> int:
        if self.tail is not None:
            return self.tail.length(rid, max_new_tokens, self.seed)
        # answers alike: a prompt's answers from one step of the run, at quantiles that move together (a Gaussian
        # copula); otherwise each answer its own step and quantile
        alike = self.prompt_share > 0
        rng = random.Random(zlib.crc32((group_key(rid) if alike else rid).encode()) ^ self.seed)
        part = pick_part(self.parts, self._cumulative, rng.random())
        u = min(NormalDist().cdf(correlated_normal(rid, self.seed, self.prompt_share)), 1 - 1e-12) if alike \
            else rng.random()
        return max(1, min(part.draw(u), max_new_tokens))

    @property
    def responses(self) -> float:
        return sum(weight for weight, _ in self.parts)

    def cdf(self, tokens: int) -> float:
        """P(a response before any cut <= tokens); the empirical workloads only."""
        return sum(weight * part.cdf(tokens) for weight, part in self.parts) / self.responses

    def quantile(self, p: float) -> int:
        """The smallest length with at least p of the responses at or below it."""
        low, high = 0, max(part.max for _, part in self.parts)
        while low < high:
            middle = (low + high) // 2
            if self.cdf(middle) >= p:
                high = middle
            else:
                low = middle + 1
        return low

    def summary(self, max_new_tokens: int | None = None) -> dict[str, Any]:
        """What the report says of it: source, kind, mean, p99, max tokens (before the run's cut), and with
        max_new_tokens the share of responses longer than it (cut at it)."""
        if self.tail is not None:
            out: dict[str, Any] = {"source": self.source, "kind": self.kind, "mean": self.tail.mean_tokens,
                                   "p99": self.tail.p99_tokens, "max": self.tail.max_tokens,
                                   "prompt_share": self.tail.prompt_share}
            if max_new_tokens is not None:
                mu, sigma = lognormal_parameters(self.tail.mean_tokens, self.tail.p99_tokens)
                y = math.log(max_new_tokens + 0.5)   # a draw is rounded: longer than the limit from limit + 0.5
                above = 0.5 * math.erfc((y - mu) / (sigma * math.sqrt(2))) if sigma > 0 else float(mu > y)
                out["cut_fraction"] = 0.0 if (self.tail.max_tokens or math.inf) <= max_new_tokens else above
            return out
        out = {"source": self.source, "kind": self.kind, "responses": round(self.responses),
               "mean": sum(w * part.mean for w, part in self.parts) / self.responses, "p99": self.quantile(0.99),
               "max": max(part.max for _, part in self.parts), "prompt_share": self.prompt_share}
        if max_new_tokens is not None:
            out["cut_fraction"] = 1 - self.cdf(max_new_tokens)
        return out


def cumulative_weights(parts: tuple[tuple[float, Any], ...]) -> tuple[float, ...]:
    """The running totals of (weight, part) pairs' weights, for `pick_part`."""
    return tuple(itertools.accumulate(weight for weight, _ in parts))


def pick_part(parts: tuple[tuple[float, Any], ...], cumulative: tuple[float, ...], u: float) -> Any:
    """The part at probability u in [0, 1), each as likely as its weight."""
    index = bisect.bisect_right(cumulative, u * cumulative[-1])
    return parts[min(index, len(parts) - 1)][1]


def describe(summary: dict[str, Any], max_new_tokens: int | None = None) -> str:
    """One line for the report."""
    what = {"run": "the responses of run", "responses": "responses in",
            "parametric": "a log-normal long tail"}[summary["kind"]]
    text = (f"{what} {summary['source']}" if summary["kind"] != "parametric" else what)
    if "responses" in summary:
        text += f" ({summary['responses']:,} responses)"
    text += f": mean {summary['mean']:,.0f} tokens, p99 {summary['p99']:,.0f}"
    text += f", max {summary['max']:,}" if summary["max"] else ", no max"
    text += f", prompt share {summary.get('prompt_share') or 0:.2f}"
    if max_new_tokens is not None and summary.get("cut_fraction"):
        text += (f"; {summary['cut_fraction']:.1%} longer than rollout.max_new_tokens={max_new_tokens:,} are cut at it "
                 f"(finish_reason length)")
    return text


def load_workload(source: str | Path, tokenizer: Any = None, seed: int = 0) -> Workload:
    """The workload SOURCE names: a run directory (or its metrics.jsonl), a file of responses or lengths, or
    mean=N,p99=N,max=N (see the module docstring); `tokenizer` counts a response text's tokens."""
    text = str(source)
    path = Path(text)
    if "=" in text and not path.exists():
        return parametric(text, seed)
    if path.is_dir():
        if (path / "metrics.jsonl").is_file():
            return from_run(path / "metrics.jsonl", seed)
        samples = sorted(path.rglob("*.samples.jsonl"))
        if samples:
            return from_responses(samples, tokenizer, seed, source=str(path))
        raise ConfigError(f"lengths {path}: a directory with neither a metrics.jsonl (an `areal train` run) nor "
                          f"`areal eval` results (*.samples.jsonl); expected {SOURCES}")
    if path.is_file():
        if path.name == "metrics.jsonl":
            return from_run(path, seed)
        return from_responses([path], tokenizer, seed)
    raise ConfigError(f"lengths {text}: no such file or directory; expected {SOURCES}")


def parametric(text: str, seed: int = 0) -> Workload:
    """mean=N,p99=N,max=N,prompt_share=F (all but mean optional) as a Workload."""
    values: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in ("mean", "p99", "max", "prompt_share") or key in values:
            raise ConfigError(f"lengths {text!r}: expected mean=N,p99=N,max=N,prompt_share=F (all but mean "
                              f"optional), got {key!r}")
        try:
            values[key] = float(value)
        except ValueError:
            what = "a number in [0, 1]" if key == "prompt_share" else "a number of tokens"
            raise ConfigError(f"lengths {text!r}: {key} must be {what}, got {value.strip()!r}") from None
        if key == "prompt_share":
            if not 0 <= values[key] <= 1:
                raise ConfigError(f"lengths {text!r}: prompt_share must be in [0, 1] (the share of the log-length "
                                  f"variance a prompt decides), got {value.strip()!r}")
        elif not math.isfinite(values[key]) or values[key] < 1:
            raise ConfigError(f"lengths {text!r}: {key} must be a number of tokens >= 1, got {value.strip()!r}")
    if "mean" not in values:
        raise ConfigError(f"lengths {text!r}: expected mean=N,p99=N,max=N (the mean at least)")
    mean, p99 = values["mean"], values.get("p99", values["mean"])
    try:
        lognormal_parameters(mean, p99)
    except ValueError as exc:
        raise ConfigError(f"lengths {text!r}: {exc}") from None
    top = values.get("max")
    if top is not None and top != int(top):
        raise ConfigError(f"lengths {text!r}: max must be a whole number of tokens, got {top:g}")
    return Workload(source=text, kind="parametric", seed=seed,
                    tail=LogNormal(mean, p99, int(top) if top else None, values.get("prompt_share", 0.0)))


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) for each row of a JSON list or a JSONL file (blank lines skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"lengths {path}: cannot be read as UTF-8 text ({exc}); expected {SOURCES}") from None
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"lengths {path}: not valid JSON ({exc.msg}, line {exc.lineno}); expected a JSON "
                              f"list or one JSON value a line") from None
        yield from ((f"{path}: item {i}", row) for i, row in enumerate(rows))
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"lengths {path}:{number}: not a JSON value ({line[:60]!r}); expected one response "
                              f"object, string or whole number of tokens a line") from None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def from_run(metrics: Path, seed: int = 0) -> Workload:
    """The pooled response lengths of an `areal train` run's steps (its metrics.jsonl)."""
    parts: list[tuple[float, Distribution]] = []
    rows = list(_rows(metrics))   # read once: the run's rewards, shares and trained lengths come from these rows too
    for where, row in rows:
        if not isinstance(row, dict):
            raise ConfigError(f"lengths {where}: expected a step's metrics (a JSON object), got {row!r:.60}")
        turns = "turn_length_hist" in row or "turn_length_quantiles" in row   # a multi-turn run: a request is a turn
        part = length_part(row, *(("turn_length", "turns") if turns else ("response_length", "responses")), where)
        if part is not None:
            parts.append(part)
    if not parts:
        raise ConfigError(f"lengths {metrics}: no step logs response_length_hist or response_length_quantiles (a run "
                          f"made before they were logged, or no step ended); expected {SOURCES}")
    return Workload(source=str(metrics.parent), kind="run", parts=tuple(parts), seed=seed,
                    rewards=run_rewards(metrics, rows), prompt_share=run_prompt_share(rows),
                    trained_share=run_trained_share(rows), trained_lengths=run_trained_lengths(rows))


def length_part(row: dict[str, Any], name: str, count_key: str, where: str) -> tuple[float, Distribution] | None:
    """(weight, lengths) of one step's `<name>_hist` or `<name>_quantiles` (rl/run.py's length_distribution): a
    histogram weighs its count, quantiles the step's `count_key`; None when the step logs neither (or no length)."""
    if f"{name}_hist" in row:
        pairs = row[f"{name}_hist"]
        if not (isinstance(pairs, list) and pairs and all(
                isinstance(p, list) and len(p) == 2 and all(_whole(v) and v >= 0 for v in p) for p in pairs)):
            raise ConfigError(f"lengths {where}: {name}_hist must be [[tokens, count], ...] of whole numbers, got "
                              f"{pairs!r:.80}")
        histogram = Histogram.of((tokens, count) for tokens, count in pairs)
        return (histogram.count, histogram) if histogram.values else None
    if f"{name}_quantiles" in row:
        pairs, count = row[f"{name}_quantiles"], row.get(count_key)
        ok = isinstance(pairs, list) and len(pairs) >= 2 and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                        for v in p) for p in pairs)
        probabilities = [p[0] for p in pairs] if ok else []
        values = [p[1] for p in pairs] if ok else []
        if not (ok and probabilities[0] == 0 and probabilities[-1] == 1 and values[0] >= 0
                and all(a < b for a, b in zip(probabilities, probabilities[1:]))
                and all(a <= b for a, b in zip(values, values[1:]))):
            raise ConfigError(f"lengths {where}: {name}_quantiles must be [[p, tokens], ...] from p = 0 to 1, both "
                              f"increasing, got {pairs!r:.80}")
        if not (_whole(count) and count >= 1):
            raise ConfigError(f"lengths {where}: {name}_quantiles needs the step's {count_key} (a whole number >= 1), "
                              f"got {count!r}")
        return count, Quantiles(tuple(map(float, probabilities)), tuple(map(float, values)))
    return None


POOLED_DRAWS = 256


def pooled(parts: list[tuple[float, Distribution]]) -> Histogram:
    """Steps' lengths as one histogram, each step weighing its count: a histogram's lengths as they are, quantiles at
    up to POOLED_DRAWS evenly spaced probabilities (so that a long run pools in bounded time)."""
    counts: list[tuple[int, float]] = []
    for weight, part in parts:
        if isinstance(part, Histogram):
            before = (0, *part.cumulative[:-1])
            counts += [(v, c - b) for v, c, b in zip(part.values, part.cumulative, before)]
        else:
            draws = max(1, min(POOLED_DRAWS, round(weight)))
            counts += [(part.draw((j + 0.5) / draws), weight / draws) for j in range(draws)]
    return Histogram.of(counts)


@dataclass(frozen=True)
class TrainedLengths:
    """The prompt and response lengths of the sequences a run's step loop trained on, pooled over its steps. Which
    groups carry a gradient follows their prompts (in the CPU demo the easy ones: short prompts with four-token
    answers, against the batch's long tail), which simulated rewards do not know; a simulated step trains sequences
    of these lengths (plan/trainer.py's trained_like), so that its padding and packing are the run's."""

    prompts: Histogram
    responses: Histogram

    @property
    def mean(self) -> float:
        """Tokens of a trained sequence, on average."""
        return self.prompts.mean + self.responses.mean

    def describe(self) -> str:
        return (f"the step trains sequences of that run's trained lengths ({self.prompts.mean:.1f} prompt + "
                f"{self.responses.mean:.1f} response tokens on average)")


def run_trained_lengths(rows: list[tuple[str, Any]]) -> TrainedLengths | None:
    """A run's TrainedLengths, from its steps' (metrics.jsonl's `_rows`) trained_prompt_length_* and
    trained_response_length_* (rl/run.py); None for a run that does not log them."""
    prompts, responses = [], []
    for where, row in rows:
        if not isinstance(row, dict):
            continue
        prompt = length_part(row, "trained_prompt_length", "trained_sequences", where)
        response = length_part(row, "trained_response_length", "trained_sequences", where)
        if prompt is not None and response is not None:
            prompts.append(prompt)
            responses.append(response)
    return TrainedLengths(pooled(prompts), pooled(responses)) if prompts else None


def run_prompt_share(rows: list[tuple[str, Any]]) -> float:
    """How alike a run's answers to one prompt ran: its steps' (metrics.jsonl's `_rows`) response_length_prompt_share,
    weighted by their responses (0 for a run that does not log it)."""
    steps = [(row.get("responses", 1), row["response_length_prompt_share"]) for _, row in rows
             if isinstance(row, dict) and isinstance(row.get("response_length_prompt_share"), (int, float))
             and isinstance(row.get("responses", 1), (int, float))]
    weight = sum(w for w, _ in steps)
    return min(1.0, max(0.0, sum(w * v for w, v in steps) / weight)) if weight > 0 else 0.0


def run_trained_share(rows: list[tuple[str, Any]]) -> float | None:
    """The share of a run's responses its step loop trained on (trained_sequences / responses over its steps,
    metrics.jsonl's `_rows`: groups that all scored alike are skipped, all of a batch is trained when none is mixed);
    None for a run that does not log it."""
    steps = [(row["responses"], row["trained_sequences"]) for _, row in rows
             if isinstance(row, dict) and isinstance(row.get("responses"), (int, float)) and row["responses"] > 0
             and isinstance(row.get("trained_sequences"), (int, float))]
    responses = sum(r for r, _ in steps)
    return min(1.0, max(0.0, sum(t for _, t in steps) / responses)) if responses > 0 else None


def trained_lengths_of(lengths: Any, config: Any) -> TrainedLengths | None:
    """The lengths a simulated trainer gives the sequences it trains for `config` (a TrainConfig) on `lengths`: a
    run's workload's `trained_lengths` where the step loop skips uniform groups as that run's did (no KL term), else
    None (all of a batch is trained, its lengths as drawn; or the workload does not say)."""
    from areal_core.rl.rollout import skips_uniform_groups   # (the rollout module brings torch; parsing needs none)

    trained = getattr(lengths, "trained_lengths", None)
    return trained if skips_uniform_groups(config) else None


def run_rewards(metrics: Path, rows: list[tuple[str, Any]]) -> dict[str, float] | None:
    """A run's rewards as the simulated reward model takes them (plan/trainer.py's RewardCosts): `correct_rate`, the
    mean reward, and `uniform_groups`, the share of groups that score alike whatever their size (the step loop
    skips them, so they set how much is trained). A mixed group is drawn response by response at the rate, so
    uniform = 1 - mixed / P(a drawn group of the run's size is mixed). `rows`: its metrics.jsonl's (`_rows`), the
    run's config.yaml beside it gives the group size. None when the run does not log them."""
    import statistics

    import yaml

    steps = [row for _, row in rows if isinstance(row, dict) and isinstance(row.get("reward_mean"), (int, float))
             and isinstance(row.get("mixed_group_fraction"), (int, float))]
    config = metrics.parent / "config.yaml"
    try:
        group = int(yaml.safe_load(config.read_text())["rollout"]["group_size"])
    except (OSError, TypeError, KeyError, ValueError, yaml.YAMLError):
        return None
    if not steps or group < 1:
        return None
    rate = min(1.0, max(0.0, statistics.fmean(row["reward_mean"] for row in steps)))
    mixed = statistics.fmean(row["mixed_group_fraction"] for row in steps)
    drawn_mixed = 1 - rate ** group - (1 - rate) ** group
    uniform = min(1.0, max(0.0, 1 - mixed / drawn_mixed)) if drawn_mixed > 0 else 1.0
    return {"correct_rate": rate, "uniform_groups": uniform}


def from_responses(paths: list[Path], tokenizer: Any = None, seed: int = 0, source: str | None = None) -> Workload:
    """Lengths from files of responses (texts tokenized by `tokenizer`, `areal eval` transcripts' turns) or of
    whole numbers."""
    lengths: list[int] = []
    texts: list[tuple[str, str]] = []
    for path in paths:
        for where, row in _rows(path):
            if _whole(row) and row >= 1:
                lengths.append(row)
            elif isinstance(row, str):
                texts.append((where, row))
            elif isinstance(row, dict) and isinstance(row.get("transcript"), list):
                turns = [t for t in row["transcript"] if isinstance(t, dict) and t.get("role") == "assistant"]
                if not turns or not all(_whole(t.get("tokens")) and t["tokens"] >= 0 for t in turns):
                    raise ConfigError(f"lengths {where}: a transcript without policy turns' tokens (turns with role "
                                      f"assistant and a whole number of tokens)")
                lengths.extend(t["tokens"] for t in turns)
            elif isinstance(row, dict) and any(isinstance(row.get(f), str) for f in TEXT_FIELDS):
                texts.append((where, next(row[f] for f in TEXT_FIELDS if isinstance(row.get(f), str))))
            else:
                got = f"an object with keys {sorted(row)[:8]}" if isinstance(row, dict) else repr(row)[:60]
                raise ConfigError(f"lengths {where}: expected a response (an object with a text field "
                                  f"{', '.join(TEXT_FIELDS)}, an `areal eval` sample, or a string) or a whole number "
                                  f"of tokens >= 1, got {got}")
    if texts:
        if tokenizer is None:
            raise ConfigError(f"lengths {texts[0][0]}: response texts need a tokenizer to count their tokens")
        encoded = tokenizer([text for _, text in texts], add_special_tokens=False)["input_ids"]
        lengths.extend(len(ids) for ids in encoded)
    name = source or (str(paths[0]) if len(paths) == 1 else f"{len(paths)} files")
    if not lengths or not any(lengths):
        raise ConfigError(f"lengths {name}: no responses or lengths in it; expected {SOURCES}")
    counts: dict[int, int] = {}
    for n in lengths:
        counts[n] = counts.get(n, 0) + 1
    histogram = Histogram.of(counts.items())
    return Workload(source=name, kind="responses", parts=((histogram.count, histogram),), seed=seed)
