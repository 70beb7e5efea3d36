"""`mqbed bench`: run the benchmark scripts of ``tests/bench/`` and write what they measured.

Each benchmark is a plain script that prints its figures (they never assert a speed). This
module runs them one after the other — never in parallel, they would measure each other — and
writes ``docs/performance.md``: the machine, the exact command of each benchmark, its wall
time and its output. ``--quick`` runs short variants that check the machinery (a broken
benchmark fails the command), not the numbers.
"""

from __future__ import annotations

__all__ = ["BENCHMARKS", "run_benchmarks"]

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from testbed.exceptions import MqbedError
from testbed.observe.environment import environment

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Benchmark:
    name: str
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
        "Locust generator: rate fidelity at 1,000 msg/s, msg/s per worker vs "
        "a bare pika loop, recording overhead",
        "bench_workload.py",
    ),
    Benchmark(
        "simulator",
        "simulated messages per wall second, growth 1e4 -> 1e6, peak memory, memory of a "
        "6-minute vs a 1-hour prediction (ratio), M/M/2 and tandem vs bare SimPy and Ciw",
        "bench_sim.py",
    ),
    Benchmark(
        "fault-proxy",
        "latency added by the fault proxy, throughput through it vs direct",
        "bench_proxy.py",
    ),
    Benchmark(
        "correlation",
        "Spark correlation of synthetic delivery rows: time and memory from 1e5 to 1e7 rows",
        "bench_correlate.py",
        quick=("--sizes", "1e5"),
    ),
)


def _command(b: Benchmark, quick: bool) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "tests" / "bench" / b.script),
        *(b.quick if quick else b.full),
    ]


def _run_script(cmd: list[str], timeout: float) -> tuple[str, int]:
    """Run one benchmark script in its own process group → (stdout + stderr tail, exit code).

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
        return out + err[-4000:], proc.returncode
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                out, err = proc.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                out, err = "", ""
        return f"timed out after {timeout:.0f} s\n{out}{err[-4000:]}", -1


def run_benchmarks(
    out: Path,
    *,
    quick: bool = False,
    only: list[str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Path:
    """Run the benchmarks (all, or those named in `only`); write the report to `out`."""
    chosen = [b for b in BENCHMARKS if not only or b.name in only]
    unknown = set(only or ()) - {b.name for b in BENCHMARKS}
    if unknown:
        raise MqbedError(
            f"unknown benchmark(s) {sorted(unknown)}; choose from {[b.name for b in BENCHMARKS]}"
        )
    sections = []
    failures = []
    for b in chosen:
        cmd = _command(b, quick)
        progress(f"bench {b.name}: {' '.join(cmd[1:])}")
        t0 = time.monotonic()
        output, rc = _run_script(cmd, b.quick_timeout if quick else b.timeout)
        wall = time.monotonic() - t0
        if rc != 0:
            failures.append(f"{b.name} (exit {rc})")
        rel = " ".join(["python", str(Path("tests/bench") / b.script), *cmd[2:]])
        sections.append(
            f"## {b.name}\n\n{b.what}.\n\n```\n{rel}\n```\n\nexit {rc}, {wall:.1f} s wall\n\n"
            f"```\n{output.strip()}\n```\n"
        )
    env = environment()
    machine = {k: env[k] for k in ("host", "platform", "python", "packages")}
    text = (
        f"# mqbed performance figures{' (quick: machinery check, not numbers)' if quick else ''}"
        f"\n\nProduced by `mqbed bench{' --quick' if quick else ''}` on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}. Figures are one machine's and "
        "noisy: re-measure before quoting.\n\nMachine:\n\n```json\n"
        f"{json.dumps(machine, indent=2)}\n```\n\n" + "\n".join(sections)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    if failures:
        raise MqbedError(f"benchmark(s) failed: {', '.join(failures)}; see {out}")
    return out
