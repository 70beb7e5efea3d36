"""A quick calibration (docs/models.md §9) against the session brokers yields a valid profile."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.calibration.api import calibrate_endpoint
from testbed.calibration.profile_files import sidecar_path
from testbed.core.profile import default_profile, load_profile
from tests.integration.conftest import start_or_fail

pytestmark = pytest.mark.integration
MakeBackend = Callable[[str], LocalBackend]


def _quick(endpoint: BrokerEndpoint, out: Path) -> float:
    lines: list[str] = []
    t0 = time.monotonic()
    path = calibrate_endpoint(endpoint, out, quick=True, progress=lines.append)
    took = time.monotonic() - t0
    assert path == out
    assert any("ETA" in line for line in lines)
    prof = load_profile(out)
    assert prof.source == "measured" and prof.broker.kind == endpoint.kind
    assert prof.broker.version and prof.broker.version != "unknown"
    for cfg in ("base", "prefetch1", "confirms"):
        assert cfg in prof.latency, (cfg, prof.notes)
    base = prof.latency["base"]
    shipped = default_profile(endpoint.kind).latency["base"]
    side = json.loads(sidecar_path(out).read_text())
    for fit, ref in ((base.low_load, shipped.low_load), (base.high_load, shipped.high_load)):
        # within a small multiple of the shipped profile's measured base latency, so a 40 ms
        # Nagle stall fails it. The floor is 25 ms: the base configuration is persistent, and
        # a CI run on 2026-11-27 measured a flat 15 ms low-load median on a broker that the
        # other xdist worker's disk load shared the machine with (the profile was what that
        # machine did at the time; the test is about the protocol, not the machine).
        assert 0 < fit.a < max(5 * ref.a, 0.025), (fit, ref, _base_medians(side))
        assert fit.b >= 0
    assert prof.write_time.mean > 0 and prof.read_time.mean > 0 and prof.publish_time.mean > 0
    assert prof.queue_service.a + prof.queue_service.b > 0
    assert prof.memory.per_message_overhead >= 0
    assert "--quick" in out.read_text()
    assert side["protocol"]["quick"] is True
    assert {p["config"] for p in side["points"]} == {
        "base", "prefetch1", "confirms", "confirms_transient"
    }  # fmt: skip
    assert len(side["routing"]) == 2 and side["queue_service"] and side["memory"]
    return took


def _base_medians(side: dict) -> list[tuple[str, float, int, float]]:
    """(load, rate, size, median ms) of every base point: what a failed bound shows."""
    return [
        (p["load"], p["rate"], p["size"], round(p["latency"]["median"] * 1e3, 3))
        for p in side["points"]
        if p["config"] == "base" and p["latency"]
    ]


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_quick_calibration(kind: str, fresh_backend: MakeBackend, tmp_path: Path) -> None:
    """On a broker of its own, as ``mqbed calibrate`` does: what earlier tests left on the
    session brokers (queues, stored messages, a pause) is not part of a calibration."""
    (endpoint,) = start_or_fail(fresh_backend(kind), [kind], label="calibrate", detach=False)
    _quick(endpoint, tmp_path / f"{kind}-local.yaml")


# two --quick draws of the client path (~66 s of load each), a broker start and a kill: 199 s
# alone, over the suite's 300 s under make test's load (2026-12-02)
@pytest.mark.timeout(900)
def test_calibrate_command_measures_the_client_path_and_the_restart(tmp_path: Path) -> None:
    """``mqbed calibrate`` through the installed command, on a broker it starts itself: the
    profile gets this machine's client path (two draws pooled) and its broker restart time (one
    kill with ``--quick``), the JSON document says so, and the broker is gone afterwards."""
    mqbed = Path(sys.executable).with_name("mqbed")
    out, home = tmp_path / "activemq-here.yaml", tmp_path / "home"
    done = subprocess.run(
        [str(mqbed), "calibrate", "--broker", "activemq", "--client-path-only", "--quick",
         "--home", str(home), "--profile-out", str(out), "--json", "--draws", "2"],
        capture_output=True, text=True, timeout=840, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    prof = load_profile(out)
    assert prof.client_path is not None and prof.client_path.client == "stomp"
    cost = prof.client_path.cpu_per_op  # the Locust process's CPU per publish or delivery
    assert cost is not None and 1e-5 < cost < 0.01, cost
    split = prof.client_path.cpu  # where it goes: measured spans and the fitted rest
    assert split is not None and split.publish > 0 and split.ack > 0, split
    # one publish and one delivery per message: the parts add up to the two operations
    assert split.publish + split.receive + split.ack == pytest.approx(2 * cost, rel=0.5), split
    cp = prof.client_path
    assert cp.missing() is None  # of the current calibration revision
    # --draws 2: measured twice in a row, the tables pooled, the file says over which draws
    assert doc["draws"] == 2 and len(cp.provenance.pooled) == 2, cp.provenance
    assert cp.provenance.pooled[0] <= cp.provenance.pooled[1] == cp.provenance.date
    assert "client path, draw 2 of 2" in done.stderr and "--draws 2" in cp.provenance.command
    assert "Tables pooled (median of each quantile) over 2 draws" in out.read_text()
    loop = cp.provenance.cpu_loop_ms  # the machine's speed then (testbed.observe.cpu_speed)
    assert loop is not None and loop > 0, cp.provenance
    # the fault proxy's hop, measured beside (--quick: a quarter of the pairs, in each draw)
    hop = cp.proxy_hop
    assert hop is not None and hop.n == 2 * 250 and hop.quantile(0.5) > 0, hop
    # a prefetch-1 consumer's ack → next waiting start: shorter than the whole delivery path
    turn = cp.turnaround_table(244.0)
    assert turn is not None and {p.rate for p in cp.turnaround} == {244.0, 438.0}
    whole = cp.delivery_table(244.0, 200, False, 0.0)
    assert 0 < turn.quantile(0.5) < whole.quantile(0.5), (turn.q, whole.q)
    # transient deliveries from a producer that asks for receipts have points of their own
    # (the quiet phase's 30 msg/s one when its short --quick phase reached 50 deliveries)
    receipts = {p.rate for p in cp.delivery if p.confirms and not p.persistent}
    assert {130.0, 244.0, 438.0} <= receipts <= {30.0, 130.0, 244.0, 438.0}, receipts
    # the sparse stream's wake-up points (too few awake deliveries in a quick one: none)
    pairs = zip(cp.wake, cp.wake[1:], strict=False)
    assert all(a.idle < b.idle and a.extra <= b.extra for a, b in pairs)
    restart = prof.restart_time
    assert restart is not None and restart.samples == 1, restart
    assert 0.1 < restart.mean < 120 and restart.date, restart
    assert doc["restart_time"]["mean"] == restart.mean and doc["profile"] == str(out)
    assert "broker restart 1/1: killed in" in done.stderr and "healthy after" in done.stderr
    # the same kill counted the publishes it lost in flight: how long clients talked to it
    assert "publishes lost in flight" in done.stderr and restart.kill_s is not None, restart
    # the stream after the restart: its slow first seconds (docs/models.md §6)
    assert "deliveries after the restart: median" in done.stderr, done.stderr[-3000:]
    assert restart.cold is not None and restart.cold.extra_s >= 0, restart
    assert not list((home / "runs").glob("*/state.json")), "the calibration's broker was left"
