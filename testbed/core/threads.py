"""Thread counts of the `threads` broker model's two stages (docs/models.md §3a, §4).

A scenario's ``broker.threads`` (and a profile's ``threads.count``) is either one count for both
the receive and the dispatch stage (``threads: 4``) or one per stage
(``threads: {receive: 2, dispatch: 8}``), the N1 ≠ N2 tandem of §4.
"""

from __future__ import annotations

__all__ = ["StageThreads", "ThreadCount", "stage_counts"]

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag

from testbed.core.strict import Strict

Count = Annotated[int, Field(ge=1, le=1024)]


class StageThreads(Strict):
    """One thread count per stage of the `threads` model."""

    receive: Count = 1
    """Servers N1 of the receive (enqueue) stage every publish passes."""
    dispatch: Count = 1
    """Servers N2 of the dispatch stage every delivery attempt passes."""


def _branch(v: Any) -> str:
    return "stages" if isinstance(v, dict | StageThreads) else "count"


# tagged by the value's shape, so that a bad value is reported against its own form only
ThreadCount = Annotated[
    Annotated[Count, Tag("count")] | Annotated[StageThreads, Tag("stages")],
    Discriminator(_branch),
]


def stage_counts(threads: int | StageThreads) -> tuple[int, int]:
    """(receive, dispatch) thread counts; a bare count applies to both stages."""
    if isinstance(threads, StageThreads):
        return threads.receive, threads.dispatch
    n = max(1, int(threads))
    return n, n
