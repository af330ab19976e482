"""Episodes, built token in / token out, and the context a workflow runs them in.

An episode is one token sequence: the prompt, then every turn in order. The policy's tokens are appended
exactly as the engine produced them (ids, log-probs, versions) and never decoded to be encoded again: a
conversation re-tokenised from its text can split differently (byte-level BPE merges across a turn's end,
special-token text), and the trainer would then score tokens the policy never sampled. Only new text (a tool
result, test feedback, the chat template's turn markers) is tokenised, and it is masked out of the loss.

    episode = ctx.new_episode()
    text = await ctx.generate(episode, stop=("</tool>",))   # a policy turn: loss mask 1
    ctx.append_message(episode, "tool", "42")                # environment text: loss mask 0
    text = await ctx.generate(episode)
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from areal_core.engine.protocol import ContextLengthError, GenerateOutput, GenerateRequest, InferenceEngine, SamplingParams
from areal_core.errors import ConfigError
from areal_core.tasks import Task
from areal_core.types import RewardResult


@dataclass
class Episode:
    """A growing episode: the prompt ids and, per output token, its id, loss mask, log-prob and version.

    turns: the transcript, one {role, start, end, text} per segment (token offsets into the output);
    response: the text the reward scores (None: the last policy turn's text); reward: set by a workflow that
    scores the episode itself (else the runtime scores `response`); info: anything the workflow records."""

    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    ended_by: str = "answer"
    tool_calls: int = 0
    tool_seconds: list[float] = field(default_factory=list)   # each tool call's, in order (`areal plan` draws them)
    scores: list[dict[str, Any]] = field(default_factory=list)
    response: str | None = None
    reward: RewardResult | None = None
    info: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0          # wall-clock of the whole episode (set by the runner)
    reward_seconds: float = 0.0   # of its reward calls alone

    @property
    def length(self) -> int:
        """Prompt and output tokens together."""
        return len(self.prompt_ids) + len(self.tokens)

    @property
    def generations(self) -> int:
        return sum(turn["role"] == "assistant" for turn in self.turns)

    def add_policy_tokens(self, output: GenerateOutput, text: str) -> None:
        start = len(self.tokens)
        self.tokens += output.output_ids
        self.mask += [1] * len(output.output_ids)
        self.logprobs += output.output_logprobs
        self.versions += output.output_versions
        self.turns.append({"role": "assistant", "start": start, "end": len(self.tokens), "text": text,
                           "finish_reason": output.finish_reason})
        self.finish_reason = output.finish_reason

    def add_environment_tokens(self, ids: list[int], role: str, text: str, **details: Any) -> None:
        """Tokens appended for the policy (tool output, feedback, turn markers): trained on never. They take the
        version of the token before them, so an episode's versions stay in order. `details` are kept in the
        transcript as JSON (anything else as its repr)."""
        details = json_safe(details)
        start = len(self.tokens)
        version = self.versions[-1] if self.versions else 0
        self.tokens += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [version] * len(ids)
        self.turns.append({"role": role, "start": start, "end": len(self.tokens), "text": text, **details})

    def last_policy_text(self) -> str:
        for turn in reversed(self.turns):
            if turn["role"] == "assistant":
                return turn["text"]
        return ""

    def final_response(self) -> str:
        """What the reward scores: `response` when the workflow set it, else the last policy turn's text."""
        return self.response if self.response is not None else self.last_policy_text()


LIMIT_OPTIONS = {"max_turns", "max_tool_calls", "max_total_tokens", "max_new_tokens", "budget_s", "tool_timeout_s",
                 "max_tool_output_chars"}


@dataclass(frozen=True)
class EpisodeLimits:
    """Bounds on one episode. max_turns counts policy generations; max_total_tokens bounds prompt + output (each
    generation asks for no more than is left); budget_s is wall-clock for the whole workflow: a generation or a
    tool call still running at the budget is cut (its partial turn dropped) and the episode ends there, scored on
    what it holds (the final reward is outside the budget, bounded by the reward's own timeout)."""

    max_turns: int = 8
    max_tool_calls: int = 8
    max_total_tokens: int | None = None
    max_new_tokens: int = 128
    budget_s: float | None = None
    tool_timeout_s: float = 10.0
    max_tool_output_chars: int = 2000

    @classmethod
    def from_options(cls, options: dict[str, Any], max_new_tokens: int, where: str) -> "EpisodeLimits":
        values: dict[str, Any] = {"max_new_tokens": max_new_tokens}
        for key in LIMIT_OPTIONS:
            if options.get(key) is None:
                continue
            value = options[key]
            kind = float if key.endswith("_s") else int
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or (
                    kind is int and value != int(value)):
                raise ConfigError(f"{where}: workflow option {key}={value!r}: expected a positive "
                                  f"{'number of seconds' if kind is float else 'whole number'}")
            values[key] = kind(value)
        return cls(**values)


ScoreFn = Callable[[str, dict[str, Any]], Awaitable[RewardResult]]
ToolCaller = Callable[[str, str, float], Awaitable[Any]]


class EpisodeContext:
    """What a workflow gets for one episode: the sample, generation through the engine protocol, the tokenizer,
    the tools the task allows, the reward service, the limits and the workflow's options."""

    def __init__(self, *, sample: dict[str, Any], task: Task, engine: InferenceEngine, tokenizer: Any,
                 sampling: SamplingParams, rid: str, options: dict[str, Any], limits: EpisodeLimits,
                 tools: dict[str, Any], score: ScoreFn, call_tool: ToolCaller,
                 prompt_ids: list[int] | None = None) -> None:
        self.sample, self.task, self.engine, self.tokenizer = sample, task, engine, tokenizer
        self._prompt_ids = prompt_ids
        self.sampling, self.rid, self.options, self.limits, self.tools = sampling, rid, options, limits, tools
        self._score, self._call_tool = score, call_tool
        self._clock = asyncio.get_running_loop()   # virtual under `areal plan`; kept for calls from threads
        self.started = self._clock.time()
        self.chat = task.spec.prompt.messages is not None
        self.episode: Episode | None = None  # the newest from new_episode: what a budget cut keeps

    def new_episode(self) -> Episode:
        """An episode holding the sample's prompt (the task's template, rendered and tokenised)."""
        if self._prompt_ids is None:
            self._prompt_ids = self.task.prompt_token_ids(self.sample, self.tokenizer)
        self.episode = Episode(prompt_ids=list(self._prompt_ids))
        return self.episode

    def remaining_s(self) -> float | None:
        if self.limits.budget_s is None:
            return None
        return self.limits.budget_s - (self._clock.time() - self.started)

    def time_left(self, limit: float | None = None) -> float | None:
        """The seconds a step may run: `limit`, or what is left of the budget when that is less (at least 1 ms: a
        step begun at the edge is cut, not refused); None when there is neither."""
        remaining = self.remaining_s()
        if remaining is None:
            return limit
        return max(0.001, remaining if limit is None else min(limit, remaining))

    def out_of_budget(self, episode: Episode) -> str | None:
        """Why the episode may not generate again (and records it as `ended_by`), or None."""
        limits, why = self.limits, None
        if episode.generations >= limits.max_turns:
            why = "max_turns"
        elif limits.max_total_tokens is not None and episode.length >= limits.max_total_tokens:
            why = "max_total_tokens"
        elif (remaining := self.remaining_s()) is not None and remaining <= 0:
            why = "budget"
        if why is not None:
            episode.ended_by = why
        return why

    async def generate(self, episode: Episode, *, stop: tuple[str, ...] = (), max_new_tokens: int | None = None,
                       ignore_eos: bool = False) -> str | None:
        """One policy turn, continuing the episode's tokens; returns its text, or None when a limit forbids
        another turn (`episode.ended_by` says which). The engine's tokens are appended as they are.
        ignore_eos: generate the whole budget, past the model's end-of-sequence tokens."""
        if self.out_of_budget(episode):
            return None
        if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                                           or max_new_tokens < 1):
            raise ValueError(f"generate(max_new_tokens={max_new_tokens!r}): expected a whole number >= 1")
        if any(not isinstance(s, str) or not s for s in stop):   # the workflow's mistake, not the engine's
            raise ValueError(f"generate(stop={stop!r}): stop strings must be non-empty strings")
        turn = episode.generations
        budget = min(max_new_tokens or self.limits.max_new_tokens, self.limits.max_new_tokens)
        if self.limits.max_total_tokens is not None:
            budget = min(budget, self.limits.max_total_tokens - episode.length)
        changes: dict[str, Any] = {}
        if budget != self.sampling.max_new_tokens:
            changes["max_new_tokens"] = budget
        if turn and self.sampling.seed is not None:  # each turn its own draw, reproducibly
            changes["seed"] = self.sampling.seed + 7919 * turn
        if stop:
            changes["stop"] = tuple(self.sampling.stop) + tuple(stop)
        if ignore_eos:
            changes["ignore_eos"] = True
        params = dataclasses.replace(self.sampling, **changes) if changes else self.sampling
        rid = self.rid if turn == 0 else f"{self.rid}.t{turn}"
        ids = episode.prompt_ids + episode.tokens if episode.tokens else episode.prompt_ids
        request, timeout = GenerateRequest(ids, params, rid=rid), self.time_left()
        try:
            if timeout is None:
                output = await self.engine.generate(request)
            else:  # cut at the budget: the engine aborts the request (cancelled), its partial turn is not kept
                output = await asyncio.wait_for(self.engine.generate(request), timeout)
        except asyncio.TimeoutError:
            if timeout is None or (self.remaining_s() or 0) > 0:
                raise  # not the budget's cut: the engine's own error
            episode.ended_by = "budget"
            return None
        except ContextLengthError:
            if not episode.tokens:
                raise  # the prompt alone is too long: the sample's failure, as with one generation
            episode.ended_by = "max_total_tokens"  # an engine whose limit the episode did not know: it ends here
            return None
        text = decode_response(self.tokenizer, output.output_ids)
        episode.add_policy_tokens(output, text)
        if output.finish_reason == "length" and budget < self.limits.max_new_tokens:
            episode.ended_by = "max_total_tokens"
        return text

    def append_text(self, episode: Episode, text: str, role: str = "tool", **details: Any) -> None:
        """Plain text appended for the policy (tokenised on its own; loss mask 0)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        episode.add_environment_tokens(list(ids), role, text, **details)

    def append_message(self, episode: Episode, role: str, content: str, **details: Any) -> None:
        """A chat message appended for the policy: the close of the policy's turn and the message with the chat
        template's own turn markers, then the template's generation prompt for the next policy turn. On a
        plain-text prompt, the content alone."""
        if not self.chat:
            self.append_text(episode, content, role, **details)
            return
        text = chat_suffix(self.tokenizer, role, content)
        last = episode.tokens[-1] if episode.mask[-1:] == [1] else None
        ended = self.tokenizer.decode([last]) if last in set(self.tokenizer.all_special_ids) else ""
        if ended and text.startswith(ended):  # the policy's turn ended on the template's end-of-turn token
            text = text[len(ended):]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        episode.add_environment_tokens(list(ids), role, content, **details)

    async def score(self, response: str, **options: Any) -> RewardResult:
        """The task's reward on `response` through the reward service (e.g. for feedback between attempts)."""
        return await self._score(response, options)

    async def call_tool(self, name: str, arguments: str) -> Any:
        """Run tool `name`: always a ToolResult, an error message when the call failed (never an exception). It
        may run for tool_timeout_s, or what is left of the budget when that is less."""
        result = await self._call_tool(name, arguments, self.time_left(self.limits.tool_timeout_s))
        seconds = getattr(result, "details", {}).get("time_s")
        if self.episode is not None and isinstance(seconds, (int, float)):
            self.episode.tool_seconds.append(float(seconds))
        return result


