"""Client crash faults (docs/models.md §6): consumer and producer instances die abruptly.

A crash is a :class:`ClientCrash` raised inside the instance's greenlet (`throw_crash`), which
interrupts whatever it is doing — serving, waiting for a confirm, blocked in socket I/O. The
loop then abandons its connection without acking anything: the broker requeues every unacked
delivery (redelivered), a producer's unconfirmed publishes count as unconfirmed, and (ActiveMQ)
visibility-timeout copies the consumer was holding are lost — as in a real process crash.
With ``restart_after`` the instance reconnects after that delay and goes on.

The schedule comes from the scenario: each ``consumer_crash``/``producer_crash`` fault crashes
``count`` instances of its group *in each Locust process* (with `workers: N`, up to N × count);
a ``stochastic`` fault whose target is a consumer group gives each instance its own
failure/repair episodes (exponential MTTF/MTTR, see
:func:`testbed.core.faultplan.plan_crashes`, shared with the simulator).
Every crash and restart is an ``events`` row (``fault_start``/``fault_end``).
"""

from __future__ import annotations

__all__ = ["ClientCrash", "Settling", "run_crash_plan", "throw_crash"]

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import gevent

from testbed.core.client_events import crash_skipped, crash_started
from testbed.core.faultplan import CrashPlan


class ClientCrash(BaseException):
    """Raised inside a producer/consumer greenlet to emulate an abrupt process crash.

    A BaseException so that no `except Exception` on the way (client libraries included)
    swallows it.
    """

    def __init__(self, kind: str, restart_after: float | None):
        super().__init__(kind)
        self.kind = kind
        self.restart_after = restart_after


class Settling(Protocol):
    """A loop that may be between a delivery's ack and its record (`ConsumerLoop`)."""

    settling: bool

    def defer(self, exc: ClientCrash) -> None: ...


def throw_crash(glet: gevent.Greenlet, exc: ClientCrash, loop: Settling | None = None) -> None:
    """Raise `exc` inside the running greenlet `glet` from the hub's next callback; a `loop`
    settling a delivery at that moment takes it after the record instead (`loop.defer`).

    Hand-written rather than ``glet.kill(exc, block=False)``: kill too throws from a later hub
    callback, so a settling check made at the call was stale by the time the exception landed.
    A consumer whose service sleep ended in the same loop iteration woke first, acked (a socket
    write, which yields) and took the crash inside the ack: the broker had the ack, the record
    said ``crashed``, the ledger counted the message lost
    (test_client_crashes_redeliver_and_restart[activemq], 0.9 ms after the service ended).
    Deciding inside the callback, when `glet` is switched out, sees its real state."""
    if not glet:  # not started yet, or already dead: kill handles both
        glet.kill(exc, block=False)
        return

    def throw() -> None:
        if glet.dead:
            return
        if loop is not None and loop.settling:
            loop.defer(exc)
            return
        try:
            glet.throw(exc)
        except BaseException:  # as gevent's own kill callback: the hub reports, never dies
            gevent.get_hub().handle_error(glet, *sys.exc_info())

    gevent.get_hub().loop.run_callback(throw)


def run_crash_plan(
    plans: Sequence[CrashPlan],
    now: Callable[[], float],
    live: Callable[[str], list[Any]],
    crash: Callable[[Any, ClientCrash], None],
    event: Callable[[float, str, str, dict[str, Any]], None],
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Execute `plans` on the run clock: for each, crash the chosen live instances.

    `live(group)` lists the group's running instances of this process, ordered by index; each
    has an `index` attribute. `crash(instance, exc)` delivers the exception to it.
    """
    for plan in plans:
        delay = plan.at - now()
        if delay > 0:
            sleep(delay)
        victims = live(plan.group)
        if plan.instance is not None:
            victims = [v for v in victims if getattr(v, "index", None) == plan.instance]
        victims = victims[: plan.count]
        if not victims:
            name, detail = crash_skipped(plan.kind, "no live instance in this process")
            event(now(), name, plan.group, detail)
            continue
        names = [getattr(v, "name", "?") for v in victims]
        name, detail = crash_started(plan.kind, plan.index, names, plan.restart_after)
        event(now(), name, plan.group, detail)
        for v in victims:
            crash(v, ClientCrash(plan.kind, plan.restart_after))
