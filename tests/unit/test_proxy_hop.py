"""The fault proxy's own transit (`testbed.calibration.proxy_hop`): measured through a real
`FaultProxy` link, kept in a profile, pooled, and added by the simulator on every crossing of a
run whose clients go through the proxy — and only there."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from emulator.sim.model import Model
from testbed.calibration import proxy_hop
from testbed.calibration.pooling import pool_client_paths
from testbed.core.client_path import ClientPath
from testbed.core.profile import Profile, default_profile, load_profile, shipped_profile_path
from testbed.core.quantiles import PROBS, QuantileTable
from testbed.core.scenario_loader import parse_scenario


def _constant(seconds: float) -> QuantileTable:
    return QuantileTable(n=100, q=[seconds] * len(PROBS))


def test_one_hop_is_half_the_round_trips_quantile_difference() -> None:
    direct = np.linspace(0.1, 0.2, 101)
    proxied = direct + 0.06 + np.linspace(0.0, 0.02, 101)  # two crossings of 30-40 µs
    hop = proxy_hop.hop_table(direct, proxied)
    assert hop.quantile(0.0) == pytest.approx(0.03)
    assert hop.quantile(1.0) == pytest.approx(0.04)
    assert hop.quantile(0.5) == pytest.approx(0.035)
    # a proxied sample faster than the direct one somewhere: floored at 0, never decreasing
    noisy = proxy_hop.hop_table(direct, direct - 0.01)
    assert noisy.q == [0.0] * len(PROBS)


def test_a_real_proxy_crossing_costs_time() -> None:
    hop = proxy_hop.measure_proxy_hop(pairs=200, rate=1000.0)
    assert hop.n == 200
    # Python reads and writes every chunk: tens of microseconds at least, far from a second
    assert 5e-6 < hop.quantile(0.5) < 0.05
    assert hop.q == sorted(hop.q)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="10 pairs"):
        proxy_hop.measure_proxy_hop(pairs=3)


def test_the_hop_is_written_into_a_profile_in_place(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    shutil.copy(shipped_profile_path("rabbitmq", "pika"), path)
    before = path.read_text()
    for seconds in (1e-4, 2e-4):  # a second write replaces the first
        proxy_hop.add_to_profile(path, _constant(seconds), "2026-11-28T00:00:00Z")
    text = path.read_text()
    cp = load_profile(path).client_path
    assert cp is not None and cp.proxy_hop == _constant(2e-4)
    assert text.count("  proxy_hop:\n") == 1 and text.count("# Fault proxy hop measured") == 1
    others = yaml.safe_load(before)["client_path"]
    after = yaml.safe_load(text)["client_path"]
    assert {k: v for k, v in after.items() if k != "proxy_hop"} == {
        k: v for k, v in others.items() if k != "proxy_hop"
    }


def test_a_profile_without_a_client_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("source: measured\n")
    with pytest.raises(ValueError, match="no client_path"):
        proxy_hop.add_to_profile(path, _constant(1e-4), "now")


def test_the_command_names_a_bad_profile_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("source: measured\n")
    monkeypatch.setattr(proxy_hop, "measure_proxy_hop", lambda: pytest.fail("measured anyway"))
    assert proxy_hop.main(["--add-to", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: no client_path with a provenance to add the hop to\n"
    assert path.read_text() == "source: measured\n"


def _cp(hop: QuantileTable | None) -> ClientPath:
    cp = default_profile("rabbitmq", "pika").client_path
    assert cp is not None
    return cp.model_copy(update={"proxy_hop": hop})


def test_a_profile_without_the_hop_is_measured_again() -> None:
    assert _cp(None).missing() == "the fault proxy's hop"
    assert _cp(_constant(1e-4)).missing() is None


def test_pooled_hops_are_the_median_of_the_draws_that_measured_one() -> None:
    pooled = pool_client_paths([_cp(_constant(1e-4)), _cp(None), _cp(_constant(3e-4))])
    assert pooled.proxy_hop is not None and pooled.proxy_hop.n == 200
    assert pooled.proxy_hop.q == pytest.approx([2e-4] * len(PROBS))
    assert pool_client_paths([_cp(None), _cp(None)]).proxy_hop is None


SCENARIO = """
name: hop
seed: 3
duration: 10s
topology: {{queues: [{{name: q}}]}}
producers: [{{name: p, queue: q, arrival: {{kind: poisson, rate: 50/s}}, size: 200B}}]
consumers:
  - {{name: c, queue: q, prefetch: 10, service_time: {{kind: exponential, mean: 2ms}}}}
faults: [{fault}]
"""
LATENCY = (
    "{kind: latency, at: 8s, duration: 1s, side: consumers, direction: downstream, latency: 20ms}"
)
PAUSE = "{kind: broker_pause, at: 8s, duration: 1s}"


def _median_before_the_fault(fault: str, hop: QuantileTable | None) -> float:
    s, issues = parse_scenario(SCENARIO.format(fault=fault))
    assert s is not None, [str(i) for i in issues]
    prof = default_profile("rabbitmq", "pika")
    prof = Profile.model_validate({**prof.model_dump(), "client_path": _cp(hop).model_dump()})
    d = Model(s, prof, 0).run().tables["deliveries"].to_pandas()
    a = d[(d.outcome == "acked") & (d.t_deliver < 7.5)]
    assert len(a) > 300
    return float(a.latency_s.median())


def test_through_the_proxy_a_message_crosses_it_twice() -> None:
    """A network fault puts the clients behind the proxy for the whole run: long before the
    toxic acts, each message pays the hop on its publish and on its delivery."""
    without = _median_before_the_fault(LATENCY, None)
    with_hop = _median_before_the_fault(LATENCY, _constant(1e-3))
    assert with_hop - without == pytest.approx(2e-3, abs=2e-4)


def test_without_a_network_fault_there_is_no_proxy_to_cross() -> None:
    assert _median_before_the_fault(PAUSE, _constant(1e-3)) == _median_before_the_fault(PAUSE, None)
