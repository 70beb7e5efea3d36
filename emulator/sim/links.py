"""Explicit hook points on the simulated paths between clients and the broker (docs/models.md §6).

Producers, the broker and consumers call a ``Link`` at each point where a message crosses a
connection, so that fault models (``emulator.sim.faults``, ``faults_net``) change what happens
there without touching the objects. ``Link``'s methods are no-ops; a fault model subclasses it
and overrides the points it needs. The objects hold ``link = None`` while no link is
registered (``Model.add_link``), and then test it once per event: the fault-free path costs one
comparison.

The points, in the order a message meets them:

=================  =======================================  ===================================
hook               called by, when                          a link may
=================  =======================================  ===================================
``send``           ``Producer._publish``, before it draws   refuse the publish (return the
                   anything                                 message number to report instead)
``sent``           ``Producer._publish``, after             observe (the message number)
                   ``Broker.publish``
``upstream``       ``Broker.publish``: the publish goes     add transit time (``extra``)
                   on the wire to the broker
``accept``         the message reaches the broker           hold or drop it (return False)
                   (``Broker._arrive``, and a consumer's
                   follow-up publish via ``Broker.accept``)
``confirm``        ``Producer.on_confirm``: the broker's    void, hold or delay it (return
                   confirm reaches the client               False; ``Producer.confirmed`` is
                                                            the confirm itself)
``confirm_delay``  asked by a ``confirm`` hook: the         add transit time
                   confirm's time on the wire
``deliver``        ``Consumer.deliver``, before serving: a  move its dispatch time later
                   copy is sent to the consumer
``delivered``      ``Consumer.deliver``, after serving      observe (when the handler is free)
``ack``            ``Consumer.deliver``, for each ack or    move its arrival at the broker
                   nack it schedules (``_acked``,           later
                   ``_early_ack``, ``_nacked``,
                   ``_failed``)
``record``         ``Consumer.record``: an attempt is       observe (before the recorder)
                   settled (outcome code)
=================  =======================================  ===================================

Several links compose in a ``Links`` chain, which sees every event in registration order:
a gate (``send``, ``accept``, ``confirm``) stops at the first link that takes the event, a
transit time (``upstream``, ``confirm_delay``, ``deliver``, ``ack``) passes through each link in
turn, and an observation (``sent``, ``delivered``, ``record``) reaches every link. The fault
timeline registers ``FaultSim`` (broker and client faults) before ``NetFaults`` (network
toxics): the delivery a ``delivered`` hook sees has already been delayed by every ``deliver``
hook, and a confirm that ``FaultSim`` lets through has its transit time from ``confirm_delay``.
"""

from __future__ import annotations

__all__ = ["Link", "Links"]

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.sim.consumers import Consumer
    from emulator.sim.producers import Producer
    from emulator.sim.queues import Queue

HOOKS = (
    "send",
    "sent",
    "upstream",
    "accept",
    "confirm",
    "confirm_delay",
    "deliver",
    "delivered",
    "ack",
    "record",
)


class Link:
    """The hook points of one fault model (or observer); every default leaves the event alone."""

    def send(self, p: Producer, t_int: float, now: float) -> int | None:
        """``p`` is about to publish (intended at ``t_int``): None lets it; a message number
        (or -1) is what ``Producer._publish`` returns instead, publishing nothing."""
        return None

    def sent(self, p: Producer, m: int) -> None:
        """``p`` published message ``m`` (``Broker.publish`` was called)."""

    def upstream(self, sender: Any, m: int, extra: float) -> float:
        """Message ``m`` leaves ``sender`` for the broker now: its transit time beyond the
        model's ``d`` (``extra``, as ``Broker.publish`` got it)."""
        return extra

    def accept(
        self, sender: Any, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> bool:
        """Message ``m`` is at the broker now: False holds or drops it (the broker does not
        route it; a link that holds it routes it later with ``Broker.route``)."""
        return True

    def confirm(self, p: Producer, value: tuple[int, int]) -> bool:
        """The broker's confirm ``value`` = (message, notify) reaches ``p``'s connection: False
        voids, holds or delays it (a link delivering it later calls ``p.confirmed``)."""
        return True

    def confirm_delay(self, p: Producer, delay: float) -> float:
        """The transit time of a confirm the broker sends ``p`` now (beyond the model's)."""
        return delay

    def deliver(self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float) -> float:
        """Copy ``m`` of ``q`` is dispatched to ``c`` at ``t_disp``: when it leaves for ``c``."""
        return t_disp

    def delivered(
        self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float, free0: float
    ) -> None:
        """``c`` took the copy dispatched at ``t_disp`` (its handler was free from ``free0``,
        and is now free from ``c.free``)."""

    def ack(self, c: Consumer, t: float) -> float:
        """An ack or nack of ``c`` would reach the broker at ``t``: when it does."""
        return t

    def record(self, c: Consumer, m: int, attempt: int, out: int) -> None:
        """``c`` settles attempt ``attempt`` of ``m`` with outcome code ``out``."""


def _overrides(link: Link, name: str) -> bool:
    return getattr(type(link), name) is not getattr(Link, name)


class Links(Link):
    """Links composed in registration order (see the module docstring); only the links that
    override a hook are called for it."""

    def __init__(self) -> None:
        self.links: list[Link] = []
        self._resolve()

    def __bool__(self) -> bool:
        return bool(self.links)

    def add(self, link: Link) -> None:
        """Register ``link`` after those already registered."""
        self.links.append(link)
        self._resolve()

    def _resolve(self) -> None:
        hooks: dict[str, tuple[Callable[..., Any], ...]] = {
            name: tuple(getattr(x, name) for x in self.links if _overrides(x, name))
            for name in HOOKS
        }
        self._send = hooks["send"]
        self._sent = hooks["sent"]
        self._upstream = hooks["upstream"]
        self._accept = hooks["accept"]
        self._confirm = hooks["confirm"]
        self._confirm_delay = hooks["confirm_delay"]
        self._deliver = hooks["deliver"]
        self._delivered = hooks["delivered"]
        self._ack = hooks["ack"]
        self._record = hooks["record"]

    def send(self, p: Producer, t_int: float, now: float) -> int | None:
        for f in self._send:
            m = f(p, t_int, now)
            if m is not None:
                return int(m)
        return None

    def sent(self, p: Producer, m: int) -> None:
        for f in self._sent:
            f(p, m)

    def upstream(self, sender: Any, m: int, extra: float) -> float:
        for f in self._upstream:
            extra = f(sender, m, extra)
        return extra

    def accept(
        self, sender: Any, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> bool:
        return all(f(sender, m, queues, notify, persistent) for f in self._accept)

    def confirm(self, p: Producer, value: tuple[int, int]) -> bool:
        return all(f(p, value) for f in self._confirm)

    def confirm_delay(self, p: Producer, delay: float) -> float:
        for f in self._confirm_delay:
            delay = f(p, delay)
        return delay

    def deliver(self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float) -> float:
        for f in self._deliver:
            t_disp = f(c, q, m, attempt, t_disp)
        return t_disp

    def delivered(
        self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float, free0: float
    ) -> None:
        for f in self._delivered:
            f(c, q, m, attempt, t_disp, free0)

    def ack(self, c: Consumer, t: float) -> float:
        for f in self._ack:
            t = f(c, t)
        return t

    def record(self, c: Consumer, m: int, attempt: int, out: int) -> None:
        for f in self._record:
            f(c, m, attempt, out)
