"""Every scenario in the library validates, without warnings, and its numbers are what the
name and comments promise."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import get_args

import pytest

from testbed.core.distributions import KINDS
from testbed.core.load import offered_load
from testbed.core.scenario import Arrival, ClosedArrival
from testbed.core.scenario_faults import NETWORK_TOXICS, NetworkFault
from testbed.core.scenario_loader import load_scenario, validate_file

LIBRARY = sorted((Path(__file__).resolve().parents[2] / "workloads").glob("*/*.yaml"))


def test_library_is_not_empty() -> None:
    names = {p.stem for p in LIBRARY}
    assert {
        "quickstart",
        "fanout-1to10",
        "vt-retries-p0.1",
        "vt-retries-p0.2",
        "closed-loop-saturation",
        "specjms2007-interaction1",
        "specjms2007-interaction3",
        "faults-broker-kill-pcm",
        "qos-be",
        "qos-pc",
        "qos-pcm",
        "visibility-in-order",
        "visibility-out-of-order",
    } <= names


@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_scenario_validates_cleanly(path: Path) -> None:
    scenario, issues = validate_file(path)
    assert scenario is not None, [str(i) for i in issues]
    assert issues == [], [str(i) for i in issues]
    assert scenario.name == path.stem


def _lib(name: str):  # type: ignore[no-untyped-def]
    return load_scenario(next(p for p in LIBRARY if p.stem == name))


def test_quickstart_is_half_utilised() -> None:
    load = offered_load(_lib("quickstart"))["work"]
    assert load.arrival_rate == pytest.approx(200.0)
    assert load.utilisation == pytest.approx(0.5)


def test_fanout_reaches_ten_queues() -> None:
    s = _lib("fanout-1to10")
    assert len(s.routed_queues("ticks", None)) == 10
    assert all(offered_load(s)[f"sub{i}"].arrival_rate == pytest.approx(100.0) for i in range(10))


def test_specjms_interaction1_chain_rates() -> None:
    loads = offered_load(_lib("specjms2007-interaction1"))
    # every link of the six-message chain carries one message per interaction
    for q in (
        "dc.order",
        "sm.orderconf",
        "dc.shipdep",
        "hq.statinfo",
        "sm.shipinfo",
        "dc.shipconf",
    ):
        assert loads[q].arrival_rate == pytest.approx(1.54), q


def test_specjms_interaction3_topic_routing() -> None:
    s = _lib("specjms2007-interaction3")
    assert s.routed_queues("prices", "PriceUpdate.hq1") == [f"sm{i}.prices" for i in range(1, 6)]
    assert s.routed_queues("prices", "PriceUpdate.hq2") == [f"sm{i}.prices" for i in range(6, 11)]


def test_vt_retry_attempt_rate() -> None:
    load = offered_load(_lib("vt-retries-p0.2"))["jobs"]
    assert load.attempt_rate == pytest.approx(100.0 / 0.8)


def test_visibility_in_order_twins_differ_only_in_order() -> None:
    """The in-order file and its out-of-order twin: the same workload and failures (p = 0.1 as
    in vt-retries-p0.1), apart from ``in_order`` and the names (one RabbitMQ queue cannot be
    declared both with and without a single active consumer); in order the one consumer is
    ρ ≈ 0.54 busy (5 ms per message, 200 ms per failed attempt)."""
    ordered, loose = _lib("visibility-in-order"), _lib("visibility-out-of-order")
    a, b = ordered.model_dump(), loose.model_dump()
    assert a["topology"]["queues"][0]["visibility"].pop("in_order") is True
    assert b["topology"]["queues"][0]["visibility"].pop("in_order") is False
    text = repr(a).replace("jobs-in-order", "Q").replace("visibility-in-order", "N")
    assert text == repr(b).replace("jobs-out-of-order", "Q").replace("visibility-out-of-order", "N")
    assert (
        ordered.consumers[0].failure_probability
        == _lib("vt-retries-p0.1").consumers[0].failure_probability
    )
    rho = offered_load(ordered)["jobs-in-order"].utilisation
    assert rho == pytest.approx(20 * 0.005 + 20 * (1 / 0.9 - 1) * 0.2)


@pytest.mark.parametrize("pool", [0, 1, 2])
def test_elastic_ramp_pool_and_npp(pool: int) -> None:
    from emulator import analytic
    from testbed.core.policies import make_autoscaler

    s = _lib(f"elastic-ramp-500-pool{pool}")
    spec = s.autoscaling[0]
    scaler = make_autoscaler(s, spec)
    assert len(scaler.provisioner.pool) == pool
    # the ramp's growth 450 msg/s over 60 s and a 5 s start-up need NPP = 1 pre-provisioned host
    assert analytic.npp(450 / 60, 5.0, 100.0) == 1
    assert spec.sla_delta == pytest.approx(450 / 60)
    assert scaler.watched_queues()[:2] == ["work.0", "work.1"]
    # at the peak, 500 msg/s need 5 consumers of 100 msg/s; max_replicas 10 leaves headroom
    assert offered_load(s)["work"].utilisation == pytest.approx(0.5)


def test_elastic_ramp_at_the_issues_rate() -> None:
    s = _lib("elastic-ramp-750-pool1")
    assert s.autoscaling[0].sla_delta == pytest.approx(700 / 60, rel=1e-3)
    assert offered_load(s)["work"].utilisation == pytest.approx(0.75)


def _kinds_used() -> dict[str, set[str]]:
    """Arrival kinds, distribution kinds (sizes, service and think times) and toxics in use."""
    used: dict[str, set[str]] = {"arrival": set(), "distribution": set(), "toxic": set()}
    for path in LIBRARY:
        s = load_scenario(path)
        dists = [p.size for p in s.producers] + [c.service_time for c in s.consumers]
        dists += [f.size for c in s.consumers for f in c.follow_ups]
        for p in s.producers:
            used["arrival"].add(p.arrival.kind)
            if isinstance(p.arrival, ClosedArrival):
                dists.append(p.arrival.think_time)
        used["distribution"].update("deterministic" if d.kind == "fixed" else d.kind for d in dists)
        used["toxic"].update(f.kind for f in s.faults if isinstance(f, NetworkFault))
    return used


def test_every_kind_has_a_runnable_example() -> None:
    """Each arrival kind, distribution kind and toxic appears in at least one library scenario."""
    arrivals = {
        get_args(a.model_fields["kind"].annotation)[0] for a in get_args(get_args(Arrival)[0])
    }
    used = _kinds_used()
    assert arrivals == {"poisson", "constant", "mmpp", "ramp", "steps", "trace", "closed"}
    assert used["arrival"] == arrivals
    assert used["distribution"] == set(KINDS) - {"fixed"}  # fixed is deterministic's alias
    assert used["toxic"] == set(NETWORK_TOXICS)


def test_library_has_an_activemq_scenario() -> None:
    kinds = {load_scenario(p).broker.kind for p in LIBRARY}
    assert kinds == {"rabbitmq", "activemq"}


def test_step_and_trace_examples_say_what_they_send() -> None:
    steps = _lib("arrival-steps").producers[0].arrival
    assert [(s.at, s.rate) for s in steps.steps] == [(0.0, 50.0), (10.0, 150.0), (20.0, 50.0)]
    trace = _lib("arrival-trace").producers[0].arrival
    assert len(trace.times) == 200 and trace.loop  # 8 bursts of 25, read from traces/bursts.csv
    assert all(
        offered_load(_lib("service-time-shapes"))[q].utilisation == pytest.approx(0.4)
        for q in ("steady", "fitted", "skewed", "bimodal", "idle", "measured")
    )


def test_readme_example_table_names_library_files() -> None:
    """The README's example table lists only scenarios that exist, and every new example."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = [ln for ln in readme.splitlines() if ln.startswith("| `") and ".yaml`" in ln]
    named = {n for ln in rows for n in re.findall(r"`([\w.*-]+)\.yaml`", ln.split("|")[1])}
    stems = {p.stem for p in LIBRARY}
    for name in named:
        assert fnmatch.filter(stems, name), f"README names {name}.yaml, not in workloads/"
    assert {
        "activemq-quickstart",
        "arrival-constant",
        "arrival-steps",
        "arrival-trace",
        "service-time-shapes",
        "faults-network-degraded",
        "faults-network-outages",
    } <= named
