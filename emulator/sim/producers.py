"""Producer instances: open-loop schedules and closed loops (docs/models.md §1).

An open-loop producer follows ``testbed.core.arrivals.schedule``: each message has an intended
send time; it is published then, or later if the client is still busy with the previous
publish call (``publish_time``) or blocked by broker flow control. With publisher confirms it
does not wait for them: the live clients (pika, kombu and stomp.py adapters) put the channel in
confirm mode and collect confirms asynchronously between sends, so several publishes can be
unconfirmed at once — as many as a broker kill finds on the wire. The lateness stays
visible as ``t_publish - t_intended``. The producer is thus the §3a *sender stage*: one server
per instance. Each publish also books the CPU of one client operation on its Locust process
(``emulator.sim.client_cpu``): while the process works for other users, the publish waits.

A closed-loop producer thinks, publishes (``t_intended`` = end of think), and is blocked until
the send completes — until the confirm arrives when it asks for confirms (and, in the
``shared_lock`` model, until its write completed, §3b), otherwise for the publish call — then
thinks again (the machine-repairman shape of §5's MVA).

Every instance has its own random streams (arrivals, sizes, routing-key choice), so adding a
producer never shifts the others.

Fault hooks (``emulator.sim.links``): ``_publish`` asks ``link.send`` first (a producer cut off
publishes nothing) and tells ``link.sent`` after; the broker's confirm enters at ``on_confirm``,
which ``link.confirm`` may void, hold or delay; ``confirmed`` is the confirm itself.
"""

from __future__ import annotations

__all__ = ["Producer", "picker"]

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from emulator.sim.broker import Broker
    from emulator.sim.client_cpu import ClientCpu
    from emulator.sim.links import Links
    from emulator.sim.queues import Queue
    from emulator.sim.recorder import Recorder


def picker(rng: np.random.Generator, k: int, batch: int = 1024) -> Callable[[], int]:
    """A fast zero-argument uniform choice among ``range(k)``."""

    def gen() -> Iterator[int]:
        while True:
            yield from rng.integers(0, k, batch).tolist()

    return gen().__next__


