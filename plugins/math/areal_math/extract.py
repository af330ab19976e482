"""Find the final answer in a model response.

Cues, strongest first: the `\\boxed{...}` / `\\fbox{...}` (brace-matched; boxes written side by
side, like `\\boxed{2}, \\boxed{3}`, are one answer with several values; boxes apart that differ are
several final answers, and the response is right only if every one of them is, unless some boxes are
named the final answer, which makes the others intermediate results; a hedge right after the box,
`\\boxed{12} (or possibly 13)`, is no answer), then "final answer is ...",
"the answer is ..." / "Answer: ...", GSM8K's `#### N`, the last markdown bold, and finally a trailing
bare LaTeX segment or number on the last line. When a `<think>...</think>` block is followed by text
with an answer, the thinking is ignored; otherwise the whole text is searched.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from areal_math.answer import UNIT_WORDS

# lenient (evals; "auto" is its old name): every cue, the last one wins. strict (training rewards):
# only the form the task asks for, a box, or nothing. boxed: the same as strict. none: the whole text.
EXTRACT_MODES = ("lenient", "strict", "auto", "boxed", "none")


@dataclass(frozen=True)
class Extraction:
    answer: str | None  # None: no answer found; "" : an empty one (e.g. an empty box)
    source: str  # boxed, final_answer, answer_is, gsm8k, bold, trailing, whole, none, hedged
    # Other boxed answers that differ in writing from `answer`: the response counts as right only if
    # every one of them is right too (\\boxed{\\frac12} ... \\boxed{0.5} is one answer; 18 ... 19 is two).
    others: tuple[str, ...] = ()


NOTHING = Extraction(None, "none")
HEDGED = Extraction(None, "hedged")

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_FINAL = re.compile(r"final\s+answer\s*(?:is|was|would be|will be)?\s*[:=]?", re.I)
_ANSWER_IS = re.compile(r"(?:\bthe\s+(?:correct\s+)?answer\s+(?:is|would be|will be)|^\s*\**answer\**\s*[:=])\s*:?", re.I | re.M)
_GSM8K = re.compile(r"####\s*(.+?)\s*$", re.M)
_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")
_MATH_SEGMENT = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_TRAILING_MATH = re.compile(r"(?:\$\$(.+?)\$\$|\$([^$]+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\])\s*[.!]?\s*$", re.S)
_TRAILING_NUMBER = re.compile(r"(?<![\w.^_{])(-?\d[\d,]*(?:\.\d+)?)\s*(?:[€£¥%]|m²|m³)?\s*[.!]?\s*$")
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


def _box_groups(text: str, boxes: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """(start, end, answer) per group of boxes written side by side (`\\boxed{2}, \\boxed{3}` is the answer 2, 3)."""
    groups: list[tuple[int, int, list[str]]] = []
    for start, stop, content in boxes:
        if not groups or _GAP_FILLER.sub("", text[groups[-1][1]:start]):
            groups.append((start, stop, []))
        first, _, contents = groups[-1]
        if re.sub(r"\s+", "", content) not in [re.sub(r"\s+", "", c) for c in contents]:
            contents.append(content.strip())
        groups[-1] = (first, stop, contents)
    return [(start, stop, ", ".join(contents)) for start, stop, contents in groups]


# A box the response names as its final answer ("The final answer is $\\boxed{5}$", "**Final Answer**\n\\boxed{5}");
# when some boxes are named so, the others are intermediate results.
_DESIGNATED = re.compile(r"(?:final\s+answer|\banswer)\W{0,3}(?:is|was|would be|will be)?[\s:=*]*(?:\$\$?|\\\[|\\\()?\s*$",
                         re.I)
# A hedge right after the final box: "\\boxed{12} (or possibly 13)", "\\boxed{C} or A".
_HEDGE_AFTER = re.compile(r"^[\s$.]*(?:\\\)|\\\])?[\s$.]*[,(]?\s*(?:or|either|maybe|perhaps|possibly|probably)\b"
                          r"[^.\n]{0,30}?(?:\d|\\[A-Za-z]|\$|\(\s*[A-E]\s*\)|\b[A-E]\b)", re.I)


def _boxed_answer(text: str) -> Extraction | None:
    """The boxed answer: the last box group (of those named as the final answer, when some are), with the
    other groups that differ in writing, which must all be right too; a hedge right after it is several
    answers (source "hedged", no answer)."""
    boxes = find_boxes(text)
    if not boxes:
        return None
    groups = _box_groups(text, boxes)
    named = [i for i, g in enumerate(groups) if _DESIGNATED.search(text[max(0, g[0] - 80):g[0]])]
    # Boxes named the final answer, and any box after the last of them ("... is $\\boxed{5}$. Also $\\boxed{6}$.")
    candidates = [groups[i] for i in named] + groups[named[-1] + 1:] if named else groups
    start, stop, answer = candidates[-1]
    if _HEDGE_AFTER.match(text[stop:stop + 80]):
        return HEDGED
    key = re.sub(r"\s+", "", answer)
    others = tuple(dict.fromkeys(a for _, _, a in candidates if re.sub(r"\s+", "", a) != key))
    return Extraction(answer, "boxed", others)


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
    if m and m.start() < 3 and "$" not in re.split(r"(?<!\d)\.(?!\d)", line[m.end():], maxsplit=1)[0]:
        return next(g for g in m.groups() if g is not None).strip()
    line = line.strip('"').replace('\\"', "")
    line = re.split(r"(?<!\d)\.(?!\d)|\.(?=\s|$)", line, maxsplit=1)[0]
    line = re.split(r",\s+(?=(?:since|because|which|as|so|and\s+the|where|given)\b)", line, maxsplit=1)[0]
    return line.strip().strip("*").strip().rstrip(".")


_CHAT_MARKER = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|end|user|assistant|start_header_id)\|>|</s>")
_BOILERPLATE = re.compile(r"\s*I hope (?:it|this|that) is correct\.?", re.I)
_COPULA = re.compile(r"\b(?:is|are|was|were|equals|becomes|comes to|gives|(?:in|de)creases by)\b|=(?![^$]*\$\s*$)",
                     re.I)
_NAMED_ANSWER = re.compile(r"^(?:the|our|its)\s+(?:solution|answer|result)(?:\s+set)?$", re.I)
_MATH_ANY = re.compile(r"\$\$(.+?)\$\$|\$([^$]+?)\$|\\\((.+?)\\\)", re.S)
_NUMBER_ANY = re.compile(r"(?<![\w.^_{$])-?\d[\d,]*(?:\.\d+)?(?:/\d+)?(?![\w^_}])")
# An answer written with an escaped backslash (`\\frac`, as in a JSON or Python string literal).
_DOUBLED = re.compile(r"\\\\(?=(?:boxed|fbox|left|right|frac|dfrac|tfrac|sqrt|pi|cdot|infty|text|begin|end)(?![A-Za-z]))")
# Words that make a sentence something other than a statement of its answer: anywhere in it (a
# hedge, a negation, a condition), or after its copula (a qualification of the value itself).
_HEDGE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|probably|unless|if|but|not|never|no|cannot|can't|"
                    r"isn't|guess|doubt|whether|wrong|incorrect|fails?|except|besides|try|check|recheck|when|"
                    r"while|for|than|greater|less|more|fewer|larger|smaller|exceeds?|above|below|different|other|"
                    r"step|steps|case|cases|part)\b|[;(]", re.I)
_QUALIFIER = re.compile(r"\b(?:could|might|may|between|with|without|including|excluding|counting|only|because|"
                        r"since|at least|at most)\b", re.I)
_LISTED_LAST = re.compile(r"(?:\band\b|\bor\b|,)\s*(?:\$[^$]*\$|-?\d[\d,.]*)\s*[^\w$]*$")
_CONNECTIVE = re.compile(r"\b(?:and|or|to|over|plus|minus|times|than|more|less|divided|by|of)\b", re.I)
_CONCLUSION = re.compile(r"^\W*(?:therefore|thus|hence|so|finally|in total|in conclusion|overall|altogether)\b", re.I)
_OBJECT_START = re.compile(r"^(?:\$\$(.+?)\$\$|\$([^$]+?)\$|\\\((.+?)\\\)|(-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?\s*\\?%?))"
                           r"\s*[.!]?\s*$", re.S)
_LEADING_NUMBER = re.compile(r"^(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)\s+[A-Za-z]")


def _has_object(answer: str) -> bool:
    """Whether a cue's text holds something mathematical (a later cue overrides a box only then)."""
    return bool(re.search(r"[\d\\]", answer)) or bool(re.fullmatch(r"\(?[A-Ea-e]\)?", answer.strip()))


