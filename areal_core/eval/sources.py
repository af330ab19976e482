"""Where an eval's responses come from: a model that generates them, or a file of responses made elsewhere.

    --model DIR                  a local Hugging Face model directory, run by the in-process engine
    --model sglang://HOST:PORT   a running SGLang server (or `areal serve`), through the engine protocol
    --model replay:FILE.jsonl    precomputed responses: rows {<the task's id field>, "response"}; several
                                 rows with one id are several samples of that problem, in file order

Both kinds implement `ResponseSource`; the runner neither knows nor cares which one it drives.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from areal_core.errors import ConfigError, InputError
from areal_core.score import read_response_rows
from areal_core.eval.records import EvalSettings, sample_seed
from areal_core.eval.store import ResultsStore, dumps
from areal_core.tasks import FieldSpec, Task


@dataclass(frozen=True)
class ModelRef:
    """What `--model` names: kind, and the directory, server URL or file it points at."""

    kind: Literal["local", "sglang", "replay"]
    target: str

    @property
    def default_name(self) -> str:
        if self.kind == "sglang":
            return urlsplit(self.target).netloc
        return Path(self.target).stem if self.kind == "replay" else Path(self.target).name

    def __str__(self) -> str:
        return {"local": self.target, "sglang": f"sglang://{urlsplit(self.target).netloc}",
                "replay": f"replay:{self.target}"}[self.kind]


def parse_model(text: str) -> ModelRef:
    """`DIR`, `sglang://HOST:PORT` or `replay:FILE.jsonl`; anything else is an error saying which forms exist."""
    if text.startswith("sglang://"):
        parts = urlsplit(text)
        if not parts.hostname or parts.port is None:
            raise ConfigError(f"--model {text!r}: expected sglang://HOST:PORT, e.g. sglang://127.0.0.1:30000")
        return ModelRef("sglang", f"http://{parts.hostname}:{parts.port}")
    if text.startswith("replay:"):
        path = Path(text[len("replay:"):]).expanduser()
        if not path.is_file():
            raise ConfigError(f"--model {text!r}: {path} is not a file; expected replay:FILE.jsonl")
        return ModelRef("replay", str(path.resolve()))
    if "://" in text:
        raise ConfigError(f"--model {text!r}: unknown scheme; expected a model directory, sglang://HOST:PORT "
                          "or replay:FILE.jsonl")
    from areal_core.engine.model import check_model_dir

    return ModelRef("local", str(check_model_dir(Path(text).expanduser()).resolve()))


def model_dir_hash(directory: str | Path, store: ResultsStore) -> str:
    """sha256 over every file of a model directory (weights, config, tokenizer), by name and content."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith(".")):
        digest.update(f"{path.name}\0{store.file_sha256(path)}\n".encode())
    return digest.hexdigest()


def resolve_settings(task: Task, n: int | None = None, k: tuple[int, ...] | None = None,
                     temperature: float | None = None, top_p: float | None = None,
                     max_new_tokens: int | None = None, limit: int | None = None, seed: int = 0,
                     replay: bool = False) -> EvalSettings:
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
                        max_new_tokens=max_new_tokens or defaults.max_new_tokens, limit=limit, seed=seed)


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

    def __init__(self, engine: Any, tokenizer: Any, ref: ModelRef | None = None, model_hash: str = "") -> None:
        self.engine, self.tokenizer, self.ref, self.model_hash = engine, tokenizer, ref, model_hash
        self._prompts: dict[tuple[str, str], list[int]] = {}

    @classmethod
    async def open(cls, ref: ModelRef, store: ResultsStore, *, tokenizer_path: str | None = None,
                   max_running_requests: int = 64, torch_threads: int | None = None) -> "EngineSource":
        from areal_core.engine.model import load_tokenizer

        if ref.kind == "local":
            from areal_core.engine.local import LocalEngine

            model_hash = model_dir_hash(ref.target, store)
            engine = LocalEngine(ref.target, max_running_requests=max_running_requests, torch_threads=torch_threads).start()
            return cls(engine, engine.tokenizer, ref, model_hash)
        from areal_core.engine.sglang_client import SGLangEngine

        engine = SGLangEngine([ref.target])
        try:
            info = await engine.model_info()
            served = info.get("tokenizer_path") or info.get("model_path")
            tokenizer_dir = tokenizer_path or served
            if not tokenizer_dir or not Path(tokenizer_dir).is_dir():
                raise ConfigError(f"--model {ref}: the server's model {served!r} is not a directory here; "
                                  "give its tokenizer with --tokenizer DIR")
            tokenizer = load_tokenizer(tokenizer_dir)
            model_path = info.get("model_path")
            if model_path and Path(model_path).is_dir() and not info.get("weight_version"):
                # The server still runs the weights it was started with: hash them like a local directory,
                # so the same model evaluated either way is recognised as the same model.
                model_hash = model_dir_hash(model_path, store)
            else:
                model_hash = hashlib.sha256(dumps({"server_model": model_path, "weight_version":
                                                   info.get("weight_version")}).encode()).hexdigest()
        except BaseException:
            await engine.close()
            raise
        return cls(engine, tokenizer, ref, model_hash)

    def settings(self, task: Task, **requested: Any) -> EvalSettings:
        return resolve_settings(task, **requested)

    def problems(self, task: Task, settings: EvalSettings) -> list[dict[str, Any]]:
        return task.samples()[: settings.limit or None]

    async def respond(self, task: Task, sample: dict[str, Any], sample_index: int,
                      settings: EvalSettings) -> tuple[str, str | None]:
        from areal_core.engine.protocol import GenerateRequest, SamplingParams
        from areal_core.rl.rollout import encode_prompt

        key = (task.name, sample["id"])
        if key not in self._prompts:
            self._prompts[key] = encode_prompt(task, sample, self.tokenizer)
        params = SamplingParams(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                                top_p=settings.top_p, seed=sample_seed(settings.seed, sample["id"], sample_index))
        output = await self.engine.generate(GenerateRequest(self._prompts[key], params,
                                                            rid=f"eval-{task.name}-{sample['id']}-{sample_index}"))
        return self.tokenizer.decode(output.output_ids, skip_special_tokens=True), output.finish_reason

    async def close(self) -> None:
        await self.engine.close()


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
        self.path = Path(ref.target)
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
        for option in ("n", "temperature", "top_p", "max_new_tokens"):
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
