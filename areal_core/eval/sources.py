"""Where an eval's responses come from: a model that generates them, or a file of responses made elsewhere.

    --model DIR                  a local Hugging Face model directory, run by the in-process engine (`local`)
    --model NAME:DIR             the model directory, served by engine backend NAME (e.g. `server:DIR` starts
                                 an `areal serve` process; a plugin's backend works the same way)
    --model NAME://HOST:PORT     a running server of backend NAME, e.g. sglang://HOST:PORT (SGLang, or `areal
                                 serve`), through the engine protocol
    --model replay:FILE.jsonl    precomputed responses: rows {<the task's id field>, "response"}; several
                                 rows with one id are several samples of that problem, in file order

Engine backends are found in the plugin registry (`register_engines`), the same ones `areal train` uses.

Both kinds implement `ResponseSource`; the runner neither knows nor cares which one it drives.
"""
from __future__ import annotations

import contextlib
import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from areal_core.errors import ConfigError, InputError
from areal_core.eval.records import EvalSettings, sample_seed
from areal_core.eval.store import ResultsStore, dumps
from areal_core.rewards.score import read_response_rows
from areal_core.tasks import FieldSpec, Task


REPLAY = "replay"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_.+-]*):(//)?(.*)$")


@dataclass(frozen=True)
class ModelRef:
    """What `--model` names, as `text` (its canonical form): responses replayed from a file (`backend` None,
    `model` the file), or the engine backend that generates them, with `model` a model directory or `url` a
    running server."""

    text: str
    backend: str | None
    model: str | None = None
    url: str | None = None

    @property
    def replay(self) -> bool:
        return self.backend is None

    @property
    def default_name(self) -> str:
        if self.url is not None:
            return urlsplit(self.url).netloc
        path = Path(self.model or "")
        return path.stem if self.replay else model_dir_name(path)

    def __str__(self) -> str:
        return self.text


def parse_model(text: str) -> ModelRef:
    """`DIR` (the local engine), `NAME:DIR` (engine backend NAME started on DIR), `NAME://HOST:PORT` (a running
    server of backend NAME) or `replay:FILE.jsonl`, NAME being any registered engine backend; anything else is
    an error saying which forms exist."""
    from areal_core.engine.model import check_model_dir
    from areal_core.plugins import backends

    engines = backends("engine")
    match = _SCHEME.match(text)
    if match is None or Path(text).expanduser().is_dir():
        model = str(check_model_dir(Path(text).expanduser()).resolve())
        return ModelRef(model, "local", model)
    scheme, url, rest = match.groups()
    if scheme == REPLAY and not url:
        path = Path(rest).expanduser()
        if not path.is_file():
            raise ConfigError(f"--model {text!r}: {path} is not a file; expected replay:FILE.jsonl")
        return ModelRef(f"{REPLAY}:{path.resolve()}", None, str(path.resolve()))
    if scheme not in engines:
        raise ConfigError(f"--model {text!r}: {scheme!r} is not an engine backend; expected a model directory, "
                          f"NAME:DIR, NAME://HOST:PORT (NAME: {', '.join(engines.names())}) or replay:FILE.jsonl")
    if not url:
        model = str(check_model_dir(Path(rest).expanduser()).resolve())
        return ModelRef(f"{scheme}:{model}", scheme, model)
    parts = urlsplit(f"http://{rest}")
    if not parts.hostname or parts.port is None or parts.path.strip("/"):
        raise ConfigError(f"--model {text!r}: expected {scheme}://HOST:PORT, e.g. {scheme}://127.0.0.1:30000")
    return ModelRef(f"{scheme}://{parts.hostname}:{parts.port}", scheme, url=f"http://{parts.hostname}:{parts.port}")


def model_dir_name(directory: Path) -> str:
    """The name a model directory is listed under: `<run>@step<N>` for weights a training run published or kept
    (`weights/vN`, `policies/stepN`, `checkpoints/stepN/trainer`: the policy after step N), `<run>@<path>` for
    another directory inside a run, else the directory's own name."""
    for run in list(directory.parents)[:3]:
        if (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file():
            inside = directory.relative_to(run).parts
            patterns = {("weights",): r"v(\d+)", ("policies",): r"step(\d+)", ("checkpoints",): r"step(\d+)"}
            pattern = patterns.get(inside[:1])
            number = re.fullmatch(pattern, inside[1]) if pattern and len(inside) > 1 else None
            if number is not None and inside[2:] in ((), ("trainer",)):
                return f"{run.name}@step{int(number.group(1))}"
            return f"{run.name}@{'/'.join(inside)}"
    return directory.name


def model_dir_hash(directory: str | Path, store: ResultsStore) -> str:
    """sha256 over every file of a model directory (weights, config, tokenizer), by name and content."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith(".")):
        digest.update(f"{path.name}\0{store.file_sha256(path)}\n".encode())
    return digest.hexdigest()


def resolve_settings(task: Task, n: int | None = None, k: tuple[int, ...] | None = None,
                     temperature: float | None = None, top_p: float | None = None,
                     max_new_tokens: int | None = None, limit: int | None = None, seed: int = 0,
                     replay: bool = False, top_k: int | None = None) -> EvalSettings:
    """Settings from the command line, each one not given taken from the task's `eval` defaults.
    Default k: the task's k that fit under n, and the powers of two up to n, and n (points of a pass@k curve)."""
    defaults = task.spec.eval
    n = n or defaults.n
    if k:
        bad = [value for value in k if not 1 <= value <= n]
        if bad:
            raise ConfigError(f"--k {','.join(map(str, k))}: every k must be between 1 and n={n} (got {bad[0]})")
        ks = tuple(sorted(set(k)))
    else:
        powers = {2 ** i for i in range(n.bit_length()) if 2 ** i <= n}
        ks = tuple(sorted(powers | {n} | {value for value in defaults.k if value <= n}))
    if replay:
        return EvalSettings(n=n, k=ks, temperature=None, top_p=None, max_new_tokens=None, limit=limit, seed=seed)
    return EvalSettings(n=n, k=ks, temperature=defaults.temperature if temperature is None else temperature,
                        top_p=defaults.top_p if top_p is None else top_p,
                        max_new_tokens=max_new_tokens or defaults.max_new_tokens, limit=limit, seed=seed,
                        top_k=-1 if top_k is None else top_k)


class ResponseSource(Protocol):
    """Produces the responses of one model."""

    ref: ModelRef
    model_hash: str

    def settings(self, task: Task, **requested: Any) -> EvalSettings:
        """The eval settings for `task` given the command line's (`resolve_settings` arguments)."""

    def problems(self, task: Task, settings: EvalSettings) -> list[dict[str, Any]]:
        """The task samples the eval covers (the first `settings.limit`)."""

    async def respond(self, task: Task, sample: dict[str, Any], sample_index: int,
                      settings: EvalSettings) -> tuple[str, str | None]:
        """(response text, finish reason) of one sample of one problem."""

    async def close(self) -> None: ...


class EngineSource:
    """Responses generated through the engine protocol: seeded per (problem, sample), so a rerun, a
    resumed run and `areal train`'s held-out eval of the same weights draw the same tokens."""

    def __init__(self, engine: Any, tokenizer: Any, ref: ModelRef | None = None, model_hash: str = "",
                 stack: contextlib.AsyncExitStack | None = None) -> None:
        self.engine, self.tokenizer, self.ref, self.model_hash = engine, tokenizer, ref, model_hash
        self._stack = stack
        self._prompts: dict[tuple[str, str], list[int]] = {}

    @classmethod
    async def open(cls, ref: ModelRef, store: ResultsStore, *, tokenizer_path: str | None = None,
                   max_running_requests: int = 64, torch_threads: int | None = None,
                   log_dir: Path | None = None) -> "EngineSource":
        """Start (or connect to) the engines of `ref.backend`, found in the plugin registry. The model is told
        apart by its content: a directory's files, or for a server the weights it says it runs."""
        from areal_core.engine import EngineConfig, EngineTarget, start_engines
        from areal_core.engine.model import load_tokenizer

        config = EngineConfig(backend=ref.backend, max_running_requests=max_running_requests,
                              torch_threads=torch_threads)
        target = EngineTarget(model=Path(ref.model) if ref.model else None, urls=(ref.url,) if ref.url else ())
        stack = contextlib.AsyncExitStack()
        try:
            engine = await stack.enter_async_context(start_engines(config, target, log_dir))
            info = await engine.model_info()
            served = info.get("tokenizer_path") or info.get("model_path")
            tokenizer_dir = tokenizer_path or ref.model or served
            if not tokenizer_dir or not Path(tokenizer_dir).is_dir():
                raise ConfigError(f"--model {ref}: the server's model {served!r} is not a directory here; "
                                  "give its tokenizer with --tokenizer DIR")
            tokenizer = load_tokenizer(tokenizer_dir)
            model_hash = model_dir_hash(ref.model, store) if ref.model else served_model_hash(info, store)
        except BaseException:
            await stack.aclose()
            raise
        return cls(engine, tokenizer, ref, model_hash, stack)

    def settings(self, task: Task, **requested: Any) -> EvalSettings:
        return resolve_settings(task, **requested)

    def problems(self, task: Task, settings: EvalSettings) -> list[dict[str, Any]]:
        return task.samples()[: settings.limit or None]

    def sampling(self, sample: dict[str, Any], sample_index: int, settings: EvalSettings):
        """The sampling parameters of one (problem, sample): seeded by both."""
        from areal_core.engine.protocol import SamplingParams

        return SamplingParams(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                              top_p=settings.top_p, top_k=settings.top_k,
                              seed=sample_seed(settings.seed, sample["id"], sample_index))

    async def respond(self, task: Task, sample: dict[str, Any], sample_index: int,
                      settings: EvalSettings) -> tuple[str, str | None]:
        from areal_core.engine.protocol import GenerateRequest

        key = (task.name, sample["id"])
        if key not in self._prompts:
            self._prompts[key] = task.prompt_token_ids(sample, self.tokenizer)
        params = self.sampling(sample, sample_index, settings)
        output = await self.engine.generate(GenerateRequest(self._prompts[key], params,
                                                            rid=f"eval-{task.name}-{sample['id']}-{sample_index}"))
        return self.tokenizer.decode(output.output_ids, skip_special_tokens=True), output.finish_reason

    async def close(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()


def served_model_hash(info: dict[str, Any], store: ResultsStore) -> str:
    """The identity of the model a server runs, from its /model_info: while it still runs the weights of the
    directory it was started from, that directory's hash (so the same model evaluated in-process or served is
    recognised as the same model), else a hash of its model path and weight version."""
    model_path = info.get("model_path")
    if model_path and Path(model_path).is_dir() and not int(info.get("weight_version") or 0):
        return model_dir_hash(model_path, store)
    return hashlib.sha256(dumps({"server_model": model_path, "weight_version": info.get("weight_version")}).encode()
                          ).hexdigest()


def id_column(task: Task) -> str:
    """The dataset column a task's sample ids come from (HumanEval: `task_id`), or `id`."""
    mapped = task.spec.fields.get("id")
    if isinstance(mapped, FieldSpec):
        return mapped.column
    return mapped or "id"


class ReplaySource:
    """Responses read from a JSONL file. A row names its problem by the task's id field (`task_id` for
    HumanEval, `unique_id` for MATH-500) or by `id` (the sample id `areal tasks show` prints, which is the
    row index for data sets without ids). With several tasks, each row also says its `task`."""

    def __init__(self, ref: ModelRef, tasks: list[str]) -> None:
        self.ref = ref
        self.path = Path(ref.model or "")
        self.model_hash = hashlib.sha256(self.path.read_bytes()).hexdigest()
        self.rows: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for number, where, row in read_response_rows(self.path):
            task = row.get("task")
            if task is None:
                if len(tasks) > 1:
                    raise InputError(f"{where}: the row has no 'task' field; a replay file evaluated on several "
                                     f"tasks ({', '.join(tasks)}) names each row's task")
                task = tasks[0]
            self.rows[str(task)].append((number, row))
        self._responses: dict[str, dict[str, list[str]]] = {}

    def _by_id(self, task: Task) -> dict[str, list[str]]:
        if task.name not in self._responses:
            known = {sample["id"] for sample in task.samples()}
            column = id_column(task)
            responses: dict[str, list[str]] = defaultdict(list)
            for number, row in self.rows.get(task.name, []):
                key = column if column in row else "id"
                if key not in row:
                    raise InputError(f"{self.path}:{number}: no sample id; expected field {column!r} "
                                     f"(task {task.name!r}'s id) or 'id'")
                sample_id = str(row[key])
                if sample_id not in known:
                    raise InputError(f"{self.path}:{number}: {key}={sample_id!r} is not a problem of task "
                                     f"{task.name!r} (e.g. {next(iter(known))!r})")
                responses[sample_id].append(row["response"])
            self._responses[task.name] = responses
        return self._responses[task.name]

    def settings(self, task: Task, **requested: Any) -> EvalSettings:
        for option in ("n", "temperature", "top_p", "top_k", "max_new_tokens"):
            if requested.get(option) is not None:
                raise ConfigError(f"--{option.replace('_', '-')} does not apply to replayed responses "
                                  f"(--model {self.ref}): the file decides them")
        limit = requested.get("limit")
        counts = [len(self._by_id(task).get(s["id"], [])) for s in task.samples()[: limit or None]]
        n = min(counts) if counts else 0
        if n == 0:
            missing = [s["id"] for s, c in zip(task.samples(), counts) if c == 0]
            raise InputError(f"{self.path}: no responses for {len(missing)} of the {len(counts)} problems of task "
                             f"{task.name!r} (first: {missing[0]!r}); give every problem a row, or evaluate the "
                             "first ones with --limit")
        return resolve_settings(task, **{**requested, "n": n}, replay=True)

    def problems(self, task: Task, settings: EvalSettings) -> list[dict[str, Any]]:
        return task.samples()[: settings.limit or None]

    async def respond(self, task: Task, sample: dict[str, Any], sample_index: int,
                      settings: EvalSettings) -> tuple[str, str | None]:
        return self._by_id(task)[sample["id"]][sample_index], None

    async def close(self) -> None:
        return None
