"""Fixtures shared by the unit tests: `fsynced`, the paths that `testbed.core.atomic` fsyncs
(files by the temporary name they have then), for the atomic-output tests of both sides."""

from __future__ import annotations

import os

import pytest

import testbed.core.atomic as atomic


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths fsynced (files by the temporary name they have then)."""
    seen: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", record)
    return seen
