"""Files and directories written whole or not at all (areal_core/files.py), with the modes plain writes give."""
from __future__ import annotations

import os
import stat

import pytest

from areal_core.files import atomic_directory, atomic_write


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def umask():
    current = os.umask(0o022)
    os.umask(current)
    return current


def test_an_atomic_write_replaces_the_file_whole_with_the_mode_a_plain_write_gives(tmp_path):
    target = tmp_path / "out" / "rows.jsonl"
    atomic_write(target, ["a\n", "b\n"])
    atomic_write(target, "c\n", durable=True)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert target.read_text() == "c\n"
    assert mode(target) == mode(plain) == 0o666 & ~umask()
    assert sorted(p.name for p in target.parent.iterdir()) == ["rows.jsonl"]  # no temporary file left


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "rows.jsonl"
    atomic_write(target, "old\n")

    def rows():
        yield "new\n"
        raise RuntimeError("the writer died")

    with pytest.raises(RuntimeError):
        atomic_write(target, rows())
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_an_atomic_directory_appears_whole_readable_like_a_plain_one_and_replaces_the_old(tmp_path):
    target = tmp_path / "weights" / "v1"
    with atomic_directory(target, durable=False) as tmp:
        (tmp / "model.safetensors").write_text("one")
    with atomic_directory(target) as tmp:
        (tmp / "model.safetensors").write_text("two")
    (tmp_path / "plain").mkdir()
    assert (target / "model.safetensors").read_text() == "two"
    assert mode(target) == mode(tmp_path / "plain") == 0o777 & ~umask()
    assert [p.name for p in target.parent.iterdir()] == ["v1"]


def test_a_failed_block_leaves_the_directory_untouched(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target, durable=False) as tmp:
        (tmp / "state").write_text("good")
    with pytest.raises(RuntimeError):
        with atomic_directory(target, durable=False) as tmp:
            (tmp / "state").write_text("half")
            raise RuntimeError("killed mid-write")
    assert (target / "state").read_text() == "good" and [p.name for p in tmp_path.iterdir()] == ["ckpt"]
