"""Correlation job performance: wall time and peak memory at 1e5, 1e6, 1e7 delivery rows.

    .venv/bin/python tests/bench/bench_correlate.py                 # 1e5, 1e6, 1e7 (~5 min)
    .venv/bin/python tests/bench/bench_correlate.py --sizes 1e5 1e6 # quicker

A plain script that prints figures (not a timed unit test). For each size N it writes a
synthetic run directory (``tests/analysis/synthetic.py``, vectorised numpy → Parquet) whose
measured **and** predicted sides each hold N messages and N acked deliveries over 300 s
(one replication each, so N rows per side, 2N in all), then runs the whole correlation job
(``analyse_run``: windows, summary metrics, histograms/CDF/KS, the per-type join, the
summary) in a fresh child process on a ``local[2]`` Spark session.

Figures per size: data generation time; Spark session start; job wall time and CPU seconds
(Python + JVM, from ``/proc``: the figure that survives a machine shared with other work) in a
fresh JVM and again warmed up; CPU µs per row;
peak memory as the **sum of the RSS of the child's Python and its driver JVM**, sampled from
``/proc/<pid>/status`` every 0.2 s (and, as a cross-check, ``getrusage(RUSAGE_CHILDREN)``
``ru_maxrss``, which is the largest single descendant, i.e. the JVM). Growth is judged by
the time per row, which should stay roughly flat (linear); the target is < 3 min at 1e7
(issue 18's: < 10 min and < 8 GiB at 1e8, which the default sizes do not reach).

Besides that human output it prints each figure as a record of `mqbed bench`'s figure protocol
(``mqbed-figure {...}`` lines, testbed/bench/figures.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DURATION_S = 300.0
TARGETED = ("1e7", "1e8")
"""Sizes with catalogued targets: a run without them says so in their rows."""


def _tag(n: int) -> str:
    e = round(math.log10(n))
    return f"1e{e}" if 10**e == n else f"{n:,}"


def _emit(key: str, value: float | None, **kw: Any) -> None:
    """A figure record on stdout; imported here, not at the top: the child process measures
    its own memory and must not carry the suite's modules."""
    from testbed.bench.catalogue import emit

    emit(key, value, **kw)


def figures(n: int, fig: dict[str, float]) -> None:
    """The records of one size: wall time, CPU per row (its growth), peak memory."""
    tag = _tag(n)
    _emit(
        f"correlation.job_s@{tag}",
        fig["job_s"],
        unit="s",
        name=f"correlation job wall time, {tag} rows per side (fresh JVM)",
    )
    _emit(
        f"correlation.cpu_per_row@{tag}",
        fig["warm_cpu_s"] / (2 * n) * 1e6,
        unit="µs",
        name=f"CPU per row (Python + JVM, warm), {tag} rows per side",
    )
    _emit(
        f"correlation.rss@{tag}",
        fig["peak_rss_sum_mib"],
        unit="MiB",
        name=f"peak RSS (Python + JVM), {tag} rows per side",
    )


def not_run(sizes: list[str]) -> None:
    """Rows for the catalogued sizes this run left out, with the reason."""
    ran = {_tag(int(float(t))) for t in sizes}
    for tag in TARGETED:
        if tag not in ran:
            why = (
                f"not among the sizes run ({' '.join(sizes)}); "
                f"`python tests/bench/bench_correlate.py --sizes {tag}` measures it"
            )
            _emit(f"correlation.job_s@{tag}", None, note=why)
            if tag == "1e8":
                _emit("correlation.rss@1e8", None, note=why)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    """user + system CPU seconds of process `pid` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(run_dir: Path, driver_memory: str) -> None:
    """Run the job once in this process and print one JSON line of figures."""
    from pyspark import SparkContext

    from testbed.analysis.job import analyse_run
    from testbed.analysis.session import spark_session, stop_spark

    peak = {"sum_kib": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            gateway = SparkContext._gateway
            proc = getattr(gateway, "proc", None) if gateway is not None else None
            total = _rss_kib(os.getpid()) + (_rss_kib(proc.pid) if proc is not None else 0)
            peak["sum_kib"] = max(peak["sum_kib"], total)
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    spark = spark_session("local[2]", app_name="mqbed-bench", driver_memory=driver_memory)
    jvm = SparkContext._gateway.proc.pid  # type: ignore[union-attr]

    def cpu() -> float:
        return _cpu_s(os.getpid()) + _cpu_s(jvm)

    t1, c1 = time.perf_counter(), cpu()
    result = analyse_run(spark, run_dir)
    t2, c2 = time.perf_counter(), cpu()
    analyse_run(spark, run_dir)  # again, in the warmed-up JVM
    t3, c3 = time.perf_counter(), cpu()
    stop_spark(spark)
    stop.set()
    sampler.join(timeout=2)
    tp = next(e for e in result.summary["metrics"] if e["metric"] == "throughput_msg_s")
    print(
        json.dumps(
            {
                "session_s": t1 - t0,
                "job_s": t2 - t1,
                "warm_job_s": t3 - t2,
                "job_cpu_s": c2 - c1,
                "warm_cpu_s": c3 - c2,
                "peak_rss_sum_mib": peak["sum_kib"] / 1024,
                "throughput_measured": tp["measured"],
                "windows": len(result.windows),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1e5", "1e6", "1e7"])
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic run dirs")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.driver_memory)
        return
    from tests.analysis.synthetic import write_run

    work = Path(tempfile.mkdtemp(prefix="bench-correlate-"))
    print(
        f"{'rows/side':>10} {'gen s':>6} {'spark s':>7} {'job s':>6} {'cpu s':>6} "
        f"{'warm s':>6} {'cpu s':>6} {'cpu µs/row':>10} {'peak RSS MiB (py+JVM)':>21} "
        f"{'ru_maxrss MiB':>13}"
    )
    try:
        for text in args.sizes:
            n = int(float(text))
            t = time.perf_counter()
            run_dir = write_run(
                work / f"n{n}",
                messages=n,
                rate=n / DURATION_S,
                warmup=5.0,
                predicted_replications=1,
                name=f"bench-{n}",
            )
            gen_s = time.perf_counter() - t
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    str(run_dir),
                    "--driver-memory",
                    args.driver_memory,
                ],
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
                cwd=ROOT,
            )
            maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"child failed for n={n}")
            fig = json.loads(out.stdout.strip().splitlines()[-1])
            rows = 2 * n
            print(
                f"{n:>10.0e} {gen_s:6.1f} {fig['session_s']:7.1f} {fig['job_s']:6.1f} "
                f"{fig['job_cpu_s']:6.1f} {fig['warm_job_s']:6.1f} {fig['warm_cpu_s']:6.1f} "
                f"{fig['warm_cpu_s'] / rows * 1e6:10.2f} {fig['peak_rss_sum_mib']:21,.0f} "
                f"{maxrss / 1024:13,.0f}",
                flush=True,
            )
            figures(n, fig)
            if not args.keep:
                shutil.rmtree(run_dir.parent, ignore_errors=True)
        not_run(args.sizes)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
