"""`mqbed`'s exit codes: one list, shown in ``mqbed --help`` and the README ("Exit codes").

Each error class of :mod:`testbed.exceptions` carries its code (``exit_code``); `code_for` is
how the CLI turns an exception into the process's exit status.
"""

from __future__ import annotations

__all__ = [
    "OK",
    "INTERNAL",
    "USAGE",
    "SCENARIO",
    "RUN_FAILURE",
    "ACCURACY_MISS",
    "THRESHOLD_MISS",
    "INTERRUPTED",
    "CODES",
    "code_for",
    "epilog",
]

import signal

from testbed.interrupts import EXIT_CODES as _SIGNAL_EXITS

OK = 0
INTERNAL = 1
USAGE = 2
SCENARIO = 3
RUN_FAILURE = 4
ACCURACY_MISS = 5
THRESHOLD_MISS = 6
INTERRUPTED = {
    sig.name: _SIGNAL_EXITS[int(sig)] for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
}
"""130 (SIGINT, Ctrl-C), 143 (SIGTERM), 129 (SIGHUP): as a shell reports a death by the signal;
the run directory is still written (`testbed.interrupts`)."""

CODES: list[tuple[int, str]] = [
    (OK, "success (every threshold of `run` met)"),
    (INTERNAL, "internal error: a bug, shown with a traceback; please report it"),
    (USAGE, "usage error: unknown option, bad option value or combination"),
    (SCENARIO, "scenario or configuration error (file:line field: message), nothing started"),
    (RUN_FAILURE, "run failure: broker, backend, fault or Locust user failed"),
    (ACCURACY_MISS, "accuracy miss: `bench --suite accuracy`, a prediction missed its target"),
    (THRESHOLD_MISS, "threshold miss: `run`, the measured run missed an SLO threshold"),
    *((code, f"interrupted by {name}") for name, code in INTERRUPTED.items()),
]


def code_for(error: BaseException) -> int:
    """The exit status for an error the CLI caught (an mqbed error: its class's code)."""
    from emulator.errors import PredictionError

    if isinstance(error, PredictionError):
        return SCENARIO  # the scenario does not meet the method's assumptions
    code = getattr(error, "exit_code", RUN_FAILURE)
    return code if isinstance(code, int) else RUN_FAILURE


def epilog() -> str:
    """The exit-code table for ``--help`` (``\\b`` keeps click from re-wrapping it)."""
    lines = ["\b", "Exit codes:"]
    lines += [f"  {code:>3}  {text}" for code, text in CODES]
    return "\n".join(lines)
