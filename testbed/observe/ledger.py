"""The live side's ledger files: after a run, merge every process's record parts and write the
ledgers (the computation itself is `testbed.core.ledger`, shared with the simulator)."""

from __future__ import annotations

__all__ = [
    "collect_side",
    "locust_exceptions",
    "locust_log_notes",
    "silent_replications",
    "user_errors",
]

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from testbed.core.ledger import compute_ledger, write_ledgers
from testbed.core.records import Ledger, merge_parts, read_table

SORT_KEYS = {"messages": "t_publish", "deliveries": "t_deliver", "timeseries": "t", "events": "t"}
"""How `collect_side` orders each merged table."""


def collect_side(side_dir: Path, replications: int) -> list[Ledger]:
    """After a live run (also an interrupted one): merge each table's per-process parts into
    one sorted file and write the ledgers of `replications` replications; returns them."""
    for table, key in SORT_KEYS.items():
        merge_parts(side_dir, table, sort_by=key)
    messages = read_table(side_dir, "messages")
    deliveries = read_table(side_dir, "deliveries")
    ledgers = []
    for rep in range(replications):
        m = messages.filter(pc.equal(messages.column("replication"), rep))
        d = deliveries.filter(pc.equal(deliveries.column("replication"), rep))
        ledgers.append(compute_ledger(m, d))
    write_ledgers(side_dir, ledgers)
    return ledgers


def user_errors(side_dir: Path) -> list[dict[str, Any]]:
    """`user_error` events: a producer or consumer that could not start or died."""
    events = read_table(side_dir, "events")
    bad = events.filter(pc.equal(events.column("kind"), "user_error"))
    return [
        {"t": r["t"], "target": r["target"], "detail": json.loads(r["detail"])}
        for r in bad.to_pylist()
    ]


def locust_exceptions(locust_dir: Path) -> list[dict[str, Any]]:
    """Exceptions Locust caught outside our users' own error handling (a user that failed
    before its process had a recorder, e.g. a worker that could not read the run's
    configuration): the master's ``*_exceptions.csv``, which gathers every worker's."""
    found: list[dict[str, Any]] = []
    for path in sorted(locust_dir.glob("*_exceptions.csv")):
        try:
            with path.open(newline="", encoding="utf-8", errors="replace") as fh:
                rows = list(csv.DictReader(fh))
        except OSError:
            continue
        for row in rows:
            message = (row.get("Message") or "").strip()
            trace = (row.get("Traceback") or "").strip().splitlines()
            detail = f"{row.get('Count', '?')}x {message}" + (f" ({trace[-1]})" if trace else "")
            found.append({"t": None, "target": f"locust {path.name}", "detail": detail})
    return found


def locust_log_notes(locust_dir: Path, prefix: str, limit: int = 3) -> list[str]:
    """The last `limit` warnings, errors and worker-liveness lines of the Locust logs of one
    replication (``<prefix>*.log``): why its Locust may have stopped early (e.g. "The last
    worker went missing, stopping test.")."""
    notes: list[str] = []
    for log in sorted(locust_dir.glob(f"{prefix}*.log")):
        try:
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        notes += [f"{log.name}: {line.split(': ', 1)[-1][:200]}" for line in lines
                  if "/ERROR/" in line or "/WARNING/" in line or "missing" in line]  # fmt: skip
    return notes[-limit:]


def silent_replications(
    scenario: Any, ledgers: list[Ledger], locust_dir: Path | None = None
) -> list[dict[str, Any]]:
    """A replication whose producers published nothing is no measurement, whatever hid the
    cause (workers that never reached the broker, records lost with a killed process): an
    error of the run, never an empty ledger that looks like a quiet success. With
    `locust_dir`, the detail quotes the replication's Locust log lines that may say why."""
    if not scenario.producers:
        return []
    found = []
    for rep, led in enumerate(ledgers):
        if led.sent:
            continue
        notes = locust_log_notes(locust_dir, f"r{rep}") if locust_dir is not None else []
        detail = "no message was published: see measured/locust/*.log"
        found.append({"t": None, "target": f"replication r{rep}",
                      "detail": detail + "".join(f"; {n}" for n in notes)})  # fmt: skip
    return found
