"""Read a user-named text file without trusting it: regular files only, bounded size, UTF-8.

Scenario and trace files come from users (and from other people's repositories), so reading one
must not hang (a FIFO blocks ``open`` until a writer appears), must not read forever
(``/dev/zero``, ``/proc`` files that report size 0) and must not hand an undecodable byte to a
parser that then fails with a traceback. Every refusal is an :class:`InputRefused` carrying a
1-based line and a message meant for the user.

The standard library has all the pieces but no single call that does this, hence this module.
"""

from __future__ import annotations

__all__ = ["InputRefused", "read_text_file", "MAX_SCENARIO_BYTES"]

import errno
import os
import stat
from pathlib import Path

MAX_SCENARIO_BYTES = 1 << 20
"""1 MiB: the largest library scenario is a few KiB."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputRefused(ValueError):
    """A file mqbed will not read; `line` is 1-based (1 when the whole file is at fault)."""

    def __init__(self, message: str, line: int = 1):
        self.line = line
        super().__init__(message)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a special file"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def _refuse_os_error(e: OSError) -> InputRefused:
    if e.errno == errno.ENOENT:
        return InputRefused("no such file")
    if e.errno in (errno.EACCES, errno.EPERM):
        return InputRefused("cannot read: permission denied")
    return InputRefused(f"cannot read: {e.strerror or e}")


def _check_regular(st: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputRefused(
            f"not a regular file but {_kind(st.st_mode)}; mqbed reads only regular files"
        )
    if st.st_size > limit:
        raise InputRefused(f"file is {_size(st.st_size)}; the limit is {_size(limit)}")


def _read_bounded(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file, or InputRefused.

    Checked with ``os.stat`` before opening so a FIFO is never opened; opened with O_NONBLOCK
    anyway (the path may be swapped between stat and open) and checked again on the open
    descriptor; read with a byte bound, since a file may grow or lie about its size."""
    try:
        if "\0" in str(path):
            raise InputRefused("the file name contains a NUL byte")
        _check_regular(os.stat(path), limit)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC
        fd = os.open(path, flags)
    except OSError as e:
        raise _refuse_os_error(e) from None
    try:
        _check_regular(os.fstat(fd), limit)
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise _refuse_os_error(e) from None
    finally:
        os.close(fd)
    if total > limit:
        raise InputRefused(f"file is larger than the limit of {_size(limit)}")
    return b"".join(chunks)


def read_text_file(path: str | Path, limit: int = MAX_SCENARIO_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes (a leading BOM is dropped)."""
    data = _read_bounded(Path(path), limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        column = e.start - (before.rfind(b"\n") + 1) + 1
        raise InputRefused(
            f"file is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {column} "
            "cannot be decoded; save the file as UTF-8",
            line,
        ) from None
    return text.removeprefix("\ufeff")
