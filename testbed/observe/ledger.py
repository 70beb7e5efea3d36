"""The ledger: Jepsen's queue checker over the record tables (DESIGN.md `ledger.json`).

Definitions (per run; the same function serves measured and predicted tables):

- **sent**: messages the producers attempted to publish (rows of `messages`).
- **confirmed**: publishes the broker acknowledged (`t_confirm` not null). A producer without
  publisher confirms records ``t_confirm = t_publish`` when its send returned without error,
  so "confirmed" means "the client believes the broker has it".
- **delivered_unique**: distinct sent messages with at least one delivery whose processing
  completed (outcome ``acked``).
- **lost**: confirmed, never acked and never dead-lettered after the drain.
- **duplicated**: distinct messages acked more than once.
- **unexpected**: distinct message ids delivered that no producer sent.
- **recovered**: delivered (acked) although their publish was never confirmed.
- **redeliveries**: delivery attempts beyond the first (``attempt > 1`` or the broker's
  ``redelivered`` flag).
- **dead_lettered**: distinct messages dead-lettered after `max_deliveries`.
"""

from __future__ import annotations

__all__ = ["compute_ledger"]

import pyarrow as pa
import pyarrow.compute as pc

from testbed.core.records import Ledger


def _ids(table: pa.Table) -> set[str]:
    return set(table.column("msg_id").to_pylist())


def compute_ledger(messages: pa.Table, deliveries: pa.Table) -> Ledger:
    """Ledger for one replication's `messages` and `deliveries` tables."""
    sent_ids = _ids(messages)
    confirmed_ids = _ids(messages.filter(pc.is_valid(messages.column("t_confirm"))))
    outcome = deliveries.column("outcome")
    acked = deliveries.filter(pc.equal(outcome, "acked"))
    acked_counts = pc.value_counts(acked.column("msg_id")).to_pylist() if acked.num_rows else []
    acked_ids = {row["values"] for row in acked_counts}
    duplicated = sum(1 for row in acked_counts if row["counts"] > 1)
    dead_ids = _ids(deliveries.filter(pc.equal(outcome, "dead_lettered")))
    delivered_ids = _ids(deliveries)
    redelivery_mask = pc.or_(
        pc.greater(deliveries.column("attempt"), 1),
        pc.fill_null(deliveries.column("redelivered"), False),
    )
    redeliveries = int(pc.sum(pc.cast(redelivery_mask, pa.int64())).as_py() or 0)
    return Ledger(
        sent=len(sent_ids),
        confirmed=len(confirmed_ids),
        delivered_unique=len(acked_ids & sent_ids),
        lost=len(confirmed_ids - acked_ids - dead_ids),
        duplicated=duplicated,
        unexpected=len(delivered_ids - sent_ids),
        recovered=len((acked_ids & sent_ids) - confirmed_ids),
        redeliveries=redeliveries,
        dead_lettered=len(dead_ids & sent_ids),
    )
