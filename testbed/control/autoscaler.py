"""Live autoscaling (docs/models.md §7, §8): broker statistics -> pure policy -> consumer pool.

A background thread of `mqbed run` (the control process) runs one
:class:`~testbed.core.policies.Autoscaler` per `autoscaling:` entry — the same object the
simulator runs. Every ``interval`` it polls the broker (RabbitMQ management API / ActiveMQ
statistics plugin), builds an :class:`Observation` (ready + unacked, publish and ack rates),
decides, and writes one ``scale`` event with the decision's inputs. Between decisions it
ticks every 0.1 s to bring started consumers in at their ``ready_at`` (start-up delay, pool).

Actuation goes through a small JSON *control file* in the run directory, written atomically
(temp file + rename) whenever it changes and read by the Locust worker
(:mod:`testbed.workload.scaling`):

    {"seq": 7, "groups": {"workers": {"work.0": [0], ...} -> slots},
     "ratios": {"work": {"work.0": 0.4, "work.1": 0.6}}}

``groups[g]`` maps each *ready* slot to the queue it reads. A slot that leaves the map stops
gracefully in the worker: it takes no new delivery, finishes and acks the one in hand, and
closes its consumer so that prefetched, unstarted deliveries go back to the broker — nothing is
lost and nothing is processed twice. Elastic member queues (``<alias>.<i>``) and the alias (a
direct exchange with one binding per member) are declared before the run; "adding a queue"
gives it a ratio and a consumer, "removing" takes both away once it is empty.

The thread is time-bounded: each poll has the poller's timeout, and `stop()` joins with a
deadline. A failing poll is logged as an ``autoscale_error`` event and the round is skipped —
a listener never kills the run.
"""

from __future__ import annotations

__all__ = ["LiveAutoscaler", "observation_from_stats", "write_control"]

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from testbed.core.clock import RunClock
from testbed.core.policies import Autoscaler, Decision, Observation, QueueObservation
from testbed.core.policies import make_autoscaler as _make
from testbed.core.scenario import Scenario
from testbed.observe.recorder import Recorder
from testbed.observe.stats import BrokerStats, StatsPoller

log = logging.getLogger(__name__)
TICK = 0.1


def observation_from_stats(stats: BrokerStats, queues: list[str], t: float) -> Observation:
    """The policy's view of one broker poll (only `queues`; missing ones count as empty)."""
    out = {}
    for q in queues:
        s = stats.queues.get(q)
        if s is not None:
            out[q] = QueueObservation(
                s.ready, s.unacked, s.consumers, float(s.publish_rate), float(s.ack_rate)
            )
    return Observation(t, out)


def write_control(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


class LiveAutoscaler:
    """The control thread of one replication."""

    def __init__(
        self,
        scenario: Scenario,
        poller: StatsPoller,
        clock: RunClock,
        recorder: Recorder,
        control_file: Path,
        *,
        stop_at: float | None = None,
    ) -> None:
        self.scenario = scenario
        self.poller = poller
        self.clock = clock
        self.recorder = recorder
        self.control_file = control_file
        self.stop_at = stop_at
        self.scalers: list[Autoscaler] = [_make(scenario, a) for a in scenario.autoscaling]
        self.ratios: dict[str, dict[str, float]] = {}
        for sc in self.scalers:
            if sc.alias is not None:
                ready = sc.provisioner.ready(0.0)
                self.ratios[sc.alias] = {sc.queue_of(s): 1.0 / len(ready) for s in ready}
        self.errors: list[str] = []
        self._seq = 0
        self._last_doc: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._base = min((sc.interval for sc in self.scalers), default=1.0)
        self._thread: threading.Thread | None = None
        self.publish(0.0)

    # -- the control file ---------------------------------------------------------------------

    def document(self, now: float) -> dict[str, Any]:
        groups = {
            sc.target: {str(s): sc.queue_of(s) for s in sc.provisioner.ready(now)}
            for sc in self.scalers
        }
        return {"groups": groups, "ratios": self.ratios}

    def publish(self, now: float) -> None:
        doc = self.document(now)
        if doc == self._last_doc:
            return
        self._last_doc = json.loads(json.dumps(doc))
        self._seq += 1
        write_control(self.control_file, {"seq": self._seq, "t": round(now, 3), **doc})

    # -- one round ----------------------------------------------------------------------------

    def step(self, sc: Autoscaler, stats: BrokerStats, now: float) -> Decision:
        """Decide from one poll and act (also what the tests drive directly)."""
        obs = observation_from_stats(stats, sc.watched_queues(), now)
        d = sc.decide(obs, now)
        if d.ratios is not None and sc.alias is not None:
            self.ratios[sc.alias] = d.ratios
        self.recorder.event(now, "scale", d.target, d.detail())
        self.publish(now)
        return d

    def _round(self, k: int) -> None:
        err: str | None = None
        stats: BrokerStats | None = None
        try:
            stats = self.poller.poll()
        except Exception as e:  # noqa: BLE001 - a poll failure skips the round
            err = f"{type(e).__name__}: {e}"
        now = self.clock.now()
        if stats is not None and not stats.broker_up:
            err = stats.error or "broker down"
        if stats is None or err is not None:
            self.errors.append(err or "poll failed")
            self.recorder.event(now, "autoscale_error", "autoscaling", {"error": err})
            return
        for sc in self.scalers:
            if k % max(1, round(sc.interval / self._base)) == 0:
                self.step(sc, stats, now)

    def run(self) -> None:
        k = 0
        next_round = self._base
        while not self._stop.is_set():
            now = self.clock.now()
            if self.stop_at is not None and now >= self.stop_at:
                break
            if now >= next_round:
                k += 1
                try:
                    self._round(k)
                except Exception as e:  # never kill the run: record and go on
                    log.exception("autoscaler round failed")
                    self.errors.append(f"{type(e).__name__}: {e}")
                next_round += self._base
                if next_round < self.clock.now():  # a slow poll: skip, do not catch up in bursts
                    next_round = self.clock.now() + self._base
            self.publish(self.clock.now())  # starts whose ready_at has come
            self._stop.wait(TICK)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> LiveAutoscaler:
        self._thread = threading.Thread(target=self.run, name="autoscaler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.poller.close()
        except Exception:  # noqa: BLE001
            log.debug("closing the autoscaler's poller failed", exc_info=True)
        self.recorder.close()
