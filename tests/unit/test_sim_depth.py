"""The simulator's summary counts queue depth from the records, as the report's job does.

The same hand data as tests/analysis/test_metrics_latency.py's depth test (that one runs the
Spark definition): a redelivered copy stays until it is settled, a copy never settled and a
message never delivered count until the load window ends, and the sampled depth is not used.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from emulator.sim.summary import replication_metrics
from testbed.core.records import SCHEMAS

LOAD, DRAIN = 1.0, 3.0


def _table(name: str, rows: list[dict[str, object]]) -> pa.Table:
    schema = SCHEMAS[name]
    return pa.Table.from_pylist([{f: r.get(f) for f in schema.names} for r in rows], schema=schema)


def test_depth_is_the_exact_time_average_of_unsettled_copies() -> None:
    published = (("y1", 1.2), ("y2", 1.4), ("y3", 2.5), ("y4", 0.2), ("z1", 1.0))
    deliveries = [  # msg, queue, attempt, t_deliver, t_done, outcome, t_publish
        ("y1", "q", 1, 1.3, 1.5, "timed_out", 1.2),
        ("y1", "q", 2, 1.9, 2.0, "acked", 1.2),
        ("y2", "q", 1, 1.5, None, "crashed", 1.4),
        ("y4", "q", 1, 0.3, 0.4, "acked", 0.2),
        ("z1", "r", 1, 1.5, 2.5, "acked", 1.0),
    ]
    tables = {
        "messages": _table(
            "messages",
            [
                {
                    "msg_id": m,
                    "queue": "r" if m == "z1" else "q",
                    "flow": "A",
                    "t_publish": p,
                    "t_intended": p,
                    "replication": 0,
                }
                for m, p in published
            ],  # fmt: skip
        ),
        "deliveries": _table(
            "deliveries",
            [
                {
                    "msg_id": m,
                    "queue": q,
                    "attempt": a,
                    "t_deliver": d,
                    "t_done": done,
                    "outcome": o,
                    "latency_s": d - p,
                    "replication": 0,
                }
                for m, q, a, d, done, o, p in deliveries
            ],  # fmt: skip
        ),
        "timeseries": _table("timeseries", [{"t": 2.0, "queue": "q", "depth_ready": 40}]),
        "events": _table(
            "events",
            [
                {"t": t, "kind": "phase", "target": "s", "detail": json.dumps({"phase": p})}
                for t, p in ((LOAD, "load"), (DRAIN, "drain"))
            ],  # fmt: skip
        ),
    }
    got = replication_metrics(tables)
    q = ((2.0 - 1.2) + (3.0 - 1.4) + (3.0 - 2.5)) / (DRAIN - LOAD)
    r = (2.5 - 1.0) / (DRAIN - LOAD)
    assert got[("queue_depth_mean", "q", None)] == pytest.approx(q)
    assert got[("queue_depth_mean", "r", None)] == pytest.approx(r)
    assert got[("queue_depth_mean", None, None)] == pytest.approx(q + r)
