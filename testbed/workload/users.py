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

import logging
import time
from typing import Any

from locust import User, task
from locust.exception import StopUser

from testbed.brokers import make_adapter
from testbed.core.client_events import client_down, client_up, crash_ended, on
from testbed.core.reconnect import FIRST_RETRY, next_delay
from testbed.core.scenario import Scenario
from testbed.core.seeds import arrival_rng
from testbed.workload.consumer import ConsumerLoop
from testbed.workload.crashes import ClientCrash, throw_crash
from testbed.workload.process import (
    LocustStatsListener,
    Process,
    current_process,
    process_state,
)
from testbed.workload.producer import ProducerLoop
from testbed.workload.scaling import AliasRouter, slot_count
from testbed.workload.topology import declarations

log = logging.getLogger(__name__)


RECONNECT_LIMIT = 300.0
"""Seconds a client keeps trying to reconnect after losing the broker before it gives up."""


class _MqbedUser(User):
    abstract = True
    group_index: int = 0
    group_name: str = ""
    kind = 0  # 0 producer, 1 consumer (random stream and endpoint side)

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

    def _connect(self) -> Any:
        st = process_state(self.environment)
        adapter = make_adapter(st.endpoint(self.kind == 1), st.scenario.broker.client)
        try:
            adapter.connect()
            # idempotent; ActiveMQ routes exchanges client-side from the declarations it has seen
            adapter.declare(declarations(st.scenario))
        except BaseException:  # a crash or error half way must not leave a connection open
            adapter.abort()  # (one holding an exclusive queue would keep it alive)
            raise
        return adapter

    def _make_loop(self, st: Process) -> Any:
        raise NotImplementedError

    def crash(self, exc: ClientCrash) -> None:
        """A planned crash (`testbed.workload.crashes`): raised inside this instance's
        greenlet, where it is — except that a consumer settling a delivery takes it after the
        record (`throw_crash`)."""
        if self._greenlet is None:
            return
        loop = getattr(self, "loop", None)
        throw_crash(self._greenlet, exc, loop if isinstance(loop, ConsumerLoop) else None)

    def on_start(self) -> None:
        try:
            st = process_state(self.environment)
            self.index = st.next_index(self.group_name)
            self.name = f"{self.group_name}.{st.worker_index}.{self.index}"
            self.adapter = self._connect()
            self.loop = self._make_loop(st)
            st.register(self)
        except Exception as e:
            self._failed("start", e)
            raise

    @task
    def work(self) -> None:
        st = process_state(self.environment)
        resume_at = 0.0
        while True:
            try:
                self._run(st, resume_at)
            except ClientCrash as crash:
                resume_at = self._recover(st, crash)
                continue
            except Exception as e:
                errors = type(self.loop.adapter).connection_errors
                if not isinstance(e, errors) or st.stopping:
                    self._failed("run", e)
                    raise
                resume_at = self._recover(st, e)
                continue
            raise StopUser()

    def _recover(self, st: Process, cause: BaseException) -> float:
        """Come back from a crash or a lost connection; returns the run clock's time it
        resumed at (StopUser if it gave up or the run stops). An instance retrying its
        connection after a lost one is a running process: a planned crash meanwhile takes it
        down as it would a connected one (the failures of client and broker are independent,
        docs/models.md §6), and it restarts once the crash's repair time has passed."""
        while True:
            try:
                if isinstance(cause, ClientCrash):
                    return self._after_crash(st, cause)
                return self._after_drop(st, cause)
            except ClientCrash as crash:
                cause = crash

    def _after_crash(self, st: Process, crash: ClientCrash) -> float:
        st.unregister(self)
        self._abandon()
        if crash.restart_after is None or st.stopping:
            raise StopUser() from None
        time.sleep(crash.restart_after)
        if st.stopping or not self._restart(st):
            raise StopUser() from None
        self.loop.adapter = self.adapter
        resume_at = st.clock.now()
        st.register(self)  # as the simulator's: not a crash target until it has restarted
        st.recorder.event(resume_at, *on(self.group_name, crash_ended(crash.kind, self.name)))
        return resume_at

    def _after_drop(self, st: Process, error: BaseException) -> float:
        down_at = st.clock.now()
        self._abandon()
        st.recorder.event(down_at, *on(self.name, client_down(str(error))))
        if not self._reconnect(st):
            st.unregister(self)  # gave up: no longer a crash target
            raise StopUser() from None
        self.loop.adapter = self.adapter
        resume_at = st.clock.now()
        st.recorder.event(resume_at, *on(self.name, client_up(resume_at - down_at)))
        return resume_at

    def _run(self, st: Process, resume_at: float) -> None:
        self.loop.run(resume_at) if self.kind == 0 else self.loop.run()

    def _restart(self, st: Process) -> bool:
        """Connect again after a crash; a broker that is down meanwhile (a kill during the
        restart time) is retried with the backoff of a lost connection, as the simulator's
        restarted clients are. False if it gave up."""
        try:
            self.adapter = self._connect()
            return True
        except Exception as e:
            if not isinstance(e, type(self.loop.adapter).connection_errors):
                self._failed("restart", e)
                raise
            log.debug("restart of %s found the broker down: %s", self.name, e)
        return self._reconnect(st)

    def _reconnect(self, st: Process) -> bool:
        """The backoff of `testbed.core.reconnect` (0.1 s doubling to 2 s) until connected,
        the run stops, or `RECONNECT_LIMIT` seconds pass. False if it gave up."""
        deadline = time.monotonic() + RECONNECT_LIMIT
        delay = FIRST_RETRY
        while not st.stopping and time.monotonic() < deadline:
            time.sleep(delay)
            try:
                self.adapter = self._connect()
                return True
            except Exception as e:  # still down
                log.debug("reconnect of %s failed: %s", self.name, e)
                delay = next_delay(delay)
        return False

    def _abandon(self) -> None:
        """Drop the connection as a dying process would: the socket is shut at once (no
        protocol close, which can fail mid-frame after the kill and leave the connection —
        and its unacked deliveries — held until the process exits); the broker requeues."""
        adapter, self.adapter = self.adapter, None
        if adapter is None:  # crashed while it had none (retrying its connection)
            return
        try:
            adapter.abort()
        except BaseException:  # abort never raises by contract; a crash must not spread
            log.warning("aborting a crashed client's connection failed", exc_info=True)

    def on_stop(self) -> None:
        adapter = getattr(self, "adapter", None)
        if adapter is not None:
            try:
                adapter.close()
            except Exception:  # closing a broken connection must not hide the run's data
                log.debug("adapter close failed", exc_info=True)
        state = current_process()
        if state is not None:
            state.recorder.flush()


