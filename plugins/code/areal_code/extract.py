"""Find the program in a model's response.

By default the program is the **last** fenced code block (```` ``` ```` or ``~~~``) whose info
string names the wanted language (``python``, ``py``, ``python3``, any case); if no block names a
language, the last untagged block; if the response has no fenced block at all, the whole response
(completion-style answers such as HumanEval continuations). An unterminated last fence (a response
cut at max_new_tokens) counts as a block running to the end of the text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from areal_core.errors import ConfigError

LANGUAGE_ALIASES = {
    "python": ("python", "py", "python3", "py3", "python2"),
    "cpp": ("cpp", "c++", "cc", "cxx"),
    "java": ("java",),
}
BLOCK_CHOICES = ("last", "first", "longest")
NO_BLOCK_CHOICES = ("raw", "empty")
_FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)


@dataclass(frozen=True)
class CodeBlock:
    language: str
    code: str
    terminated: bool


def find_blocks(text: str) -> list[CodeBlock]:
    """All fenced blocks, in order. A closing fence is the same character, at least as long."""
    blocks = []
    position = 0
    while True:
        opening = _FENCE.search(text, position)
        if opening is None:
            return blocks
        fence = opening.group("fence")
        language = (opening.group("info").strip().split() or [""])[0].lower()
        body_start = opening.end() + 1
        closing_re = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        closing = closing_re.search(text, body_start) if body_start <= len(text) else None
        if closing is None:
            blocks.append(CodeBlock(language, text[body_start:], terminated=False))
            return blocks
        blocks.append(CodeBlock(language, text[body_start:closing.start()], terminated=True))
        position = closing.end()


def extract_code(response: str, language: str = "python", block: str = "last",
                 no_block: str = "raw") -> tuple[str, str]:
    """(program, how it was found). `how` is one of: "block", "untagged block", "raw", "none"."""
    if block not in BLOCK_CHOICES:
        raise ConfigError(f"reward option block={block!r}: expected one of {', '.join(BLOCK_CHOICES)}")
    if no_block not in NO_BLOCK_CHOICES:
        raise ConfigError(f"reward option no_block={no_block!r}: expected one of {', '.join(NO_BLOCK_CHOICES)}")
    aliases = LANGUAGE_ALIASES.get(language.lower(), (language.lower(),))
    blocks = find_blocks(response)
    tagged = [b for b in blocks if b.language in aliases]
    untagged = [b for b in blocks if not b.language]
    chosen, how = (tagged, "block") if tagged else (untagged, "untagged block")
    if chosen:
        if block == "first":
            pick = chosen[0]
        elif block == "longest":
            pick = max(chosen, key=lambda b: len(b.code))
        else:
            pick = chosen[-1]
        return pick.code, how
    if blocks:  # only blocks of other languages: nothing to run
        return "", "none"
    if no_block == "raw" and response.strip():
        return response, "raw"
    return "", "none"
