"""Free TCP ports on 127.0.0.1 for local brokers, and "is anything listening there?" probes.

Ports are drawn at random *below* the kernel's ephemeral range so that outgoing connections
(which take ephemeral ports) cannot grab a broker's port while it is down for a restart.
"""

from __future__ import annotations

__all__ = ["LOOPBACK", "pick_free_ports", "port_open", "wait_port_open"]

import random
import socket
import time
from collections.abc import Collection
from pathlib import Path

from testbed.exceptions import BackendError

LOOPBACK = "127.0.0.1"

# Well-known ports of the brokers and tools we run (and RabbitMQ's CLI dist range), never picked.
_RESERVED = {4369, 5672, 15672, 15692, 25672, 61613, 61614, 61616, 8161, 9090}
_RESERVED.update(range(35672, 35683))


def _candidate_range() -> range:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    if low > 12000:
        return range(max(10000, low - 12000), low)
    return range(1024, low) if low > 2048 else range(10000, 30000)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def pick_free_ports(count: int, *, exclude: Collection[int] = ()) -> list[int]:
    """`count` distinct ports that can be bound on 127.0.0.1 right now, none in `exclude`."""
    candidates = _candidate_range()
    chosen: list[int] = []
    rng = random.SystemRandom()
    for _ in range(count * 200):
        if len(chosen) == count:
            break
        port = rng.choice(candidates)
        if port in _RESERVED or port in exclude or port in chosen:
            continue
        if _bindable(port):
            chosen.append(port)
    if len(chosen) != count:
        raise BackendError(
            f"could not find {count} free TCP ports on {LOOPBACK} in "
            f"{candidates.start}-{candidates.stop - 1} (found {len(chosen)})"
        )
    return chosen


def port_open(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port_open(port: int, timeout: float, *, poll: float = 0.05) -> bool:
    """Poll until 127.0.0.1:`port` accepts connections or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if port_open(port, timeout=min(0.5, max(0.05, deadline - time.monotonic()))):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
