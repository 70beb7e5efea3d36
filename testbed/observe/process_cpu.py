"""CPU time of each Locust process of a run, next to its records.

Every Locust process that runs users writes, when it quits, ``measured/processes/<worker>.json``:
the CPU seconds it spent from its first user's start to the end (after its last records were
written), the wall time of that span, how many publishes and deliveries it recorded, and a
sample every ``SAMPLE_S`` seconds of the same three running totals. A run's figures show how busy
each load generator was — a process near one core is the bottleneck of the run it measures.

Calibration needs the *marginal* CPU of one client operation (``ClientPath.cpu_per_op``, with
which the simulator makes the users of one process wait for each other), and the whole-run ratio
is not it: a Locust process spends CPU whether or not messages flow (its users' timers, Locust's
statistics, heartbeats, record flushes) — measured 0.1 of a core for SPECjms2007 interaction 3's
ten consumers at 36 operations/s, 3 ms of CPU per operation by the ratio, against 0.33-0.43 ms on
the fan-out at 1,100 operations/s. :func:`cpu_per_op` therefore fits, over the samples of every
process, CPU = a·time + b·operations by least squares and keeps the slope b; the calibration's
three phases of load give the spread of rates that separates the two.

Where in an operation the CPU goes matters as much as how much: a delivery's frames are read and
parsed *before* its handler starts (other users' deliveries that arrive meanwhile wait), its ack
and record *after* its service (the handler's own time already holds them). Publishes and
deliveries come one for one in calibration, so a fit over counts cannot tell them apart; the
process therefore also sums the CPU spent inside two spans it can see (``SPANS``, on this
thread's CPU clock): each publish (build, send, record) and each delivery's end (ack, record).
:func:`cpu_split` gives their means per operation and fits the rest — what no span covers: the
socket reads and frame parsing before a handler starts, a producer's timer waking it — over the
same samples, per publish and per delivery where the calibration's spread stream (five
deliveries a publish) lets the two apart, else per delivery alone.
"""

from __future__ import annotations

__all__ = [
    "SPANS",
    "CpuSpans",
    "DIRNAME",
    "MIN_SPREAD",
    "SAMPLE_S",
    "SPREAD_RATIO",
    "SPAN_EVERY",
    "ProcessUsage",
    "UsageClock",
    "cpu_per_op",
    "cpu_split",
    "generator_report",
    "read_usage",
    "trace_switches",
]

import json
import os
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import greenlet
import numpy as np
from greenlet import getcurrent

from testbed.core.client_path import BUSY_GENERATOR, CpuSplit

DIRNAME = "processes"
SAMPLE_S = 1.0
"""Seconds between two samples of a process's running totals."""
MIN_INTERVALS = 10
"""Sample intervals below which no marginal cost is fitted."""
SPREAD_RATIO, MIN_SPREAD = 3.0, 3
"""Intervals that deliver at least ``SPREAD_RATIO`` times as many messages as they publish, and
how many of them (``MIN_SPREAD``) split the CPU outside the spans between publishes and
deliveries (`cpu_split`; the calibration's spread stream delivers five a publish for 8 s)."""


class CpuSpans:
    """Running sums of this process's CPU inside its publishes and its deliveries' ends.

    Module state on purpose: CPU time belongs to the OS process, and every user of a Locust
    process runs on its one gevent thread, so one accumulator per process is the whole truth.
    ``time.thread_time`` reads that thread's CPU clock (other threads' work is not counted).

    A span is the CPU of *its own greenlet* between `start` and `stop`: a span can yield — pika's
    ack flushes its connection through gevent's hub — and the other users' work done meanwhile
    (their frames read and parsed, their handlers, their own spans) is theirs. Read off the
    thread's clock alone, a yielding span counted it too: on the fan-out 1→10 and the elastic
    ramp on RabbitMQ (2026-11-29) the spans summed to 1.09 and 1.14 times the process's whole
    CPU, which disjoint spans cannot. `switched`, set as the thread's greenlet trace
    (`trace_switches`), stops a span's clock while its greenlet is switched out (a 10-second
    fan-out 1→10: spans 0.50 of the process's CPU, ack 0.13 ms a delivery, against 1.13 and
    0.33 ms without it). Spans of one greenlet do not nest.

    One operation in ``every`` is timed, at random, and counts ``every`` times: the thread's CPU
    clock is a system call (0.87 µs here, ``time.thread_time``), and timing every publish spent
    a quarter of a saturated stomp.py generator's CPU in the two reads (py-spy, 2026-11-29). The
    sums stay unbiased; what calibration reads of them are means over thousands of operations.
    """

    __slots__ = ("publish_s", "ack_s", "every", "_open", "_draw")

    def __init__(self, every: int = 1, seed: int | None = None) -> None:
        self.publish_s = 0.0
        self.ack_s = 0.0
        self.every = every
        self._open: dict[Any, list[float]] = {}
        """Greenlet with an open span -> [its CPU so far, the instant it last resumed]."""
        self._draw = random.Random(seed).random

    def start(self) -> None:
        """Open a span of the calling greenlet (one call in ``every``, at random)."""
        if self.every == 1 or self._draw() * self.every < 1.0:
            self._open[getcurrent()] = [0.0, now_cpu()]

    def stop(self) -> float:
        """Close the calling greenlet's span: its own CPU since `start` times ``every`` (s; 0
        if none is open: not drawn, or not started)."""
        span = self._open.pop(getcurrent(), None)
        if span is None:
            return 0.0
        return (span[0] + now_cpu() - span[1]) * self.every

    def switched(self, event: str, args: tuple[Any, Any]) -> None:
        """greenlet trace: a switch pauses the origin's open span, resumes the target's."""
        if not self._open or event not in ("switch", "throw"):  # no open span: most switches
            return
        origin, target = args
        t = now_cpu()
        span = self._open.get(origin)
        if span is not None:
            span[0] += t - span[1]
        span = self._open.get(target)
        if span is not None:
            span[1] = t


