"""`environment.json`: what ran where — versions, host, backend, clock notes."""

from __future__ import annotations

__all__ = ["environment", "cpu_model", "memory_bytes"]

import os
import platform
import socket
import sys
from importlib import metadata
from typing import Any

import psutil

import testbed
from testbed.observe.cpu_speed import loop_ms

_PACKAGES = (
    "pika",
    "kombu",
    "stomp.py",
    "locust",
    "gevent",
    "simpy",
    "pyspark",
    "pandas",
    "pyarrow",
    "numpy",
    "pydantic",
    "prometheus-client",
    "docker",
    "testcontainers",
)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``; else what `platform` knows, or None).

    Read by hand on purpose: psutil, which gives the memory below, has no CPU model name (only
    counts, frequencies and times), and `platform.processor()` is an empty string or the
    architecture on Linux."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def memory_bytes() -> int | None:
    """The machine's physical memory (psutil: MemTotal of /proc/meminfo on Linux)."""
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, psutil.Error):
        return None


def environment(**extra: Any) -> dict[str, Any]:
    return {
        "mqbed": testbed.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": {
            "name": socket.gethostname(),
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "memory_bytes": memory_bytes(),
            "cpu_loop_ms": loop_ms(),  # this machine's speed now (testbed.observe.cpu_speed)
        },
        "packages": {p: _version(p) for p in _PACKAGES},
        "clock": "one host: producers, consumers and broker share the clock; one-way latency "
        "is trusted",
        **extra,
    }
