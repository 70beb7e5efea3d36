"""Measure the client path through the live workload (docs/models.md §9).

A short generated scenario runs through the same machinery as ``mqbed run`` — Locust users,
the broker adapter of the scenario's client library, the recorder — and its records give the
tables of :class:`testbed.core.client_path.ClientPath`:

- four phases of load, *low*, *mid*, *high* and *quiet* total message rate (``PHASES``; the
  quiet one last, after the sparse stream); in each,
  consumers that serve in zero time take messages of a small and a large size and small
  persistent messages on durable queues, from a producer that does not wait for confirms and
  from one that does, small transient messages from one that does, and follow-ups the small and
  large streams' consumers publish from their handlers (``CHAINS``), one per stream at ≤ 60
  msg/s so that it is idle when a message arrives: their publish → start delays are the delivery
  tables (and the confirmed stream's publish → confirm times the confirm table,
  `testbed.calibration.confirm_path`);
- in the mid phase one consumer, in the high phase three, serve an exponential law (mean
  ``HOLD_SERVICE``) at utilisation ``HOLD_UTILISATION`` (Poisson arrivals): a consumer that is
  sometimes idle and sometimes has the next message waiting, as a scenario's consumers are. Each
  served delivery records the service time it drew (``service_s``), so its own client cost
  ``t_done - t_deliver - service_s`` (timer overshoot, ack; with the next message's frames read
  during the ack when one is waiting) is measured message by message; the hold table is that
  sample plus the median gap from an ack to the start of a message that was already waiting
  (recording, the consumer loop). A continuous service law, not a constant: gevent wakes timers
  on whole milliseconds (epoll's timeout), and a sleep of a fractional number of milliseconds
  overshoots differently from a whole one (0.64 vs 0.25 ms for exponential 5 ms vs constant 8 ms
  sleeps, measured under SCHED_FIFO on this machine class). Earlier profiles measured the hold
  on consumers kept backlogged with a constant 8 ms service: every ack then also read the next
  message, a cost an unsaturated consumer pays only when one is waiting (measured: 0.96 vs
  0.91 ms in-handler on the quickstart), and the tables came out 0.1–0.3 ms above the quickstart's
  own consumers — enough, at utilisation 0.6, to raise its predicted mean latency by ~10 %.
- in the low phase a fan-out of one producer to five queues whose consumers share the process:
  the median gap between the handler starts of one message's copies is ``copy_gap``
  (``path_scenario.FAN``), the work a delivery costs its process before its handler, and how
  much later its first copy starts than a one-queue message's is ``fan_delay``
  (`testbed.calibration.fan_out`);
- after the quiet phase a handler that publishes three follow-ups (``path_scenario.BURST``):
  how far apart they are sent is ``follow_gap`` (`testbed.calibration.follow_burst`);
- in the mid and high phases one prefetch-1 consumer at the same utilisation: its gaps from an
  ack to the start of a message already waiting at the broker are the *turnaround* table
  (``turnaround_points``, ``path_scenario.TURN``), what a message that waited still has ahead;
- after the phases a sparse stream alone (``path_scenario.IDLE``): its deliveries by the
  machine's idle time before their publish give the wake-up of an idle machine (``wake``,
  `testbed.calibration.wake`);
- after the live run, without the broker, the fault proxy's own transit per crossing
  (``proxy_hop``, `testbed.calibration.proxy_hop`): what the runs with a network fault, whose
  clients connect through the proxy, pay on every publish, delivery, confirm and ack.

Every delivery of the delivery streams is also placed by its consumer's idle time before its
publish: per phase, how much sooner a message reaches a consumer that finished its previous
one a few milliseconds before is the ``consumer_idle`` curve (`testbed.calibration.consumer_idle`),
and the delivery tables are stored for a cold consumer.

The Locust process samples its CPU time and its counts of publishes and deliveries every second
(``testbed.observe.process_cpu``): the slope of CPU over operations across the three phases is
``cpu_per_op``, the marginal CPU cost of one client operation, with which the simulator makes the
users of one process wait for each other (0 when no positive slope could be fitted: measured, and
no shared-server term; a cached profile with 0 is not measured again for it). The same samples
split it by where it is spent (``cpu``: publish, receive before a handler starts, ack after its
service; ``testbed.observe.process_cpu.cpu_split``).

Foreign load: the machine's CPU time not spent by this process tree is measured over the
attempt (``/proc/stat`` minus psutil's per-process times, plus the hypervisor's steal). An
attempt during which other work used more than ``FOREIGN_CPU_LIMIT`` cores on average is
rejected and measured again (at most ``ATTEMPTS`` times; the quietest is kept and the
rejections are named in the provenance).
"""

