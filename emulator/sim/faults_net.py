"""Network toxics inside the simulation: the fault proxy's links as delays on the model's paths.

Each scenario network fault acts on a *side*'s links (``producers``, ``consumers`` or ``all``)
in a *direction* (upstream = client→broker, downstream = broker→client), from ``at`` to
``at + duration``, on the paths the model has:

=========  ==========================================  ========================================
side       upstream                                    downstream
=========  ==========================================  ========================================
producers  publish: client → broker                    publisher confirm: broker → client
consumers  ack / nack: client → broker                 delivery: broker → client
=========  ==========================================  ========================================

- ``latency``: + ``latency`` on a path whose bytes are sent while it is in force (× toxicity,
  the expected value; jitter is zero-mean and left out); ``loss``: + probability ×
  retransmit_delay (the expected retransmission wait).
- ``bandwidth``: a per-connection FIFO link of ``rate`` bytes/s for message bodies.
- ``partition`` (``blackhole``) and ``timeout``: bytes sent while in force are held until it
  ends (the proxy holds the stream), so deliveries/publishes stop and resume after healing.
- ``partition`` (``refuse``), ``reset_peer``, ``limit_data``: the side's connections are reset;
  consumers' unacked copies are requeued, clients reconnect with the live backoff once the link
  accepts connections again.
- ``slow_close``, ``slicer``: no effect a model at this level sees (noted in the event detail).

The proxy itself costs time whether a toxic acts or not: a scenario with a network fault runs
its clients through proxy links for the whole run (`testbed.core.faultplan.needs_proxy`), and
every crossing of a publish, a confirm or a delivery draws the profile's measured hop
(``ClientPath.proxy_hop``, `testbed.calibration.proxy_hop`; none without one), in the order
its connection sent it (`NetFaults.cross`; acks: see `NetFaults.ack`). Measured on this
machine class, a run through the proxy had every delivery quantile 0.13-0.15 ms above the same
run on direct connections: two crossings, a publish's and its delivery's.

``NetFaults`` is the ``emulator.sim.links.Link`` registered after ``FaultSim``: it adds the
hop and the toxics' transit time where a path sends bytes — ``upstream`` (publish),
``confirm_delay`` (publisher confirm, asked by ``FaultSim.confirm``), ``deliver`` (delivery)
and ``ack`` (acks and nacks) — and passes everything through unchanged in a run without a
network fault.
"""

from __future__ import annotations

__all__ = ["NetFaults"]

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.sim.links import Link
from emulator.sim.producers import Producer
from testbed.core.faultplan import episode_detail, needs_proxy
from testbed.core.quantiles import table_sampler

if TYPE_CHECKING:
    from emulator.sim.consumers import Consumer
    from emulator.sim.faults import FaultSim
    from emulator.sim.queues import Queue

SIDES = {
    "producers": ("producers",),
    "consumers": ("consumers",),
    "all": ("producers", "consumers"),
}
STREAMS = {
    "upstream": ("upstream",),
    "downstream": ("downstream",),
    "both": ("upstream", "downstream"),
}
_DELAYS = ("latency", "loss")
_HOLDS = ("timeout",)
_RESETS = ("reset_peer", "limit_data")
_INERT = ("slow_close", "slicer")
HOP_STREAM = 11
"""Entropy word of the proxy hops' random stream (simulator only: no live draw pairs with it)."""


def hop_sampler(fs: FaultSim) -> Callable[[], float] | None:
    """Draws of one proxy crossing, when the run's clients go through the proxy and the
    profile measured the hop (None otherwise: nothing is added)."""
    cp = fs.model.costs.profile.client_path
    if cp is None or cp.proxy_hop is None or not needs_proxy(fs.model.scenario.faults):
        return None
    return table_sampler(cp.proxy_hop, np.random.default_rng([fs.seed, HOP_STREAM]))


