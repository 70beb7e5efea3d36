"""Locust entry point for mqbed: `mqbed run` starts Locust with this file.

The users come from the scenario named in the run configuration (``MQBED_RUN_CONFIG``):
one ``Producer_<i>_<name>`` class per producer group and one ``Consumer_<i>_<name>`` per
consumer group, each with ``fixed_count`` = the group's count.
"""

from __future__ import annotations

from testbed.core.scenario_loader import load_scenario
from testbed.workload.config import WorkerConfig
from testbed.workload.process import configure_locust
from testbed.workload.users import build_user_classes

configure_locust()
globals().update(build_user_classes(load_scenario(WorkerConfig.from_env().scenario_file)))