from __future__ import annotations

__all__ = [
    "CHAINS",
    "HOLD_SERVICE",
    "HOLD_UTILISATION",
    "PHASES",
    "CpuMeter",
    "calibration_scenario",
    "delivery_idle_points",
    "measure_client_path",
    "tables_from_records",
    "turnaround_points",
]

import os
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from testbed.calibration.confirm_path import MIN_SAMPLE, confirm_points, read_sends
from testbed.calibration.consumer_idle import consumer_idle, idle_points, normalised
from testbed.calibration.fan_out import copy_gap, fan_delay
from testbed.calibration.follow_burst import follow_gap
from testbed.calibration.path_scenario import (
    CHAINS,
    END,
    PHASES,
    at,
    calibration_scenario,
    phase_of,
)
from testbed.calibration.path_streams import (
    BURST,
    CONFIRMED_TRANSIENT,
    FAN,
    HOLD_SERVICE,
    HOLD_UTILISATION,
    IDLE,
    LARGE,
    SMALL,
    SPREAD,
    TURN,
    WAITING_FOR,
)
from testbed.calibration.proxy_hop import HOP_PAIRS, measure_proxy_hop
from testbed.calibration.wake import awake, wake_points
from testbed.core.client_path import (
    PROTOCOL,
    ClientPath,
    HoldPoint,
    PathPoint,
    PointFit,
    Provenance,
    WakePoint,
)
from testbed.core.consumer_idle import IdlePoint
from testbed.core.quantiles import quantile_table
from testbed.observe.cpu_speed import loop_ms
from testbed.observe.foreign_load import CpuMeter
from testbed.observe.process_cpu import ProcessUsage, cpu_per_op, cpu_split, read_usage

FOREIGN_CPU_LIMIT = 0.5
"""Cores of CPU used by other work, on average over an attempt, above which it is rejected."""
ATTEMPTS = 2


def _phased(deliveries: pd.DataFrame, scale: float) -> pd.DataFrame:
    """The acked deliveries with a latency, with their publish time and load phase."""
    d = deliveries[(deliveries.outcome == "acked") & deliveries.latency_s.notna()].copy()
    d["t_publish"] = d.t_deliver - d.latency_s
    d["phase"] = phase_of(d.t_publish, scale)
    return d


def _is_delivery_stream(queue: str) -> bool:
    stream = queue.removeprefix("mqbed-cal-")
    return queue.startswith("mqbed-cal-") and not stream.startswith(
        (TURN, FAN, "hold", IDLE, BURST, SPREAD)
    )


def delivery_idle_points(
    deliveries: pd.DataFrame, scale: float = 1.0, wake: Sequence[WakePoint] = ()
) -> list[IdlePoint]:
    """The consumer idle points (`testbed.calibration.consumer_idle`) of the delivery streams,
    compared within each stream and load phase, on their delays less the ``wake`` of the
    machine's idle time (`testbed.calibration.wake.awake`)."""
    d = _phased(deliveries, scale)
    streams = d.queue.astype(str).map(_is_delivery_stream)
    group = (d.phase.astype(str) + "/" + d.queue.astype(str)).where(d.phase.notna() & streams)
    rates = {ph.name: ph.total for ph in PHASES}
    return idle_points(d, group, d.phase.map(rates), awake(d, list(wake)))


