"""Which broker a live run uses: one `mqbed up` already started, or one of its own."""

from __future__ import annotations

__all__ = ["provisioned", "needs_own_broker", "node_names", "run_memory_mb"]

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.backends.base import Backend, BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.core.scenario import Scenario
from testbed.core.scenario_faults import BrokerFault, StochasticFault


@contextmanager
def provisioned(
    scenario: Scenario, home: Path, run_id: str
) -> Iterator[tuple[BrokerEndpoint, Backend | None]]:
    """The broker for the run and the backend that owns it.

    A healthy broker from `mqbed up` in `home` is reused (backend None: not ours to break),
    unless the scenario injects broker faults — then, as when nothing is up, the run starts
    its own broker and stops it afterwards.
    """
    kind = scenario.broker.kind
    if scenario.broker.backend != "local":
        from testbed.backends.factory import provision_with_backend

        with provision_with_backend(scenario, home, run_id) as pair:
            yield pair
        return
    if not needs_own_broker(scenario):
        shared = LocalBackend(home)
        for ep in shared.endpoints():
            if ep.kind == kind and shared.is_healthy(ep.name):
                yield ep, None
                return
    own = LocalBackend(home / "runs" / run_id)
    try:
        endpoints = own.up(
            [kind], timeout=90.0, detach=False, memory_limit_mb=run_memory_mb(scenario)
        )
        yield endpoints[0], own
    finally:
        own.down(timeout=30.0)
        shutil.rmtree(own.home, ignore_errors=True)


def run_memory_mb(scenario: Scenario) -> int | None:
    """The `memory_limit_mb` a run's own broker is started with: ActiveMQ's memoryUsage limit
    always; RabbitMQ's absolute watermark only when the scenario sets ``broker.memory_limit``
    (its default relative watermark leaves more room than 256 MB absolute). At least 64 MB."""
    explicit = "memory_limit" in scenario.broker.model_fields_set
    if scenario.broker.kind == "activemq" or explicit:
        return max(64, int(scenario.broker.memory_limit / 1e6))
    return None


def needs_own_broker(scenario: Scenario) -> bool:
    """Broker faults (kill, pause, alarms, stochastic broker failures) need a broker we own."""
    return any(
        isinstance(f, BrokerFault) or (isinstance(f, StochasticFault) and f.target == "broker")
        for f in scenario.faults
    )


def node_names(scenario: Scenario) -> dict[str, str]:
    kind = scenario.broker.kind
    names = {"broker": f"{kind}0"}
    names.update({f"broker{i}": f"{kind}{i}" for i in range(scenario.broker.nodes)})
    return names
