"""Autoscaling policies with plain numbers (docs/models.md §7, §8), hand-computed."""

from __future__ import annotations

import math

import pytest

from emulator import analytic
from testbed.core.policies import (
    ElasticQueuesPolicy,
    Observation,
    Provisioner,
    QueueObservation,
    StepPolicy,
    TargetTrackingPolicy,
    forwarding_ratios,
    metric_value,
)


def obs(ready: int = 0, unacked: int = 0, publish: float = 0.0, ack: float = 0.0) -> Observation:
    return Observation(0.0, {"q": QueueObservation(ready, unacked, 0, publish, ack)})


# -- metrics ---------------------------------------------------------------------------------


def test_queue_length_counts_ready_and_unacked_per_consumer() -> None:
    assert metric_value("queue_length", obs(300, 100), 4, None) == 100.0


def test_drain_time_is_n_over_mu_minus_lambda() -> None:
    # N = 600, μ = 4 × 100 = 400/s, λ = 250/s: 600 / 150 = 4 s
    assert metric_value("drain_time", obs(600, 0, publish=250.0), 4, 100.0) == pytest.approx(4.0)
    assert metric_value("drain_time", obs(600, 0, publish=400.0), 4, 100.0) == math.inf
    assert metric_value("drain_time", obs(0, 0, publish=400.0), 4, 100.0) == 0.0


def test_npp_formula() -> None:
    # SLA.delta 12.5 msg/s², start-up 20 s, capacity 100 msg/s: ceil(250 / 100) = 3
    assert analytic.npp(12.5, 20.0, 100.0) == 3
    assert analytic.npp(10.0, 10.0, 100.0) == 1
    assert analytic.npp(0.0, 10.0, 100.0) == 0


# -- target tracking -------------------------------------------------------------------------


def test_target_tracking_formula_and_tolerance_band() -> None:
    p = TargetTrackingPolicy(100.0, min_replicas=1, max_replicas=20, scale_down_window=0.0)
    # 2 consumers, 500 messages: metric 250/consumer, ceil(2 × 250/100) = 5
    r = p.recommend(obs(400, 100), current=2, now=0.0)
    assert (r.desired, r.value, r.reason) == (5, 250.0, "above_target")
    # metric 109 / target 100 = 1.09: inside ±10 %, no change
    assert p.recommend(obs(545, 0), current=5, now=1.0).desired == 5
    assert p.recommend(obs(545, 0), current=5, now=1.0).reason == "within_tolerance"
    # 111/100 = 1.11 is outside: ceil(5 × 1.11) = 6
    assert p.recommend(obs(555, 0), current=5, now=2.0).desired == 6
    # 89/100: ceil(5 × 0.89) = 5 (4.45 rounds up) — HPA's ceil keeps it
    assert p.recommend(obs(445, 0), current=5, now=3.0).desired == 5
    # 50/100: ceil(2.5) = 3
    assert p.recommend(obs(250, 0), current=5, now=4.0).desired == 3


def test_target_tracking_min_max_and_activation() -> None:
    p = TargetTrackingPolicy(10.0, min_replicas=0, max_replicas=4, scale_down_window=0.0)
    assert p.recommend(obs(1000), current=2, now=0.0).desired == 4  # ceil(100) capped at 4
    assert p.recommend(obs(0), current=2, now=1.0).desired == 0
    r = p.recommend(obs(3), current=0, now=2.0)
    assert (r.desired, r.reason) == (1, "activate")  # KEDA 0 -> 1


def test_scale_down_stabilisation_window_keeps_the_highest_recommendation() -> None:
    p = TargetTrackingPolicy(100.0, min_replicas=1, max_replicas=10, scale_down_window=30.0)
    assert p.recommend(obs(800), current=4, now=0.0).desired == 8
    # the load vanishes at t = 10: raw 1, but the window still holds the 8 of t = 0
    r = p.recommend(obs(0), current=8, now=10.0)
    assert (r.raw, r.desired) == (1, 8)
    assert "stabilised" in r.reason
    # t = 29: the t = 0 recommendation is still inside [t-30, t]
    assert p.recommend(obs(0), current=8, now=29.0).desired == 8
    # t = 31: only the raw 1s of t = 10, 29, 31 remain
    assert p.recommend(obs(0), current=8, now=31.0).desired == 1


def test_scale_up_stabilisation_window_keeps_the_lowest_recommendation() -> None:
    p = TargetTrackingPolicy(
        100.0, min_replicas=1, max_replicas=10, scale_up_window=5.0, scale_down_window=0.0
    )
    assert p.recommend(obs(200), current=2, now=0.0).desired == 2  # raw 2
    assert p.recommend(obs(600), current=2, now=2.0).desired == 2  # raw 6, min over window 2
    assert p.recommend(obs(600), current=2, now=4.0).desired == 2
    assert p.recommend(obs(600), current=2, now=6.0).desired == 6  # t=0 fell out


# -- step ------------------------------------------------------------------------------------


def test_step_policy_thresholds_and_cooldown() -> None:
    p = StepPolicy(
        min_load=50,
        max_load=200,
        min_replicas=1,
        max_replicas=5,
        scale_up_cooldown=0.0,
        scale_down_cooldown=10.0,
    )
    assert p.recommend(obs(500), current=2, now=0.0).desired == 3  # 250 > 200
    assert p.recommend(obs(300), current=3, now=1.0).desired == 3  # 100 in band
    r = p.recommend(obs(30), current=3, now=5.0)  # 10 < 50 but scaled 5 s ago
    assert (r.raw, r.desired) == (2, 3)
    assert p.recommend(obs(30), current=3, now=11.0).desired == 2