def tables_from_records(
    deliveries: pd.DataFrame,
    scale: float = 1.0,
    idle: Sequence[IdlePoint] = (),
    wake: Sequence[WakePoint] = (),
) -> tuple[list[PathPoint], list[HoldPoint], list[PointFit]]:
    """The delivery and hold points of one calibration run's ``deliveries`` table. The delivery
    tables hold each delay less the ``wake`` of the machine's idle time before its publish
    (`awake`) and, with ``idle`` points, as it would have been to a cold consumer
    (`normalised`): the simulator adds both for the scenario's own idle times."""
    d = _phased(deliveries, scale)
    d["consumer_idle"] = consumer_idle(d)
    d["awake"] = awake(d, list(wake))
    rates = {ph.name: ph.total for ph in PHASES}
    paths: list[PathPoint] = []
    holds: list[HoldPoint] = []
    fits: list[PointFit] = []
    for (phase, queue), g in d[d.phase.notna()].groupby(["phase", "queue"]):
        stream = str(queue).removeprefix("mqbed-cal-")
        if stream.startswith((TURN, FAN)):
            continue  # `turnaround_points`, `copy_gap`
        if stream.startswith("hold"):
            sample = _hold_sample(g)
            if len(sample) < MIN_SAMPLE:
                continue
            table = quantile_table(sample)
            holds.append(HoldPoint(rate=rates[phase], service=HOLD_SERVICE, table=table))
        else:
            sample = normalised(
                g.awake.to_numpy(dtype=float), g.consumer_idle.to_numpy(dtype=float),
                list(idle), rates[phase],
            )  # fmt: skip
            if len(sample) < MIN_SAMPLE:
                continue
            paths.append(_path_point(stream, rates[phase], sample))
        kind = "hold" if stream.startswith("hold") else "delivery"
        fits.append(PointFit.held_out(f"{kind}/{phase}/{stream}", sample))
    return paths, holds, fits


def _path_point(stream: str, rate: float, sample: np.ndarray) -> PathPoint:
    """The delivery point of one stream's sample in one phase."""
    chained = {to: persistent for to, _, persistent in CHAINS.values()}
    return PathPoint(
        rate=rate,
        size=LARGE if stream == "large" else SMALL,
        persistent=stream in ("persistent", "confirmed") or chained.get(stream, False),
        confirms=stream in ("confirmed", CONFIRMED_TRANSIENT),
        follow_up=stream in chained,
        table=quantile_table(sample),
    )


def _hold_sample(g: pd.DataFrame) -> np.ndarray:
    """Each served message's client cost (``t_done - t_deliver - service_s``) plus the median
    gap from an ack to the start of a message already waiting (see the module docstring)."""
    if "service_s" not in g:
        return np.array([])
    own, after = [], []
    for _, c in g[g.service_s.notna()].sort_values("t_deliver").groupby("consumer"):
        starts = c.t_deliver.to_numpy(dtype=float)
        done = c.t_done.to_numpy(dtype=float)
        published = c.t_publish.to_numpy(dtype=float)
        own.append(done - starts - c.service_s.to_numpy(dtype=float))
        waiting = published[1:] < done[:-1] - WAITING_FOR
        after.append((starts[1:] - done[:-1])[waiting])
    if not own:
        return np.array([])
    gaps = np.concatenate(after)
    shift = float(np.median(gaps)) if len(gaps) else 0.0
    return np.maximum(np.concatenate(own) + max(shift, 0.0), 0.0)


def turnaround_points(
    deliveries: pd.DataFrame, scale: float = 1.0
) -> tuple[list[HoldPoint], list[PointFit]]:
    """Per phase, the prefetch-1 consumer's gaps from an ack to the start of a message that
    was already waiting at the broker when it acked (`path_scenario.TURN`)."""
    d = _phased(deliveries, scale)
    rates = {ph.name: ph.total for ph in PHASES}
    points: list[HoldPoint] = []
    fits: list[PointFit] = []
    turn = d[d.phase.notna() & d.queue.astype(str).str.startswith(f"mqbed-cal-{TURN}")]
    for phase, g in turn.groupby("phase"):
        gaps = []
        for _, c in g.sort_values("t_deliver").groupby("consumer"):
            starts = c.t_deliver.to_numpy(dtype=float)
            done = c.t_done.to_numpy(dtype=float)
            waiting = c.t_publish.to_numpy(dtype=float)[1:] < done[:-1] - WAITING_FOR
            gaps.append((starts[1:] - done[:-1])[waiting])
        sample = np.maximum(np.concatenate(gaps), 0.0) if gaps else np.array([])
        if len(sample) < MIN_SAMPLE:
            continue
        table = quantile_table(sample)
        points.append(HoldPoint(rate=rates[str(phase)], service=HOLD_SERVICE, table=table))
        fits.append(PointFit.held_out(f"turnaround/{phase}/{TURN}", sample))
    return points, fits


Replicate = Callable[[Path, Path], pd.DataFrame]
"""Runs a scenario file into a run directory and returns its merged measured deliveries."""


Attempt = tuple[float, pd.DataFrame, list[float], list[ProcessUsage], pd.DataFrame]
"""One calibration run: foreign cores, deliveries, load averages, CPU usage, sends."""


