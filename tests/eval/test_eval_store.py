"""The results store: runs and samples round-trip, resumable state, content hashes, clear errors."""
from __future__ import annotations

import os

import pytest

from areal_core.errors import ConfigError
from areal_core.eval.records import EvalSample, EvalSettings
from areal_core.eval.store import ResultsStore, StoreError


def make_run(store: ResultsStore, key: str = "k1", **extra) -> int:
    settings = EvalSettings(n=2, k=(1, 2), temperature=0.6, top_p=0.95, max_new_tokens=64, limit=3, seed=7)
    return store.create_run(key=key, model="m", model_ref="/models/m", model_hash="ab" * 32, task="gsm8k",
                            settings=settings, manifest={"key": key, "date": "2026-01-01T00:00:00+00:00"},
                            problems=3, **extra)


def test_runs_and_samples_round_trip_through_a_sqlite_file(tmp_path):
    path = tmp_path / "sub" / "evals.sqlite"
    with ResultsStore(path) as store:
        run_id = make_run(store)
        written = [EvalSample("p1", 1, 1, "resp ü", 0.0, False, None, "3", "stop", {"why": [1, 2]}),
                   EvalSample("p0", 0, 0, "x", 0.0, None, "verifier timed out", None, "length", {})]
        store.add_samples(run_id, written)
        assert store.done_keys(run_id) == {("p1", 1), ("p0", 0)}
        assert store.samples(run_id) == written[::-1]  # problem order, then sample order
        run = store.find_run("k1")
        assert (run.id, run.status, run.finished, run.settings.k, run.settings.top_p) == (run_id, "running", False, (1, 2), 0.95)
        store.finish_run(run_id, {"pass@1": 0.0})
    with ResultsStore(f"sqlite:///{path}") as again:  # the same file, reached through a SQLAlchemy URL
        run = again.run(run_id)
        assert run.finished and run.metrics == {"pass@1": 0.0} and run.finished_at
        assert [r.id for r in again.finished_runs(["gsm8k"])] == [run_id] and again.finished_runs(["math500"]) == []
        assert again.samples(run_id)[1].details == {"why": [1, 2]}


def test_find_run_returns_the_latest_run_with_the_key(tmp_path):
    with ResultsStore(tmp_path / "e.sqlite") as store:
        first, second = make_run(store), make_run(store)
        make_run(store, key="other")
        assert store.find_run("k1").id == second > first
        assert store.find_run("missing") is None


def test_a_sample_stored_twice_is_refused(tmp_path):
    from sqlalchemy.exc import IntegrityError

    with ResultsStore(tmp_path / "e.sqlite") as store:
        run_id = make_run(store)
        one = EvalSample("p0", 0, 0, "x", 1.0, True)
        store.add_samples(run_id, [one])
        with pytest.raises(IntegrityError):
            store.add_samples(run_id, [one])


def test_file_hash_is_remembered_until_the_file_changes(tmp_path):
    import hashlib

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 1000)
    with ResultsStore(tmp_path / "e.sqlite") as store:
        assert store.file_sha256(weights) == hashlib.sha256(b"a" * 1000).hexdigest()
        weights.write_bytes(b"b" * 1000)
        os.utime(weights, ns=(1, 1))  # a new mtime, whatever the clock's resolution
        assert store.file_sha256(weights) == hashlib.sha256(b"b" * 1000).hexdigest()


def test_bad_database_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="is a directory; expected a database file or a SQLAlchemy URL"):
        ResultsStore(tmp_path)
    with pytest.raises(ConfigError, match="not a usable SQLAlchemy URL"):
        ResultsStore("nosuchdialect://host/db")
    with pytest.raises(StoreError, match="results database"):
        ResultsStore(f"sqlite:///{tmp_path}/missing-dir/e.sqlite")
