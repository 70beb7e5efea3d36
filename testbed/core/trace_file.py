"""Read a trace arrival's send times, confined to the scenario's directory.

A trace file is named by the scenario, which may come from someone else. So the name must be
relative and must stay inside the scenario's directory once ``..`` and symlinks are resolved
(otherwise ``file: /etc/passwd`` would read any file the user can), it is read with the same
bounds as a scenario file (regular file, size limit, UTF-8), and an error shows only the
offending cell, truncated, never the rest of the file.

Format: one time (seconds from the producer's start) per line, or the first column of a CSV
whose optional header is ``t``; blank lines and ``#`` comments are skipped.
"""

from __future__ import annotations

__all__ = ["TraceError", "read_trace", "copy_trace", "MAX_TRACE_BYTES"]

import io
import math
from pathlib import Path

from testbed.core.atomic import atomic_write_text
from testbed.core.safe_read import InputRefused, read_text_file

MAX_TRACE_BYTES = 8 << 20
"""8 MiB: some 800,000 send times."""

_CELL_CHARS = 40
_FIX = (
    "copy the trace into the scenario's directory (or a folder below it) and name it "
    "relative to the scenario, e.g. 'file: traces/times.csv'"
)


class TraceError(ValueError):
    """The trace cannot be used; the message is safe to show (names only the offending cell)."""


def _cell(text: str) -> str:
    return repr(text if len(text) <= _CELL_CHARS else text[:_CELL_CHARS] + "…")


def resolve_trace(name: str, base_dir: Path) -> Path:
    """The trace's real path, or TraceError when it is absolute or leaves `base_dir`."""
    if not name or "\0" in name:
        raise TraceError(f"trace file name {_cell(name)} is empty or contains a NUL byte")
    if Path(name).is_absolute():
        raise TraceError(f"trace file {_cell(name)} is an absolute path; {_FIX}")
    base = base_dir.resolve()
    try:
        target = (base / name).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise TraceError(f"trace file {_cell(name)} cannot be resolved: {e}") from None
    if not target.is_relative_to(base):
        raise TraceError(
            f"trace file {_cell(name)} is outside the scenario's directory "
            f"(through '..' or a symlink); {_FIX}"
        )
    return target


def read_trace(name: str, base_dir: Path) -> list[float]:
    """Send times from the trace file `name` (relative to `base_dir`); TraceError if unusable."""
    path = resolve_trace(name, base_dir)
    try:
        text = read_text_file(path, MAX_TRACE_BYTES)
    except InputRefused as e:
        raise TraceError(f"trace file {_cell(name)}: {e}") from None
    times: list[float] = []
    for n, raw in enumerate(io.StringIO(text, newline=None), 1):
        first = raw.split(",", 1)[0]
        cell = first.strip()
        if not cell or cell.startswith("#") or (n == 1 and cell == "t"):
            continue
        where = f"{name[:80]}:{n}:{len(first) - len(first.lstrip()) + 1}"
        try:
            t = float(cell)
        except ValueError:
            raise TraceError(f"{where}: {_cell(cell)} is not a time in seconds") from None
        if not math.isfinite(t) or t < 0:
            raise TraceError(f"{where}: {_cell(cell)} is not a finite time >= 0 s")
        if times and t < times[-1]:
            raise TraceError(f"{where}: times must not decrease ({t:g} after {times[-1]:g})")
        times.append(t)
    if not times:
        raise TraceError(f"trace file {_cell(name)} has no send times")
    return times


def copy_trace(name: str, base_dir: Path, run_dir: Path) -> Path:
    """Copy the trace `name` (relative to `base_dir`) to the same relative name under
    `run_dir`, so the run directory's ``scenario.yaml`` finds it there (a self-contained run
    directory). Same confinement and bounds as :func:`read_trace`; returns the copy."""
    source = resolve_trace(name, base_dir)
    target = resolve_trace(name, run_dir)  # the same checks: stays inside the run directory
    try:
        text = read_text_file(source, MAX_TRACE_BYTES)
    except InputRefused as e:
        raise TraceError(f"trace file {_cell(name)}: {e}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, text)
    return target
