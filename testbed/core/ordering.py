"""Order violations: the ledger's count of messages processed out of their publish order.

Definition (one for measured and predicted runs; docs/models.md §4, README "Ledger"):

- A **stream** is one producer instance (``messages.producer``); its messages have a
  **publish sequence**, the order that instance published them in (live: ``t_publish``,
  then ``t_intended``; simulated: the message number, given in publish order).
- Each queue's **acked** deliveries are taken in the order they were acked (live: by
  ``t_done``, when the consumer sends its ack; simulated: in the order the acks reach the
  broker — the same order up to the ack's transit).
- An acked delivery of message *m* on queue *q* is an **order violation** when *q* had already
  acked a message of *m*'s stream with a higher publish sequence. Every acked delivery is
  checked, a duplicate one too: an application that sees an older message again after a newer
  one saw them out of order. Failed attempts (timed out, nacked, dropped) are not checked: they
  did not reach the application's effect.

An in-order queue (``visibility.in_order``) has none by construction; an out-of-order queue
whose attempts fail has one for nearly every message that was retried while a newer one went
through, and several consumers serving one queue side by side make some without failures.

`OrderCheck` counts incrementally, batch after batch, so the simulator can feed it as its
records stream past; the live ledger feeds the whole table at once (`order_violations`).
"""

from __future__ import annotations

__all__ = ["OrderCheck", "order_violations", "publish_sequence"]

import numpy as np

_STREAM_BITS = 32


class OrderCheck:
    """The highest publish sequence acked so far per (queue, stream); counts violations."""

    def __init__(self) -> None:
        self._high: dict[int, int] = {}
        self.violations = 0

    def feed(self, queue: np.ndarray, stream: np.ndarray, seq: np.ndarray) -> int:
        """Acked deliveries, in the order they were acked: integer codes of their queue and
        stream (stable across calls) and their publish sequence. Returns the violations among
        them (also added to ``violations``)."""
        n = len(seq)
        if n == 0:
            return 0
        key = (np.asarray(queue, dtype=np.int64) << _STREAM_BITS) + np.asarray(
            stream, dtype=np.int64
        )
        seq = np.asarray(seq, dtype=np.int64)
        order = np.argsort(key, kind="stable")  # each group keeps its ack order
        key, seq = key[order], seq[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        ends = np.r_[starts[1:], n]
        found = 0
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            k = int(key[a])
            high = self._high.get(k, -1)
            run = np.maximum.accumulate(seq[a:b])
            before = np.maximum(np.r_[high, run[:-1]], high)
            found += int(np.count_nonzero(seq[a:b] < before))
            self._high[k] = max(high, int(run[-1]))
        self.violations += found
        return found


def publish_sequence(t_publish: np.ndarray, t_intended: np.ndarray) -> np.ndarray:
    """Each message's rank in publish order (``t_publish``; a message never published by its
    ``t_intended``, ties by position): within one stream, its publish sequence."""
    t_pub = np.asarray(t_publish, dtype=np.float64)
    t_int = np.asarray(t_intended, dtype=np.float64)
    when = np.where(np.isnan(t_pub), t_int, t_pub)
    order = np.lexsort((np.arange(len(when)), when))
    rank = np.empty(len(when), dtype=np.int64)
    rank[order] = np.arange(len(when), dtype=np.int64)
    return rank


def order_violations(
    queue: np.ndarray,
    stream: np.ndarray,
    seq: np.ndarray,
    t_done: np.ndarray,
    t_deliver: np.ndarray,
) -> int:
    """Violations among a whole table of acked deliveries (any row order): they are put in ack
    order (``t_done``, ties by ``t_deliver``, then by position) and fed to one `OrderCheck`."""
    if len(seq) == 0:
        return 0
    order = np.lexsort((np.arange(len(seq)), np.asarray(t_deliver), np.asarray(t_done)))
    check = OrderCheck()
    return check.feed(np.asarray(queue)[order], np.asarray(stream)[order], np.asarray(seq)[order])
