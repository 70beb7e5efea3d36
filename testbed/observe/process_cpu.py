"""CPU time of each Locust process of a run, next to its records.

Every Locust process that runs users writes, when it quits, ``measured/processes/<worker>.json``:
the CPU seconds it spent from its first user's start to the end (after its last records were
written), the wall time of that span, and how many publishes and deliveries it recorded.
Calibration divides one by the other (``ClientPath.cpu_per_op``, the cost with which the
simulator makes the users of one process wait for each other); a run's figures show how busy
each load generator was — a process near one core is the bottleneck of the run it measures.
"""

from __future__ import annotations

__all__ = ["ProcessUsage", "read_usage", "cpu_per_op", "generator_report", "DIRNAME", "BUSY"]

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.core.client_path import BUSY_GENERATOR

DIRNAME = "processes"
BUSY = BUSY_GENERATOR


@dataclass(frozen=True)
class ProcessUsage:
    worker: str
    cpu_s: float
    wall_s: float
    publishes: int
    deliveries: int

    @property
    def utilisation(self) -> float:
        """Share of one core the process used over its span."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class UsageClock:
    """Started with the process's state; ``write`` records the span when the process quits."""

    def __init__(self) -> None:
        self.cpu0 = time.process_time()
        self.wall0 = time.monotonic()

    def write(self, measured_dir: Path, worker: str, publishes: int, deliveries: int) -> Path:
        usage = ProcessUsage(
            worker=worker,
            cpu_s=round(time.process_time() - self.cpu0, 4),
            wall_s=round(time.monotonic() - self.wall0, 3),
            publishes=publishes,
            deliveries=deliveries,
        )
        folder = Path(measured_dir) / DIRNAME
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{worker}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(usage), sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
        return path


def read_usage(root: Path) -> list[ProcessUsage]:
    """Every process usage file under ``root`` (a run, a replication or a measured directory);
    a file that is not one (torn, hand-edited) is left out."""
    out = []
    for path in sorted(Path(root).rglob(f"{DIRNAME}/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append(ProcessUsage(**{k: data[k] for k in ProcessUsage.__dataclass_fields__}))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def cpu_per_op(usages: list[ProcessUsage]) -> float | None:
    """CPU seconds per client operation (publish or delivery) over ``usages``; None when they
    recorded no operation."""
    ops = sum(u.publishes + u.deliveries for u in usages)
    if ops <= 0:
        return None
    return sum(u.cpu_s for u in usages) / ops


def generator_report(usages: list[ProcessUsage]) -> tuple[list[dict[str, object]], list[str]]:
    """(``environment.json``'s ``load_generators`` entries, warnings for processes busier than
    ``BUSY``): a load generator near a whole core delays its own publishes and deliveries, and
    the run then measures the generator as much as the broker."""
    rows: list[dict[str, object]] = []
    warnings = []
    for u in usages:
        rows.append({**asdict(u), "utilisation": round(u.utilisation, 3)})
        if u.utilisation > BUSY:
            warnings.append(
                f"warning: Locust process {u.worker} used {u.utilisation:.0%} of a core over the "
                "run: the load generator may be the bottleneck it measures; raise `workers`"
            )
    return rows, warnings