def decode_response(tokenizer: Any, ids: list[int]) -> str:
    """`tokenizer.decode(ids, skip_special_tokens=True)`: the text of a policy turn. A transformers tokenizer is handed
    the ids as an array, which its decode turns into a list in one call; a list it first checks element by element
    in Python (`to_py_obj`): about half of decoding a 4,000-token response, at thousands of tokens a response the
    controller's largest cost (bench/bench_plan_scale.py). The text is the same."""
    if ids and isinstance(tokenizer, _transformers_tokenizer()):
        import numpy

        return tokenizer.decode(numpy.asarray(ids, dtype=numpy.int64), skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True)


@functools.cache
def _transformers_tokenizer() -> type:
    from transformers import PreTrainedTokenizerBase   # imported when first needed: transformers is slow to import

    return PreTrainedTokenizerBase


def json_safe(value: Any) -> Any:
    """`value` as JSON can hold it (checkpoints and eval records are JSON): what JSON cannot is its repr."""
    return json.loads(json.dumps(value, default=repr))


_MARK = "\x00AREAL-TURN\x00"


def chat_suffix(tokenizer: Any, role: str, content: str) -> str:
    """What the tokenizer's chat template writes after an assistant turn's text when a `role` message follows:
    the close of the turn, the message with its turn markers, and the generation prompt for the next turn.
    Only what follows the assistant's text is taken, so a template that renders earlier turns differently once
    they are no longer the last (Qwen3 drops their reasoning) still extends turn by turn."""
    conversation = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK},
                    {"role": role, "content": content}]
    try:
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - a template that rejects the role: say which
        raise ConfigError(f"the chat template cannot render a {role!r} message: {type(exc).__name__}: {exc}") from None
    if _MARK not in text:
        raise ConfigError("the chat template does not print an assistant message's content; episodes cannot be "
                          "extended turn by turn")
    return text[text.rindex(_MARK) + len(_MARK):]