SPAN_EVERY = 16
"""A Locust process times one publish or delivery end in this many (`CpuSpans`)."""
SPANS = CpuSpans(SPAN_EVERY)
"""This process's spans (testbed.workload's producers and consumers add to it)."""
now_cpu = time.thread_time
"""The clock the spans are measured on."""


def trace_switches() -> None:
    """Make this thread's spans exclusive of its other greenlets' work (`CpuSpans`): install
    `SPANS.switched` as the thread's greenlet trace, calling on to any trace set before. Once
    per thread; a Locust process calls it when its first user starts. Hand-written: neither
    gevent nor greenlet offers per-greenlet CPU accounting."""
    previous = greenlet.gettrace()
    ident = threading.get_ident()
    if ident in _TRACED and previous is _TRACED[ident]:
        return
    own = SPANS.switched
    if previous is None:
        trace: Any = own
    else:

        def trace(event: str, args: tuple[Any, Any]) -> None:
            own(event, args)
            previous(event, args)

    greenlet.settrace(trace)
    _TRACED[ident] = trace


_TRACED: dict[int, Any] = {}
"""Thread -> the trace `trace_switches` installed there."""


@dataclass(frozen=True)
class ProcessUsage:
    worker: str
    cpu_s: float
    wall_s: float
    publishes: int
    deliveries: int
    samples: list[list[float]] = field(default_factory=list)
    """[seconds since the start, CPU seconds, publishes, deliveries, CPU seconds inside
    publishes, CPU seconds inside deliveries' ends], every ``SAMPLE_S`` (files written before
    the spans have the first four)."""

    @property
    def utilisation(self) -> float:
        """Share of one core the process used over its span."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class UsageClock:
    """Started with the process's state; ``sample`` every ``SAMPLE_S`` (a greenlet calls it),
    ``write`` when the process quits."""

    def __init__(self) -> None:
        self.cpu0 = time.process_time()
        self.wall0 = time.monotonic()
        self.samples: list[list[float]] = []

    def _now(self, publishes: int, deliveries: int) -> list[float]:
        return [
            round(time.monotonic() - self.wall0, 3),
            round(time.process_time() - self.cpu0, 4),
            publishes,
            deliveries,
            round(SPANS.publish_s, 5),
            round(SPANS.ack_s, 5),
        ]

    def sample(self, publishes: int, deliveries: int) -> None:
        self.samples.append(self._now(publishes, deliveries))

    def write(self, measured_dir: Path, worker: str, publishes: int, deliveries: int) -> Path:
        wall, cpu, *_ = self._now(publishes, deliveries)
        usage = ProcessUsage(worker, cpu, wall, publishes, deliveries, self.samples)
        folder = Path(measured_dir) / DIRNAME
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{worker}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(usage), sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
        return path


def read_usage(root: Path) -> list[ProcessUsage]:
    """Every process usage file under ``root`` (a run, a replication or a measured directory);
    a file that is not one (torn, hand-edited) is left out."""
    out = []
    for path in sorted(Path(root).rglob(f"{DIRNAME}/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append(
                ProcessUsage(
                    str(data["worker"]),
                    float(data["cpu_s"]),
                    float(data["wall_s"]),
                    int(data["publishes"]),
                    int(data["deliveries"]),
                    [[float(x) for x in s] for s in data.get("samples", [])],
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def cpu_per_op(usages: list[ProcessUsage]) -> float | None:
    """Marginal CPU seconds per client operation (publish or delivery): the slope b of
    CPU = a·time + b·operations fitted by least squares over every sample interval of every
    process (see the module docstring); None with fewer than ``MIN_INTERVALS`` intervals, no
    spread of rates, or a slope that is not positive."""
    rows = []
    for u in usages:
        s = np.asarray([x[:4] for x in u.samples], dtype=float)
        if len(s) < 2 or s.shape[1] != 4:
            continue
        d = np.diff(s, axis=0)
        rows.append(np.column_stack([d[:, 0], d[:, 2] + d[:, 3], d[:, 1]]))
    if not rows:
        return None
    x = np.concatenate(rows)
    x = x[x[:, 0] > 0]
    rates = x[:, 1] / x[:, 0] if len(x) else x[:, 1]
    if len(x) < MIN_INTERVALS or np.ptp(rates) < 0.2 * rates.max():
        return None  # too few intervals, or too little spread of rates to separate the terms
    (_, slope), *_ = np.linalg.lstsq(x[:, :2], x[:, 2], rcond=None)
    return float(slope) if slope > 0 else None


def cpu_split(usages: list[ProcessUsage]) -> CpuSplit | None:
    """Where a client operation's CPU goes (see the module docstring): the spans' sums over
    the publishes and deliveries they cover give ``publish`` and ``ack``; the CPU outside them
    is fitted by least squares over every sample interval, as a·time + receive·deliveries, or —
    when some intervals deliver at least ``SPREAD_RATIO`` times as often as they publish (the
    calibration's spread stream) — as a·time + publish_rest·publishes + receive·deliveries.
    None without span samples, with fewer than ``MIN_INTERVALS`` intervals or too little spread
    of delivery rates; a share fitted below zero is 0 (the other holds it all)."""
    rows = []
    for u in usages:
        s = np.asarray([x for x in u.samples if len(x) == 6], dtype=float)
        if len(s) >= 2:
            rows.append(np.diff(s, axis=0))
    if not rows:
        return None
    d = np.concatenate(rows)
    d = d[d[:, 0] > 0]
    publishes, deliveries = d[:, 2].sum(), d[:, 3].sum()
    if len(d) < MIN_INTERVALS or deliveries <= 0 or publishes <= 0:
        return None
    rates = d[:, 3] / d[:, 0]
    if np.ptp(rates) < 0.2 * rates.max():
        return None
    rest = d[:, 1] - d[:, 4] - d[:, 5]
    publish_rest, receive = _split_rest(d, rest)
    return CpuSplit(
        publish=round(float(d[:, 4].sum() / publishes), 7),
        receive=round(receive, 7),
        ack=round(float(d[:, 5].sum() / deliveries), 7),
        publish_rest=None if publish_rest is None else round(publish_rest, 7),
    )


def _split_rest(d: np.ndarray, rest: np.ndarray) -> tuple[float | None, float]:
    """(CPU per publish, CPU per delivery) outside the spans, from sample intervals ``d``
    (columns as ``ProcessUsage.samples``, differenced) and their CPU outside the spans. The
    publishes' share is None when no ``MIN_SPREAD`` intervals deliver ``SPREAD_RATIO`` times as
    often as they publish: publishes and deliveries then come one for one and a fit cannot
    tell them apart (it puts all on the deliveries, which `cpu_split` then says)."""
    spread = (d[:, 2] > 0) & (d[:, 3] >= SPREAD_RATIO * d[:, 2])
    if spread.sum() < MIN_SPREAD:
        return None, max(_slopes(d, rest, 3)[0], 0.0)
    per_publish, per_delivery = _slopes(d, rest, 2, 3)
    # a share fitted below zero: the other holds it all, fitted alone
    if per_publish < 0:
        return 0.0, max(_slopes(d, rest, 3)[0], 0.0)
    if per_delivery < 0:
        return max(_slopes(d, rest, 2)[0], 0.0), 0.0
    return per_publish, per_delivery


def _slopes(d: np.ndarray, y: np.ndarray, *columns: int) -> list[float]:
    """Least-squares slopes of ``y`` on the given columns of ``d``, beside a term in time."""
    coef, *_ = np.linalg.lstsq(d[:, [0, *columns]], y, rcond=None)
    return [float(c) for c in coef[1:]]


def generator_report(usages: list[ProcessUsage]) -> tuple[list[dict[str, object]], list[str]]:
    """(``environment.json``'s ``load_generators`` entries, warnings for processes busier than
    ``BUSY_GENERATOR``): a load generator near a whole core delays its own publishes and
    deliveries, and the run then measures the generator as much as the broker."""
    rows: list[dict[str, object]] = []
    warnings = []
    for u in usages:
        entry = {k: v for k, v in asdict(u).items() if k != "samples"}
        rows.append({**entry, "utilisation": round(u.utilisation, 3)})
        if u.utilisation > BUSY_GENERATOR:
            warnings.append(
                f"warning: Locust process {u.worker} used {u.utilisation:.0%} of a core over the "
                "run: the load generator may be the bottleneck it measures; raise `workers`"
            )
    return rows, warnings
