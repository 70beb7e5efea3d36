"""What every Locust user in one process shares: the run's configuration and clock, the
recorder (per-message records, Locust statistics, Prometheus exporter), per-group instance
counters, seeded random generators, live instances (crash targets) and the autoscaling control.

`process_state()` makes it once per Locust process, on the first user's start.
"""

from __future__ import annotations

__all__ = [
    "LocustStatsListener",
    "Process",
    "configure_locust",
    "current_process",
    "process_state",
]

import hashlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import gevent.lock
import numpy as np
from locust import events, runners

from testbed.backends.base import BrokerEndpoint
from testbed.core.clock import RunClock
from testbed.core.faultplan import plan_crashes
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario
from testbed.observe.exporter import exporter_from_env
from testbed.observe.process_cpu import SAMPLE_S, UsageClock, trace_switches
from testbed.observe.recorder import Recorder
from testbed.workload.config import ENV_VAR, T0_PENDING, WORKER_LIVENESS, WorkerConfig
from testbed.workload.crashes import run_crash_plan
from testbed.workload.scaling import CONTROL_KEY, ScaleControl


class LocustStatsListener:
    """Feeds Locust's own statistics from the recorder (never the other way round)."""

    def __init__(self, environment: Any):
        self.environment = environment

    def on_message(
        self, flow: str, queue: str, size: int, t_publish: float, t_confirm: float | None, ok: bool
    ) -> None:
        if ok and (t_confirm is None or t_publish is None or t_confirm == t_publish):
            return  # no publisher confirm: nothing to time (the send itself is in our records)
        rt = (t_confirm - t_publish) * 1000.0 if t_confirm is not None and t_publish else 0.0
        self.environment.events.request.fire(
            request_type="publish",
            name=flow,
            response_time=rt,
            response_length=size,
            exception=None if ok else RuntimeError("publish not confirmed"),
            context={},
        )

    def on_delivery(
        self, queue: str, consumer: str, outcome: str, latency_s: float | None, size: int
    ) -> None:
        if outcome in ("timed_out", "dead_lettered", "nacked", "dropped", "crashed", "unroutable"):
            exc: Exception | None = RuntimeError(outcome)
        else:
            exc = None
        self.environment.events.request.fire(
            request_type="consume",
            name=queue,
            response_time=(latency_s or 0.0) * 1000.0,
            response_length=size,
            exception=exc,
            context={},
        )

    def on_event(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None:
        return None


@dataclass
class Process:
    """What every user in this Locust process shares."""

    config: WorkerConfig
    scenario: Scenario
    clock: RunClock
    recorder: Recorder
    worker_index: int
    counters: dict[str, itertools.count[int]] = field(default_factory=dict)
    stopping: bool = False
    """Set when Locust begins to stop: consumer loops return, users end promptly."""
    live: dict[str, list[Any]] = field(default_factory=dict)
    """Running instances per group (crash targets), ordered by index."""
    crash_greenlet: Any = None
    control: ScaleControl | None = None
    """Live autoscaling: the control file the control process writes (None: no scaling)."""

    def register(self, user: Any) -> None:
        group = self.live.setdefault(user.group_name, [])
        group.append(user)
        group.sort(key=lambda u: u.index)
        if self.crash_greenlet is None and any(
            f.kind in ("consumer_crash", "producer_crash", "stochastic")
            for f in self.scenario.faults
        ):
            import gevent

            counts = {c.name: c.count for c in self.scenario.consumers}
            counts.update({p.name: p.count for p in self.scenario.producers})
            plans = sorted(
                plan_crashes(
                    self.scenario,
                    self.config.seed + self.worker_index,
                    counts,
                    self.config.stop_producers_at,
                )
            )
            self.crash_greenlet = gevent.spawn(
                run_crash_plan,
                plans,
                self.clock.now,
                lambda g: list(self.live.get(g, [])),
                lambda u, exc: u.crash(exc),
                self.recorder.event,
            )

    def unregister(self, user: Any) -> None:
        group = self.live.get(user.group_name, [])
        if user in group:
            group.remove(user)

    def next_index(self, group: str) -> int:
        return next(self.counters.setdefault(group, itertools.count()))

    def rng(self, kind: int, group_index: int, instance: int) -> np.random.Generator:
        seq = np.random.SeedSequence(
            [
                self.config.seed,
                self.config.replication,
                kind,
                group_index,
                instance,
                self.worker_index,
            ]
        )
        return np.random.default_rng(seq)

    def endpoint(self, consumer: bool) -> BrokerEndpoint:
        data = (
            self.config.consumer_endpoint
            if consumer and self.config.consumer_endpoint
            else self.config.endpoint
        )
        return BrokerEndpoint.from_json(data)


_STATE: Process | None = None
_MAKING = gevent.lock.BoundedSemaphore()
"""Held while the state is made: waiting for the run's start yields to the other users'
greenlets, which must wait for the one state instead of making a second."""


def configure_locust() -> None:
    """Process-wide Locust settings of every mqbed Locust process (the locustfile calls this
    first): the worker liveness (`testbed.workload.config.WORKER_LIVENESS`), set where Locust's
    maintainers point for it (``locust.runners.HEARTBEAT_LIVENESS``, locustio/locust#1988 —
    there is no command-line option), and the runner's INFO lines (workers joining, missing,
    self-healed, the test stopped) kept in the logs even at ``--loglevel WARNING``."""
    runners.HEARTBEAT_LIVENESS = WORKER_LIVENESS

    @events.init.add_listener
    def _runner_lines(**_: Any) -> None:
        # after Locust's logging set-up, which resets the level of every child of "locust"
        logging.getLogger("locust.runners").setLevel(logging.INFO)


START_WAIT = 300.0
"""Seconds an external worker waits for the run to fix its start (t=0) once it is ready."""


def current_process() -> Process | None:
    """This process's shared state if a user has started, else None (never creates it)."""
    return _STATE


def _usage_timer(usage: UsageClock, recorder: Recorder) -> None:
    """Sample this process's CPU time and operation counts (testbed.observe.process_cpu)."""
    while True:
        gevent.sleep(SAMPLE_S)
        usage.sample(recorder.messages.rows_appended, recorder.deliveries.rows_appended)


def _flush_timer(recorder: Recorder, interval: float) -> None:
    """Flush rows older than `interval` even when no new row arrives to trigger it: a crash
    then loses at most `interval` seconds of rows (recording.flush_interval, README)."""
    while True:
        gevent.sleep(interval / 2)
        recorder.flush_due()


def process_state(environment: Any | None = None) -> Process:
    if _STATE is None:
        with _MAKING:
            if _STATE is None:
                _make_state(environment)
    assert _STATE is not None
    return _STATE


def _make_state(environment: Any | None) -> None:
    """The process's state, its recorder and their stop hooks (once, under `_MAKING`)."""
    global _STATE
    config = WorkerConfig.from_env()
    worker_index = int(os.environ.get("MQBED_WORKER_INDEX", "0"))
    if config.t0_ns == T0_PENDING:  # an external worker: the run fixes t=0 when all are in
        config = WorkerConfig.await_start(os.environ[ENV_VAR], worker_index, START_WAIT)
    usage = UsageClock()  # from the start (an external worker's wait for t=0 is not its work)
    trace_switches()  # spans count their own greenlet's CPU only
    scenario = load_scenario(config.scenario_file)
    listeners = [LocustStatsListener(environment)] if environment is not None else []
    token = hashlib.sha1(f"{config.run_id}:{config.t0_ns}".encode()).hexdigest()[:6]
    worker = f"w{worker_index}-{os.getpid()}"
    recorder = Recorder(
        Path(config.measured_dir),
        worker,
        config.replication,
        scenario.recording.batch_rows,
        listeners,
        id_prefix=f"{token}.r{config.replication}.",
        flush_interval=scenario.recording.flush_interval,
    )
    _STATE = Process(config, scenario, RunClock(config.t0_ns), recorder, worker_index)
    if config.extra.get(CONTROL_KEY):
        _STATE.control = ScaleControl(config.extra[CONTROL_KEY])
    # Only now: starting the exporter's HTTP thread yields to other greenlets (gevent),
    # which must find _STATE set instead of making a second recorder.
    exporter = exporter_from_env(worker, run_id=config.run_id)
    if exporter is not None:
        recorder.listeners.append(exporter)

    @events.test_stopping.add_listener
    def _stopping(**_: Any) -> None:
        if _STATE is not None:
            _STATE.stopping = True

    flusher = gevent.spawn(_flush_timer, recorder, scenario.recording.flush_interval)
    sampler = gevent.spawn(_usage_timer, usage, recorder)

    @events.quitting.add_listener
    def _flush(**_: Any) -> None:
        flusher.kill(block=False)
        sampler.kill(block=False)
        recorder.close()
        try:
            usage.write(
                Path(config.measured_dir),
                worker,
                recorder.messages.rows_written,
                recorder.deliveries.rows_written,
            )
        except OSError:  # the records are written; a figure about them must not fail the quit
            logging.getLogger(__name__).exception("could not write this process's CPU usage")
        if exporter is not None:
            exporter.close()
