"""`mqbed bench` runs each benchmark script in its own process group: a stuck one is stopped
with everything it started, and its output so far is kept (it says which step hung)."""

from __future__ import annotations

import os
import sys
import time

from testbed.bench.runner import run_script


def test_stuck_script_is_stopped_with_its_children_and_keeps_its_output() -> None:
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "print(f'child {child.pid}', flush=True)\n"
        "print('[  0.1 s] rate_fidelity', file=sys.stderr, flush=True)\n"
        "time.sleep(300)\n"
    )
    t0 = time.monotonic()
    ran = run_script([sys.executable, "-c", script], timeout=2.0)
    assert ran.rc == -1 and time.monotonic() - t0 < 30
    assert ran.stderr.startswith("timed out after 2 s") and "rate_fidelity" in ran.stderr
    child = int(ran.stdout.split("child ", 1)[1].split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}"):
        time.sleep(0.1)  # init reaps the orphan
    assert not os.path.exists(f"/proc/{child}"), "the script's child outlived the timeout"


def test_finished_script_gives_its_output_and_exit_code() -> None:
    ran = run_script([sys.executable, "-c", "print('figures'); raise SystemExit(3)"], 30)
    assert ran.rc == 3 and ran.stdout.strip() == "figures" and ran.stderr == ""
