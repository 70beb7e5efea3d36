"""`mqbed bench`: run the benchmark scripts of ``tests/bench/`` and collect their figures.

Each benchmark is a plain script that prints its figures for people and, one line each, as
records of the figure protocol (:mod:`testbed.bench.figures`); it never asserts a speed. This
module runs them one after the other — never in parallel, they would measure each other —
reads the records out of each script's stdout and builds one document: the machine, then per
area its figures, each judged against its target (:mod:`testbed.bench.catalogue`).
``docs/performance.md`` is that document rendered (:mod:`testbed.bench.markdown`); ``--json``
prints it as it is. ``--quick`` runs short variants that check the machinery (a broken
benchmark fails the command), not the numbers.
"""

from __future__ import annotations

__all__ = ["BENCHMARKS", "ROOT", "Benchmark", "Ran", "run_benchmarks", "run_script"]

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed.bench.catalogue import expected
from testbed.bench.figures import Figure, parse
from testbed.bench.markdown import kept_sections, markdown, scrub
from testbed.exceptions import MqbedError
from testbed.observe.environment import environment

ROOT = Path(__file__).resolve().parents[2]
TAIL_LINES = 25


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    what: str
    script: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)
    timeout: float = 1800.0
    quick_timeout: float = 240.0
    """A quick variant takes 2-60 s here; past this it is stuck, and its output says where."""


BENCHMARKS = (
    Benchmark(
        "workload",
        "the Locust generator and the recorder",
        "One Locust worker publishing against real brokers: how closely an open-loop Poisson "
        "schedule is kept (msg/s sent against the schedule, publish delay = sent − scheduled), "
        "how many msg/s one worker publishes against a bare client loop on the same broker in "
        "the same run (transient, no confirms, 200 B), what recording costs, and broker "
        "start-up.",
        "bench_workload.py",
    ),
    Benchmark(
        "simulator",
        "the prediction engine",
        "The discrete-event simulator behind predictions: event-loop speed, how a whole "
        "prediction's cost and memory grow with its size and with the simulated duration, and "
        "the same M/M/2 and tandem models side by side in bare SimPy and Ciw (speed, and mean "
        "sojourn with 95 % intervals).",
        "bench_sim.py",
    ),
    Benchmark(
        "fault-proxy",
        "the network-fault proxy",
        "mqbed's asyncio TCP proxy that network faults go through: the round-trip time a link "
        "adds on 127.0.0.1 (no toxic, and a 0 ms latency toxic, which takes the queued path "
        "every toxic uses), and bulk throughput through a link against a direct connection.",
        "bench_proxy.py",
    ),
    Benchmark(
        "correlation",
        "the Spark analysis",
        "The Spark correlation job on synthetic runs with N measured and N predicted delivery "
        "rows (windows, metrics, distributions, the per-type join), in a fresh local[2] JVM: "
        "wall time, CPU per row (its growth across sizes) and peak RSS of Python + JVM.",
        "bench_correlate.py",
        quick=("--sizes", "1e5"),
    ),
)


@dataclass(frozen=True)
class Ran:
    stdout: str
    stderr: str
    rc: int
    """Exit code; -1 when it timed out (``stderr`` then starts with "timed out after")."""


def _command(b: Benchmark, quick: bool) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "tests" / "bench" / b.script),
        *(b.quick if quick else b.full),
    ]


def run_script(cmd: list[str], timeout: float) -> Ran:
    """Run one benchmark script in its own process group.

    On timeout the whole group (the script and the brokers, Locust and JVMs it started) gets
    SIGTERM, then SIGKILL 15 s later; the output so far is kept (exit code -1)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return Ran(out, err, proc.returncode)
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                out, err = proc.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                out, err = "", ""
        return Ran(out, f"timed out after {timeout:.0f} s\n{err}", -1)


def merge(area: str, emitted: Sequence[Figure], failed: bool) -> list[Figure]:
    """The area's rows: every catalogued figure (what the script printed, else "not measured"
    with the reason) in catalogue order, then the uncatalogued ones it printed."""
    got = {f.key: f for f in emitted}
    why = (
        "the benchmark failed before measuring it (its output is below)"
        if failed
        else "the script printed no figure for it"
    )
    rows = [got.pop(f.key) if f.key in got else f.unmeasured(why) for f in expected(area)]
    return rows + [f for f in emitted if f.key in got]


def tail(ran: Ran, other_stdout: list[str]) -> str:
    """The last lines of a failed script's output (stdout without records, then stderr), with
    this machine's paths made relative."""
    lines = [*other_stdout, *ran.stderr.splitlines()]
    lines = [line[:240] for line in lines if line.strip()][-TAIL_LINES:]
    return scrub("\n".join(lines), ROOT)


