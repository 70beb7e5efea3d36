"""A refused STOMP connect fails at once: the runner's own backoff (testbed.workload.users)
decides when to try again, as the simulator assumes (emulator.sim.faults_clients)."""

from __future__ import annotations

import socket
import time

import pytest

from testbed.brokers.base import ConnectionLost
from testbed.brokers.stomp_session import StompSession


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connect_fails_without_the_librarys_own_sleep() -> None:
    session = StompSession("127.0.0.1", _closed_port(), "u", "p", connect_timeout=5.0)
    t0 = time.monotonic()
    with pytest.raises(ConnectionLost):
        session.connect()
    # stomp.py's default sleeps 0.1 s in 0.2 s steps after the failed attempt
    assert time.monotonic() - t0 < 0.15
