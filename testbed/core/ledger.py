"""The ledger: Jepsen's queue checker over the record tables (docs/architecture.md "Run directory").

One definition for measured and predicted runs: the live run (`testbed.observe.ledger`) and the
simulator (`emulator.sim`, `emulator.predict`) both call it.

- **sent**: messages the producers attempted to publish (rows of `messages`).
- **confirmed**: publishes the broker acknowledged (`t_confirm` not null). A producer without
  publisher confirms records ``t_confirm = t_publish`` when its send returned without error,
  so "confirmed" means "the client believes the broker has it" — best-effort losses stay
  visible as `lost`.
- **delivered_unique**: sent messages with at least one ``acked`` delivery (in any queue).
- **lost**: confirmed, never acked, never dead-lettered and not unroutable after the drain.
  (Per message: a fan-out message acked in some subscriber queues counts as delivered.)
- **duplicated**: messages acked more than once *in the same queue* (a fan-out copy in another
  queue is not a duplicate).
- **unexpected**: distinct message ids delivered that no producer of this run sent.
- **recovered**: acked although their publish was never confirmed.
- **redeliveries**: delivery attempts beyond the first (``attempt > 1`` or the broker's
  ``redelivered`` flag).
- **dead_lettered**: sent messages dead-lettered after `max_deliveries`.
- **unroutable**: sent messages never acked nor dead-lettered that the broker dropped because
  no queue took them — a transient subscription (``exclusive``/``auto_delete``) whose consumer
  was away — and returned to their ``mandatory`` producer (an ``unroutable`` row). They were
  never enqueued, so they are not `lost`. Without ``mandatory`` the broker drops them silently:
  nothing tells them apart, and they count as `lost` (docs/models.md §6).
- **order_violations**: acked deliveries of a message after the same queue had acked a later
  message of the same producer instance (`testbed.core.ordering`, which defines it exactly):
  0 on an in-order queue, and the count of a queue's processing out of publish order otherwise.

Joins go through one hash index over the message ids (in C) and numpy, so a million-message
replication costs tens of MB, not a Python set of strings.
"""

from __future__ import annotations

__all__ = [
    "MESSAGE_COUNTS",
    "compute_ledger",
    "message_counts",
    "message_index",
    "codes",
    "float_column",
    "write_ledgers",
    "LEDGER_FILE",
]

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from testbed.core.ordering import order_violations, publish_sequence
from testbed.core.records import Ledger


