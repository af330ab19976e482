"""Declarative task specs: where the data comes from, how rows become samples, the prompt, the reward.

A task spec is a YAML file in ``tasks/`` (or a directory on ``$AREAL_TASKS_PATH``) or a dict registered
by a plugin. Example::

    name: gsm8k
    description: Grade-school math word problems (test split).
    dataset:
      path: gsm8k/test.jsonl        # relative to the data dir; absolute paths work too
      hub: openai/gsm8k             # used only when the local file is absent (needs hub access)
      hub_config: main
      split: test
    fields:                         # sample field <- dataset column (all columns are kept as well)
      id: idx
      question: question
      reference: {column: answer, regex: '####\\s*(.+)$', type: str}
    prompt:
      messages:
        - {role: user, content: "{{ question }}\\nPut the final answer in \\\\boxed{}."}
    reward: {name: math, options: {}, plugin: areal-math}   # plugin: what to install when it is missing
    # workflow: {name: tool_calls, options: {tools: [calculator]}}   # default: single_turn
    # reward.modes: {train: strict, eval: lenient} picks the grading mode per use (the defaults)
    eval: {n: 4, k: [1, 4], temperature: 0.6, max_new_tokens: 1024}

Or a generated dataset: ``dataset: {generator: arithmetic, seed: 0, size: 1000, options: {digits: 3}}``.
Prompts are Jinja templates over the sample's fields (see `prompts.py`).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from areal_core.config.schema import build, to_plain
from areal_core.errors import ConfigError, TaskSpecError

@dataclass(frozen=True)
class DatasetSpec:
    """Exactly one source: a local file (`path`, with `hub` as optional fallback), a hub id, or a generator."""

    path: str | None = None
    format: Literal["json", "jsonl", "parquet", "csv", "arrow"] | None = None
    hub: str | None = None
    hub_config: str | None = None
    split: str = "test"
    generator: str | None = None
    seed: int = 0
    size: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    on_bad_row: Literal["error", "skip"] = "error"

    def validate(self) -> None:
        if self.generator and (self.path or self.hub):
            raise ValueError("a dataset has either a generator or a path/hub, not both")
        if not (self.generator or self.path or self.hub):
            raise ValueError("a dataset needs one of: path, hub, generator")
        if self.generator and (self.size is None or self.size <= 0):
            raise ValueError("a generated dataset needs a positive size")
        if self.size is not None and self.size <= 0:
            raise ValueError(f"size must be positive, got {self.size}")


@dataclass(frozen=True)
class FieldSpec:
    """A sample field taken from a dataset column, optionally cut by a regex (group 1) and typed."""

    column: str
    regex: str | None = None
    type: Literal["any", "str", "int", "float"] = "any"

    def validate(self) -> None:
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from None


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class PromptSpec:
    """Either a plain-text `template` or chat `messages`; both are Jinja templates over sample fields."""

    template: str | None = None
    messages: list[ChatMessage] | None = None

    def validate(self) -> None:
        if (self.template is None) == (self.messages is None):
            raise ValueError("a prompt has exactly one of: template, messages")
        if self.messages is not None and not self.messages:
            raise ValueError("prompt.messages is empty")


@dataclass(frozen=True)
class RewardRef:
    """The reward that scores the task, its options, and the distribution that provides it when that is a
    plugin (e.g. `areal-math`): without it installed the task is listed as unavailable, naming it."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    plugin: str | None = None
    # The grading mode per use, for a reward that has modes (math: strict, lenient), e.g.
    # {train: strict, eval: lenient} (the defaults); a use left out keeps its default.
    modes: dict[str, str] | None = None

    def validate(self) -> None:
        unknown = sorted(set(self.modes or {}) - {"train", "eval"})
        if unknown:
            raise ValueError(f"reward.modes: unknown use(s) {', '.join(unknown)}; expected train and/or eval")

    def mode_for(self, use: str) -> str:
        """The grading mode of this task's reward in `use` ("train" or "eval")."""
        from areal_core.rewards.registry import DEFAULT_MODES

        return (self.modes or {}).get(use) or DEFAULT_MODES[use]


@dataclass(frozen=True)
class WorkflowRef:
    """How an episode of the task runs: a registered workflow (single_turn, tool_calls, feedback, a plugin's) and
    its options (tools, call format, limits; see `areal_core.workflows.builtin`)."""

    name: str = "single_turn"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalDefaults:
    n: int = 1
    k: list[int] = field(default_factory=lambda: [1])
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 1024

    def validate(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if any(k < 1 or k > self.n for k in self.k):
            raise ValueError(f"every k must be between 1 and n={self.n}, got {self.k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    dataset: DatasetSpec
    prompt: PromptSpec
    reward: RewardRef
    description: str = ""
    fields: dict[str, str | FieldSpec] = field(default_factory=dict)
    eval: EvalDefaults = field(default_factory=EvalDefaults)
    workflow: WorkflowRef | None = None   # None: single_turn
    source: str = ""

    def validate(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", self.name):
            raise ValueError(f"task name {self.name!r} must be letters, digits, '_', '-' or '.'")

    def with_source(self, source: str) -> "TaskSpec":
        return dataclasses.replace(self, source=source)

    def to_dict(self) -> dict[str, Any]:
        def prune(value: Any) -> Any:  # unset optional keys only clutter a printed spec
            if isinstance(value, dict):
                return {k: prune(v) for k, v in value.items() if v is not None}
            return value

        data = prune(to_plain(self))
        data.pop("source", None)
        return data

    def content(self) -> dict[str, Any]:
        """What decides a task's samples and scores (`to_dict` less `reward.plugin`, which only says what to
        install): eval identities and the warm-up cache hash this, so naming the plugin changes neither."""
        data = self.to_dict()
        data["reward"] = {k: v for k, v in data["reward"].items() if k != "plugin"}
        return data


def task_spec_from_dict(data: Any, where: str) -> TaskSpec:
    try:
        return build(TaskSpec, data)
    except ConfigError as exc:
        raise TaskSpecError(f"{where}: {exc}") from None


def load_task_yaml(path: str | Path) -> TaskSpec:
    """Read and validate one task spec file; any problem is a TaskSpecError naming the file and key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TaskSpecError(f"{path}: cannot read task spec ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise TaskSpecError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TaskSpecError(f"{path}: a task spec must be a mapping, got {type(data).__name__}")
    data.setdefault("source", f"file {path}")
    return task_spec_from_dict(data, str(path))
