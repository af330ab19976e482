"""Prompts: a task's Jinja template (or chat messages) rendered over one sample, and turned into token ids.

A missing field is an error, never blank text; a field the sample leaves empty (null, or missing from a JSON
row) is refused rather than printed as "None". Chat messages become text through the model's tokenizer chat
template.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from areal_core.errors import TaskSpecError
from areal_core.tasks.spec import PromptSpec


def render_prompt(prompt: PromptSpec, sample: dict[str, Any], task: str) -> str | list[dict[str, str]]:
    """The prompt for one sample: text, or a list of chat messages ({role, content})."""
    if prompt.template is not None:
        return _render(prompt.template, sample, task)
    return [{"role": m.role, "content": _render(m.content, sample, task)} for m in prompt.messages or []]


def encode_prompt(prompt: str | list[dict[str, str]], tokenizer: Any) -> list[int]:
    """Token ids of a rendered prompt (chat messages through the tokenizer's chat template)."""
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 may return a BatchEncoding (a Mapping, not a dict)
        ids = ids["input_ids"]
    return list(ids)


class EmptyPromptField(TaskSpecError):
    """The prompt prints a field the sample leaves empty (null, or missing from a JSON row); `detail` says
    which, without the task and sample the message starts with."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class _FalsyMarker(str):
    def __bool__(self) -> bool:
        return False


def _empty_fields(template: str, sample: dict[str, Any]) -> str:
    """Which empty fields the template prints: render again (as plain Jinja, which prints None) with a
    marker in place of one empty field at a time."""
    import jinja2

    plain = jinja2.Environment(keep_trailing_newline=True, autoescape=False).from_string(template)
    printed = []
    for key in [k for k, v in sample.items() if v is None]:
        marker = _FalsyMarker(f"\x00{key}\x00")  # tested like None, printed as itself
        try:
            if marker in plain.render(**{**sample, key: marker}):
                printed.append(repr(key))
        except Exception:  # noqa: BLE001 - the template also fails otherwise: count the field as printed
            printed.append(repr(key))
    what = (f"the empty (missing or null) field{'s' if len(printed) > 1 else ''} {', '.join(printed)}" if printed
            else "an empty (null) nested value")
    return (f"{what}, which would read \"None\"; a template that allows it writes {{{{ x or '' }}}} "
            "or {{ x | default('', true) }}")


def _refuse_none(value: Any) -> Any:
    if value is None:
        raise EmptyPromptField("the prompt prints a field this row leaves empty (missing or null)")
    return value


@functools.lru_cache(maxsize=256)
def _compiled(template: str) -> Any:
    """The compiled template (compiling costs more than rendering; a training run renders one template
    for every prompt)."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                             finalize=_refuse_none)
    return env.from_string(template)


def _render(template: str, sample: dict[str, Any], task: str) -> str:
    import jinja2

    try:
        return _compiled(template).render(**sample)
    except EmptyPromptField:
        detail = f"the prompt prints {_empty_fields(template, sample)}"
        raise EmptyPromptField(f"task {task!r}, sample {sample.get('id')!r}: {detail}", detail) from None
    except jinja2.UndefinedError as exc:
        raise TaskSpecError(
            f"task {task!r}: the prompt template uses an undefined field ({exc.message}); "
            f"sample fields: {', '.join(sorted(sample))}"
        ) from None
    except jinja2.TemplateError as exc:
        raise TaskSpecError(f"task {task!r}: the prompt template is invalid: {exc}") from None
