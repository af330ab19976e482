"""The results store: every eval run, its manifest and every scored sample, in one SQL database.

SQLite by default (a file in the user's data directory), or any database SQLAlchemy can reach through a
URL (`postgresql://user@host/areal`), so a team can share one leaderboard. Two tables:

    runs     one row per eval of one model on one task: the identity key, the manifest (model path or
             URL and content hash, task spec hash, dataset hash, plugin versions, sampling settings,
             seed, date, code version), status running|finished|superseded, and the aggregate metrics
    samples  one row per scored sample: (run, prompt id, sample index) -> response, extracted answer,
             score, verdict, error, reward details

Samples are committed one by one as they are scored, so an eval that is killed loses at most the
samples in flight; the runner finds the unfinished run by its key and does only what is missing.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from areal_core.errors import ArealError, ConfigError
from areal_core.eval.records import EvalSample, EvalSettings

DB_ENV = "AREAL_EVAL_DB"
SCHEMA_VERSION = 1


class StoreError(ArealError):
    """The results database cannot be opened, or holds something this version cannot read."""


def default_db() -> str:
    """$AREAL_EVAL_DB, else `$XDG_DATA_HOME/areal/evals.sqlite` (~/.local/share/areal/evals.sqlite)."""
    if os.environ.get(DB_ENV):
        return os.environ[DB_ENV]
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return str(base / "areal" / "evals.sqlite")


def database_url(db: str | Path) -> str:
    """A SQLAlchemy URL as given (`sqlite:///x.db`, `postgresql://...`), or a file path made into a SQLite URL."""
    text = str(db)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    if path.is_dir():
        raise ConfigError(f"--db {text}: is a directory; expected a database file or a SQLAlchemy URL")
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunRecord:
    """One row of `runs`."""

    id: int
    key: str
    model: str
    model_ref: str
    model_hash: str
    task: str
    settings: EvalSettings
    manifest: dict[str, Any]
    source: str                 # "eval" (areal eval) or "train" (periodic evals of areal train)
    step: int | None
    run_dir: str | None
    status: str                 # "running", "finished", or "superseded" (a training eval its resumed run redid)
    problems: int
    created_at: str
    finished_at: str | None
    metrics: dict[str, Any] | None

    @property
    def finished(self) -> bool:
        return self.status == "finished"


def _tables():
    from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Integer, MetaData, String, Table, Text,
                            BigInteger)

    metadata = MetaData()
    Table("store_info", metadata, Column("name", String(64), primary_key=True), Column("value", Text, nullable=False))
    Table("runs", metadata,
          Column("id", Integer, primary_key=True, autoincrement=True),
          Column("key", String(64), nullable=False, index=True),
          Column("model", String(255), nullable=False, index=True),
          Column("model_ref", Text, nullable=False),
          Column("model_hash", String(64), nullable=False),
          Column("task", String(255), nullable=False, index=True),
          Column("settings", JSON, nullable=False),
          Column("manifest", JSON, nullable=False),
          Column("source", String(16), nullable=False),
          Column("step", Integer),
          Column("run_dir", Text),
          Column("status", String(16), nullable=False),
          Column("problems", Integer, nullable=False),
          Column("created_at", String(32), nullable=False),
          Column("finished_at", String(32)),
          Column("metrics", JSON))
    Table("samples", metadata,
          Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
          Column("prompt_id", String(512), primary_key=True),
          Column("sample_index", Integer, primary_key=True),
          Column("problem_index", Integer, nullable=False),
          Column("response", Text, nullable=False),
          Column("extracted", Text),
          Column("score", Float, nullable=False),
          Column("correct", Boolean),
          Column("verdict", String(16), nullable=False),
          Column("error", Text),
          Column("finish_reason", String(16)),
          Column("details", JSON))
    # Content hashes of big files (model weights, datasets), valid while path, size and mtime match.
    Table("file_hashes", metadata,
          Column("path", String(1024), primary_key=True),
          Column("size", BigInteger, nullable=False),
          Column("mtime_ns", BigInteger, nullable=False),
          Column("sha256", String(64), nullable=False))
    return metadata


class ResultsStore:
    """`ResultsStore(path_or_url)`; creates the tables on first use. One process writes a given run."""

    def __init__(self, db: str | Path | None = None) -> None:
        from sqlalchemy import create_engine, event
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

        self.url = database_url(db or default_db())
        try:
            self.engine = create_engine(self.url)
        except (ArgumentError, NoSuchModuleError) as exc:
            raise ConfigError(f"--db {self.url}: not a usable SQLAlchemy URL ({exc})") from None
        if self.engine.dialect.name == "sqlite":
            @event.listens_for(self.engine, "connect")
            def _sqlite_settings(connection, _record) -> None:
                # WAL: `areal leaderboard` reads while an eval writes; NORMAL sync: a commit per sample stays cheap.
                cursor = connection.cursor()
                for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=30000"):
                    cursor.execute(f"PRAGMA {pragma}")
                cursor.close()

        self.metadata = _tables()
        self.runs, self.samples_table = self.metadata.tables["runs"], self.metadata.tables["samples"]
        self.file_hashes, self.info = self.metadata.tables["file_hashes"], self.metadata.tables["store_info"]
        try:
            self.metadata.create_all(self.engine)
            self._check_schema()
        except SQLAlchemyError as exc:
            raise StoreError(f"results database {self.engine.url.render_as_string(hide_password=True)}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None

    def _check_schema(self) -> None:
        from sqlalchemy import insert, select

        with self.engine.begin() as conn:
            found = conn.execute(select(self.info.c.value).where(self.info.c.name == "schema_version")).scalar()
            if found is None:
                conn.execute(insert(self.info).values(name="schema_version", value=str(SCHEMA_VERSION)))
            elif int(found) != SCHEMA_VERSION:
                raise StoreError(f"results database {self.url} has schema version {found}; this areal reads "
                                 f"version {SCHEMA_VERSION}")

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "ResultsStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------------------------
    def create_run(self, *, key: str, model: str, model_ref: str, model_hash: str, task: str,
                   settings: EvalSettings, manifest: dict[str, Any], problems: int, source: str = "eval",
                   step: int | None = None, run_dir: str | None = None) -> int:
        from sqlalchemy import insert

        with self.engine.begin() as conn:
            result = conn.execute(insert(self.runs).values(
                key=key, model=model, model_ref=model_ref, model_hash=model_hash, task=task,
                settings=settings.to_dict(), manifest=manifest, source=source, step=step, run_dir=run_dir,
                status="running", problems=problems, created_at=manifest.get("date") or utc_now()))
            return int(result.inserted_primary_key[0])

    def find_run(self, key: str) -> RunRecord | None:
        """The latest run with this identity key, finished or not (superseded runs do not count)."""
        from sqlalchemy import select

        query = select(self.runs).where(self.runs.c.key == key, self.runs.c.status != "superseded")
        with self.engine.connect() as conn:
            row = conn.execute(query.order_by(self.runs.c.id.desc())).first()
        return None if row is None else self._run(row)

    def run(self, run_id: int) -> RunRecord:
        from sqlalchemy import select

        with self.engine.connect() as conn:
            row = conn.execute(select(self.runs).where(self.runs.c.id == run_id)).first()
        if row is None:
            raise StoreError(f"results database {self.url} has no run #{run_id}")
        return self._run(row)

    def finished_runs(self, tasks: Iterable[str] | None = None) -> list[RunRecord]:
        from sqlalchemy import select

        query = select(self.runs).where(self.runs.c.status == "finished").order_by(self.runs.c.id)
        if tasks is not None:
            query = query.where(self.runs.c.task.in_(list(tasks)))
        with self.engine.connect() as conn:
            return [self._run(row) for row in conn.execute(query)]

    def finish_run(self, run_id: int, metrics: dict[str, Any], settings: EvalSettings | None = None) -> None:
        """Mark the run finished with its metrics (and, when given, settings whose k changed)."""
        from sqlalchemy import update

        values: dict[str, Any] = {"status": "finished", "metrics": metrics}
        if settings is not None:
            values["settings"] = settings.to_dict()
        if not self.run(run_id).finished:
            values["finished_at"] = utc_now()
        with self.engine.begin() as conn:
            conn.execute(update(self.runs).where(self.runs.c.id == run_id).values(**values))

    def supersede_training_evals(self, run_dir: str, after_step: int) -> int:
        """Mark the evals that the training run in `run_dir` recorded after `after_step` superseded: the run
        resumed from that step's checkpoint and evaluates those steps again, with the weights it trains anew.
        They stay in the store (samples too) but off the leaderboard. Returns how many."""
        from sqlalchemy import update

        runs = self.runs.c
        with self.engine.begin() as conn:
            result = conn.execute(update(self.runs).where(
                runs.source == "train", runs.run_dir == run_dir, runs.step > after_step,
                runs.status != "superseded").values(status="superseded"))
            return int(result.rowcount)

    @staticmethod
    def _run(row: Any) -> RunRecord:
        data = dict(row._mapping)
        data["settings"] = EvalSettings.from_dict(data["settings"])
        return RunRecord(**data)

    # -- samples --------------------------------------------------------------------------------
    def add_samples(self, run_id: int, samples: Iterable[EvalSample]) -> None:
        """Store scored samples in one transaction (the runner stores each sample as soon as it is
        scored, so an interrupted eval keeps everything it finished)."""
        from sqlalchemy import insert

        rows = [dict(run_id=run_id, prompt_id=s.prompt_id, sample_index=s.sample_index, problem_index=s.problem_index,
                     response=s.response, extracted=s.extracted, score=s.score, correct=s.correct, verdict=s.verdict,
                     error=s.error, finish_reason=s.finish_reason,
                     # (a transcript rides in the details column: stores made before workflows need no migration)
                     details=s.details if s.transcript is None else {**s.details, TRANSCRIPT_KEY: s.transcript})
                for s in samples]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(insert(self.samples_table), rows)

    def done_keys(self, run_id: int) -> set[tuple[str, int]]:
        """(prompt id, sample index) of every sample already stored for the run."""
        from sqlalchemy import select

        table = self.samples_table
        with self.engine.connect() as conn:
            rows = conn.execute(select(table.c.prompt_id, table.c.sample_index).where(table.c.run_id == run_id))
            return {(prompt_id, index) for prompt_id, index in rows}

    def samples(self, run_id: int) -> list[EvalSample]:
        """The run's samples in problem order, then sample order."""
        from sqlalchemy import select

        table = self.samples_table
        query = (select(table).where(table.c.run_id == run_id)
                 .order_by(table.c.problem_index, table.c.sample_index))
        with self.engine.connect() as conn:
            samples = []
            for row in conn.execute(query):
                details = dict(row.details or {})
                transcript = details.pop(TRANSCRIPT_KEY, None)
                samples.append(EvalSample(
                    prompt_id=row.prompt_id, problem_index=row.problem_index, sample_index=row.sample_index,
                    response=row.response, score=row.score, correct=row.correct, error=row.error,
                    extracted=row.extracted, finish_reason=row.finish_reason, details=details, transcript=transcript))
            return samples

    # -- content hashes -------------------------------------------------------------------------
    def file_sha256(self, path: Path) -> str:
        """sha256 of a file, remembered while its size and modification time stay the same (a 15 GB
        checkpoint is read once, not on every eval)."""
        import hashlib

        from sqlalchemy import delete, insert, select

        path = path.resolve()
        stat = path.stat()
        table = self.file_hashes
        with self.engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.path == str(path))).first()
        if row is not None and row.size == stat.st_size and row.mtime_ns == stat.st_mtime_ns:
            return row.sha256
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        with self.engine.begin() as conn:
            conn.execute(delete(table).where(table.c.path == str(path)))
            conn.execute(insert(table).values(path=str(path), size=stat.st_size, mtime_ns=stat.st_mtime_ns,
                                              sha256=digest.hexdigest()))
        return digest.hexdigest()


TRANSCRIPT_KEY = "__transcript__"


def dumps(value: Any) -> str:
    """Canonical JSON (sorted keys), the input of every identity hash."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
