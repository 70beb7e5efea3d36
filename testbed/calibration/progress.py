"""Progress of a calibration: one line (or a progress bar) per step, with elapsed time and ETA."""

from __future__ import annotations

__all__ = ["Reporter", "hms"]

import time
from collections.abc import Callable
from typing import Any


class Reporter:
    """Step progress with an ETA. Lines go to `sink` when given (the CLI's printer); otherwise
    a rich progress bar on stderr (a plain line printer when stderr is not a terminal)."""

    def __init__(self, total: float, steps: int, sink: Callable[[str], None] | None) -> None:
        self.total = total
        self.steps = steps
        self.sink = sink
        self.done_planned = 0.0
        self.k = 0
        self.t0 = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        if sink is None:
            from rich.console import Console

            console = Console(stderr=True, emoji=False)
            if console.is_terminal:
                from rich.progress import (
                    BarColumn,
                    Progress,
                    TaskProgressColumn,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )

                self._bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    TaskProgressColumn(),
                    TimeElapsedColumn(),
                    TextColumn("ETA"),
                    TimeRemainingColumn(),
                    console=console,
                )
                self._task = self._bar.add_task("calibration", total=total)
                self._bar.start()
            else:
                self.sink = lambda line: console.print(line, markup=False, highlight=False)

    def eta(self) -> float:
        left = self.total - self.done_planned
        if self.done_planned < 0.1 * self.total:
            return left
        return left * (time.monotonic() - self.t0) / self.done_planned

    def line(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        elif self.sink is not None:
            self.sink(text)

    def start(self, label: str) -> None:
        self.k += 1
        elapsed = time.monotonic() - self.t0
        msg = f"[{self.k}/{self.steps}] {label}"
        if self._bar is not None:
            self._bar.update(self._task, description=msg)
        else:
            self.line(f"{msg}  (elapsed {hms(elapsed)}, ETA {hms(self.eta())})")

    def finish(self, planned: float) -> None:
        self.done_planned += planned
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done_planned)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def hms(seconds: float) -> str:
    """`seconds` as ``h:mm:ss``, or ``m:ss`` under an hour."""
    s = max(0, int(round(seconds)))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )
