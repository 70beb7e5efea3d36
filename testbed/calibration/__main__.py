"""``python -m testbed.calibration``: the broker micro-benchmarks alone (docs/models.md §9).

The stages of ``mqbed calibrate`` without its client path and without its machine cache: it
writes only the profile named by ``--out`` (never a shipped profile by default). The exact
command line is recorded in the profile header. For a profile runs use, call ``mqbed
calibrate`` (it adds the client path measured through the live workload).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from testbed.calibration.api import calibrate
from testbed.core.broker_kinds import KINDS
from testbed.exceptions import MqbedError


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="python -m testbed.calibration",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 written, 2 usage error, 3 configuration error, 4 run failure.",
    )
    ap.add_argument(
        "--broker",
        required=True,
        choices=list(KINDS),
        help="the broker to measure (a local one is started when none is up)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE",
        help="the profile YAML file to write (required: a shipped profile in "
        "deploy/calibration/ is only overwritten when named here)",
    )
    ap.add_argument(
        "--duration",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds per point after warm-up (default 60)",
    )
    ap.add_argument(
        "--repeats", type=int, default=3, metavar="N", help="repetitions per point (default 3)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: 2-second points, one repeat, three sizes",
    )
    ap.add_argument("--home", type=Path, default=None, metavar="DIR",
                    help="testbed home whose running broker to use")  # fmt: skip
    a = ap.parse_args(args_list)
    out = a.out
    command = shlex.join(["python", "-m", "testbed.calibration", *args_list])
    try:
        path = calibrate(
            a.broker, out, duration=a.duration, repeats=a.repeats, quick=a.quick,
            home=a.home, command=command,
        )  # fmt: skip
    except MqbedError as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