def _objects(sentence: str) -> int:
    """Candidate answers in a sentence: numbers in its prose and math segments that are more than a
    name (`$n$`, `$ABCDEFGH$`, `$f(x)$` name things; `$12$`, `$(7, 6)$` are values)."""
    segments = [next(g for g in m.groups() if g is not None) for m in _MATH_ANY.finditer(sentence)]
    values = [seg for seg in segments if re.search(r"\d|\\(?!text)[A-Za-z]|[<>=]", seg)]
    prose = _MATH_ANY.sub(" ", sentence)
    return len(values) + len(_NUMBER_ANY.findall(prose))


def _tail_object(sentence: str, leading_number: bool = False) -> tuple[str, str]:
    """In a sentence that names its one answer ("The largest $n$ is 34", "the pair is $(7, 6)$",
    "$x \\geq 5$ is the solution", "Jane started growing Sphere 3 hours ago"), that object, with how it
    was found ("copula": after the last copula; "number": the sentence's last token; "direct": the
    sentence is only math). Else the sentence ("sentence"): a hedge ("3 or 4", "could be 12"), a
    sentence with several values ("the minimum is 3 and the maximum is 12") or a condition stays
    whole and is judged as such."""
    prose = re.sub(r"\$[^$]*\$|\\[A-Za-z]+", "", sentence)
    if not _PROSE.search(prose):
        return sentence, "direct"
    words = _MATH_ANY.sub(" ", sentence)
    if _HEDGE.search(words) or _objects(sentence) != 1:
        return sentence, "sentence"
    copulas = list(_COPULA.finditer(sentence))
    if copulas and _QUALIFIER.search(_MATH_ANY.sub(" ", sentence[copulas[-1].end():])):
        return sentence, "sentence"
    if copulas:
        tail = sentence[copulas[-1].end():].strip().rstrip(".").strip()
        m = _OBJECT_START.match(tail)
        if m:
            return next(g for g in m.groups() if g is not None).strip(), "copula"
        if _NAMED_ANSWER.match(tail):
            segments = list(_MATH_ANY.finditer(sentence[:copulas[-1].start()]))
            if segments:
                return next(g for g in segments[-1].groups() if g is not None).strip(), "copula"
        if leading_number:
            m = _LEADING_NUMBER.match(tail)
            if m and not _CONNECTIVE.search(tail[m.end(1):]):
                return m.group(1), "copula"
    m = re.search(r"(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)(?:\s+([A-Za-z]+)(?:\s+[A-Za-z]+)?)?\s*\.?\s*$", prose.strip())
    if (m and "$" not in sentence and len(_PROSE.findall(prose)) >= 3 and not _QUALIFIER.search(words)
            and (m.group(2) is None or m.group(2).lower() in UNIT_WORDS)):
        return m.group(1), "number"  # the sentence's last value, with a unit: "... Sphere 3 hours ago"
    return sentence, "sentence"


