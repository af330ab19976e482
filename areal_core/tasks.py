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
    reward: {name: math, options: {}}
    eval: {n: 4, k: [1, 4], temperature: 0.6, max_new_tokens: 1024}

Or a generated dataset: ``dataset: {generator: arithmetic, seed: 0, size: 1000, options: {digits: 3}}``.
Prompts are Jinja templates over the sample's fields (a missing field is an error, never blank text);
chat messages are turned into text later, by the model's tokenizer chat template.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import warnings
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import yaml

from areal_core.errors import ConfigError, DatasetError, TaskSpecError
from areal_core.schema import build, to_plain

DATA_DIR_ENV = "AREAL_DATA_DIR"
_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


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
    name: str
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


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data root: the argument, else ``$AREAL_DATA_DIR``, else ``$XDG_DATA_HOME/areal/data``."""
    if data_dir:
        return Path(data_dir).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "areal" / "data"


def _normalise(value: Any, tp: str, where: str) -> Any:
    if tp == "any":
        return value
    if tp == "str":
        # Answer columns mix types (int in AIME25, float in AMC23): 27.0 must read "27", not "27.0".
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return value if isinstance(value, str) else str(value)
    try:
        return int(value) if tp == "int" else float(value)
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: cannot read {value!r} as {tp}") from None


def _jsonable(value: Any) -> Any:
    """Rows read through Arrow may hold numpy values; samples must be JSON-friendly."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class Task:
    """A task spec bound to its data: loads rows, maps them to samples, renders prompts."""

    def __init__(self, spec: TaskSpec, data_dir: str | Path | None = None) -> None:
        self.spec = spec
        self.data_dir = resolve_data_dir(data_dir)
        self._samples: list[dict[str, Any]] | None = None
        self.skipped_rows: list[str] = []

    @property
    def name(self) -> str:
        return self.spec.name

    # -- data ---------------------------------------------------------------------------------
    def _local_path(self) -> Path | None:
        if not self.spec.dataset.path:
            return None
        path = Path(self.spec.dataset.path).expanduser()
        return path if path.is_absolute() else self.data_dir / path

    def describe_source(self) -> str:
        ds = self.spec.dataset
        if ds.generator:
            return f"generator {ds.generator} (seed {ds.seed}, size {ds.size})"
        if ds.path:
            return str(self._local_path())
        return f"hub {ds.hub} ({ds.split})"

    def _read_rows(self) -> list[dict[str, Any]]:
        ds = self.spec.dataset
        if ds.generator:
            from areal_core.registry import generator_registry

            generator = generator_registry().get(ds.generator)
            try:
                rows = list(islice(generator.fn(seed=ds.seed, size=ds.size, **ds.options), ds.size))
            except TypeError as exc:
                raise DatasetError(f"task {self.name!r}: generator {ds.generator!r} rejected its options {ds.options}: {exc}") from None
            return rows
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
        path = self._local_path()
        if path is not None and path.exists():
            suffixes = [s for s in path.suffixes if s not in (".gz", ".bz2", ".zst", ".xz")]
            fmt = ds.format or (_FORMATS.get(suffixes[-1]) if suffixes else None)
            if fmt is None:
                raise DatasetError(f"task {self.name!r}: cannot tell the format of {path}; set dataset.format")
            builder = "json" if fmt in ("json", "jsonl") else fmt
            try:
                loaded = datasets.load_dataset(builder, data_files=str(path), split="train")
            except Exception as exc:
                raise DatasetError(f"task {self.name!r}: cannot read {path} as {fmt}: {type(exc).__name__}: {exc}") from None
        elif ds.hub:
            try:
                loaded = datasets.load_dataset(ds.hub, ds.hub_config, split=ds.split)
            except Exception as exc:
                where = f"{path} does not exist and " if path else ""
                raise DatasetError(
                    f"task {self.name!r}: {where}loading {ds.hub!r} from the Hugging Face hub failed "
                    f"({type(exc).__name__}: {exc}); put the file under the data dir "
                    f"(--data-dir or ${DATA_DIR_ENV})"
                ) from None
        else:
            raise DatasetError(
                f"task {self.name!r}: dataset file {path} not found; set the data dir with --data-dir "
                f"or ${DATA_DIR_ENV} (now {self.data_dir})"
            )
        rows = loaded.to_list()
        if ds.size is not None:
            rows = rows[: ds.size]
        return rows

    def _row_to_sample(self, index: int, row: Any) -> dict[str, Any]:
        where = f"task {self.name!r}, row {index} of {self.describe_source()}"
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected an object, got {type(row).__name__}")
        sample = {k: _jsonable(v) for k, v in row.items()}
        for name, spec in self.spec.fields.items():
            if isinstance(spec, str):
                spec = FieldSpec(column=spec)
            if spec.column not in row:
                raise DatasetError(f"{where}: no column {spec.column!r} (needed for field {name!r}); columns: {', '.join(row)}")
            value = sample[spec.column]
            if spec.regex is not None:
                match = re.search(spec.regex, str(value), re.MULTILINE | re.DOTALL)
                if match is None:
                    raise DatasetError(f"{where}: column {spec.column!r} does not match {spec.regex!r}")
                value = match.group(1) if match.groups() else match.group(0)
                value = value.strip()
            sample[name] = _normalise(value, spec.type, f"{where}, field {name!r}")
        # The id a user can look samples up by: the mapped/own `id` field, else the row index.
        sample["id"] = str(sample.get("id", index))
        # A JSON row without a column other rows have is read as null, and the prompt would say "None": a bad
        # row, found here so that `on_bad_row` applies (other template errors concern every row: they are
        # raised when a prompt is rendered).
        try:
            self.render_prompt(sample)
        except EmptyPromptField as exc:
            raise DatasetError(f"{where}: {exc.detail}") from None
        except TaskSpecError:
            pass
        except Exception as exc:  # noqa: BLE001 - e.g. a TypeError from arithmetic on this row's values
            raise DatasetError(f"{where}: the prompt template fails on this row: {type(exc).__name__}: {exc}") from None
        return sample

    def samples(self) -> list[dict[str, Any]]:
        """All samples (cached). A bad row raises DatasetError naming it, or with
        ``dataset.on_bad_row: skip`` is left out and recorded in ``skipped_rows`` with a warning."""
        if self._samples is None:
            samples = []
            for index, row in enumerate(self._read_rows()):
                try:
                    samples.append(self._row_to_sample(index, row))
                except DatasetError as exc:
                    if self.spec.dataset.on_bad_row == "error":
                        raise
                    self.skipped_rows.append(str(exc))
            if not samples and not self.skipped_rows:
                raise DatasetError(f"task {self.name!r}: {self.describe_source()} has no rows")
            if self.skipped_rows and not samples:
                raise DatasetError(f"task {self.name!r}: every row of {self.describe_source()} is malformed "
                                   f"({len(self.skipped_rows)} skipped); first: {self.skipped_rows[0]}")
            if self.skipped_rows:
                warnings.warn(f"task {self.name!r}: skipped {len(self.skipped_rows)} malformed rows; first: {self.skipped_rows[0]}")
            self._samples = samples
        return self._samples

    # -- prompts ------------------------------------------------------------------------------
    def render_prompt(self, sample: dict[str, Any]) -> str | list[dict[str, str]]:
        """The prompt for one sample: text, or a list of chat messages ({role, content})."""
        prompt = self.spec.prompt
        if prompt.template is not None:
            return _render(prompt.template, sample, self.name)
        return [{"role": m.role, "content": _render(m.content, sample, self.name)} for m in prompt.messages or []]


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


def get_task(name: str, data_dir: str | Path | None = None, tasks_dirs: tuple[str, ...] = ()) -> Task:
    from areal_core.registry import task_registry

    return Task(task_registry(tasks_dirs).get(name), data_dir)
