"""How long a broker of this machine takes to come back after a kill: the profile's
``restart_time``, which the simulator adds to every broker kill, stop or restart of a scenario.

A constant per broker kind cannot be right on every machine: RabbitMQ came back in 4-8 s on
one machine of the class and in 9-18 s on another, and ActiveMQ in 1.5-6 s. So the figure is
measured the way a run's fault injector makes it happen — SIGKILL the node, start it again on
the same ports and data, wait until its health probe answers — and timed from the restart
call to healthy (the ``broker_up`` event of a live run comes at the same point). The same kills
measure how many consumers' acks a kill forgets (`testbed.calibration.ack_loss`).

A run whose scenario kills, stops or restarts a broker measures it once on the run's own
broker when this machine's cached profile has no figure yet, and caches it there
(`testbed.calibration.choice`). ``mqbed calibrate`` measures it on the broker it starts.
"""

from __future__ import annotations

__all__ = ["RESTART_REPEATS", "measure_restart", "needs_restart_time", "restart_probe"]

import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from testbed.backends.base import BrokerEndpoint
from testbed.calibration.ack_loss import LOAD_S, AckLoad, KillLosses
from testbed.calibration.cold_start import STEADY_S, Sample, cold_stream, fit_cold
from testbed.core.faultplan import is_broker_target
from testbed.core.profile import RestartTime

RESTART_REPEATS = 2
"""Kills per measurement: a RabbitMQ restart costs 5-18 s, so two bound the price."""
RESTART_TIMEOUT = 120.0
"""Longest a measured restart may take before the measurement fails (s)."""
_RESTARTING = frozenset({"broker_kill", "broker_restart"})
"""Broker fault kinds after which the broker has to start again."""


class Restartable(Protocol):
    def kill_node(self, name: str) -> float | None: ...

    def restart_node(self, name: str, timeout: float = ...) -> Any: ...

    def endpoints(self) -> list[BrokerEndpoint]: ...


def needs_restart_time(faults: Sequence[Any]) -> bool:
    """Whether a scenario's fault timeline kills, stops or restarts a broker (its prediction
    then depends on the restart time)."""
    for f in faults:
        if f.kind in _RESTARTING:
            return True
        if f.kind == "stochastic" and f.mode == "kill" and is_broker_target(f.target, None):
            return True
    return False


def measure_restart(
    backend: Restartable,
    node: str,
    repeats: int = RESTART_REPEATS,
    progress: Callable[[str], None] = lambda line: None,
    client: str | None = None,
) -> RestartTime:
    """Kill `node` and start it again `repeats` times; the restart → healthy times, the
    slow first seconds after each (`testbed.calibration.cold_start`), and with
    a `client` library the acks each kill forgot and how long clients still talked to the
    dying broker (`testbed.calibration.ack_loss`; without a load, the signal → gone time)."""
    samples: list[float] = []
    kills: list[float] = []
    losses: list[KillLosses] = []
    streams: list[list[Sample]] = []
    for i in range(repeats):
        load = _acked_load(backend, node, client, progress)
        if load is not None:
            load.start()
            time.sleep(LOAD_S)
        t_kill = time.monotonic()
        took = backend.kill_node(node)
        t0 = time.monotonic()
        if load is not None:
            load.halt()  # no more sends or acks: a reconnecting client must not drain the queue
        kills.append(took if took is not None else t0 - t_kill)
        backend.restart_node(node, timeout=RESTART_TIMEOUT)
        samples.append(time.monotonic() - t0)
        healthy_ns = time.time_ns()
        progress(f"broker restart {i + 1}/{repeats}: killed in {kills[-1] * 1000:.0f} ms, "
                 f"healthy after {samples[-1]:.1f} s")  # fmt: skip
        streams.append(_cold(backend, node, healthy_ns, i, progress))
        if load is not None:
            load.stop()
            lost = _count_losses(load, _endpoint(backend, node), t_kill, t0, progress)
            if lost is not None:
                losses.append(lost)
    sd = statistics.stdev(samples) if len(samples) > 1 else 0.0
    acked = [k for k in losses if k.ack_rate > 0]
    windows = [k.forgotten / k.ack_rate for k in acked]
    voids = [k.lost_in_flight / k.send_rate for k in losses if k.send_rate > 0]
    return RestartTime(
        mean=round(statistics.fmean(samples), 3),
        sd=round(sd, 3),
        samples=len(samples),
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        ack_loss_s=round(statistics.fmean(windows), 4) if windows else None,
        acks_forgotten=[k.forgotten for k in acked],
        kill_s=round(statistics.fmean(voids or kills), 4),
        cold=fit_cold(streams),
    )