def _cue_answer(text: str) -> tuple[Extraction, str, int] | None:
    """The last "final answer" / "the answer is" / "Answer:" cue, how its object was found, and where
    the cue starts."""
    found: list[tuple[int, Extraction, str]] = []
    for source, pattern in (("final_answer", _FINAL), ("answer_is", _ANSWER_IS)):
        for match in reversed(list(pattern.finditer(text))):
            answer = _sentence(text[match.end():])
            if answer:
                obj, how = _tail_object(answer)
                found.append((match.start(), Extraction(obj, source), how))
                break
    if not found:
        return None
    start, extraction, how = max(found, key=lambda item: item[0])
    return extraction, how, start


def _last_sentence_answer(text: str) -> Extraction | None:
    """No cue at all: the last sentence, when it concludes ("Therefore, the probability is 2/3.")."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if s.strip()]
    if not sentences:
        return None
    last = sentences[-1].strip()
    starts = [m.start() for m in re.finditer(r"\b(?:Therefore|Thus|Hence|So|Finally)\b", last)]
    if starts:  # "P(A) = (1/2) * (4/3) P(A) = 2/3 Therefore, the probability ... is 2/3"
        last = last[starts[-1]:]
    if not _CONCLUSION.search(last):
        return None
    answer, how = _tail_object(last.rstrip("."), leading_number=True)
    return Extraction(answer, "last_sentence") if how in ("copula", "number") else None


def _clean_tail(text: str) -> str:
    """Cut what follows the model's turn: a chat-template marker ends it (`<|im_end|>`, `<|eot_id|>`,
    `</s>`, or the start of another turn); then the Minerva sign-off goes."""
    marker = _CHAT_MARKER.search(text)
    if marker:
        text = text[:marker.start()]
    return _BOILERPLATE.sub("", text)


def _extract(text: str, mode: str) -> Extraction:
    if mode == "none":
        return Extraction(text.strip(), "whole")
    if mode in ("strict", "boxed"):
        return _boxed_answer(text) or NOTHING
    text = _DOUBLED.sub(r"\\", _clean_tail(text))
    found = _lenient(text)
    if found.answer and found.answer.startswith("=") and found.answer[1:].strip():
        return Extraction(found.answer[1:].strip(), found.source)  # "$ ... = \\frac{10}{9}$" cut at its "="
    return found


def _lenient(text: str) -> Extraction:
    boxes = find_boxes(text)
    boxed = _boxed_answer(text) if boxes else None
    found = _cue_answer(text)
    cue, how, cue_start = found if found is not None else (None, "", -1)
    # The last explicit final answer wins, whatever its kind: a box, or a later "Final Answer: ..."
    # that states its object outright (an intermediate \boxed{255} loses to it; a later remark such
    # as "the answer is an integer less than 12" does not beat a box).
    overrides = cue is not None and how in ("direct", "copula") and _has_object(cue.answer)
    # Boxes that differ are several answers, unless a final-answer statement after them all settles it.
    if boxed is not None and not (overrides and cue_start > boxes[-1][0]):
        return boxed
    if cue is not None:
        return cue
    gsm = list(_GSM8K.finditer(text))
    if gsm:
        return Extraction(gsm[-1].group(1).strip(), "gsm8k")
    for m in reversed(list(_BOLD.finditer(text))):
        content = re.sub(r"^\s*(?:final\s+)?answer\s*[:=]?\s*", "", m.group(1).strip(), flags=re.I).strip()
        if content and not content.endswith(":") and not re.match(r"(?i)step\b", content) and re.search(r"[\d\\]", content):
            return Extraction(_strip_math(content), "bold")
    display = list(re.finditer(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]", text, re.S))
    if display and not text[display[-1].end():].strip(" \t\n.!"):
        return Extraction(next(g for g in display[-1].groups() if g is not None).strip(), "trailing")
    lines = [ln for ln in text.strip().split("\n") if ln.strip()]
    if not lines:
        return NOTHING
    last = lines[-1].strip()
    # A last line that hedges or lists ("So $x=-3$ or $x=4$.", "the roots are 12 and 13") names no
    # single answer at its end.
    listed = bool(_HEDGE.search(_MATH_ANY.sub(" ", last)) or _LISTED_LAST.search(last))
    m = _TRAILING_MATH.search(last)
    if m and not listed:
        return Extraction(next(g for g in m.groups() if g is not None).strip(), "trailing")
    unit_free = re.sub(r"(?<=[\d$])\s*\b(?:percent|pct)\b\.?$", r"\\%", last)
    if not _PROSE.search(re.sub(r"\\[A-Za-z]+", "", unit_free)):
        return Extraction(_strip_math(unit_free), "trailing")
    concluded = _last_sentence_answer(text)
    if concluded is not None:
        return concluded
    m = _TRAILING_NUMBER.search(last)
    if m and not listed:
        return Extraction(m.group(1), "trailing")  # "We get 6! = 720"; not "So it is not 12."
    return NOTHING


def _strip_math(s: str) -> str:
    s = s.strip()
    m = _MATH_SEGMENT.fullmatch(s)
    if m:
        return next(g for g in m.groups() if g is not None).strip()
    return s


def extract_answer(response: str, mode: str = "lenient") -> Extraction:
    """The final answer in `response`. mode: "lenient" (every cue; "auto" is the same), "strict" or
    "boxed" (boxes only), "none" (the whole response is the answer)."""
    if mode not in EXTRACT_MODES:
        raise ValueError(f"extract must be one of {', '.join(EXTRACT_MODES)}, got {mode!r}")
    if mode == "auto":
        mode = "lenient"
    if "</think>" in response:
        after = response.rsplit("</think>", 1)[1]
        found = _extract(after, mode)
        if found.answer is not None:
            return found
        response = response.replace("<think>", " ").replace("</think>", " ")
    return _extract(response, mode)


__all__ = ["Extraction", "extract_answer", "find_boxes", "EXTRACT_MODES"]
