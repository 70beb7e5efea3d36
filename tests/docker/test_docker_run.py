"""`mqbed run` on the docker backend: the run provisions its own broker container (none was
started with `mqbed up --backend docker` in its home), measures, and removes the container."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.backends.docker_engine import DockerEngine

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def test_short_run_on_its_own_broker_container(
    docker_engine: DockerEngine, broker_images: dict[str, str], docker_client: Any, tmp_path: Path
) -> None:
    from testbed.run import run_scenario

    scenario = yaml.safe_load((REPO / "workloads" / "scenarios" / "quickstart.yaml").read_text())
    scenario.update(name="quickstart-docker", duration="6s", warmup="1s", drain_timeout="20s")
    path = tmp_path / "quickstart-docker.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    home = tmp_path / "home"
    result = run_scenario(
        path, home=home, out_dir=tmp_path / "runs", backend="docker", predict=False
    )
    (ledger,) = result.ledgers
    # everything sent was confirmed and delivered once; a run that delivers nothing fails
    assert ledger.sent == ledger.confirmed == ledger.delivered_unique > 0, ledger
    assert ledger.lost == ledger.duplicated == 0, ledger
    # 2 x 100/s Poisson over 6 s: the producers kept their rate (within 4 sigma)
    expected = 200 * 6.0
    assert abs(ledger.sent - expected) < 4 * math.sqrt(expected), ledger.sent
    env = json.loads((result.run_dir / "environment.json").read_text())
    assert env["backend"] == "docker"
    assert env["broker"]["version"], env["broker"]
    leftovers = [
        c
        for c in docker_client.containers.list(all=True)
        if c.labels.get("org.mqbed.home", "").startswith(str(home))
    ]
    assert not leftovers, [c.name for c in leftovers]
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


KILL_SCENARIO = """
name: docker-broker-kill
seed: 7
duration: 14s
warmup: 1s
drain_timeout: 40s
broker: {kind: rabbitmq, backend: docker}
topology:
  queues:
    - {name: orders, durable: true}
producers:
  - name: shop
    queue: orders
    arrival: {kind: poisson, rate: 50/s}
    size: 1KB
    persistent: true
    confirms: true
consumers:
  - name: fulfil
    queue: orders
    count: 2
    prefetch: 20
    ack: after_processing
    service_time: {kind: exponential, mean: 4ms}
faults:
  - {kind: broker_pause, at: 3s, duration: 2s}
  - {kind: broker_kill, at: 7s, duration: 1s}
"""


def test_broker_faults_act_on_the_container_with_their_measured_effect(
    docker_engine: DockerEngine, broker_images: dict[str, str], tmp_path: Path
) -> None:
    """The run's fault timeline pauses and kills the broker *container* (docker backend as
    the fault injector's backend); the records show the stall and the outage, and no
    confirmed persistent message is lost."""
    import pyarrow.compute as pc

    from testbed.core.records import read_table
    from testbed.run import run_scenario

    path = tmp_path / "docker-broker-kill.yaml"
    path.write_text(KILL_SCENARIO)
    result = run_scenario(path, home=tmp_path / "home", out_dir=tmp_path / "runs", predict=False)
    (ledger,) = result.ledgers
    assert ledger.confirmed > 0 and ledger.lost == 0, ledger
    measured = result.run_dir / "measured"
    events = read_table(measured, "events").to_pylist()
    started = {json.loads(e["detail"]).get("kind") for e in events if e["kind"] == "fault_start"}
    ended = {json.loads(e["detail"]).get("kind") for e in events if e["kind"] == "fault_end"}
    assert {"broker_pause", "broker_kill"} <= started & ended, events
    assert not [e for e in events if e["kind"] == "fault_error"], events
    messages = read_table(measured, "messages")
    confirmed = messages.filter(pc.is_valid(messages.column("t_confirm")))
    wait = pc.subtract(confirmed.column("t_confirm"), confirmed.column("t_publish"))
    # the pause holds confirms for ~2 s; the kill takes the broker away for ≥ 1 s + start-up
    assert pc.max(wait).as_py() >= 1.5, pc.max(wait).as_py()
    timeseries = read_table(measured, "timeseries").to_pylist()
    down = [r["t"] for r in timeseries if not r["broker_up"]]
    assert down and min(down) >= 6.5, down[:5]  # the poller saw the killed broker
