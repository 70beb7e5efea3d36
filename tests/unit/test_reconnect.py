"""The reconnect backoff is one rule (`testbed.core.reconnect`): the live users sleep its delays,
the simulator schedules its attempts by it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.core.reconnect import FIRST_RETRY, RETRY_CAP, next_attempt, next_delay

ROOT = Path(__file__).resolve().parents[2]


def delays(n: int) -> list[float]:
    out = [FIRST_RETRY]
    while len(out) < n:
        out.append(next_delay(out[-1]))
    return out


def test_the_delays_double_from_a_tenth_of_a_second_to_two() -> None:
    assert delays(8) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])
    assert RETRY_CAP == 2.0


def test_next_attempt_is_the_first_try_after_the_broker_is_back() -> None:
    # tries at 0.1, 0.3, 0.7, 1.5, 3.1, 5.1, 7.1: the first at or after 3.0 is 3.1
    t, delay = next_attempt(0.0, FIRST_RETRY, 3.0)
    assert (t, delay) == pytest.approx((3.1, 2.0))
    assert next_attempt(5.0, FIRST_RETRY, 5.05) == pytest.approx((5.1, 0.2))
    assert next_attempt(0.0, 2.0, 0.0) == pytest.approx((2.0, 2.0))  # one sleep at least


LIVE = """
import json, sys, types
from testbed.workload import users
slept = []
users.time.sleep = slept.append
tries = []
def connect():
    tries.append(1)
    if len(tries) < 7:
        raise ConnectionError("down")
    return "adapter"
me = types.SimpleNamespace(name="c0", _connect=connect)
ok = users._MqbedUser._reconnect(me, types.SimpleNamespace(stopping=False))
print(json.dumps({"ok": ok, "slept": slept, "adapter": me.adapter}))
"""


def test_the_live_users_sleep_the_same_delays() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LIVE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {"ok": True, "slept": delays(7), "adapter": "adapter"}
