"""The end of a streamed replication: the messages table chunk by chunk, and the ledger.

Each retired chunk of messages (``emulator.sim.recorder``) is read back in order, late confirms
are patched in, and it is written to ``messages.r<N>.parquet``; the ledger
(``testbed.core.ledger.message_counts``, with which ``compute_ledger`` counts whole tables) is
counted from the chunk and the side file of its acked, dead-lettered and unroutable rows — every
delivery of a message lands in its chunk's side file, however late — so a message's figures
never need another chunk. The summary's listeners see each chunk here, with its final confirms.
"""

from __future__ import annotations

__all__ = ["write_messages", "small_tables", "deliveries_table"]

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from emulator.sim.message_lookup import lookup
from emulator.sim.spool import LEDGER_ROW, PartWriter
from testbed.core.ledger import MESSAGE_COUNTS, message_counts
from testbed.core.records import DELIVERIES, EVENTS, MESSAGES, OUTCOMES, TIMESERIES, Ledger

if TYPE_CHECKING:
    from emulator.sim.recorder import Recorder

_ACKED = OUTCOMES.index("acked")
_DEAD = OUTCOMES.index("dead_lettered")
_UNROUTABLE = OUTCOMES.index("unroutable")


def _late_confirms(rec: Recorder) -> tuple[np.ndarray, np.ndarray]:
    """Confirms that came after their chunk retired, sorted by message."""
    late = sorted((m, t) for m, t in rec.confirms.items() if 0 <= m < rec.messages)
    keys = np.array([m for m, _ in late], dtype=np.int64)
    return keys, np.array([t for _, t in late], dtype=np.float64)


