"""Files and directories written whole or not at all: built beside their final name, then renamed into place,
so a reader (or a run resumed after `kill -9`) never sees half of one."""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator


# tempfile makes private files (0600) and directories (0700); what is renamed into place gets the modes a plain
# open() or mkdir() would give, so runs, caches and published weights stay readable by whoever could read them
# before (generation servers of another user, a cache shared on a machine). Read once, at import.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _fsync_path(path: Path) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, content: str | Iterable[str], *, durable: bool = False) -> Path:
    """Write `content` (text, or an iterable of lines) to `path` through a temporary sibling and a rename;
    with `durable`, fsync'ed first, so after a crash `path` is the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines([content] if isinstance(content, str) else content)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            _fsync_path(path.parent)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


@contextmanager
def atomic_directory(directory: str | Path, durable: bool = True, keep_existing: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory beside `directory`; when the block succeeds, rename it to
    `directory`. The block failing removes the temporary directory and leaves `directory` untouched.

    durable: every file and the directories are fsync'ed first, so after a crash `directory` is either the
    old one or the complete new one.
    keep_existing: for directories that several processes may build at once with the same content (a cache
    entry): the first to finish puts its copy in place, later ones are dropped, and an entry in place is
    never replaced (a reader may be using it). Otherwise `directory` has one writer, which replaces it and
    removes what a killed writer left behind."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    if not keep_existing:
        # Left by a writer that was killed. An old copy is garbage only once `directory` exists: a kill between
        # the two renames below leaves the old copy as the only complete one.
        stale = [*directory.parent.glob(f".{directory.name}.tmp-*")]
        if directory.exists():
            stale += directory.parent.glob(f".{directory.name}.old-*")
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        tmp.chmod(0o777 & ~_UMASK)
        yield tmp
        if durable:
            for path in sorted(tmp.rglob("*"), reverse=True):  # files before the directories holding them
                _fsync_path(path)
            _fsync_path(tmp)
        if keep_existing:
            try:
                os.replace(tmp, directory)
            except OSError:  # a non-empty directory is in place: another writer finished first
                if not directory.is_dir():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
            return
        old = None
        if directory.exists():
            # os.replace cannot overwrite a non-empty directory: move the old one aside first.
            old = directory.parent / f".{directory.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(directory, old)
        os.replace(tmp, directory)
        if durable:
            _fsync_path(directory.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


DATA_DIR_ENV = "AREAL_DATA_DIR"


def directory_bytes(directory: str | Path) -> int:
    """The bytes of the files under `directory` (recursively)."""
    return sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data root: the argument, else ``$AREAL_DATA_DIR``, else ``$XDG_DATA_HOME/areal/data``."""
    if data_dir:
        return Path(data_dir).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "areal" / "data"
