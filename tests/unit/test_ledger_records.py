"""Ledger arithmetic on hand-built tables, and the crash-tolerant record writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from testbed.core.ledger import compute_ledger, write_ledgers
from testbed.core.records import (
    DELIVERIES,
    MESSAGES,
    Ledger,
    RecordWriter,
    merge_parts,
    read_table,
)


def _messages(rows: list[tuple[str, float | None]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "msg_id": m,
                "flow": "f",
                "queue": "q",
                "producer": "p",
                "size_bytes": 10,
                "t_intended": 0.0,
                "t_publish": 0.0,
                "t_confirm": c,
                "replication": 0,
            }
            for m, c in rows
        ],
        schema=MESSAGES,
    )


def _deliveries(rows: list[tuple[str, int, str, bool]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "msg_id": m,
                "queue": "q",
                "consumer": "c",
                "attempt": a,
                "t_deliver": 1.0,
                "t_done": 1.1,
                "outcome": o,
                "redelivered": r,
                "latency_s": 1.0,
                "replication": 0,
            }
            for m, a, o, r in rows
        ],
        schema=DELIVERIES,
    )


def test_ledger_counts_each_category() -> None:
    messages = _messages([("a", 0.1), ("b", 0.1), ("c", 0.1), ("d", None), ("e", 0.1), ("f", 0.1)])
    deliveries = _deliveries(
        [
            ("a", 1, "acked", False),  # plain delivery
            ("b", 1, "timed_out", False),  # dropped, then redelivered and acked
            ("b", 2, "acked", True),
            ("c", 1, "acked", False),  # acked twice: a duplicate
            ("c", 1, "acked", True),
            ("d", 1, "acked", False),  # never confirmed but delivered: recovered
            ("e", 1, "timed_out", False),  # dead-lettered after attempts
            ("e", 2, "dead_lettered", True),
            ("zz", 1, "acked", False),  # never sent: unexpected
            # f: confirmed, never delivered: lost
        ]
    )
    ledger = compute_ledger(messages, deliveries)
    assert ledger == Ledger(
        sent=6,
        confirmed=5,
        delivered_unique=4,  # a, b, c, d
        lost=1,  # f
        duplicated=1,  # c
        unexpected=1,  # zz
        recovered=1,  # d
        redeliveries=3,  # b#2, c (redelivered flag), e#2
        dead_lettered=1,  # e
    )


def test_ledger_on_empty_tables() -> None:
    ledger = compute_ledger(MESSAGES.empty_table(), DELIVERIES.empty_table())
    assert ledger.to_json() == dict.fromkeys(Ledger().to_json(), 0)


def test_ledger_json_round_trip(tmp_path: Path) -> None:
    ledger = Ledger(sent=3, confirmed=2, lost=1)
    ledger.write(tmp_path / "ledger.json")
    assert Ledger.read(tmp_path / "ledger.json") == ledger


def test_both_sides_write_ledgers_alike(tmp_path: Path) -> None:
    reps = [Ledger(sent=10, confirmed=10, delivered_unique=9, lost=1), Ledger(sent=5, lost=0)]
    (tmp_path / "ledger.r7.json").write_text("{}")  # from an earlier run with more replications
    write_ledgers(tmp_path, reps)
    assert Ledger.read(tmp_path / "ledger.json") == Ledger(
        sent=15, confirmed=10, delivered_unique=9, lost=1
    )
    assert [Ledger.read(tmp_path / f"ledger.r{i}.json") for i in (0, 1)] == reps
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ledger.json", "ledger.r0.json", "ledger.r1.json"]  # fmt: skip
    write_ledgers(tmp_path, reps[:1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]


def test_writer_flushes_in_batches_and_survives_a_crash(tmp_path: Path) -> None:
    w = RecordWriter(tmp_path, "events", worker="w1", batch_rows=3)
    for i in range(7):
        w.append((float(i), "k", "t", "{}", 0))
    # a crash now (no close) loses only the 7th row, which is still buffered
    assert w.rows_written == 6
    crashed = read_table(tmp_path, "events")
    assert crashed.column("t").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # a half-written part (the .tmp of an interrupted flush) is ignored
    (tmp_path / "events.parts" / "w1-000009.tmp").write_bytes(b"garbage")
    w.close()
    merged = merge_parts(tmp_path, "events", sort_by="t")
    table = pq.read_table(merged)
    assert table.num_rows == 7 and table.schema.names == [
        "t",
        "kind",
        "target",
        "detail",
        "replication",
    ]
    # merged parts are gone; the .tmp may be a flush still under way, so it is not touched
    assert [p.name for p in (tmp_path / "events.parts").iterdir()] == ["w1-000009.tmp"]


def test_writer_rejects_unknown_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown table 'message'"):
        RecordWriter(tmp_path, "message")


def test_merge_without_parts_writes_an_empty_table(tmp_path: Path) -> None:
    out = merge_parts(tmp_path, "deliveries")
    assert pq.read_table(out).num_rows == 0


def test_merge_keeps_a_late_part_and_never_double_counts(tmp_path: Path) -> None:
    """Issue 16 item 6: merge_parts deleted every file of the parts directory, including a
    part an external worker flushed while the merge ran; now only parts named in the merged
    file's manifest are deleted, and readers skip parts the manifest names."""
    w = RecordWriter(tmp_path, "events", worker="w1", batch_rows=2)
    w.extend((float(i), "k", "t", "{}", 0) for i in range(4))
    real_read = pq.read_table
    late = RecordWriter(tmp_path, "events", worker="late", batch_rows=1)

    def read_then_a_late_flush(source: Any, *args: Any, **kwargs: Any) -> Any:
        if str(source).endswith("w1-000001.parquet"):
            late.append((9.0, "late", "t", "{}", 0))  # lands while the merge runs
        return real_read(source, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pq, "read_table", read_then_a_late_flush)
        out = merge_parts(tmp_path, "events", sort_by="t")
    assert pq.read_table(out).num_rows == 4
    assert [p.name for p in (tmp_path / "events.parts").iterdir()] == ["late-000000.parquet"]
    assert read_table(tmp_path, "events").column("t").to_pylist()[-1] == 9.0
    # a crash between writing the merged file and deleting its parts: the parts come back,
    # named in the manifest, and count once
    for name in ("w1-000000.parquet", "w1-000001.parquet"):
        pq.write_table(real_read(out).slice(0, 2), tmp_path / "events.parts" / name)
    assert read_table(tmp_path, "events").num_rows == 5
    merge_parts(tmp_path, "events", sort_by="t")
    assert pq.read_table(out).column("t").to_pylist() == [0.0, 1.0, 2.0, 3.0, 9.0]
    assert not (tmp_path / "events.parts").exists()


