"""What every logic reward shares: scoring options, answer extraction, hostile-input guards, verdicts.

A response is judged in four steps, each of which can stop it with score 0 and a reason:

1. size:       a response longer than ``max_response_chars`` is rejected before it is read;
2. extraction: the answer is cut out of the response (``extract`` option, see `extract_answer`);
3. screening:  the answer must be at most ``max_answer_chars`` long and free of look-alike characters
               (non-ASCII letters, digits and marks, invisible format characters, control characters);
               answers are names, words, digits and operators, all ASCII, so ``Аmelia`` with a Cyrillic
               ``А`` or a full-width ``１`` is a forgery, not an answer;
4. the family's own parser and verifier.

Scores (`verdict`): 1.0 when the answer is right. Otherwise 0.0, raised to ``format_score`` when the
answer was *well formed* (parsed completely, just wrong) and, with ``partial_credit``, to the family's
fraction of correct parts. A rejected answer (step 1-3, or a conflicting or unparseable one) scores 0.
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, fields
from typing import Any, Mapping

from areal_core import RewardResult
from areal_core.errors import ConfigError

EXTRACT_MODES = ("auto", "answer_tag", "boxed", "full")

# Machine-readable failure kinds, in details["failure"]; details["reason"] says it in words.
NO_ANSWER = "no_answer"          # nothing could be extracted (missing/unclosed tag, strict format broken)
TOO_LONG = "too_long"            # response or answer over the size limits
SUSPICIOUS = "suspicious_character"  # look-alike / invisible / control character in the answer
UNPARSEABLE = "unparseable"      # the answer is not in the family's answer language
INCOMPLETE = "incomplete"        # parsed, but some part (a person, a cell) has no value
CONFLICT = "conflict"            # the answer gives one part two different values
WRONG = "wrong"                  # well formed, complete, and wrong


@dataclass(frozen=True)
class ScoringOptions:
    """Options every logic reward accepts (``--option key=value``, or ``reward.options`` in a task spec).

    partial_credit:     score a wrong answer by the fraction of its parts that are right (per family:
                        people, cells, houses x attributes; countdown: closeness to the target).
    format_score:       score of a well-formed but wrong answer (e.g. 0.1), in [0, 1).
    extract:            where the answer is: ``auto`` (the <answer>...</answer> block, else the \\boxed{...},
                        else the text after the last </think>, else the whole response), ``answer_tag``,
                        ``boxed`` or ``full``. Several blocks (or boxes) that differ are several final
                        answers, a hedge: rejected as a conflict. Grading modes: ``strict`` (training)
                        reads only the <answer> block the prompts ask for, ``lenient`` (evals) is ``auto``.
    strict_format:      also require the R1 layout: at most one <think>, exactly one </think>, then exactly
                        one <answer>...</answer> (the opening <think> may be in the prompt).
    max_response_chars: longer responses are rejected unread.
    max_answer_chars:   longer extracted answers are rejected unparsed.
    """

    partial_credit: bool = False
    format_score: float = 0.0
    extract: str = "auto"
    strict_format: bool = False
    max_response_chars: int = 200_000
    max_answer_chars: int = 20_000

    def validate(self, reward: str) -> None:
        if not isinstance(self.partial_credit, bool):
            raise ConfigError(f"reward {reward!r}: option partial_credit must be true or false, got {self.partial_credit!r}")
        if not isinstance(self.strict_format, bool):
            raise ConfigError(f"reward {reward!r}: option strict_format must be true or false, got {self.strict_format!r}")
        if (not isinstance(self.format_score, (int, float)) or isinstance(self.format_score, bool)
                or not math.isfinite(self.format_score) or not 0.0 <= self.format_score < 1.0):
            raise ConfigError(f"reward {reward!r}: option format_score must be a number in [0, 1), "
                              f"got {self.format_score!r}")
        if self.extract not in EXTRACT_MODES:
            raise ConfigError(f"reward {reward!r}: option extract must be one of {', '.join(EXTRACT_MODES)}, "
                              f"got {self.extract!r}")
        for name in ("max_response_chars", "max_answer_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"reward {reward!r}: option {name} must be a positive integer, got {value!r}")


COMMON_OPTIONS = tuple(f.name for f in fields(ScoringOptions))


def split_options(reward: str, options: Mapping[str, Any],
                  family_options: Mapping[str, Any]) -> tuple[ScoringOptions, dict[str, Any]]:
    """Separate the common scoring options from the family's own (whose defaults are `family_options`).

    An unknown option is a ConfigError naming the reward and listing the valid ones."""
    unknown = sorted(set(options) - set(COMMON_OPTIONS) - set(family_options))
    if unknown:
        valid = ", ".join(sorted(set(COMMON_OPTIONS) | set(family_options)))
        raise ConfigError(f"reward {reward!r}: unknown option {', '.join(map(repr, unknown))}; valid options: {valid}")
    common = ScoringOptions(**{k: v for k, v in options.items() if k in COMMON_OPTIONS})
    common.validate(reward)
    own = {**family_options, **{k: v for k, v in options.items() if k in family_options}}
    return common, own


class Rejection(Exception):
    """Raised by parsers: the answer cannot be scored. `kind` is one of the failure kinds above."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def _distinct_last(blocks: list[str], what: str) -> str | None:
    """The last block, when every block says the same; several different final answers are a hedge."""
    if not blocks:
        return None
    if len({block.strip() for block in blocks}) > 1:
        raise Rejection(CONFLICT, f"the response has {len(blocks)} {what} with different answers; give one final answer")
    return blocks[-1]


