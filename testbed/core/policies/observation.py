"""What an autoscaling policy sees at one control round: per-queue figures, no broker inside.

The live loop builds it from a broker statistics poll (:mod:`testbed.observe.stats`), the
simulator from :meth:`emulator.sim.model.Model.observe`; both through these two classes, so a
policy cannot tell them apart. Queue length is ready + unacked (docs/models.md §8: counting only
ready messages makes a policy remove consumers that still hold in-flight work).
"""

from __future__ import annotations

__all__ = ["Observation", "QueueObservation"]

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class QueueObservation:
    """One queue at one instant; rates in messages per second."""

    ready: int = 0
    unacked: int = 0
    consumers: int = 0
    publish_rate: float = 0.0
    ack_rate: float = 0.0

    @property
    def length(self) -> int:
        return self.ready + self.unacked

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "unacked": self.unacked,
            "consumers": self.consumers,
            "publish_rate": round(self.publish_rate, 3),
            "ack_rate": round(self.ack_rate, 3),
        }


@dataclass(frozen=True)
class Observation:
    """The queues of one scaled consumer group (one queue, or the members of an elastic alias)."""

    t: float
    queues: dict[str, QueueObservation] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return sum(q.length for q in self.queues.values())

    @property
    def ready(self) -> int:
        return sum(q.ready for q in self.queues.values())

    @property
    def unacked(self) -> int:
        return sum(q.unacked for q in self.queues.values())

    @property
    def publish_rate(self) -> float:
        return sum(q.publish_rate for q in self.queues.values())

    @property
    def ack_rate(self) -> float:
        return sum(q.ack_rate for q in self.queues.values())

    def queue(self, name: str) -> QueueObservation:
        return self.queues.get(name, QueueObservation())
