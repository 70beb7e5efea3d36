"""Wait until the machine is quiet: for live comparisons that foreign load would distort.

The accuracy gate compares a live run with a prediction from a profile measured minutes
before; if the other pytest-xdist worker loads the machine during one of the two and not the
other, the comparison measures that load, not the model. `wait_until_quiet` waits (bounded)
until processes outside this test's process tree have used at most `limit` cores for
`settle` seconds in a row; it returns what it saw, so the test can say it in a failure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from testbed.observe.foreign_load import CpuMeter


def wait_until_quiet(
    limit: float = 0.3, settle: float = 10.0, timeout: float = 900.0, also: Sequence[int] = ()
) -> str:
    """Block until foreign CPU <= `limit` cores over `settle` s (at most `timeout` s); the
    processes in `also` (a broker this test uses) count as this test's own."""
    t0 = time.monotonic()
    last = float("nan")
    while time.monotonic() - t0 < timeout:
        meter = CpuMeter(also)
        time.sleep(settle)
        last = meter.foreign_cores()
        if last <= limit:
            return f"quiet after {time.monotonic() - t0:.0f} s (foreign load {last:.2f} cores)"
    return f"not quiet after {timeout:.0f} s (foreign load {last:.2f} cores): ran anyway"