def _cold(
    backend: Restartable, node: str, healthy_ns: int, i: int, progress: Callable[[str], None]
) -> list[Sample]:
    """The deliveries of the stream right after restart `i` (none when it failed: the restart
    time stands without it)."""
    try:
        got = cold_stream(_endpoint(backend, node), healthy_ns, f"mqbed-cal-cold{i}")
    except Exception as e:  # a broker that refuses the stream still has a restart time
        progress(f"  no stream after the restart ({type(e).__name__}: {e})")
        return []
    head = [x for t, x in got if t < 2.0]
    tail = [x for t, x in got if t >= max((t for t, _ in got), default=0.0) - STEADY_S]
    if head and tail:
        first, end = statistics.median(head) * 1000, statistics.median(tail) * 1000
        progress(f"  deliveries after the restart: median {first:.2f} ms in the first 2 s, "
                 f"{end:.2f} ms at the end")  # fmt: skip
    return got


def _endpoint(backend: Restartable, node: str) -> BrokerEndpoint:
    return next(e for e in backend.endpoints() if e.name == node)


def _acked_load(
    backend: Restartable, node: str, client: str | None, progress: Callable[[str], None]
) -> AckLoad | None:
    """The acked load before a kill (None: no client named, or it could not start — the
    restart time is measured all the same)."""
    if client is None:
        return None
    try:
        return AckLoad(_endpoint(backend, node), client)
    except Exception as e:  # a broker that refuses the load still has a restart time
        progress(f"  no acked load before the kill ({type(e).__name__}: {e})")
        return None


def _count_losses(
    load: AckLoad,
    endpoint: BrokerEndpoint,
    t_kill: float,
    t_killed: float,
    progress: Callable[[str], None],
) -> KillLosses | None:
    """After the restart: the acks the kill forgot and the publishes it lost in flight (None
    when the queue could not be read)."""
    load.abort()
    try:
        lost = load.losses(endpoint, t_kill, t_killed)
    except Exception as e:  # the count is lost, not the restart time
        progress(f"  forgotten acks not counted ({type(e).__name__}: {e})")
        return None
    ack_ms = lost.forgotten / max(lost.ack_rate, 1.0) * 1000
    void_ms = lost.lost_in_flight / max(lost.send_rate, 1.0) * 1000
    progress(f"  {lost.forgotten} acks of the {lost.ack_rate:.0f}/s before the kill forgotten: "
             f"{ack_ms:.0f} ms of acks; {lost.lost_in_flight} publishes lost in flight: "
             f"{void_ms:.0f} ms")  # fmt: skip
    return lost


def restart_probe(
    scenario: Any,
    owner: Restartable | None,
    node: str,
    progress: Callable[[str], None] = lambda line: None,
) -> Callable[[], RestartTime] | None:
    """What measures a run's restart time (and the acks a kill forgets, with the scenario's
    client library) on its own broker, for a scenario that kills or restarts it (None
    otherwise, or when the broker is not the run's to kill)."""
    if owner is None or not needs_restart_time(scenario.faults):
        return None
    client = scenario.broker.client
    return lambda: measure_restart(owner, node, progress=progress, client=client)