def mqbed_command(quick: bool, only: Sequence[str] = ()) -> str:
    args = ["mqbed", "bench", "--suite", "performance"]
    for name in only:
        args += ["--only", name]
    return shlex.join(args + (["--quick"] if quick else []))


def run_area(b: Benchmark, quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    """Run benchmark `b` → its area of the document (figures as records)."""
    cmd = _command(b, quick)
    script = shlex.join(["python", f"tests/bench/{b.script}", *cmd[2:]])
    progress(f"bench {b.name}: {script}")
    t0 = time.monotonic()
    ran = run_script(cmd, b.quick_timeout if quick else b.timeout)
    wall = time.monotonic() - t0
    parsed = parse(ran.stdout)
    rows = merge(b.name, parsed.figures, ran.rc != 0)
    return {
        "area": b.name,
        "title": b.title,
        "what": b.what,
        "script": script,
        "command": mqbed_command(quick, [b.name]),
        "exit": ran.rc,
        "wall_s": round(wall, 1),
        "ok": ran.rc == 0,
        "figures": [f.record() for f in rows],
        "brokers": parsed.brokers,
        "unreadable_records": parsed.bad,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "tail": None if ran.rc == 0 else tail(ran, parsed.other),
    }


def machine(env: dict[str, Any], brokers: dict[str, str]) -> dict[str, Any]:
    """What ran the benchmarks, without its name or paths (from ``environment()``)."""
    host = env.get("host") or {}
    return {
        "cpu_model": host.get("cpu_model"),
        "cpus": host.get("cpus"),
        "memory_bytes": host.get("memory_bytes"),
        "os": env.get("platform"),
        "python": env.get("python"),
        "mqbed": env.get("mqbed"),
        "brokers": dict(sorted(brokers.items())),
    }


def summary(areas: list[dict[str, Any]]) -> dict[str, int]:
    rows = [f for a in areas for f in a["figures"]]
    targeted = [f for f in rows if f["target"] is not None]
    count = lambda status: sum(f["status"] == status for f in targeted)  # noqa: E731
    return {
        "figures": len(rows),
        "with_target": len(targeted),
        "pass": count("pass"),
        "fail": count("fail"),
        "not_judged": count("not judged"),
        "not_measured": count("not measured"),
    }


def run_benchmarks(
    out: Path,
    *,
    quick: bool = False,
    only: list[str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the benchmarks (all, or those named in `only`), write the Markdown report to `out`
    and return the document it renders (``failed`` names the benchmarks that failed)."""
    unknown = set(only or ()) - {b.name for b in BENCHMARKS}
    if unknown:
        raise MqbedError(
            f"unknown benchmark(s) {sorted(unknown)}; choose from {[b.name for b in BENCHMARKS]}"
        )
    chosen = [b for b in BENCHMARKS if not only or b.name in only]
    areas = [run_area(b, quick, progress) for b in chosen]
    brokers = {k: v for a in areas for k, v in a["brokers"].items()}
    doc = {
        "command": mqbed_command(quick, [b.name for b in chosen] if only else ()),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": quick,
        "machine": machine(environment(), brokers),
        "summary": summary(areas),
        "failed": [f"{a['area']} (exit {a['exit']})" for a in areas if not a["ok"]],
        "areas": areas,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    others = [b.name for b in BENCHMARKS if b not in chosen]
    keep = out.exists() and not quick  # a quick run's figures are no numbers to sit beside
    kept = kept_sections(out.read_text(encoding="utf-8"), others) if keep else {}
    out.write_text(markdown(doc, kept, [b.name for b in BENCHMARKS]), encoding="utf-8")
    return doc
