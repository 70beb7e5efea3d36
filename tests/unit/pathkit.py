"""A client path whose every delivery point holds one measured-looking table: the simulator
tests of `emulator.sim` that need a client path but not its interpolation."""

from __future__ import annotations

from typing import Any

import numpy as np

from testbed.core.client_path import ClientPath, PathPoint, Provenance
from testbed.core.quantiles import quantile_table


def one_table_path(kind: str, sample: np.ndarray, **fields: Any) -> ClientPath:
    """Delivery points at 10 and 400 msg/s, 200 B and 16 KB, plain and confirmed persistent,
    all with the table of `sample`; `fields` set the path's other fields (cpu, turnaround...)."""
    client = "pika" if kind == "rabbitmq" else "stomp"
    table = quantile_table(sample)
    points = [
        PathPoint(rate=r, size=s, persistent=c, confirms=c, table=table)
        for r in (10, 400)
        for s in (200, 16_000)
        for c in (False, True)
    ]
    prov = Provenance(host="t", date="2026-11-27", broker_version="x", client=client)  # type: ignore[arg-type]
    return ClientPath(client=client, delivery=points, provenance=prov, **fields)  # type: ignore[arg-type]
