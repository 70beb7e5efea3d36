"""``--json``: exactly one JSON document on stdout, whatever the command prints meanwhile.

While a command runs in JSON mode, stdout is diverted to stderr — Python's ``sys.stdout`` and,
in a real process, file descriptor 1 itself, so Locust, Spark's JVM and any other child started
meanwhile cannot write to stdout either. The document is written when the command ends, also
when it fails: then it has ``"ok": false``, the ``exit_code`` and the ``error`` message.
(Hand-written: no library diverts a descriptor for child processes and restores it.)
"""

from __future__ import annotations

__all__ = ["json_output", "failure"]

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import typer

from testbed.cli import exit_codes
from testbed.exceptions import MqbedError


def failure(error: BaseException) -> dict[str, Any]:
    """``exit_code`` (and ``error``) for an exception ending a command."""
    if isinstance(error, typer.Exit):
        return {"exit_code": error.exit_code}
    if isinstance(error, MqbedError):
        return {"exit_code": exit_codes.code_for(error), "error": str(error)}
    if isinstance(error, KeyboardInterrupt):
        return {"exit_code": exit_codes.INTERRUPTED["SIGINT"], "error": "interrupted"}
    if isinstance(error, SystemExit):  # RunInterrupted: SIGTERM, SIGHUP
        code = error.code if isinstance(error.code, int) else exit_codes.INTERNAL
        return {"exit_code": code, "error": "interrupted" if code > 128 else str(error)}
    if hasattr(error, "exit_code") and hasattr(error, "format_message"):  # click usage error
        return {"exit_code": error.exit_code, "error": error.format_message()}
    return {"exit_code": exit_codes.INTERNAL, "error": f"{type(error).__name__}: {error}"}


def _divert() -> tuple[TextIO, int | None]:
    stream = sys.stdout
    stream.flush()
    saved_fd = None
    try:
        if stream.fileno() == 1:
            saved_fd = os.dup(1)
            os.dup2(2, 1)
    except (OSError, ValueError):  # no descriptor (a test runner's buffer): Python-level only
        saved_fd = None
    sys.stdout = sys.stderr
    return stream, saved_fd


def _restore(stream: TextIO, saved_fd: int | None) -> None:
    sys.stderr.flush()
    sys.stdout = stream
    if saved_fd is not None:
        os.dup2(saved_fd, 1)
        os.close(saved_fd)


@contextmanager
def json_output(enabled: bool) -> Iterator[dict[str, Any]]:
    """Yields the document for the command to fill; prints it at the end when `enabled`."""
    doc: dict[str, Any] = {}
    if not enabled:
        yield doc
        return
    stream, saved_fd = _divert()
    status: dict[str, Any] = {"exit_code": exit_codes.OK}
    try:
        yield doc
    except BaseException as e:
        status = failure(e)
        raise
    finally:
        _restore(stream, saved_fd)
        final = {**doc, "ok": status["exit_code"] == exit_codes.OK, **status}
        stream.write(json.dumps(final, indent=2, default=str) + "\n")
        stream.flush()
