"""A run whose scenario kills its broker predicts the outage with this machine's measured
restart time: in ``auto`` mode, when the cached profile has none, the run kills and restarts
its own broker (a real ActiveMQ here) before the load, caches the figure, and goes on with the
restarted broker (its pid changed); the prediction says which restart time it used. The same
kills count the consumers' acks each forgot (the profile's ``restart_time.ack_loss_s``). After
the run, its own kill joins the cached figure for the next run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from testbed.backends.local_activemq import activemq_version
from testbed.calibration.machine import cache_path, write_profile
from testbed.calibration.restart_observed import observed_heals
from testbed.core.profile import default_profile, load_profile
from testbed.observe.cpu_speed import loop_ms
from testbed.run import run_scenario

pytestmark = pytest.mark.integration

SCENARIO = """\
name: restart-measured
seed: 2
duration: 8s
warmup: 1s
drain_timeout: 30s
broker: {kind: activemq}
topology: {queues: [{name: q, durable: true}]}
producers:
  - {name: p, queue: q, arrival: 20/s, size: 200B, persistent: true, confirms: true}
consumers: [{name: c, queue: q, ack: after_processing, service_time: 1ms}]
faults:
  - {kind: broker_kill, at: 3s, duration: 1s}
"""


def test_a_kill_scenario_measures_and_caches_the_restart_time(tmp_path: Path) -> None:
    home = tmp_path / "home"
    version = activemq_version() or "unknown"
    cached = cache_path(home, "activemq", version, "stomp")
    # the seeded profile's client path says this machine ran the speed probe's loop three
    # times as fast then: the run must say it changed (testbed.observe.cpu_speed)
    seeded = default_profile("activemq", "stomp")
    cp = seeded.client_path
    assert cp is not None
    then = cp.provenance.model_copy(update={"cpu_loop_ms": loop_ms() / 3})
    seeded = seeded.model_copy(update={"client_path": cp.model_copy(update={"provenance": then})})
    write_profile(seeded, cached, "seeded by the test")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    console = Console(file=None, record=True, width=200, stderr=True)
    result = run_scenario(
        path, home=home, out_dir=tmp_path / "runs", replications=1, calibration="auto",
        console=console,
    )  # fmt: skip
    lines = console.export_text().splitlines()
    restart = load_profile(cached).restart_time
    # the two calibration kills, then the run's own kill pooled in after its prediction
    # (testbed.calibration.restart_observed)
    assert restart is not None and restart.samples == 3, lines
    (heal,) = observed_heals(pd.read_parquet(result.run_dir / "measured" / "events.parquet"))
    calibrated = (3 * restart.mean - heal) / 2
    assert sum("with this run's 1 kills" in line for line in lines) == 1, lines
    assert any(
        "broker restart 2/2: killed in" in line and "healthy after" in line for line in lines
    )
    # how long clients still published into the dying broker: the publishes each kill lost in
    # flight over the publish rate (at 100 msg/s a second of them would be a broken count)
    assert sum("publishes lost in flight" in line for line in lines) == 2, lines
    assert restart.kill_s is not None and 0.0 <= restart.kill_s < 1.0, restart
    # the same kills counted the acks they forgot, under an acked persistent load of the
    # scenario's client library (testbed.calibration.ack_loss)
    assert len(restart.acks_forgotten) == 2 and restart.ack_loss_s is not None, lines
    said = [line for line in lines if "before the kill forgotten" in line]
    assert len(said) == 2, lines
    assert restart.ack_loss_s < 0.5, restart  # a whole load's acks forgotten: nothing counted
    head = json.loads((result.run_dir / "predicted" / "summary.json").read_text())["profile"]
    assert head["restart_measured"] is True
    assert head["restart_s"] == pytest.approx(calibrated, abs=0.01)  # the calibration's figure
    # the run went on with the restarted broker: the load was measured, nothing confirmed lost
    (ledger,) = result.ledgers
    assert ledger.sent > 0 and ledger.lost == 0, ledger
    ev = json.loads((result.run_dir / "environment.json").read_text())
    assert not ev.get("interrupted") and not ev.get("user_errors"), ev
    # the same kills timed the broker's slow first seconds (testbed.calibration.cold_start)
    assert restart.cold is not None and restart.cold.extra_s >= 0, restart
    assert sum("deliveries after the restart: median" in line for line in lines) == 2, lines
    speed = head["machine_speed"]  # the prediction's profile section says it too
    assert speed["changed"] and speed["ratio"] > 1.5, speed
    assert any("fixed Python loop" in line for line in lines), lines
