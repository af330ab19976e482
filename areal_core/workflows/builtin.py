"""The workflows and tools that come with areal-core, registered through the plugin hooks like any plugin's.

single_turn   one generation, scored: what every task did before workflows existed (the default).
tool_calls    the model writes a call (`call_format`: xml `<tool name="calculator">6*7</tool>`, fenced
              ```python blocks, or a pattern of your own); the tool's result is appended; again, until a
              turn holds no call (the final answer) or a limit ends the episode. Options: tools (names, default
              [calculator]), call_format, result_format ("{output}" is replaced by the tool's text; default
              "<result>{output}</result>" after a plain-text prompt, "{output}" as a chat message), tool_role
              (the chat role of results, default "tool"), tool_options ({tool: {option: value}}, e.g.
              {python: {timeout_s: 5}}), and the episode limits (max_turns, max_tool_calls,
              max_total_tokens, max_new_tokens, budget_s, tool_timeout_s, max_tool_output_chars).
feedback      for tasks whose reward explains a failure (code: which tests failed and how): up to `attempts`
              (default 3) tries; after a failed one the reward's failure summary is appended (`feedback_format`,
              "{feedback}" replaced) and the model tries again. The reward is the final attempt's.
sampled_lengths  one generation of exactly n tokens (EOS ignored), n drawn per episode from a log-normal long tail
              (`lengths: {mean, p99, max}`, `seed`): the response lengths of a reasoning workload on any model,
              a random-weight preset too, for benchmarks and rehearsals (bench/gpu_check.py). Scored as usual.
calculator    exact rational arithmetic, no `eval` (tools.py).
"""
from __future__ import annotations

import math
import random
import zlib
from typing import Any

from areal_core import __version__
from areal_core.errors import ConfigError
from areal_core.plugins.hookspecs import hookimpl
from areal_core.types import RewardResult
from areal_core.workflows.episode import LIMIT_OPTIONS, Episode, EpisodeContext
from areal_core.workflows.tools import calculator, call_format

DEFAULT_RESULT_FORMAT = "<result>{output}</result>"
DEFAULT_FEEDBACK_FORMAT = "\nThe tests failed:\n{feedback}\nWrite the whole program again, fixed.\n"
MAX_FEEDBACK_CHARS = 1500


async def single_turn(ctx: EpisodeContext) -> Episode:
    episode = ctx.new_episode()
    await ctx.generate(episode)
    return episode


TOOL_CALLS_OPTIONS = {"tools", "call_format", "result_format", "tool_role", "tool_options"}
FEEDBACK_OPTIONS = {"attempts", "feedback_format"}


def check_known(options: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(options) - known - LIMIT_OPTIONS)
    if unknown:
        raise ConfigError(f"{where}: unknown workflow option(s) {', '.join(unknown)} (options: "
                          f"{', '.join(sorted(known | LIMIT_OPTIONS))})")


def check_tool_calls(options: dict[str, Any], where: str) -> None:
    check_known(options, TOOL_CALLS_OPTIONS, where)
    call_format(options.get("call_format", "xml"), where)
    tools = options.get("tools", ["calculator"])
    if not isinstance(tools, list) or not tools or not all(isinstance(t, str) for t in tools):
        raise ConfigError(f"{where}: workflow option tools must be a non-empty list of tool names, got {tools!r}")
    tool_options = options.get("tool_options", {})
    if not isinstance(tool_options, dict) or not all(isinstance(v, dict) for v in tool_options.values()):
        raise ConfigError(f"{where}: workflow option tool_options must map a tool name to its options")
    for key in ("result_format", "tool_role"):
        if key in options and not isinstance(options[key], str):
            raise ConfigError(f"{where}: workflow option {key} must be a string")