class ProducerUser(_MqbedUser):
    """One instance of a scenario producer group."""

    abstract = True
    kind = 0

    def _make_loop(self, st: Process) -> ProducerLoop:
        spec = st.scenario.producers[self.group_index]
        return ProducerLoop(
            spec,
            self.adapter,
            st.recorder,
            st.clock,
            st.rng(0, self.group_index, self.index),
            self.name,
            st.config.stop_producers_at,
            send_type=any(f.on is not None for c in st.scenario.consumers for f in c.follow_ups),
            router=self._router(st, spec.queue),
            arrivals=arrival_rng(st.config.seed, spec.name, self.index, st.worker_index),
        )

    def _router(self, st: Process, queue: str | None) -> AliasRouter | None:
        """Elastic alias: each message goes to a member queue by the forwarding ratios."""
        if queue is None or st.control is None:
            return None
        if not any(lb.alias == queue for lb in st.scenario.topology.load_balanced):
            return None
        return AliasRouter(st.control, queue, st.rng(2, self.group_index, self.index))


class ConsumerUser(_MqbedUser):
    """One instance of a scenario consumer group."""

    abstract = True
    kind = 1

    def _make_loop(self, st: Process, queue: str | None = None) -> ConsumerLoop:
        spec = st.scenario.consumers[self.group_index]
        should_stop = lambda: st.stopping  # noqa: E731
        if queue is not None:  # a scaled slot: runs while the control file lists it
            spec = spec.model_copy(update={"queue": queue})
            should_stop = lambda: st.stopping or self._slot_queue(st) != queue  # noqa: E731
        return ConsumerLoop(
            spec,
            st.scenario,
            self.adapter,
            st.recorder,
            st.clock,
            st.rng(1, self.group_index, self.index),
            self.name,
            should_stop,
            seed=st.config.seed,
        )

    def _slot_queue(self, st: Process) -> str | None:
        return st.control.queue_of(self.group_name, self.index) if st.control else None

    def _run(self, st: Process, resume_at: float) -> None:
        if st.control is None or slot_count(st.scenario, self.group_name) is None:
            self.loop.run()
            return
        # a scaled slot: wait for the control file to list it, consume, stop gracefully, repeat
        while not st.stopping:
            queue = self._slot_queue(st)
            if queue is None:
                time.sleep(0.05)
                continue
            self.loop = self._make_loop(st, queue)
            st.recorder.event(st.clock.now(), "consumer_start", self.name, {"queue": queue})
            self.loop.run()
            st.recorder.event(
                st.clock.now(),
                "consumer_stop",
                self.name,
                {"queue": queue, "received": self.loop.received, "graceful": True},
            )


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
        count = slot_count(scenario, c.name) or c.count
        if count > 0:
            name = f"Consumer_{i}_{c.name}".replace(".", "_").replace("-", "_")
            classes[name] = type(
                name,
                (ConsumerUser,),
                {
                    "abstract": False,
                    "fixed_count": count,
                    "group_index": i,
                    "group_name": c.name,
                },
            )
    return classes