class Producer:
    """One producer instance."""

    def __init__(
        self,
        name: str,
        idx: int,
        broker: Broker,
        rec: Recorder,
        *,
        flow: int,
        dest: int,
        routes: list[tuple[Queue, ...]],
        pick: Callable[[], int] | None,
        size: Callable[[], float],
        publish_cost: Callable[[], float],
        confirms: bool,
        persistent: bool,
        confirm_extra: tuple[float, float],
        start: float,
        stop: float,
        max_messages: int | None,
        times: Iterator[float] | None = None,
        think: Callable[[], float] | None = None,
        on_done: Callable[[Producer], None] = lambda p: None,
        key_prefix: str = "",
    ) -> None:
        if (times is None) == (think is None):
            raise ValueError("a producer is either open-loop (times) or closed-loop (think)")
        self.name = name
        self.idx = idx
        self.key_prefix = key_prefix  # message n's key: key_prefix + n (seeds.message_key)
        self.broker = broker
        self.env = broker.env
        self.call_at = broker.call_at
        self.call = broker.call
        self.new = rec.new_message
        self.confirm_record = rec.confirm
        self.flow = flow
        self.dest = dest
        self.routes = routes
        self.pick = pick
        self.size = size
        self.publish_cost = publish_cost
        self.confirms = confirms
        self.persistent = persistent
        self.extra_a, self.extra_b = confirm_extra if confirms else (0.0, 0.0)
        self.start = start
        self.stop = stop
        self.max = max_messages if max_messages is not None else math.inf
        self.times = times
        self.think = think
        self.on_done = on_done
        self.closed = think is not None
        if confirms:
            self.notify = 1
        elif self.closed and broker.blocks_closed_until_written:
            self.notify = 2
        else:
            self.notify = 0
        self.sent = 0
        self.ready = 0.0  # the client can publish again from then
        self.t_int = 0.0
        self.channel_free = 0.0  # its channel's fan-out routing work (amqp)
        self.done = False
        self.mandatory = False  # unroutable publishes come back (an ``unroutable`` row)
        self.link: Links | None = None  # fault hooks (emulator.sim.links), set by the model
        self.cpu: ClientCpu | None = None  # its Locust process's CPU, set by the model
        self._booked = False  # closed loop: its publish's CPU is booked for now

    def begin(self) -> None:
        """Schedule the first send (call at time 0)."""
        if self.closed:
            assert self.think is not None
            self.call_at(self.start + self.think(), self._fire_closed)
        else:
            self._next()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.on_done(self)

    # -- open loop --------------------------------------------------------------------------

    def _next(self) -> None:
        if self.sent >= self.max:
            self._finish()
            return
        assert self.times is not None
        t = next(self.times, None)
        if t is None:
            self._finish()
            return
        self.t_int = t
        at = t if t > self.ready else self.ready
        if self.cpu is not None:
            # its send work *ends* at its timestamp: the delivery tables were measured with
            # producers in the consumers' process, so they already hold a delivery's wait for
            # its own message's send. Booked after the timestamp, that wait counted twice (at
            # 5 msg/s, KS 0.15 between the simulated latency and the table it was drawn from;
            # 0.02 booked before)
            at = self.cpu.done_by(at, self.cpu.publish)
        self.call_at(at, self._fire_open)

    def _fire_open(self, ev: Any = None) -> None:
        b = self.broker
        if b.blocked:
            b.wait_unblocked(self._fire_open)
            return
        now = self.env.now
        self._publish(self.t_int, now)
        self.ready = now + self.publish_cost()  # confirms come back meanwhile (docstring)
        self._next()

    # -- closed loop ------------------------------------------------------------------------

    def _fire_closed(self, ev: Any = None) -> None:
        now = self.env.now
        if now >= self.stop or self.sent >= self.max:
            self._finish()
            return
        b = self.broker
        if b.blocked:
            b.wait_unblocked(self._fire_closed)
            return
        if self.cpu is not None and not self._booked:
            at = self.cpu.done_by(now, self.cpu.publish)  # as in _next
            if at > now:  # its process is busy with other users: publish when it is free
                self._booked, self.t_int = True, now
                self.call_at(at, self._fire_closed)
                return
        intended = self.t_int if self._booked else now  # the end of its think time
        self._booked = False
        self._publish(intended, now)
        if not self.notify:
            assert self.think is not None
            self.call(self.publish_cost() + self.think(), self._fire_closed)

    # -- both -------------------------------------------------------------------------------

    def _publish(self, t_int: float, now: float) -> int:
        """Publish one message intended at ``t_int`` now: its number (or what ``link.send``
        returned instead)."""
        link = self.link
        if link is not None and link.send is not None:
            refused = link.send(self, t_int, now)
            if refused is not None:
                return refused
        size = self.size()
        queues = self.routes[self.pick()] if self.pick is not None else self.routes[0]
        m = self.new(self.flow, self.dest, self.idx, size, t_int, now)
        b = self.broker
        keys = b.crn_keys
        if keys is not None and len(queues) == 1:
            keys[m] = self.key_prefix + str(self.sent)
        self.sent += 1
        b.pending += 1
        b.publish(self, m, queues, self.notify, self.persistent, self.extra_a + self.extra_b * size)
        if not self.confirms:  # as the live client: "confirmed" = the send returned (ledger)
            self.confirm_record(m, now)
        if link is not None and link.sent is not None:
            link.sent(self, m)
        return m

    def on_confirm(self, ev: Any) -> None:
        """The broker's confirm (``ev.value`` = (message, notify)) reaches the client, unless
        ``link.confirm`` takes it."""
        link = self.link
        if link is not None and link.confirm is not None and not link.confirm(self, ev.value):
            return
        self.confirmed(ev)

    def confirmed(self, ev: Any) -> None:
        """The confirm is in: record it (notify 1; not a returned one, 3); a closed loop
        thinks again (an open loop never waited for it)."""
        m, notify = ev.value
        if notify == 1:
            self.confirm_record(m, self.env.now)
        if self.closed:
            assert self.think is not None
            self.call(self.think(), self._fire_closed)
