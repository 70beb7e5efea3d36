"""A background thread that polls broker statistics every interval into `timeseries` rows.

It also keeps the latest figures for the progress display and the drain check.
"""

from __future__ import annotations

__all__ = ["TimeseriesSampler"]

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core.clock import RunClock
from testbed.core.records import RecordWriter
from testbed.observe.stats import BrokerStats, StatsPoller

log = logging.getLogger(__name__)


@dataclass
class Latest:
    t: float = 0.0
    broker_up: bool = False
    depth: int = 0
    publish_rate: float = 0.0
    deliver_rate: float = 0.0
    consumers: int = 0
    per_queue: dict[str, int] = field(default_factory=dict)
    polls: int = 0


class TimeseriesSampler:
    def __init__(
        self,
        poller: StatsPoller,
        clock: RunClock,
        measured_dir: Path,
        queues: list[str],
        replication: int,
        interval: float = 1.0,
    ):
        self.poller = poller
        self.clock = clock
        self.queues = queues
        self.replication = replication
        self.interval = interval
        self.writer = RecordWriter(measured_dir, "timeseries", f"poller-r{replication}", 60)
        self.latest = Latest()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stats-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        self.writer.close()
        try:
            self.poller.close()
        except Exception:
            log.debug("poller close failed", exc_info=True)

    def poll_once(self) -> BrokerStats | None:
        try:
            stats = self.poller.poll()
        except Exception as e:  # a poller must never kill the run
            log.warning("stats poll failed: %s", e)
            return None
        t = self.clock.now()
        latest = Latest(t=t, broker_up=stats.broker_up, polls=self.latest.polls + 1)
        row: tuple[Any, ...]
        for q in self.queues:
            qs = stats.queues.get(q)
            if qs is None:
                if stats.broker_up:
                    continue
                row = (
                    t,
                    q,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    0,
                    False,
                    stats.memory_bytes,
                    self.replication,
                )
            else:
                row = (
                    t,
                    q,
                    qs.ready,
                    qs.unacked,
                    qs.publish_rate,
                    qs.deliver_rate,
                    qs.ack_rate,
                    qs.consumers,
                    0,
                    stats.broker_up,
                    stats.memory_bytes,
                    self.replication,
                )
                latest.depth += qs.ready + qs.unacked
                latest.publish_rate += qs.publish_rate
                latest.deliver_rate += qs.deliver_rate
                latest.consumers += qs.consumers
                latest.per_queue[q] = qs.ready + qs.unacked
            self.writer.append(row)
        self.latest = latest
        return stats

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.poll_once()
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.monotonic()))