class NetFaults(Link):
    """Precomputed toxic intervals per (side, stream), applied where a path sends bytes."""

    def __init__(self, fs: FaultSim) -> None:
        self.fs = fs
        self.delays: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        self.holds: dict[tuple[str, str], list[tuple[float, float]]] = {}
        self.rates: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        self.link_free: dict[tuple[int, str], float] = {}
        self.active = False
        self.hop = hop_sampler(fs)
        self.hop_free: dict[tuple[str, int, str], float] = {}

    # -- planning ---------------------------------------------------------------------------

    def schedule(self, ep: Any) -> None:
        p = ep.params
        kind = ep.fault
        tox = float(p.get("toxicity", 1.0))
        keys = [(s, d) for s in SIDES[ep.target] for d in STREAMS[p.get("direction", "both")]]
        mode = p.get("mode") or "blackhole"
        modelled = kind not in _INERT
        for key in keys:
            if kind == "latency":
                self.delays.setdefault(key, []).append((ep.start, ep.end, p["latency"] * tox))
            elif kind == "loss":
                wait = p.get("retransmit_delay", 0.2) * p["probability"] * tox
                self.delays.setdefault(key, []).append((ep.start, ep.end, wait))
            elif kind == "bandwidth":
                self.rates.setdefault(key, []).append((ep.start, ep.end, float(p["rate"])))
            elif kind in _HOLDS or (kind == "partition" and mode == "blackhole"):
                self.holds.setdefault(key, []).append((ep.start, ep.end))
        self.active = True
        k = self.fs.kernel
        k.call_at(ep.start, self._start, (ep, modelled))
        k.call_at(ep.end, self._end, (ep, modelled))

    def _detail(self, ep: Any, modelled: bool) -> dict[str, Any]:
        return {
            **episode_detail(ep),
            "links": list(SIDES[ep.target]),
            "toxics": [t["name"] for t in ep.toxics],
            "modelled": modelled,
        }

    def _start(self, ev: Any) -> None:
        ep, modelled = ev.value
        fs = self.fs
        fs.event("fault_start", ep.target, {**self._detail(ep, modelled), "action_s": 0.0})
        resets = ep.fault in _RESETS or (
            ep.fault == "partition" and (ep.params.get("mode") or "blackhole") == "refuse"
        )
        if not resets:
            return
        now = fs.kernel.now
        ok_at = now if ep.fault == "limit_data" else ep.end
        sides = SIDES[ep.target]
        if "consumers" in sides:
            for c in list(fs.inflight):
                if c.active and c.queue is not None:
                    fs.give_back(fs._disconnect(c, now))
                    fs._reconnect_later(c, now, ok_at)
        if "producers" in sides:
            for p in fs.model.producers:
                if not p.done and p not in fs.dead:
                    fs._cut_producer(p, now, ok_at)

    def _end(self, ev: Any) -> None:
        ep, modelled = ev.value
        detail = {**self._detail(ep, modelled), "rolled_back": False, "clipped": ep.clipped}
        self.fs.event("fault_end", ep.target, {**detail, "heal_s": 0.0})

    # -- paths ------------------------------------------------------------------------------

    def arrival(
        self, key: tuple[str, str], t_send: float, client: int = -1, size: float = 0.0
    ) -> float:
        """When bytes sent at ``t_send`` on a ``key`` link leave the proxy (before the model's
        own network delay)."""
        t = t_send
        for s, e in self.holds.get(key, ()):
            if s <= t < e:
                t = e
        for s, e, extra in self.delays.get(key, ()):
            if s <= t_send < e:
                t += extra
        for s, e, rate in self.rates.get(key, ()):
            if s <= t_send < e and size > 0:
                lk = (client, key[1])
                free = self.link_free.get(lk, 0.0)
                t = (t if t > free else free) + size / rate
                self.link_free[lk] = t
        return t

    def cross(self, key: tuple[str, int, str], t: float) -> float:
        """When bytes reaching the proxy at ``t`` on connection ``key`` leave it: one hop later,
        never before the bytes sent ahead of them on that connection (TCP keeps their order)."""
        assert self.hop is not None
        t += self.hop()
        last = self.hop_free.get(key, 0.0)
        if t < last:
            t = last
        self.hop_free[key] = t
        return t

    # -- hooks (emulator.sim.links) ---------------------------------------------------------

    def upstream(self, sender: Any, m: int, extra: float) -> float:
        """A producer's publish crosses the producers' upstream link."""
        if not isinstance(sender, Producer):
            return extra
        now = self.fs.kernel.now
        if self.hop is not None:
            extra = self.cross(("p", sender.idx, "up"), now + extra) - now
        if self.active:
            size = self.fs.b.sizes[m]
            extra += self.arrival(("producers", "upstream"), now, sender.idx, size) - now
        return extra

    def confirm_delay(self, p: Producer, delay: float) -> float:
        """A confirm crosses the producers' downstream link."""
        if self.hop is not None:
            now = self.fs.kernel.now
            delay = self.cross(("p", p.idx, "down"), now + delay) - now
        if not self.active:
            return delay
        sent = self.fs.kernel.now - self.fs.b.d
        return delay + (self.arrival(("producers", "downstream"), sent) - sent)

    def deliver(self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float) -> float:
        """A delivery crosses the consumers' downstream link."""
        if self.active:
            t_disp = self.arrival(("consumers", "downstream"), t_disp, c.idx, c.sizes[m])
        return t_disp if self.hop is None else self.cross(("c", c.idx, "down"), t_disp)

    def ack(self, c: Consumer, t: float) -> float:
        """Acks (and nacks) reach the broker through the consumers' upstream link. They cross
        it without the proxy's hop: a random transit per ack would let two consumers' acks
        reach the broker in another order than they sent them, and the ledger's order check
        (`testbed.core.ordering`) counts them in the order sent, as the live side does. What
        this leaves out: a prefetch-1 consumer whose next message waits at the broker gets it
        one hop (~0.06 ms) too early; with a larger prefetch the ack only returns credit."""
        if self.active:
            d = c.d
            t = self.arrival(("consumers", "upstream"), t - d) + d
        return t
