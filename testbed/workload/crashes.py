"""Client crash faults (docs/models.md §6): consumer and producer instances die abruptly.

A crash is a :class:`ClientCrash` raised inside the instance's greenlet (gevent.kill), which
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

__all__ = ["ClientCrash", "run_crash_plan"]

import time
from collections.abc import Callable, Sequence
from typing import Any

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
            event(
                now(),
                "fault_skipped",
                plan.group,
                {"kind": plan.kind, "reason": "no live instance in this process"},
            )
            continue
        event(
            now(),
            "fault_start",
            plan.group,
            {
                "kind": plan.kind,
                "instances": [getattr(v, "name", "?") for v in victims],
                "restart_after": plan.restart_after,
            },
        )
        for v in victims:
            crash(v, ClientCrash(plan.kind, plan.restart_after))
