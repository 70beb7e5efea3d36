"""Renamed options: `--out DIR` means one thing in every command, the parent directory under
which the command creates its new result (`run`, `sweep`, `bench`'s accuracy runs). The
options that meant something else got their own names (`predict --run-dir`, `calibrate
--profile-out`, `bench --report`, `compare --page-dir`, and `bench --out` for the old `--runs`);
scripts that spell them the old way keep working, with one line on stderr."""

from __future__ import annotations

__all__ = ["old_spelling", "renamed"]

from typing import Any, TypeVar

import typer

from testbed.cli.app import progress

T = TypeVar("T")


def old_spelling(name: str, metavar: str) -> Any:
    """A renamed option's old name, still accepted (hidden from --help; see `renamed`)."""
    return typer.Option(name, metavar=metavar, hidden=True, help="Deprecated spelling.")


def renamed(new: T | None, old: T | None, *, command: str, was: str, now: str) -> T | None:
    """The value of an option that `was` spelled otherwise: `old` (the old spelling's value,
    with one line on stderr naming the option that replaces it) or `new`; both is a usage
    error."""
    if old is None:
        return new
    if new is not None:
        raise typer.BadParameter(f"{was} is the old spelling of {now}: give {now} only")
    progress(f"mqbed {command}: {was} is deprecated, use {now}")
    return old
