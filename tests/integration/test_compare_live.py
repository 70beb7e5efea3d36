"""`compare_runs` on real runs (session RabbitMQ, 3.5 s each): one fast and one slow
consumer on a queue. With prefetch 1 the slow consumer holds one message at a time; with
prefetch 50 it hoards half the messages and serves them one by one, 100 ms each: a large,
designed latency difference. Two seeds of the prefetch-1 scenario must differ in nothing.
The two seeds have three replications each, so their interval (Welch's t over the replications)
holds the noise from one replication to the next: with one replication each, two seeds a
minute apart once came out with medians of 1.74 and 1.14 ms, "significant" by the slices of
each run; with three, bootstrapped, mean latencies of 2.2 and 3.3 ms (every replication of
the second run ~1 ms up). The hoarding run has five: its replications differ widely (mean
latency 300-470 ms), and three values give a t law with 2 degrees of freedom.

Spark: the suite's session fixture (`spark`, tests/conftest.py: one JVM per test process, reused
by `compare_runs` and by the gate's reports before it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.compare import compare_runs
from tests.integration.live import run_quietly
from tests.integration.quiet import wait_until_quiet

# Two seeds must show nothing significant: a comparison of live latencies measures foreign load
# as readily as a change (the other xdist worker's runs doubled one seed's median in a full
# `make test`), so it runs in the gate's phase, alone on the machine, after waiting for quiet.
pytestmark = [pytest.mark.integration, pytest.mark.gate, pytest.mark.xdist_group("gate")]

SCENARIO = """\
name: compare-prefetch-{prefetch}
seed: {seed}
duration: 3s
warmup: 0.5s
replications: {reps}
drain_timeout: 20s
broker: {{kind: rabbitmq}}
topology:
  queues: [{{name: cmp}}]
producers:
  - {{name: p, count: 1, queue: cmp, arrival: {{kind: poisson, rate: 30/s}}, size: 200B}}
consumers:
  - {{name: fast, queue: cmp, count: 1, prefetch: {prefetch}, service_time: 5ms}}
  - {{name: slow, queue: cmp, count: 1, prefetch: {prefetch}, service_time: 100ms}}
"""


def live(tmp_path: Path, home: Path, label: str, prefetch: int, seed: int, reps: int) -> Path:
    text = SCENARIO.format(prefetch=prefetch, seed=seed, reps=reps)
    return run_quietly(text, tmp_path, home, name=f"{label}.yaml", out=label)


@pytest.mark.usefixtures("spark")
def test_prefetch_difference_is_significant_and_two_seeds_are_not(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    wait_until_quiet(timeout=300, also=[rabbitmq.pid] if rabbitmq.pid else [])
    a = live(tmp_path, local_backend.home, "a", prefetch=1, seed=1, reps=3)
    b = live(tmp_path, local_backend.home, "b", prefetch=1, seed=2, reps=3)
    c = live(tmp_path, local_backend.home, "c", prefetch=50, seed=1, reps=5)
    console = Console(stderr=True, record=True, width=160)
    doc = compare_runs([a, b, c], tmp_path / "cmp", console, level=0.99)
    seeds, prefetch = doc["comparisons"]
    shown = console.export_text()

    assert seeds["same_scenario"] and seeds["same_settings"]  # the seed aside
    assert seeds["significant"] == [], shown
    assert all(m["method"] == "replications" for m in seeds["metrics"]), shown

    assert len(doc["warnings"]) == 1 and "compare-prefetch-50" in doc["warnings"][0]
    assert "latency_mean_s" in prefetch["significant"], shown  # the median may fall either side
    m = {e["metric"]: e for e in prefetch["metrics"]}
    assert m["latency_mean_s"]["interval"][0] > 0.02, shown  # hoarded: waits of 100-ms services
    assert m["losses"]["other"] == m["duplicates"]["other"] == 0
    assert Path(doc["files"]["html"]).read_text().count('class="comparison"') == 2
