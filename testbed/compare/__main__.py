"""``python -m testbed.compare RUN_A RUN_B [...] [--page-dir DIR] [--json]``.

Exit codes (those of ``mqbed``): 0 compared (whatever the differences), 2 usage error, 3 bad
input (fewer than two runs, a directory that is not a run, a run without measured data), 130
interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from testbed.compare.core import compare_runs
from testbed.exceptions import MqbedError

DESCRIPTION = """\
Compare measured runs (directories written by `mqbed run`), each against the first one, the
baseline. Per metric (throughput, latency mean/p50/p95/p99, queue depth, losses, duplicates;
load window only) it shows both values, the difference, a bootstrap interval of the difference
and whether the difference is significant (the interval excludes 0). Replications are
resampled when both runs have at least 3, otherwise blocks of short slices of the load
window (ledger counts: a Poisson law); the output names the method. The intervals are
simultaneous over the metrics (Bonferroni): two runs of the same scenario show nothing
significant at the given level. Spark reads the runs (local[*] unless --spark-master).
Runs of different scenarios are compared with a warning."""

EPILOG = """\
examples:
  python -m testbed.compare runs/20260101T000000Z-quickstart runs/20260102T000000Z-quickstart
  python -m testbed.compare runs/A runs/B runs/C --page-dir runs/compare-abc
  python -m testbed.compare runs/A runs/B --json > comparison.json

--page-dir DIR writes compare.html (overlaid latency CDFs, throughput, latency and queue depth
over time, the table), compare.md and compare.json. --json prints the JSON document on stdout;
progress and the table go to stderr. Exit codes: 0 compared, 2 usage error, 3 bad input (not a
run, no data), 130 interrupted."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m testbed.compare",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="run directories; the first is the baseline",
    )
    p.add_argument(
        "--page-dir",
        type=Path,
        metavar="DIR",
        help="write compare.html, compare.md, compare.json here",
    )
    # the old spelling (`--out DIR` now means a parent directory everywhere): still accepted
    p.add_argument("--out", type=Path, dest="old_out", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    p.add_argument(
        "--level",
        type=float,
        default=0.95,
        metavar="P",
        help="simultaneous confidence level of the intervals (default 0.95)",
    )
    p.add_argument("--spark-master", metavar="URL", help="Spark master URL (default local[*])")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console(stderr=True, emoji=False)
    if args.old_out is not None:
        if args.page_dir is not None:
            parser().error("--out is the old spelling of --page-dir: give --page-dir only")
        deprecated = "python -m testbed.compare: --out is deprecated, use --page-dir"
        console.print(deprecated, markup=False)
        args.page_dir = args.old_out
    try:
        doc = compare_runs(
            args.runs, args.page_dir, console, level=args.level, spark_master=args.spark_master
        )
    except MqbedError as exc:
        console.print(f"error: {exc}", markup=False, style="red")
        return exc.exit_code
    except KeyboardInterrupt:
        console.print("interrupted", markup=False)
        return 130
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
