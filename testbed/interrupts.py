"""How a live run reacts to SIGINT, SIGTERM and SIGHUP: one clean stop for all three.

`interruptible()` (around `testbed.run.run_scenario`) turns the first of these signals into an
exception in the main thread — `KeyboardInterrupt` for SIGINT, `RunInterrupted` (a
`SystemExit` with code 128 + signal number) for SIGTERM and SIGHUP — whether or not the run owns
its broker. The run's ``finally`` paths then heal the faults, stop Locust, merge the records,
write ``environment.json`` (``"interrupted": true``) and stop the brokers the run started.
Cleanup code runs `shielded()`: a signal arriving then is noted and raised when the cleanup is
done, so it cannot cut the cleanup short. Signals after the first are ignored: the stop is
bounded in time.

Exit codes are the ones shells report for a death by the signal: 130 (SIGINT), 143 (SIGTERM),
129 (SIGHUP).
"""

from __future__ import annotations

__all__ = ["EXIT_CODES", "INTERRUPTS", "Interrupts", "RunInterrupted", "interruptible"]

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_CODES = {int(s): 128 + int(s) for s in SIGNALS}
"""Exit status of `mqbed run` stopped by each signal (as a shell reports a death by it)."""


class RunInterrupted(SystemExit):
    """SIGTERM or SIGHUP stopped the run; `code` is the exit status (128 + signal number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class Interrupts:
    """The interrupt state of this process's run (one at a time: the main thread's)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._shield = 0
        self._raised = False

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    @property
    def pending(self) -> bool:
        """Whether a stop signal arrived (raised already or still deferred)."""
        return self.signum is not None

    def _handler(self, signum: int, _frame: Any) -> None:
        if self.signum is not None:
            return  # already stopping
        self.signum = signum
        if self._shield == 0:
            self._raise()

    def _raise(self) -> None:
        self._raised = True
        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        assert self.signum is not None
        raise RunInterrupted(self.signum)

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Cleanup that a signal must not cut short; a signal noted meanwhile is raised after."""
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
            if self._shield == 0 and self.signum is not None and not self._raised:
                self._raise()


INTERRUPTS = Interrupts()


@contextlib.contextmanager
def interruptible() -> Iterator[Interrupts]:
    """Install the handlers for the duration (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield INTERRUPTS
        return
    INTERRUPTS.reset()  # a fresh state for each run
    previous = {s: signal.signal(s, INTERRUPTS._handler) for s in SIGNALS}
    try:
        yield INTERRUPTS
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