def _quietest_attempt(
    replicate: Replicate,
    kind: str,
    client: str,
    scale: float,
    progress: Callable[[str], None],
    broker_pids: Sequence[int],
    rejected: list[str],
) -> Attempt:
    """The calibration scenario run until an attempt is quiet (at most ``ATTEMPTS``), or the
    quietest of them; each busy attempt is named in ``rejected``."""
    best: Attempt | None = None
    for attempt in range(1, ATTEMPTS + 1):
        with tempfile.TemporaryDirectory(prefix="mqbed-calibration-") as tmp:
            path = Path(tmp) / "calibration.yaml"
            path.write_text(yaml.safe_dump(calibration_scenario(kind, client, scale)))
            load = [os.getloadavg()[0]]
            meter = CpuMeter(broker_pids)
            progress(f"calibrating the client path ({kind}/{client}), attempt {attempt}: "
                     f"~{at(END, scale) + 10:.0f} s")  # fmt: skip
            deliveries = replicate(path, Path(tmp) / "run")
            foreign, steal = meter.foreign_cores(), meter.steal_cores()
            load.append(os.getloadavg()[0])
            usage = read_usage(Path(tmp) / "run")
            sends = read_sends(Path(tmp) / "run")
        if best is None or foreign < best[0]:
            best = (foreign, deliveries, load, usage, sends)
        if foreign <= FOREIGN_CPU_LIMIT:
            break
        rejected.append(f"attempt {attempt}: other work used {foreign:.2f} cores on average"
                        f" ({steal:.2f} of them stolen by the hypervisor)")  # fmt: skip
        progress(f"  rejected: other work used {foreign:.2f} cores (limit {FOREIGN_CPU_LIMIT})")
    assert best is not None  # ATTEMPTS ≥ 1
    return best


def measure_client_path(
    replicate: Replicate,
    *,
    kind: str,
    client: str,
    broker_version: str,
    host: str,
    scale: float = 1.0,
    progress: Callable[[str], None] = lambda line: None,
    command: str = "",
    broker_pids: Sequence[int] = (),
) -> ClientPath:
    """Run the calibration scenario (up to ``ATTEMPTS`` times, rejecting busy ones)."""
    started = time.monotonic()
    rejected: list[str] = []
    foreign, deliveries, load, usage, sends = _quietest_attempt(
        replicate, kind, client, scale, progress, broker_pids, rejected
    )
    if foreign > FOREIGN_CPU_LIMIT:
        rejected.append(f"every attempt was busy: kept the quietest ({foreign:.2f} cores)")
    wake = wake_points(deliveries, scale)
    idle = delivery_idle_points(deliveries, scale, wake)
    paths, holds, fits = tables_from_records(deliveries, scale, idle, wake)
    turns, fit_t = turnaround_points(deliveries, scale)
    confirms, fit_c = confirm_points(sends, scale)
    if not paths:
        raise RuntimeError("the calibration run recorded too few deliveries to tabulate")
    pairs = HOP_PAIRS if scale >= 1 else HOP_PAIRS // 4  # --quick: a smoke test, ~1 s
    progress(f"measuring the fault proxy's hop: {pairs} round-trip pairs")
    hop = measure_proxy_hop(pairs)
    return ClientPath(
        client=client,  # type: ignore[arg-type]
        delivery=paths,
        hold=holds,
        confirm=confirms,
        turnaround=turns,
        copy_gap=copy_gap(deliveries),
        fan_delay=fan_delay(deliveries, scale),
        follow_gap=follow_gap(sends),
        wake=wake,
        consumer_idle=idle,
        fit=fits + fit_t + fit_c,
        cpu_per_op=round(cpu_per_op(usage) or 0.0, 7),
        cpu=cpu_split(usage),
        proxy_hop=hop,
        protocol=PROTOCOL,
        provenance=Provenance(
            host=host,
            hostname=socket.gethostname(),
            date=datetime.now(UTC).isoformat(timespec="seconds"),
            broker_version=broker_version,
            client=client,  # type: ignore[arg-type]
            command=command,
            wall_s=round(time.monotonic() - started, 1),
            load_average=[round(x, 2) for x in load],
            rejected=rejected,
            foreign_cores=round(foreign, 3),
            busy=foreign > FOREIGN_CPU_LIMIT,
            cpu_loop_ms=loop_ms(),
        ),
    )