# -- provisioning ----------------------------------------------------------------------------


def test_cold_start_waits_for_the_startup_delay() -> None:
    prov = Provisioner(5.0, initial=1, max_units=4)
    s = prov.add(now=10.0)
    assert (s.slot, s.ready_at, s.source) == (1, 15.0, "cold")
    assert prov.ready(12.0) == [0] and prov.starting(12.0) == [1]
    assert prov.ready(15.0) == [0, 1]


def test_pool_first_then_refill_then_cold() -> None:
    prov = Provisioner(5.0, pool=2, initial=1, max_units=8)
    a, b, c = prov.add(10.0), prov.add(10.0), prov.add(10.0)
    assert [(x.source, x.ready_at) for x in (a, b)] == [("pool", 10.0), ("pool", 10.0)]
    # both pool hosts taken at t = 10; their refills boot until 15 and are the next pool
    assert (c.source, c.ready_at) == ("pool", 15.0)
    assert len(prov.pool) == 2  # refilled again
    prov.remove(a.slot)  # its booted host returns; a refill still booting is released instead
    assert len(prov.pool) == 2
    assert sorted(h.ready_at for h in prov.pool) == [0.0, 15.0]


def test_co_provisioned_slots_share_a_host() -> None:
    prov = Provisioner(5.0, slots_per_vm=2, initial=1, max_units=8)
    s = prov.add(3.0)
    assert (s.source, s.ready_at) == ("slot", 3.0)  # the second slot of the initial host
    s2 = prov.add(3.0)
    assert (s2.source, s2.ready_at) == ("cold", 8.0)
    s3 = prov.add(4.0)
    assert (s3.source, s3.ready_at) == ("slot", 8.0)  # rides on the host still booting
    assert prov.hosts_up() == 2


# -- elastic queues --------------------------------------------------------------------------


def test_forwarding_ratios_formula() -> None:
    # c = (100, 50, 50) => C = 200; l = (10, 40, 10) => l_avg = 20
    # r = (100 + 10, 50 - 20, 50 + 10) / 200 = (0.55, 0.15, 0.30)
    r = forwarding_ratios({0: 100.0, 1: 50.0, 2: 50.0}, {0: 10.0, 1: 40.0, 2: 10.0})
    assert r == pytest.approx({0: 0.55, 1: 0.15, 2: 0.30})


def test_forwarding_ratios_clip_and_renormalise() -> None:
    # c = (10, 10), C = 20, l = (100, 0), l_avg = 50: raw (10-50, 10+50) -> (0, 60)/20 -> (0, 1)
    assert forwarding_ratios({0: 10.0, 1: 10.0}, {0: 100.0, 1: 0.0}) == {0: 0.0, 1: 1.0}
    assert forwarding_ratios({0: 0.0, 1: 0.0}, {0: 5.0, 1: 0.0}) == {0: 0.5, 1: 0.5}


def test_elastic_scale_up_above_max_load() -> None:
    p = ElasticQueuesPolicy(min_load=50, max_load=200, max_queues=4)
    st = p.decide({0: 300.0, 1: 150.0}, {0: 100.0, 1: 100.0}, starting=0, cold_starting=0, now=0)
    assert (st.add, st.avg_load, st.reason) == (1, 225.0, "scale_up")
    st = p.decide({0: 300.0, 1: 150.0}, {0: 100.0, 1: 100.0}, starting=1, cold_starting=1, now=1)
    assert (st.add, st.reason) == (0, "waiting_for_startup")


def test_elastic_gradual_scale_down_and_cancel() -> None:
    p = ElasticQueuesPolicy(min_load=50, max_load=200, step=0.5)
    c = {0: 100.0, 1: 100.0}
    st = p.decide({0: 10.0, 1: 20.0}, c, starting=0, cold_starting=0, now=0, newest=0)
    assert st.reason == "elect_scale_down" and st.plan == {"slot": 0, "factor": 1.0}
    # l = (10, 20): r = (100+5, 100-5)/200 = (0.525, 0.475); factor 0.5 -> r0 = 0.2625
    st = p.decide({0: 10.0, 1: 20.0}, c, starting=0, cold_starting=0, now=1)
    assert st.reason == "scale_down_step"
    assert st.ratios[0] == pytest.approx(0.2625) and st.ratios[1] == pytest.approx(0.7375)
    # the average rises above min_load: the plan is cancelled, ratios back to the formula
    st = p.decide({0: 60.0, 1: 60.0}, c, starting=0, cold_starting=0, now=2)
    assert st.reason == "cancel_scale_down" and p.plan is None
    assert st.ratios == {0: 0.5, 1: 0.5}


def test_elastic_removes_the_queue_once_its_ratio_is_zero_and_it_is_empty() -> None:
    p = ElasticQueuesPolicy(min_load=50, max_load=200, step=1.0)
    c = {0: 100.0, 1: 100.0}
    p.decide({0: 0.0, 1: 20.0}, c, starting=0, cold_starting=0, now=0, newest=0)  # elect 0
    st = p.decide({0: 5.0, 1: 20.0}, c, starting=0, cold_starting=0, now=1)
    assert st.ratios[0] == 0.0 and st.remove == ()  # ratio 0, still 5 messages to drain
    st = p.decide({0: 0.0, 1: 20.0}, c, starting=0, cold_starting=0, now=2)
    assert (st.remove, st.reason, st.ratios) == ((0,), "scale_down", {1: 1.0})
    # never below min_queues (1)
    st = p.decide({1: 0.0}, {1: 100.0}, starting=0, cold_starting=0, now=3)
    assert st.reason == "hold" and st.plan is None
