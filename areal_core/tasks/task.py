"""A task spec bound to its data: rows read from a local file, the hub or a generator, mapped to samples."""
from __future__ import annotations

import re
import warnings
from itertools import islice
from pathlib import Path
from typing import Any

from areal_core.errors import DatasetError, TaskSpecError, UnknownNameError
from areal_core.files import DATA_DIR_ENV, resolve_data_dir
from areal_core.tasks.prompts import EmptyPromptField, encode_prompt, render_prompt
from areal_core.tasks.spec import FieldSpec, TaskSpec

_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


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
            from areal_core.tasks.registry import generator_registry

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
        return render_prompt(self.spec.prompt, sample, self.name)

    def prompt_token_ids(self, sample: dict[str, Any], tokenizer: Any) -> list[int]:
        """The rendered prompt of one sample, tokenized (chat messages through the tokenizer's chat template)."""
        return encode_prompt(self.render_prompt(sample), tokenizer)


def get_task(name: str, data_dir: str | Path | None = None, tasks_dirs: tuple[str, ...] = ()) -> Task:
    """The registered task `name` bound to its data; a task whose reward is not installed is an error that
    names the plugin to install."""
    from areal_core.tasks.registry import task_registry, unavailable_reason

    spec = task_registry(tasks_dirs).get(name)
    reason = unavailable_reason(spec)
    if reason is not None:
        raise UnknownNameError(f"task {name!r} is unavailable: {reason}")
    if spec.reward.modes:  # a misspelt mode fails here, naming the task, not when training starts
        from areal_core.rewards.registry import check_modes

        problem = check_modes(spec.reward.name, spec.reward.modes)
        if problem is not None:
            raise TaskSpecError(f"task {name!r} ({spec.source or 'registered'}): {problem}")
    return Task(spec, data_dir)