def _tag_blocks(text: str, open_tag: str, close_tag: str) -> list[str]:
    """The contents of every open_tag...close_tag block; Rejection when the last one is not closed."""
    lower = text.lower()
    blocks, position = [], 0
    while True:
        start = lower.find(open_tag, position)
        if start < 0:
            return blocks
        end = lower.find(close_tag, start + len(open_tag))
        if end < 0:
            raise Rejection(NO_ANSWER, f"the last {open_tag} tag is not closed by {close_tag}")
        # A nested opening tag starts the block again: the innermost text is the answer.
        inner = lower.rfind(open_tag, start, end)
        blocks.append(text[inner + len(open_tag):end])
        position = end + len(close_tag)


def _boxes(text: str) -> list[str]:
    """The contents of every \\boxed{...}, braces matched (linear scans, no recursion)."""
    boxes, position = [], 0
    while True:
        start = text.find("\\boxed{", position)
        if start < 0:
            return boxes
        depth, i = 1, start + len("\\boxed{")
        begin = i
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            raise Rejection(NO_ANSWER, "a \\boxed{ has no matching closing brace")
        boxes.append(text[begin:i - 1])
        position = i


def check_strict_format(response: str) -> None:
    """The R1 layout: [<think>] ... </think> ... <answer> ... </answer>, each tag once, in that order."""
    lower = response.lower()
    counts = {tag: lower.count(tag) for tag in ("<think>", "</think>", "<answer>", "</answer>")}
    if counts["<think>"] > 1 or any(counts[t] != 1 for t in ("</think>", "<answer>", "</answer>")):
        found = ", ".join(f"{tag} x{n}" for tag, n in counts.items())
        raise Rejection(NO_ANSWER, "strict format expects </think>, <answer> and </answer> once each "
                                   f"(and at most one <think>); found {found}")
    positions = [lower.find("<think>") if counts["<think>"] else -1,
                 lower.find("</think>"), lower.find("<answer>"), lower.find("</answer>")]
    if positions != sorted(positions):
        raise Rejection(NO_ANSWER, "strict format expects <think>...</think> before <answer>...</answer>")


_THINKING = re.compile(r"<think>.*?</think>|^(?:(?!<think>).)*?</think>", re.I | re.S)


def _outside_thinking(response: str) -> str:
    """The response without its reasoning (each <think>...</think>, and the text before a first </think>
    whose <think> was in the prompt), when what is left holds an answer tag or box: a tag or box inside the
    reasoning ("I must answer inside <answer> </answer> tags") is not an answer then."""
    zone = _THINKING.sub(" ", response)
    return zone if "<answer>" in zone.lower() or "\\boxed{" in zone else response


