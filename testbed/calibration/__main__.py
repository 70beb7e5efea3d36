"""``python -m testbed.calibration``: the calibration from a shell (docs/models.md §9).

Same options as ``mqbed calibrate``; the exact command line is recorded in the profile header.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from testbed.calibration.api import calibrate
from testbed.exceptions import MqbedError


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m testbed.calibration", description=__doc__)
    ap.add_argument("--broker", required=True, choices=["rabbitmq", "activemq"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--home", type=Path, default=None)
    a = ap.parse_args(args_list)
    out = a.out or Path("deploy/calibration") / f"{a.broker}-local.yaml"
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
