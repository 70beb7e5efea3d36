"""The Jepsen-style ledger computed from record tables alone (DESIGN.md ``ledger.json``).

A pure function of the ``messages`` and ``deliveries`` tables of one replication, so the same
definition can serve measured and predicted runs (it belongs in ``testbed.core.records`` once
the live side adopts it):

- ``sent``: published messages; ``confirmed``: those with a ``t_confirm``.
- ``delivered_unique``: messages with at least one ``acked`` delivery (in any queue), plus acked
  ids that were never published (``unexpected``).
- ``lost``: confirmed messages never acked (after the drain).
- ``duplicated``: messages acked more than once *in the same queue* (a fan-out copy in another
  queue is not a duplicate).
- ``unexpected``: acked message ids that were never published.
- ``recovered``: unconfirmed messages that were acked anyway.
- ``redeliveries``: delivery attempts flagged ``redelivered``; ``dead_lettered``: attempts with
  that outcome.

Joins go through ``message_index`` (one hash table over the message ids, in C) and numpy, so a
million-message replication needs tens of MB, not a string join.
"""

from __future__ import annotations

__all__ = ["ledger_from_tables", "message_index", "codes"]

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def ledger_from_tables(messages: pa.Table, deliveries: pa.Table) -> Ledger:
    n = messages.num_rows
    outcome = deliveries["outcome"]
    acked_rows = deliveries.select(["msg_id", "queue"]).filter(pc.equal(outcome, "acked"))
    idx = message_index(acked_rows["msg_id"], messages)
    known = idx >= 0
    delivered = np.zeros(n, dtype=bool)
    delivered[idx[known]] = True
    unexpected = (
        len(pc.unique(acked_rows["msg_id"].filter(pa.array(~known)))) if not known.all() else 0
    )
    qcode, qnames = codes(acked_rows["queue"])
    pair = idx[known] * (len(qnames) + 1) + (qcode[known] + 1)
    uniq, counts = np.unique(pair, return_counts=True)
    duplicated = len(np.unique(uniq[counts > 1] // (len(qnames) + 1)))
    confirmed = np.asarray(pc.is_valid(messages["t_confirm"]).to_numpy(zero_copy_only=False))
    return Ledger(
        sent=n,
        confirmed=int(confirmed.sum()),
        delivered_unique=int(delivered.sum()) + unexpected,
        lost=int(np.count_nonzero(confirmed & ~delivered)),
        duplicated=duplicated,
        unexpected=unexpected,
        recovered=int(np.count_nonzero(~confirmed & delivered)),
        redeliveries=_count(deliveries["redelivered"]),
        dead_lettered=_count(pc.equal(outcome, "dead_lettered")),
    )


def _count(mask: pa.Array | pa.ChunkedArray) -> int:
    return int(pc.sum(mask.cast(pa.int64())).as_py() or 0)
