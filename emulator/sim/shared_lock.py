"""The ``shared_lock`` broker service model (docs/models.md §3b): one lock per queue."""

from __future__ import annotations

__all__ = ["SharedLockBroker"]

from typing import Any

from emulator.sim.broker import Broker, Sender
from emulator.sim.costs import Costs
from emulator.sim.kernel import Kernel, stream, uniforms
from emulator.sim.queues import Queue


class SharedLockBroker(Broker):
    kind = "shared_lock"
    blocks_closed_until_written = True

    def __init__(self, kernel: Kernel, costs: Costs, sizes: Any, seed: int, rep: int) -> None:
        super().__init__(kernel, costs, sizes, seed, rep)
        self.write = costs.lock_write.sampler(stream(seed, rep, "broker:lock-write"))
        self.read = costs.lock_read.sampler(stream(seed, rep, "broker:lock-read"))
        self.u = uniforms(stream(seed, rep, "broker:lock-choice"))
        self.copies: dict[int, int] = {}  # fan-out copies still to be written before the confirm

    def _route(
        self, sender: Sender, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> None:
        n = len(queues)
        if n > 1:
            self.pending += n - 1
            self.copies[m] = n
        for q in queues:
            q.writers.append((sender, m, notify, persistent))
            self.try_lock(q)

    def try_lock(self, q: Queue) -> None:
        if q.lock_busy:
            return
        writers = q.writers
        reader = bool(q.ready) and bool(q.avail) and not (q.in_order and q.busy_line())
        if not writers and not reader:
            return
        q.lock_busy = True
        if writers and (not reader or self.u() < 0.5):
            i = int(self.u() * len(writers)) if len(writers) > 1 else 0
            writers[i], writers[-1] = writers[-1], writers[i]
            self.call(self.write(), self._write_done, (q, writers.pop()))
        else:
            _, m = q.ready.popleft()
            attempt = q.attempts.pop(m, 0) + 1
            self.call(self.read(), self._read_done, (q, q.take_consumer(), m, attempt))

    def _write_done(self, ev: Any) -> None:
        q, (sender, m, notify, persistent) = ev.value
        q.lock_busy = False
        if notify and self._last_copy(m):
            c = self.costs
            extra = c.persist_a + c.persist_b * self.sizes[m] if persistent and q.durable else 0.0
            self.call(self.d + extra, sender.on_confirm, (m, notify))
        q.enqueue(m, self.env.now)  # enqueue calls try_lock

    def _last_copy(self, m: int) -> bool:
        left = self.copies.get(m)
        if left is None:
            return True
        if left > 1:
            self.copies[m] = left - 1
            return False
        del self.copies[m]
        return True

    def _read_done(self, ev: Any) -> None:
        q, consumer, m, attempt = ev.value
        q.lock_busy = False
        consumer.deliver(q, m, attempt, self.env.now)
        self.try_lock(q)