def extract_answer(response: str, mode: str) -> tuple[str, str]:
    """(answer text, where it came from). Raises Rejection when the mode finds no answer."""
    zone = _outside_thinking(response)
    if mode in ("auto", "answer_tag"):
        block = _distinct_last(_tag_blocks(zone, "<answer>", "</answer>"), "<answer> blocks")
        if block is not None:
            return block, "answer_tag"
        if mode == "answer_tag":
            raise Rejection(NO_ANSWER, "no <answer>...</answer> block in the response")
    if mode in ("auto", "boxed"):
        block = _distinct_last(_boxes(zone), "\\boxed{} answers")
        if block is not None:
            return block, "boxed"
        if mode == "boxed":
            raise Rejection(NO_ANSWER, "no \\boxed{...} in the response")
    cut = response.lower().rfind("</think>")
    text = response[cut + len("</think>"):] if cut >= 0 else response
    if not text.strip():
        raise Rejection(NO_ANSWER, "the response has no text after </think>" if cut >= 0 else "the response is empty")
    return text, "after_think" if cut >= 0 else "full"


_ALLOWED_CONTROL = {"\n", "\r", "\t"}


def screen_answer(answer: str, max_chars: int) -> None:
    """Reject over-long answers and characters that only imitate ASCII (O(len) and bounded)."""
    if len(answer) > max_chars:
        raise Rejection(TOO_LONG, f"the answer is {len(answer):,} characters; "
                                  f"the limit is {max_chars:,} (option max_answer_chars)")
    for position, ch in enumerate(answer):
        if ch.isascii():
            if ch.isprintable() or ch in _ALLOWED_CONTROL:
                continue
            raise Rejection(SUSPICIOUS, f"the answer contains the control character U+{ord(ch):04X} at position {position}")
        category = unicodedata.category(ch)
        if category[0] in "LNMC":
            name = unicodedata.name(ch, "unnamed")
            ascii_form = unicodedata.normalize("NFKC", ch)
            imitates = ascii_form.isascii() and ascii_form != ch and ascii_form.strip()
            looks = f", which imitates {ascii_form!r}" if imitates else ""
            raise Rejection(SUSPICIOUS, f"the answer contains {ch!r} (U+{ord(ch):04X} {name}){looks} at position "
                                        f"{position}; answers must use ASCII letters and digits")


def prepare(response: str, opts: ScoringOptions) -> tuple[str, str]:
    """Steps 1-3: size limit, (strict format,) extraction, screening. Returns (answer, source)."""
    if len(response) > opts.max_response_chars:
        raise Rejection(TOO_LONG, f"the response is {len(response):,} characters; "
                                  f"the limit is {opts.max_response_chars:,} (option max_response_chars)")
    if opts.strict_format:
        check_strict_format(response)
    answer, source = extract_answer(response, opts.extract)
    screen_answer(answer, opts.max_answer_chars)
    return answer, source


def rejected(rejection: Rejection, **details: Any) -> RewardResult:
    return RewardResult(score=0.0, correct=False,
                        details={"failure": rejection.kind, "reason": rejection.reason, **details})


def verdict(opts: ScoringOptions, *, correct: bool, well_formed: bool, fraction: float | None,
            failure: str | None = None, reason: str | None = None, **details: Any) -> RewardResult:
    """The score of a parsed answer: 1.0 if correct; else max(0, format_score if well formed,
    fraction if partial_credit). `fraction` is the family's fraction of correct parts (None: not defined)."""
    if correct:
        return RewardResult(score=1.0, correct=True, details=details)
    score = 0.0
    if well_formed:
        score = max(score, opts.format_score)
    if opts.partial_credit and fraction is not None:
        score = max(score, min(fraction, 1.0))
    details = {"failure": failure or WRONG, "reason": reason or "the answer is wrong", **details}
    if fraction is not None:
        details["fraction_correct"] = fraction
    return RewardResult(score=float(score), correct=False, details=details)


def excerpt(text: str, limit: int = 200) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."