def message_index(msg_ids: pa.ChunkedArray | pa.Array, messages: pa.Table) -> np.ndarray:
    """Row of ``messages`` for each id in ``msg_ids`` (-1 where the id was never published)."""
    idx = pc.index_in(msg_ids, value_set=messages["msg_id"].combine_chunks())
    return np.asarray(pc.fill_null(idx, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """Integer codes and the distinct values of a string column (nulls → -1)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    enc = pc.dictionary_encode(arr)
    idx = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return idx, [str(v) for v in enc.dictionary.to_pylist()]


def float_column(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric column as float numpy, nulls as NaN."""
    return np.asarray(
        pc.fill_null(pc.cast(column, pa.float64()), float("nan")).to_numpy(zero_copy_only=False),
        dtype=np.float64,
    )


LEDGER_FILE = "ledger.json"
"""The whole side's ledger: the sum over its replications (one replication: that one)."""


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[rows[rows >= 0]] = True
    return out


MESSAGE_COUNTS = (
    "confirmed",
    "delivered_unique",
    "lost",
    "duplicated",
    "recovered",
    "dead_lettered",
    "unroutable",
)
"""The `Ledger` fields counted per message (`message_counts`): over a whole table, or summed
over chunks of messages that each hold every delivery of their messages."""


def message_counts(
    confirmed: np.ndarray,
    acked: np.ndarray,
    acked_queue: np.ndarray,
    width: int,
    dead: np.ndarray,
    returned: np.ndarray,
) -> dict[str, int]:
    """The `MESSAGE_COUNTS` of ``n = len(confirmed)`` messages (the module docstring's
    definitions). `confirmed`: whether each message's publish was confirmed; `acked`: the message
    (row 0..n-1, negative for an unknown id) of every acked delivery, `acked_queue` its queue's
    code (-1 and up, below ``width - 1``); `dead`, `returned`: the messages of the
    ``dead_lettered`` and ``unroutable`` rows. The live ledger counts whole tables with it, the
    streamed simulator (`emulator.sim.chunkpass`) each chunk of messages."""
    n = len(confirmed)
    known = acked >= 0
    delivered = _mask(n, acked)
    pairs, counts = np.unique(acked[known] * width + acked_queue[known] + 1, return_counts=True)
    dead_lettered = _mask(n, dead)
    unroutable = _mask(n, returned) & ~delivered & ~dead_lettered
    return {
        "confirmed": int(confirmed.sum()),
        "delivered_unique": int(delivered.sum()),
        "lost": int(np.count_nonzero(confirmed & ~delivered & ~dead_lettered & ~unroutable)),
        "duplicated": len(np.unique(pairs[counts > 1] // width)),
        "recovered": int(np.count_nonzero(~confirmed & delivered)),
        "dead_lettered": int(dead_lettered.sum()),
        "unroutable": int(unroutable.sum()),
    }


def compute_ledger(messages: pa.Table, deliveries: pa.Table) -> Ledger:
    """Ledger for one replication's `messages` and `deliveries` tables."""
    outcome = deliveries["outcome"]
    acked = deliveries.select(["msg_id", "queue", "t_deliver", "t_done"]).filter(
        pc.equal(outcome, "acked")
    )
    acked_idx = message_index(acked["msg_id"], messages)
    qcode, qnames = codes(acked["queue"])
    all_idx = message_index(deliveries["msg_id"], messages)
    unknown = deliveries["msg_id"].filter(pa.array(all_idx < 0))
    unexpected = len(pc.unique(unknown)) if len(unknown) else 0
    again = pc.or_(
        pc.greater(deliveries["attempt"], 1), pc.fill_null(deliveries["redelivered"], False)
    )
    counts = message_counts(
        np.asarray(pc.is_valid(messages["t_confirm"]).to_numpy(zero_copy_only=False)),
        acked_idx,
        qcode,
        len(qnames) + 1,
        message_index(deliveries["msg_id"].filter(pc.equal(outcome, "dead_lettered")), messages),
        message_index(deliveries["msg_id"].filter(pc.equal(outcome, "unroutable")), messages),
    )
    return Ledger(
        sent=messages.num_rows,
        unexpected=unexpected,
        redeliveries=int(pc.sum(pc.cast(again, pa.int64())).as_py() or 0),
        order_violations=_order_violations(messages, acked, acked_idx, qcode),
        **counts,
    )


def _order_violations(
    messages: pa.Table, acked: pa.Table, acked_idx: np.ndarray, qcode: np.ndarray
) -> int:
    """`testbed.core.ordering`'s count over the acked rows of known messages."""
    known = acked_idx >= 0
    if not known.any():
        return 0
    stream, _ = codes(messages["producer"])
    seq = publish_sequence(
        float_column(messages["t_publish"]), float_column(messages["t_intended"])
    )
    rows = acked_idx[known]
    return order_violations(
        qcode[known],
        stream[rows],
        seq[rows],
        float_column(acked["t_done"])[known],
        float_column(acked["t_deliver"])[known],
    )


def write_ledgers(side_dir: Path, ledgers: list[Ledger]) -> Path:
    """Write one side's ledgers the same way for `measured/` and `predicted/`.

    ``ledger.json`` holds the sum over the replications (Jepsen's checker over the side's whole
    history); with more than one replication each also gets ``ledger.r<N>.json``. Files of an
    earlier, larger set of replications are removed.
    """
    side_dir = Path(side_dir)
    side_dir.mkdir(parents=True, exist_ok=True)
    for stale in side_dir.glob("ledger.r*.json"):
        stale.unlink()
    total = Ledger(**{k: sum(getattr(x, k) for x in ledgers) for k in Ledger().to_json()})
    total.write(side_dir / LEDGER_FILE)
    if len(ledgers) > 1:
        for rep, ledger in enumerate(ledgers):
            ledger.write(side_dir / f"ledger.r{rep}.json")
    return side_dir / LEDGER_FILE
