"""When a consumer the policy asked for can take messages (docs/models.md §7, pure).

A consumer runs in a *slot* of a host ("VM"); a host has ``slots_per_vm`` slots
(co-provisioning) and takes ``startup_delay`` seconds to boot. Adding a consumer uses, in order:

1. a free slot on a host that is up or booting (``source="slot"``: ready when that host is);
2. a host from the pre-provisioned pool (``"pool"``: ready at once if it has booted), and the
   pool is refilled by booting a new host (ready ``startup_delay`` later);
3. a new host (``"cold"``: ready after ``startup_delay``).

A host left without consumers goes back to the pool; when that makes the pool larger than its
size, the host that would be ready last is released (a still-booting one before a booted one),
so up/down cycles never leave the pool holding booting machines while booted ones are let go.
Pool hosts and the hosts of the initial consumers are up at t = 0 (provisioned
before the run). Slot numbers are the lowest free ones, so they stay compact: the live pool and
the elastic member queues (``<alias>.<slot>``) are indexed by them.
"""

from __future__ import annotations

__all__ = ["Provisioner", "Start", "StartSource"]

from dataclasses import dataclass, field
from typing import Literal

StartSource = Literal["initial", "slot", "pool", "cold"]


@dataclass(frozen=True)
class Start:
    """Consumer `slot` is added and takes messages from `ready_at` on."""

    slot: int
    ready_at: float
    source: StartSource

    def to_json(self) -> dict[str, object]:
        return {"slot": self.slot, "ready_at": round(self.ready_at, 6), "source": self.source}


@dataclass
class _Host:
    id: int
    ready_at: float
    slots: set[int] = field(default_factory=set)


class Provisioner:
    """Bookkeeping of consumer slots, hosts and the pre-provisioned pool. No clock inside."""

    def __init__(
        self,
        startup_delay: float,
        *,
        slots_per_vm: int = 1,
        pool: int = 0,
        max_units: int = 1000,
        initial: int = 0,
    ) -> None:
        if startup_delay < 0:
            raise ValueError(f"startup_delay must be >= 0 s, got {startup_delay!r}")
        if slots_per_vm < 1:
            raise ValueError(f"slots_per_vm must be >= 1, got {slots_per_vm!r}")
        if pool < 0:
            raise ValueError(f"pool must be >= 0 hosts, got {pool!r}")
        if not 0 <= initial <= max_units:
            raise ValueError(f"initial consumers {initial!r} not in [0, max_units={max_units}]")
        self.startup_delay = float(startup_delay)
        self.slots_per_vm = slots_per_vm
        self.pool_size = pool
        self.max_units = max_units
        self._next_host = 0
        self.hosts: dict[int, _Host] = {}
        """Hosts that carry at least one consumer."""
        self.pool: list[_Host] = [self._host(0.0) for _ in range(pool)]
        self.units: dict[int, tuple[float, int]] = {}
        """slot -> (ready_at, host id), in the order the consumers were added"""
        self.initial = [self._place(0.0, "initial") for _ in range(initial)]

    def _host(self, ready_at: float) -> _Host:
        h = _Host(self._next_host, ready_at)
        self._next_host += 1
        return h

    # -- queries ----------------------------------------------------------------------------

    def count(self) -> int:
        """Consumers asked for: running and still starting (HPA's `spec.replicas`)."""
        return len(self.units)

    def ready(self, now: float) -> list[int]:
        return sorted(s for s, (r, _) in self.units.items() if r <= now)

    def starting(self, now: float) -> list[int]:
        return sorted(s for s, (r, _) in self.units.items() if r > now)

    def ready_at(self, slot: int) -> float:
        return self.units[slot][0]

    def newest(self) -> int | None:
        """The slot of the consumer added last (None when there is none)."""
        return next(reversed(self.units), None)

    def hosts_up(self) -> int:
        """Hosts paid for: carrying consumers or waiting in the pool."""
        return len(self.hosts) + len(self.pool)

    # -- actions ----------------------------------------------------------------------------

    def add(self, now: float) -> Start:
        if len(self.units) >= self.max_units:
            raise ValueError(f"no free consumer slot: all {self.max_units} are in use")
        return self._place(now, None)

    def _place(self, now: float, source: StartSource | None) -> Start:
        slot = next(i for i in range(self.max_units + 1) if i not in self.units)
        open_hosts = [h for h in self.hosts.values() if len(h.slots) < self.slots_per_vm]
        if open_hosts:
            host = min(open_hosts, key=lambda h: (h.ready_at, h.id))
            src: StartSource = "slot"
        elif source == "initial":
            host = self._host(0.0)
            src = "initial"
        elif self.pool:
            host = min(self.pool, key=lambda h: (h.ready_at, h.id))
            self.pool.remove(host)
            self.pool.append(self._host(now + self.startup_delay))  # refill
            src = "pool"
        else:
            host = self._host(now + self.startup_delay)
            src = "cold"
        host.slots.add(slot)
        self.hosts[host.id] = host
        ready_at = max(now, host.ready_at)
        self.units[slot] = (ready_at, host.id)
        return Start(slot, ready_at, source or src)

    def remove(self, slot: int) -> None:
        """The consumer in `slot` leaves (gracefully: the actuator lets it finish first)."""
        _, host_id = self.units.pop(slot)
        host = self.hosts[host_id]
        host.slots.discard(slot)
        if not host.slots:
            del self.hosts[host_id]
            self.pool.append(host)
            if len(self.pool) > self.pool_size:
                # release the host that is ready last (ties: the newest), keep booted ones
                self.pool.remove(max(self.pool, key=lambda h: (h.ready_at, h.id)))
