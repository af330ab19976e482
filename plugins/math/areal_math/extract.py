"""Find the final answer in a model response.

Cues, strongest first: the last `\\boxed{...}` / `\\fbox{...}` (brace-matched; boxes written side by
side, like `\\boxed{2}, \\boxed{3}`, are one answer with several values), then "final answer is ...",
"the answer is ..." / "Answer: ...", GSM8K's `#### N`, the last markdown bold, and finally a trailing
bare LaTeX segment or number on the last line. When a `<think>...</think>` block is followed by text
with an answer, the thinking is ignored; otherwise the whole text is searched.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

EXTRACT_MODES = ("auto", "boxed", "none")


@dataclass(frozen=True)
class Extraction:
    answer: str | None  # None: no answer found; "" : an empty one (e.g. an empty box)
    source: str  # boxed, final_answer, answer_is, gsm8k, bold, trailing, whole, none


NOTHING = Extraction(None, "none")

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_FINAL = re.compile(r"final\s+answer\s*(?:is|was|would be|will be)?\s*[:=]?", re.I)
_ANSWER_IS = re.compile(r"(?:\bthe\s+(?:correct\s+)?answer\s+(?:is|would be|will be)|^\s*\**answer\**\s*[:=])\s*:?", re.I | re.M)
_GSM8K = re.compile(r"####\s*(.+?)\s*$", re.M)
_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")
_MATH_SEGMENT = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_TRAILING_MATH = re.compile(r"(?:\$\$(.+?)\$\$|\$([^$]+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\])\s*[.!]?\s*$", re.S)
_TRAILING_NUMBER = re.compile(r"(?<![\w.^_{])(-?\d[\d,]*(?:\.\d+)?)\s*[.!]?\s*$")
_PROSE = re.compile(r"[A-Za-z]{3,}")
_GAP_FILLER = re.compile(r"\\text\s*\{\s*(?:or|and)\s*\}|\\(?:quad|qquad|[,;: ])|\$|\\\[|\\\]|\\\(|\\\)|\b(?:or|and)\b|[\s,;.]")


def find_boxes(text: str) -> list[tuple[int, int, str]]:
    """Every complete outermost box as (start, end, content), in one pass over the text; a box cut off
    by the end of the text is skipped (a box inside it may still count)."""
    boxes: list[tuple[int, int, str]] = []
    open_boxes: list[tuple[int, int, int]] = []  # (start of \\boxed, index of its brace, depth inside it)
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            m = _BOX.match(text, i)
            if m:
                j = m.end()
                while j < n and text[j] == " ":
                    j += 1
                if j < n and text[j] == "{":
                    open_boxes.append((i, j, depth + 1))
                    depth += 1
                    i = j + 1
                    continue
                if j > m.end() and j < n:  # `\\boxed 5`
                    tok = re.match(r"[^\s$]+", text[j:])
                    if tok:
                        boxes.append((i, j + tok.end(), tok.group(0)))
                        i = j + tok.end()
                        continue
            i += 2  # an escaped character such as \\{ is not a brace
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            if open_boxes and open_boxes[-1][2] == depth:
                start, brace, _ = open_boxes.pop()
                boxes.append((start, i + 1, text[brace + 1:i]))
            depth = max(0, depth - 1)
        i += 1
    boxes.sort()
    outer: list[tuple[int, int, str]] = []
    for box in boxes:  # a box inside another box is part of it
        if outer and box[0] < outer[-1][1]:
            continue
        outer.append(box)
    return outer


def _boxed_answer(text: str) -> str | None:
    boxes = find_boxes(text)
    if not boxes:
        return None
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        gap = text[prev[1]:group[0][0]]
        if _GAP_FILLER.sub("", gap):
            break
        group.insert(0, prev)
    contents: list[str] = []
    for _, _, content in group:
        key = re.sub(r"\s+", "", content)
        if key not in [re.sub(r"\s+", "", c) for c in contents]:
            contents.append(content.strip())
    return ", ".join(contents) if len(contents) > 1 else contents[0]


def _sentence(rest: str) -> str:
    """The answer after a cue like 'the answer is': its math segment, or the text up to the end of
    the sentence."""
    line = rest.strip().split("\n", 1)[0] if rest.strip() else ""
    if not line:
        # "Final Answer:\n\n$18$" puts the answer on the next line
        lines = [ln for ln in rest.split("\n") if ln.strip()]
        line = lines[0] if lines else ""
    line = line.strip().strip("*").strip()
    m = _MATH_SEGMENT.search(line)
    if m and m.start() < 3:
        return next(g for g in m.groups() if g is not None).strip()
    line = re.split(r"(?<!\d)\.(?!\d)|\.(?=\s|$)", line, maxsplit=1)[0]
    line = re.split(r",\s+(?=(?:since|because|which|as|so|and\s+the|where|given)\b)", line, maxsplit=1)[0]
    return line.strip().strip("*").strip().rstrip(".")


def _extract(text: str, mode: str) -> Extraction:
    if mode == "none":
        return Extraction(text.strip(), "whole")
    boxed = _boxed_answer(text)
    if boxed is not None:
        return Extraction(boxed, "boxed")
    if mode == "boxed":
        return NOTHING
    for source, pattern in (("final_answer", _FINAL), ("answer_is", _ANSWER_IS)):
        matches = list(pattern.finditer(text))
        if matches:
            answer = _sentence(text[matches[-1].end():])
            if answer:
                return Extraction(answer, source)
    gsm = list(_GSM8K.finditer(text))
    if gsm:
        return Extraction(gsm[-1].group(1).strip(), "gsm8k")
    for m in reversed(list(_BOLD.finditer(text))):
        content = re.sub(r"^\s*(?:final\s+)?answer\s*[:=]?\s*", "", m.group(1).strip(), flags=re.I).strip()
        if content and not content.endswith(":") and not re.match(r"(?i)step\b", content) and re.search(r"[\d\\]", content):
            return Extraction(_strip_math(content), "bold")
    lines = [ln for ln in text.strip().split("\n") if ln.strip()]
    if not lines:
        return NOTHING
    last = lines[-1].strip()
    m = _TRAILING_MATH.search(last)
    if m:
        return Extraction(next(g for g in m.groups() if g is not None).strip(), "trailing")
    if not _PROSE.search(re.sub(r"\\[A-Za-z]+", "", last)):
        return Extraction(_strip_math(last), "trailing")
    m = _TRAILING_NUMBER.search(last)
    if m:
        return Extraction(m.group(1), "trailing")
    return NOTHING


def _strip_math(s: str) -> str:
    s = s.strip()
    m = _MATH_SEGMENT.fullmatch(s)
    if m:
        return next(g for g in m.groups() if g is not None).strip()
    return s


def extract_answer(response: str, mode: str = "auto") -> Extraction:
    """The final answer in `response`. mode: "auto" (every cue), "boxed" (boxes only), "none" (the
    whole response is the answer)."""
    if mode not in EXTRACT_MODES:
        raise ValueError(f"extract must be one of {', '.join(EXTRACT_MODES)}, got {mode!r}")
    if "</think>" in response:
        after = response.rsplit("</think>", 1)[1]
        found = _extract(after, mode)
        if found.answer is not None:
            return found
        response = response.replace("<think>", " ").replace("</think>", " ")
    return _extract(response, mode)


__all__ = ["Extraction", "extract_answer", "find_boxes", "EXTRACT_MODES"]