def write_messages(rec: Recorder) -> tuple[Path, Ledger]:
    """Write ``messages.r<N>.parquet`` from the chunk files; the replication's ledger."""
    files, R, n, rep = rec.files(), rec.R, rec.messages, rec.replication
    assert rec.retired_hi == n, "finish() retires every chunk first"
    late_m, late_t = _late_confirms(rec)
    names = pa.array(rec.names, type=pa.string())
    width = len(rec.names) + 1
    writer = PartWriter(rec._spool() / f"messages.r{rep}.parquet", "messages")
    counts = dict.fromkeys(MESSAGE_COUNTS, 0)
    for k in range(-(-n // R)):
        batch = files.read(k)
        lo = k * R
        hi = lo + batch.num_rows
        t_conf = batch.column("t_confirm").to_numpy().copy()
        sel = (late_m >= lo) & (late_m < hi)
        t_conf[late_m[sel] - lo] = late_t[sel]
        t_pub = batch.column("t_publish").to_numpy()
        flow = batch.column("flow")
        writer.write(
            pa.Table.from_arrays(
                [
                    pa.array(np.arange(lo, hi, dtype=np.int64)).cast(pa.string()),
                    names.take(flow),
                    names.take(batch.column("dest")),
                    names.take(batch.column("producer")),
                    pa.array(np.rint(batch.column("size").to_numpy()).astype(np.int64)),
                    batch.column("t_intended"),
                    pa.array(t_pub, mask=np.isnan(t_pub)),
                    pa.array(t_conf, mask=np.isnan(t_conf)),
                    pa.array(np.full(hi - lo, rep, dtype=np.int32)),
                ],
                schema=MESSAGES,
            )
        )
        side = rec._ledger_sides.pop(k, None)
        rows = side.read_all() if side is not None else np.zeros(0, dtype=LEDGER_ROW)
        _count(counts, rows, lo, width, ~np.isnan(t_conf))
        for listener in rec.listeners:
            listener.messages(
                {
                    "flow": flow.to_numpy(),
                    "t_intended": batch.column("t_intended").to_numpy(),
                    "t_publish": t_pub,
                    "t_confirm": t_conf,
                    "msg": np.arange(lo, hi, dtype=np.int64),
                    "dest": batch.column("dest").to_numpy(),
                }
            )
        files.remove(k)
        if side is not None:
            side.remove()
    ledger = Ledger(
        sent=n,
        unexpected=0,  # every delivery is of a message number this replication made
        redeliveries=rec.redeliveries,
        order_violations=rec.order.violations,
        **counts,
    )
    return writer.close(), ledger


def check_order(rec: Recorder, cols: dict[str, np.ndarray]) -> None:
    """Feed a flushed batch's acked rows, in the order they were recorded (the order their
    acks reached the broker), to the replication's `OrderCheck`; a message's stream is its
    producer instance and its publish sequence its number."""
    acked = cols["outcome"] == _ACKED
    if acked.any():
        m = cols["msg"][acked]
        rec.order.feed(cols["queue"][acked], lookup(rec, m, "producer"), m)


def _count(
    counts: dict[str, int],
    rows: np.ndarray,
    lo: int,
    width: int,
    confirmed: np.ndarray,
) -> None:
    """Add one chunk's ledger counts (`testbed.core.ledger.message_counts`, which
    ``compute_ledger`` counts whole tables with): every delivery of the chunk's messages (from
    number `lo`, one per element of `confirmed`) is in its side file's `rows`."""
    acked = rows[rows["o"] == _ACKED]
    chunk = message_counts(
        confirmed,
        acked["m"] - lo,
        acked["q"].astype(np.int64),
        width,
        rows[rows["o"] == _DEAD]["m"] - lo,
        rows[rows["o"] == _UNROUTABLE]["m"] - lo,
    )
    for name, value in chunk.items():
        counts[name] += value


def small_tables(
    events_rows: list[tuple[float, str, str, str]], series_rows: list[tuple[Any, ...]], rep: int
) -> dict[str, pa.Table]:
    """``timeseries`` and ``events`` (a few rows a second: kept in memory)."""
    ev: list[Sequence[Any]] = (
        list(zip(*events_rows, strict=True)) if events_rows else [[], [], [], []]
    )
    events = pa.Table.from_arrays(
        [
            pa.array(ev[0], type=pa.float64()),
            pa.array(ev[1], type=pa.string()),
            pa.array(ev[2], type=pa.string()),
            pa.array(ev[3], type=pa.string()),
            pa.array(np.full(len(events_rows), rep, dtype=np.int32)),
        ],
        schema=EVENTS,
    )
    cols: list[Sequence[Any]] = list(zip(*series_rows, strict=True)) if series_rows else [[]] * 11
    series = pa.Table.from_arrays(
        [pa.array(c, type=TIMESERIES.field(i).type) for i, c in enumerate(cols)]
        + [pa.array(np.full(len(series_rows), rep, dtype=np.int32))],
        schema=TIMESERIES,
    )
    return {"timeseries": series, "events": events}


def deliveries_table(names_list: list[str], cols: dict[str, np.ndarray], rep: int) -> pa.Table:
    """A flushed batch of deliveries as a ``deliveries`` table (``latency_s`` from publish;
    null on an ``unroutable`` row, which is no delivery: the live recorder leaves it null, and
    the report's queue depth counts a row with a latency as a copy in its queue)."""
    msg, t_pub = cols["msg"], cols["t_publish"]
    names = pa.array(names_list, type=pa.string())
    attempt = cols["attempt"]
    reps = np.full(len(msg), rep, dtype=np.int32)
    table = pa.Table.from_arrays(
        [
            pa.array(msg).cast(pa.string()),
            names.take(pa.array(cols["queue"])),
            names.take(pa.array(cols["consumer"])),
            pa.array(attempt),
            pa.array(cols["t_deliver"]),
            pa.array(cols["t_done"]),
            pa.array(OUTCOMES, type=pa.string()).take(pa.array(cols["outcome"])),
            pa.array(attempt > 1),
            pa.array(cols["t_deliver"] - t_pub, mask=cols["outcome"] == _UNROUTABLE),
            pa.nulls(len(msg), pa.float64()),  # service_s: measured runs only
            pa.array(reps),
        ],
        schema=DELIVERIES,
    )
    return table
