"""The simulator's recorder streams messages out in chunks (`emulator.sim.recorder`): a message
acked after its chunk was retired to disk is read back from the chunk file with every column
the ledger needs — its producer above all, which the in-order check keys its streams by."""

from __future__ import annotations

from pathlib import Path

from emulator.sim.recorder import OUTCOME_CODES, Recorder

ACKED = OUTCOME_CODES["acked"]


def _publish(rec: Recorder, n: int, producers: tuple[int, int]) -> None:
    """``n`` messages from two producers in turn, 1 ms apart."""
    for i in range(n):
        rec.new_message(0, 0, producers[i % 2], 100.0, i / 1000, i / 1000)


def test_a_late_ack_of_a_retired_message_reads_its_producer_back(tmp_path: Path) -> None:
    rec = Recorder(chunk_rows=4)
    rec.configure(tmp_path, 0)
    a, b = rec.name("producer-a"), rec.name("producer-b")
    _publish(rec, 20, (a, b))  # chunks 0-2 retired, chunk 3 sealed, chunk 4 current
    assert rec.retired_hi >= 8
    # acked in this order: 1 (b) and 3 (b) from a retired chunk, then 2 (a), 0 (a), 5 (b);
    # a's stream acks 2 before 0 (one violation), b's 1, 3, 5 stay in order
    for m in (1, 3, 2, 0, 5):
        rec.delivery(m, 0, 0, 1, 0.1, 0.2, ACKED)
    rec.flush_deliveries()
    assert rec.order.violations == 1


def test_two_producers_in_order_from_retired_chunks_violate_nothing(tmp_path: Path) -> None:
    """Message numbers interleave the producers: were the producer read wrongly (one stream),
    acking 1 before 0 would count as a violation."""
    rec = Recorder(chunk_rows=4)
    rec.configure(tmp_path, 0)
    a, b = rec.name("producer-a"), rec.name("producer-b")
    _publish(rec, 20, (a, b))
    for m in (1, 0, 3, 2, 5, 4, 7, 6, 17, 16):
        rec.delivery(m, 0, 0, 1, 0.1, 0.2, ACKED)
    rec.flush_deliveries()
    assert rec.order.violations == 0
