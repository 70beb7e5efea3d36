"""Explicit hook points on the simulated paths between clients and the broker (docs/models.md §6).

Producers, the broker and consumers call a ``Link`` at each point where a message crosses a
connection, so that fault models (``emulator.sim.faults``, ``faults_net``) change what happens
there without touching the objects. ``Link``'s methods are no-ops; a fault model subclasses it
and overrides the points it needs. The objects hold ``link = None`` while no link is
registered (``Model.add_link``) — the fault-free path costs one comparison per event — and
then the model's ``Links``, whose hook attributes are None where no link overrides the point.

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

Several links compose in ``Links``, which passes every event on in registration order:
a gate (``send``, ``accept``, ``confirm``) stops at the first link that takes the event, a
transit time (``upstream``, ``confirm_delay``, ``deliver``, ``ack``) passes through each link in
turn, and an observation (``sent``, ``delivered``, ``record``) reaches every link. The fault
timeline registers ``FaultSim`` (broker and client faults) before ``NetFaults`` (network
toxics): the delivery a ``delivered`` hook sees has already been delayed by every ``deliver``
hook, and ``FaultSim``'s ``confirm`` gate asks ``Links.confirm_time`` (the ``confirm_delay``
hooks) for a confirm's transit and hands a delayed confirm to ``Producer.confirmed`` itself.
"""

from __future__ import annotations

__all__ = ["Link", "Links", "HOOKS"]

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.sim.consumers import Consumer
    from emulator.sim.producers import Producer
    from emulator.sim.queues import Queue


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


def _gate_none(fs: tuple[Callable[..., Any], ...]) -> Callable[..., Any]:
    def gate(*args: Any) -> Any:
        for f in fs:
            out = f(*args)
            if out is not None:
                return out
        return None

    return gate


def _gate_bool(fs: tuple[Callable[..., Any], ...]) -> Callable[..., bool]:
    def gate(*args: Any) -> bool:
        return all(f(*args) for f in fs)

    return gate


def _fold(fs: tuple[Callable[..., Any], ...]) -> Callable[..., Any]:
    def fold(*args: Any) -> Any:
        *head, x = args
        for f in fs:
            x = f(*head, x)
        return x

    return fold


def _each(fs: tuple[Callable[..., Any], ...]) -> Callable[..., None]:
    def each(*args: Any) -> None:
        for f in fs:
            f(*args)

    return each


_COMPOSE: dict[str, Callable[[tuple[Callable[..., Any], ...]], Callable[..., Any]]] = {
    "send": _gate_none,
    "sent": _each,
    "upstream": _fold,
    "accept": _gate_bool,
    "confirm": _gate_bool,
    "confirm_delay": _fold,
    "deliver": _fold,
    "delivered": _each,
    "ack": _fold,
    "record": _each,
}
HOOKS = tuple(_COMPOSE)
"""The hook points, in the order a message meets them."""


class Links:
    """The registered links, composed in registration order (see the module docstring).

    Each hook is an attribute resolved when a link is added: None when no link overrides it
    (the caller skips it), the one link's bound method, or a function calling those of several
    links in turn — so a hook point costs one call per link that uses it.
    """

    send: Callable[[Producer, float, float], int | None] | None
    sent: Callable[[Producer, int], None] | None
    upstream: Callable[[Any, int, float], float] | None
    accept: Callable[[Any, int, tuple[Queue, ...], int, bool], bool] | None
    confirm: Callable[[Producer, tuple[int, int]], bool] | None
    confirm_delay: Callable[[Producer, float], float] | None
    deliver: Callable[[Consumer, Queue, int, int, float], float] | None
    delivered: Callable[[Consumer, Queue, int, int, float, float], None] | None
    ack: Callable[[Consumer, float], float] | None
    record: Callable[[Consumer, int, int, int], None] | None

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
        for name, compose in _COMPOSE.items():
            fs = tuple(getattr(x, name) for x in self.links if _overrides(x, name))
            setattr(self, name, None if not fs else fs[0] if len(fs) == 1 else compose(fs))

    def confirm_time(self, p: Producer) -> float:
        """The transit time of a confirm the broker sends ``p`` now (0 without a link's)."""
        f = self.confirm_delay
        return 0.0 if f is None else f(p, 0.0)
