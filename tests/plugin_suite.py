"""Helpers for the tests of the pytest plugin (`testbed.pytest_plugin`): how a `pytester` run
loads it, and a tiny user scenario.

Until the package is reinstalled (``pip install -e .``) the ``pytest11`` entry point is not in
the environment, so the inner run loads the plugin with ``-p testbed.pytest_plugin``; once it
is, pytest loads it by itself, and ``-p`` with the module name would register it a second time
under another name (an error), so no option is given then.
"""

from __future__ import annotations

from importlib.metadata import entry_points

PLUGIN = "testbed.pytest_plugin"

TINY = """\
name: plugin-tiny
seed: 7
duration: 2s
warmup: 1s
drain_timeout: 10s
broker: {kind: rabbitmq}
topology:
  queues: [{name: plugin-work, durable: false}]  # its own queue on a shared broker
producers:
  - {name: orders, count: 1, queue: plugin-work, arrival: {kind: constant, rate: 20/s}, size: 200B}
consumers:
  - name: workers
    queue: plugin-work
    count: 1
    prefetch: 10
    service_time: {kind: deterministic, value: 1ms}
"""
"""Two seconds of 20 msg/s, the first one a warm-up: a run of a few seconds."""


def plugin_args() -> list[str]:
    """The options a `pytester` run needs to load the plugin (see the module docstring)."""
    installed = [ep for ep in entry_points(group="pytest11") if ep.value == PLUGIN]
    return [] if installed else ["-p", PLUGIN]
