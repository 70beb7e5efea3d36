"""The ``events`` rows of client faults, the same on both sides: a live Locust user
(`testbed.workload.users`, `testbed.workload.crashes`) and a simulated one
(`emulator.sim.faults_clients`) record a crash, its restart, a lost connection and its
reconnect through these builders, so the report reads one set of names and details.

Each builder returns ``(event, detail)``; the caller adds its time and target (the group for a
crash, the instance for a connection). Before these existed each side wrote its own: the
simulated ``fault_start`` of a crash carried the fault's ``index`` and the live one did not.
"""

from __future__ import annotations

__all__ = ["client_down", "client_up", "crash_ended", "crash_skipped", "crash_started", "on"]

from collections.abc import Sequence
from typing import Any

Row = tuple[str, dict[str, Any]]


def crash_started(
    kind: str, index: int, instances: Sequence[str], restart_after: float | None
) -> Row:
    """A crash of `instances` (of a group), the `index`-th fault of the scenario."""
    detail = {"kind": kind, "index": index, "instances": list(instances)}
    return "fault_start", {**detail, "restart_after": restart_after}


def crash_ended(kind: str, instance: str) -> Row:
    """A crashed instance restarted."""
    return "fault_end", {"kind": kind, "instances": [instance]}


def crash_skipped(kind: str, reason: str) -> Row:
    """A crash that found no instance to crash."""
    return "fault_skipped", {"kind": kind, "reason": reason}


def client_down(error: str) -> Row:
    """An instance lost its connection (`error`: what the client library said, cut to 200)."""
    return "client_down", {"error": error[:200]}


def client_up(downtime_s: float) -> Row:
    """An instance reconnected after `downtime_s`."""
    return "client_up", {"downtime_s": round(downtime_s, 6)}


def on(target: str, row: Row) -> tuple[str, str, dict[str, Any]]:
    """`row` about `target`, in the order both recorders take: ``(event, target, detail)``."""
    return row[0], target, row[1]