async def tool_calls(ctx: EpisodeContext) -> Episode:
    fmt = call_format(ctx.options.get("call_format", "xml"), "workflow tool_calls")
    result_format = ctx.options.get("result_format") or ("{output}" if ctx.chat else DEFAULT_RESULT_FORMAT)
    role = ctx.options.get("tool_role", "tool")
    episode = ctx.new_episode()
    while (text := await ctx.generate(episode, stop=fmt.stop)) is not None:
        if episode.finish_reason == "abort":
            break
        call = fmt.find(text)
        if call is None:
            episode.ended_by = "answer" if episode.finish_reason == "stop" else episode.finish_reason
            break
        if episode.tool_calls >= ctx.limits.max_tool_calls:
            episode.ended_by = "max_tool_calls"
            break
        episode.tool_calls += 1
        if isinstance(call, str):
            name, result_text, error = "", f"error: {call}", True
        else:
            result = await ctx.call_tool(call.name, call.arguments)
            name, result_text, error = call.name, result.text, result.error is not None
        ctx.append_message(episode, role, result_format.replace("{output}", result_text), tool=name, error=error)
    return episode


def check_feedback(options: dict[str, Any], where: str) -> None:
    check_known(options, FEEDBACK_OPTIONS, where)
    attempts = options.get("attempts", 3)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConfigError(f"{where}: workflow option attempts must be a whole number >= 1, got {attempts!r}")
    if "feedback_format" in options and "{feedback}" not in str(options["feedback_format"]):
        raise ConfigError(f"{where}: workflow option feedback_format must contain {{feedback}}")


def failure_summary(result: RewardResult, limit: int = MAX_FEEDBACK_CHARS) -> str:
    """What a failed attempt is told: the reward's own `feedback` detail, else its failed tests, else its reason."""
    details = result.details
    if isinstance(details.get("feedback"), str):
        text = details["feedback"]
    elif isinstance(details.get("tests"), list):
        lines = [f"- {t.get('name', 'test')}: {t.get('verdict', '?')}"
                 + (f": {t.get('message') or t.get('stderr', '')}".rstrip(": ") if (t.get("message") or t.get("stderr")) else "")
                 for t in details["tests"] if isinstance(t, dict) and t.get("verdict") != "passed"]
        text = "\n".join(lines) or "no test passed"
    else:
        text = str(details.get("reason") or f"score {result.score:g}")
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def feedback(ctx: EpisodeContext) -> Episode:
    attempts = ctx.options.get("attempts", 3)
    template = ctx.options.get("feedback_format", DEFAULT_FEEDBACK_FORMAT)
    episode = ctx.new_episode()
    for attempt in range(attempts):
        text = await ctx.generate(episode)
        if text is None or episode.finish_reason == "abort":
            break
        result = await ctx.score(text)
        episode.scores.append({"attempt": attempt, "score": result.score, "correct": result.correct,
                               "error": result.error})
        episode.reward, episode.response = result, text
        if result.error is not None or result.correct or result.score >= 1.0 or attempt == attempts - 1:
            break
        ctx.append_message(episode, "user", template.replace("{feedback}", failure_summary(result)))
    return episode


LENGTHS_OPTIONS = {"lengths", "seed"}
_Z99 = 2.3263478740408408   # the standard normal's 99th percentile


def lognormal_parameters(mean: float, p99: float) -> tuple[float, float]:
    """(mu, sigma) of the log-normal with this mean and 99th percentile: ln p99 - ln mean = z99 sigma - sigma^2 / 2,
    the smaller root (the larger puts the mean in the far tail)."""
    gap = math.log(p99 / mean)
    if gap < 0 or gap > _Z99 ** 2 / 2:
        raise ValueError(f"a log-normal needs mean <= p99 <= {math.exp(_Z99 ** 2 / 2):.1f} x mean; got mean {mean:g}, "
                         f"p99 {p99:g}")
    sigma = _Z99 - math.sqrt(_Z99 ** 2 - 2 * gap)
    return math.log(mean) - sigma ** 2 / 2, sigma


