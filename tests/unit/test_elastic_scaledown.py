"""Elastic scale-down and scale-up pacing (docs/models.md §7): the queue added last goes first,
not within `scale_down_stabilization` of a scale-up, and no scale-up while a new member has
not had a round of traffic."""

from __future__ import annotations

from pathlib import Path

from testbed.core.policies import ElasticQueuesPolicy, Observation, Provisioner, QueueObservation
from testbed.core.policies.autoscaler import Autoscaler
from testbed.core.scenario_loader import parse_scenario

LIB = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"
C = {0: 100.0, 1: 100.0, 2: 100.0}
C2 = {0: 100.0, 1: 100.0}


def test_the_queue_added_last_is_elected_not_the_shortest() -> None:
    p = ElasticQueuesPolicy(min_load=50, max_load=200)
    st = p.decide({0: 1.0, 1: 30.0, 2: 9.0}, C, starting=0, cold_starting=0, now=0, newest=1)
    assert st.reason == "elect_scale_down" and st.plan == {"slot": 1, "factor": 1.0}


def test_no_election_within_the_delay_after_a_scale_up() -> None:
    p = ElasticQueuesPolicy(min_load=50, max_load=200, down_delay=30.0)
    st = p.decide({0: 300.0, 1: 300.0}, C2, starting=0, cold_starting=0, now=100.0)
    assert st.reason == "scale_up"
    low = {0: 10.0, 1: 10.0, 2: 0.0}
    st = p.decide(low, C, starting=0, cold_starting=0, now=129.0, newest=2)
    assert (st.reason, st.plan, st.remove) == ("scale_down_delay", None, ())
    st = p.decide(low, C, starting=0, cold_starting=0, now=130.0, newest=2)
    assert st.reason == "elect_scale_down" and st.plan == {"slot": 2, "factor": 1.0}


def test_no_scale_up_while_a_new_member_waits_for_its_first_traffic() -> None:
    p = ElasticQueuesPolicy(min_load=50, max_load=200)
    high = {0: 300.0, 1: 300.0}
    st = p.decide(high, C2, starting=0, cold_starting=0, now=0, warming=1)
    assert (st.add, st.reason) == (0, "waiting_for_traffic")


def _obs(t: float, lengths: dict[int, int]) -> Observation:
    return Observation(
        t, {f"w.{k}": QueueObservation(v, 0, 1, 100.0, 100.0) for k, v in lengths.items()}
    )


def test_autoscaler_waits_one_round_of_traffic_before_the_next_scale_up() -> None:
    """A member from the pool is up at once but gets a ratio only from the next round on: the
    round after it was added its queue is empty for that reason, and must not ask again."""
    prov = Provisioner(5.0, pool=2, initial=1, max_units=4)
    a = Autoscaler("g", "w", ElasticQueuesPolicy(min_load=50, max_load=200), prov, 1.0, "w")
    d = a.decide(_obs(1.0, {0: 500}), 1.0)
    assert d.reason == "scale_up" and d.ratios == {"w.0": 1.0, "w.1": 0.0}
    d = a.decide(_obs(2.0, {0: 600, 1: 0}), 2.0)  # avg 300 > 200, but w.1 had no traffic
    assert d.reason == "waiting_for_traffic" and d.ratios is not None and d.ratios["w.1"] > 0
    d = a.decide(_obs(3.0, {0: 600, 1: 100}), 3.0)  # a full round of traffic: decide again
    assert d.reason == "scale_up" and d.starts[0].source == "pool"
    assert d.starts[0].ready_at == 3.0  # the second pool host: still no boot wait


def test_vm_capacity_of_one_slot_for_a_multi_slot_host_warns() -> None:
    doc = (LIB / "elastic-ramp-750-npp.yaml").read_text()
    assert "slots_per_vm: 2" in doc and "vm_capacity: 200/s" in doc
    _, ok = parse_scenario(doc, "s.yaml")
    assert [i for i in ok if i.severity == "warning"] == []
    _, issues = parse_scenario(doc.replace("vm_capacity: 200/s", "vm_capacity: 100/s"), "s.yaml")
    warns = [i for i in issues if i.severity == "warning"]
    assert len(warns) == 1 and warns[0].path == "autoscaling[0].vm_capacity"
    assert "whole host" in warns[0].message
