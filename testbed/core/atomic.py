"""Crash-safe file writes: a reader sees the old file or the whole new one, never a torn one.

Write to a temporary file in the same directory, fsync it, rename it over the target and fsync
the directory (so the rename itself survives a power loss). Used for the run directory's
``environment.json``, ledgers and tables (issue 16, finalisation), the simulator's summary and
merged tables (`atomic_open`: written piece by piece, never whole in memory), and for the run's
broker credentials file, created mode 0600 (`testbed.workload.credentials`).
"""

from __future__ import annotations

__all__ = [
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_parquet",
    "fsync_dir",
]

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq


def fsync_dir(directory: Path) -> None:
    """Make a rename or creation in `directory` durable (best effort where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory
    finally:
        os.close(fd)


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _replace(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _create(tmp: Path, mode: int | None) -> Any:
    """The temporary file, opened for writing; with `mode`, created with it (so a private file
    is never readable by others, not even before a chmod)."""
    if mode is None:
        return open(tmp, "wb")
    tmp.unlink(missing_ok=True)
    return os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb")


@contextlib.contextmanager
def atomic_open(path: Path, mode: int | None = None) -> Iterator[IO[bytes]]:
    """A binary file to write `path`'s new content into, piece by piece: when the block ends
    it is fsynced and renamed over `path`; when the block raises, `path` is left as it was and
    the temporary file goes. With `mode`, the file is created with it."""
    path = Path(path)
    tmp = _tmp(path)
    try:
        with _create(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _replace(tmp, path)


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    with atomic_open(path, mode) as f:
        f.write(data)


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_parquet(path: Path, table: pa.Table, **options: Any) -> None:
    with atomic_open(path) as f:
        pq.write_table(table, f, **options)
