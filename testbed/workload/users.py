"""Locust users built from the scenario: one `User` class per producer group and consumer group.

Each class has ``fixed_count`` = the group's `count`, so Locust (alone or master + workers)
starts exactly the scenario's instances. A user runs its whole loop inside one task: producers
pace themselves from the arrival process and stop at the end of the load phase; consumers run
until Locust stops them (after the drain), and on stop hand unacked messages back.

Locust statistics get ``publish`` (publish → confirm) and ``consume`` (end-to-end latency)
entries through a recorder listener; our own per-message records stay the reference (Locust
rounds response times to 1 ms below 100 ms).
"""

from __future__ import annotations

__all__ = ["build_user_classes", "ProducerUser", "ConsumerUser", "LocustStatsListener"]

import hashlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from locust import User, events, task
from locust.exception import StopUser

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario
from testbed.workload.config import RunClock, WorkerConfig
from testbed.workload.consumer import ConsumerLoop
from testbed.workload.producer import ProducerLoop
from testbed.workload.recorder import Recorder
from testbed.workload.topology import declarations

log = logging.getLogger(__name__)


class LocustStatsListener:
    """Feeds Locust's own statistics from the recorder (never the other way round)."""

    def __init__(self, environment: Any):
        self.environment = environment

    def on_message(
        self, flow: str, queue: str, size: int, t_publish: float, t_confirm: float | None, ok: bool
    ) -> None:
        rt = (t_confirm - t_publish) * 1000.0 if t_confirm is not None else 0.0
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
        if outcome in ("timed_out", "dead_lettered", "nacked", "dropped", "crashed"):
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
class _Process:
    """What every user in this Locust process shares."""

    config: WorkerConfig
    scenario: Scenario
    clock: RunClock
    recorder: Recorder
    worker_index: int
    counters: dict[str, itertools.count[int]] = field(default_factory=dict)
    stopping: bool = False
    """Set when Locust begins to stop: consumer loops return, users end promptly."""

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


_PROCESS: _Process | None = None


def process_state(environment: Any | None = None) -> _Process:
    global _PROCESS
    if _PROCESS is None:
        config = WorkerConfig.from_env()
        scenario = load_scenario(config.scenario_file)
        worker_index = int(os.environ.get("MQBED_WORKER_INDEX", "0"))
        listeners = [LocustStatsListener(environment)] if environment is not None else []
        token = hashlib.sha1(f"{config.run_id}:{config.t0_ns}".encode()).hexdigest()[:6]
        recorder = Recorder(
            Path(config.measured_dir),
            f"w{worker_index}-{os.getpid()}",
            config.replication,
            scenario.recording.batch_rows,
            listeners,
            id_prefix=f"{token}.r{config.replication}.",
        )
        _PROCESS = _Process(config, scenario, RunClock(config.t0_ns), recorder, worker_index)

        @events.test_stopping.add_listener
        def _stopping(**_: Any) -> None:
            if _PROCESS is not None:
                _PROCESS.stopping = True

        @events.quitting.add_listener
        def _flush(**_: Any) -> None:
            recorder.close()

    return _PROCESS


class _MqbedUser(User):
    abstract = True
    group_index: int = 0
    group_name: str = ""

    def wait_time(self) -> float:
        return 0.0

    def _failed(self, stage: str, exc: BaseException) -> None:
        st = process_state(self.environment)
        st.recorder.event(
            st.clock.now(),
            "user_error",
            self.group_name,
            {"stage": stage, "error": f"{type(exc).__name__}: {exc}"},
        )
        st.recorder.flush()

    def _connect(self, consumer: bool) -> Any:
        st = process_state(self.environment)
        adapter = make_adapter(st.endpoint(consumer), st.scenario.broker.client)
        adapter.connect()
        # idempotent; ActiveMQ routes exchanges client-side from the declarations it has seen
        adapter.declare(declarations(st.scenario))
        return adapter

    def on_stop(self) -> None:
        adapter = getattr(self, "adapter", None)
        if adapter is not None:
            try:
                adapter.close()
            except Exception:  # closing a broken connection must not hide the run's data
                log.debug("adapter close failed", exc_info=True)
        if _PROCESS is not None:
            _PROCESS.recorder.flush()


class ProducerUser(_MqbedUser):
    """One instance of a scenario producer group."""

    abstract = True

    def on_start(self) -> None:
        try:
            self._start()
        except Exception as e:
            self._failed("start", e)
            raise

    def _start(self) -> None:
        st = process_state(self.environment)
        spec = st.scenario.producers[self.group_index]
        idx = st.next_index(spec.name)
        self.adapter = self._connect(consumer=False)
        self.loop = ProducerLoop(
            spec,
            self.adapter,
            st.recorder,
            st.clock,
            st.rng(0, self.group_index, idx),
            f"{spec.name}.{st.worker_index}.{idx}",
            st.config.stop_producers_at,
        )

    @task
    def produce(self) -> None:
        try:
            self.loop.run()
        except Exception as e:
            self._failed("run", e)
            raise
        raise StopUser()


class ConsumerUser(_MqbedUser):
    """One instance of a scenario consumer group."""

    abstract = True

    def on_start(self) -> None:
        try:
            self._start()
        except Exception as e:
            self._failed("start", e)
            raise

    def _start(self) -> None:
        st = process_state(self.environment)
        spec = st.scenario.consumers[self.group_index]
        idx = st.next_index(spec.name)
        self.adapter = self._connect(consumer=True)
        self.loop = ConsumerLoop(
            spec,
            st.scenario,
            self.adapter,
            st.recorder,
            st.clock,
            st.rng(1, self.group_index, idx),
            f"{spec.name}.{st.worker_index}.{idx}",
            lambda: st.stopping,
        )

    @task
    def consume(self) -> None:
        try:
            self.loop.run()
        except Exception as e:
            self._failed("run", e)
            raise
        raise StopUser()


def build_user_classes(scenario: Scenario) -> dict[str, type[User]]:
    """Concrete user classes for the scenario, keyed by class name (for a locustfile)."""
    classes: dict[str, type[User]] = {}
    for i, p in enumerate(scenario.producers):
        if p.count > 0:
            name = f"Producer_{i}_{p.name}".replace(".", "_").replace("-", "_")
            classes[name] = type(
                name,
                (ProducerUser,),
                {
                    "abstract": False,
                    "fixed_count": p.count,
                    "group_index": i,
                    "group_name": p.name,
                },
            )
    for i, c in enumerate(scenario.consumers):
        if c.count > 0:
            name = f"Consumer_{i}_{c.name}".replace(".", "_").replace("-", "_")
            classes[name] = type(
                name,
                (ConsumerUser,),
                {
                    "abstract": False,
                    "fixed_count": c.count,
                    "group_index": i,
                    "group_name": c.name,
                },
            )
    return classes