def check_sampled_lengths(options: dict[str, Any], where: str) -> None:
    check_known(options, LENGTHS_OPTIONS, where)
    lengths = options.get("lengths")
    if not isinstance(lengths, dict) or set(lengths) - {"mean", "p99", "max", "prompt_share"} or "mean" not in lengths:
        raise ConfigError(f"{where}: workflow option lengths must be {{mean: N, p99: N, max: N, prompt_share: F}} "
                          f"(all but mean optional), got {lengths!r}")
    values = {k: lengths[k] for k in ("mean", "p99", "max") if k in lengths}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 for v in values.values()):
        raise ConfigError(f"{where}: workflow option lengths: mean, p99 and max must be numbers >= 1, got {lengths!r}")
    share = lengths.get("prompt_share", 0.0)
    if not (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1):
        raise ConfigError(f"{where}: workflow option lengths: prompt_share must be a number in [0, 1] (the share of "
                          f"the log-length variance a prompt decides), got {share!r}")
    try:
        lognormal_parameters(values["mean"], values.get("p99", values["mean"]))
    except ValueError as exc:
        raise ConfigError(f"{where}: workflow option lengths: {exc}") from None


def group_key(rid: str) -> str:
    """What a request id shares with the other answers to its prompt: the rollout controller names a group's
    requests p<prompt>.<i> (a later turn .t<k>), so the part before the first dot."""
    return rid.partition(".")[0]


def correlated_normal(rid: str, seed: int, prompt_share: float) -> float:
    """A standard normal draw for request `rid`, reproducible from it and `seed`, of which `prompt_share` of the
    variance is its prompt's (the same for every answer to it; the rest its own): answers to one prompt run long
    or short together, as they do (Seer, arXiv 2511.14617: "requests sharing the same prompt exhibit strong
    similarities in output lengths"), and the distribution of one answer stays the same."""
    own = random.Random(zlib.crc32(rid.encode()) ^ seed).normalvariate(0.0, 1.0)
    if prompt_share <= 0:
        return own
    shared = random.Random(zlib.crc32(b"prompt:" + group_key(rid).encode()) ^ seed).normalvariate(0.0, 1.0)
    return math.sqrt(prompt_share) * shared + math.sqrt(1 - prompt_share) * own


def sampled_length(options: dict[str, Any], rid: str, limit: int) -> int:
    """The episode's length: drawn from the log-normal, reproducibly from the request id and `seed` (answers to one
    prompt alike by `prompt_share`), at most max (and the run's max_new_tokens)."""
    lengths = options["lengths"]
    mu, sigma = lognormal_parameters(lengths["mean"], lengths.get("p99", lengths["mean"]))
    z = correlated_normal(rid, int(options.get("seed", 0)), float(lengths.get("prompt_share", 0.0)))
    return max(1, min(round(math.exp(mu + sigma * z)), int(lengths.get("max", limit)), limit))


async def sampled_lengths(ctx: EpisodeContext) -> Episode:
    episode = ctx.new_episode()
    await ctx.generate(episode, max_new_tokens=sampled_length(ctx.options, ctx.rid, ctx.limits.max_new_tokens),
                       ignore_eos=True)
    episode.ended_by = episode.finish_reason
    return episode


@hookimpl
def register_workflows(register):
    register("single_turn", single_turn, description="one generation, scored (the default)")
    register("tool_calls", tool_calls, check=check_tool_calls, uses_tools=True,
             description="call tools (calculator, python, ...) until a final answer or a limit")
    register("feedback", feedback, check=check_feedback,
             description="retry with the reward's failure summary (code: failed tests), up to N attempts")
    register("sampled_lengths", sampled_lengths, check=check_sampled_lengths,
             description="exactly n tokens per response, n from a log-normal long tail (benchmarks, rehearsals)")


@hookimpl
def register_tools(register):
    register("calculator", calculator, description="exact arithmetic: + - * / // % ** and parentheses",
             version=__version__)