def test_flush_interval_bounds_the_age_of_buffered_rows(tmp_path: Path) -> None:
    w = RecordWriter(tmp_path, "events", worker="w", batch_rows=1000, flush_interval=0.5)
    w.append((0.0, "k", "t", "{}", 0))
    assert w.rows_written == 0 and not w.flush_due(now=w._oldest + 0.4)
    assert w.flush_due(now=w._oldest + 0.5) and w.rows_written == 1
    w.append((1.0, "k", "t", "{}", 0))
    w._oldest -= 0.6  # the buffered row is now 0.6 s old: the next append flushes both
    w.append((2.0, "k", "t", "{}", 0))
    assert w.rows_written == 3


def test_unroutable_messages_are_counted_apart_from_lost() -> None:
    """A returned publish (``unroutable`` row) is not lost: it was never enqueued. Without
    confirms its row says confirmed (the client thought the broker had it); with confirms the
    return made the confirm fail. A message returned by one route but acked by another (a
    fan-out copy) was delivered, and one whose return came although it was delivered later
    (a redelivered copy of the same id) counts once, as delivered."""
    messages = _messages([("r1", 0.1), ("r2", None), ("l", 0.1), ("fan", 0.1), ("ok", 0.1)])
    deliveries = _deliveries(
        [
            ("r1", 1, "unroutable", False),  # returned, no confirms: confirmed on its row
            ("r2", 1, "unroutable", False),  # returned, confirms: its confirm failed
            ("fan", 1, "unroutable", False),  # returned by one queue, acked in another
            ("fan", 1, "acked", False),
            ("ok", 1, "acked", False),
            # l: confirmed, never delivered, never returned: lost
        ]
    )
    ledger = compute_ledger(messages, deliveries)
    assert ledger == Ledger(
        sent=5,
        confirmed=4,  # all but r2
        delivered_unique=2,  # fan, ok
        lost=1,  # l only: r1 was unroutable, not lost
        unroutable=2,  # r1, r2
    )
    # each undelivered message has one fate: r2 (unconfirmed) is unroutable, not counted twice
    undelivered = ledger.sent - ledger.delivered_unique - ledger.dead_lettered
    assert undelivered == ledger.lost + ledger.unroutable == 3


def test_message_counts_of_chunks_add_up_to_the_whole() -> None:
    """The streamed simulator sums `message_counts` over chunks of messages (each with every
    delivery of its messages); `compute_ledger` counts the whole table with it."""
    import numpy as np

    from testbed.core.ledger import MESSAGE_COUNTS, message_counts
    from testbed.core.records import Ledger

    rng = np.random.default_rng(7)
    n, width = 400, 4
    confirmed = rng.random(n) < 0.8
    acked = np.sort(rng.integers(0, n, 600))  # repeats: duplicates, in one queue or another
    queue = rng.integers(-1, width - 1, len(acked))
    dead = rng.choice(n, 15, replace=False)
    returned = rng.choice(n, 25, replace=False)
    whole = message_counts(confirmed, acked, queue, width, dead, returned)
    assert tuple(whole) == MESSAGE_COUNTS
    assert set(MESSAGE_COUNTS) < {f.name for f in Ledger.__dataclass_fields__.values()}
    summed = dict.fromkeys(MESSAGE_COUNTS, 0)
    for lo in range(0, n, 64):
        hi = min(n, lo + 64)
        a, d, r = ((x >= lo) & (x < hi) for x in (acked, dead, returned))
        part = message_counts(
            confirmed[lo:hi], acked[a] - lo, queue[a], width, dead[d] - lo, returned[r] - lo
        )
        summed = {k: summed[k] + part[k] for k in MESSAGE_COUNTS}
    assert summed == whole
    assert whole["duplicated"] > 0 and whole["lost"] > 0 and whole["unroutable"] > 0
    with_unknown = message_counts(
        confirmed, np.append(acked, -1), np.append(queue, 0), width, dead, returned
    )
    assert with_unknown == whole  # an id no producer sent counts nowhere here
