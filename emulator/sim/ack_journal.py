"""Which consumers' acks of persistent messages a broker kill forgets (docs/models.md §6).

A broker that makes acks durable lazily forgets the last of them when it is killed, and those
messages come back after the restart as duplicates. Two rules, per broker kind
(`testbed.core.broker_kinds.KindFacts.acks_with_writes`):

- **acks ride on the next write** (RabbitMQ): an ack is journaled in memory and reaches the disk
  with the next write the broker must sync — the next persistent message it confirms. A kill
  forgets every ack that came after the last such write was on disk, however long before the
  signal. Measured on the library's broker-kill scenario (RabbitMQ 3.10.8, fifteen kills in
  five runs, 2026-11-28, `tests/bench/ack_loss_rule.py`): in every kill the acks forgotten
  before the signal were exactly those after the last publish before it — two acks 24 ms before
  the signal when nothing had been published for 26 ms —; a 10 ms window before the signal (the
  calibration's figure) matched 8 of the 15 kills. The calibration's paced load, one message
  each 10 ms served 4 ms, forgets one ack a kill under either rule (its measured figure).
- **a window** (ActiveMQ, or no persistent write to go by — a scenario without confirms): the
  acks that reached the broker in the last ``window`` seconds before the signal
  (``restart_time.ack_loss_s``).

Acks sent after the signal, while the process dies (the kill's teardown), are lost under both
rules. Hand-written: bookkeeping of the simulator's own events.
"""

from __future__ import annotations

__all__ = ["AckJournal"]

import math
from collections import deque
from typing import Any


class AckJournal:
    """Recent acks of persistent copies and recent writes, to answer what a kill forgets."""

    def __init__(self, window: float, with_writes: bool) -> None:
        self.window = window
        self.with_writes = with_writes
        self.writes: deque[tuple[float, int]] = deque()  # (on disk at, message), still to come
        self.synced = -math.inf  # the latest write known to be on disk
        self.acks: deque[tuple[float, Any, int, int]] = deque()  # (t, queue, message, attempt)
        self.since = -math.inf  # a kill under way forgets the acks from here on

    def written(self, m: int, at: float, now: float) -> None:
        """A persistent message will be on disk (its confirm sent) at ``at``."""
        w = self.writes
        w.append((at, m))
        while w and w[0][0] < now:
            self.synced = max(self.synced, w.popleft()[0])

    def acked(self, t: float, q: Any, m: int, attempt: int, killed: bool) -> None:
        """An ack of a persistent copy on a durable queue reached the broker at ``t``."""
        acks = self.acks
        acks.append((t, q, m, attempt))
        horizon = self.since if killed else self._durable_before(t)
        while acks and acks[0][0] < horizon:
            acks.popleft()

    def _durable_before(self, now: float) -> float:
        """Acks before this time are on disk whatever happens next."""
        if self.with_writes and self.synced > -math.inf:
            return self.synced
        return now - self.window

    def kill(self, now: float) -> set[int]:
        """The broker is killed at ``now``: fixes what it forgets and returns the messages whose
        write was still to come (lost with it)."""
        lost = {m for at, m in self.writes if at > now}
        done = [at for at, _ in self.writes if at <= now]
        if done:
            self.synced = max(self.synced, *done)
        self.writes.clear()
        if self.with_writes and self.synced > -math.inf:
            self.since = self.synced
        else:
            self.since = now - self.window
        return lost

    def forgotten(self) -> list[tuple[Any, int, int]]:
        """The acked copies the kill forgot (queue, message, attempts so far); forgets them."""
        out = [(q, m, attempt) for t, q, m, attempt in self.acks if t >= self.since]
        self.acks.clear()
        return out

    def clear(self) -> None:
        """A graceful restart: the broker synced everything before it stopped."""
        self.acks.clear()
