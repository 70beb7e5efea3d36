"""Saturation point and SLA capacity on plain numbers."""

from __future__ import annotations

import pytest

from testbed.analysis.capacity import gains, saturation_point, sla_capacity


def test_gain_is_the_elasticity_of_throughput_to_load() -> None:
    x = [10.0, 20.0, 30.0, 40.0]
    tp = [100.0, 200.0, 250.0, 250.0]
    got = gains(x, tp)
    assert got[0] is None
    assert got[1] == pytest.approx(1.0)  # doubled load, doubled throughput
    assert got[2] == pytest.approx((50 / 200) / (10 / 20))  # 0.5
    assert got[3] == pytest.approx(0.0)


def test_saturation_needs_a_flat_throughput_and_a_growing_queue() -> None:
    x = [1, 2, 3, 4, 5]
    tp = [100.0, 200.0, 290.0, 300.0, 301.0]
    depth = [0.5, 0.8, 1.0, 40.0, 400.0]
    sat = saturation_point(x, tp, depth)
    assert sat is not None
    assert (sat.index, sat.x, sat.throughput) == (3, 4.0, 300.0)
    assert sat.gain == pytest.approx((10 / 290) / (1 / 3))
    assert sat.depth_growth == pytest.approx(39.0)
    # the same throughput curve with a steady queue is not saturated
    assert saturation_point(x, tp, [1.0] * 5) is None
    # a stricter gain threshold flags an earlier step once the queue grows there
    early = saturation_point(x, tp, [0.0, 0.0, 5.0, 6.0, 7.0], min_gain=0.95)
    assert early is not None and early.x == 3.0


def test_saturation_skips_undefined_steps_and_rejects_bad_input() -> None:
    assert saturation_point([0, 1, 2], [0.0, 10.0, 10.0], [0.0, 0.0, 5.0]) is not None
    assert saturation_point([0, 1], [0.0, 0.0], [0.0, 9.0]) is None
    with pytest.raises(ValueError, match="increase"):
        saturation_point([1, 1], [1.0, 1.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="length"):
        saturation_point([1, 2], [1.0], [0.0, 0.0])


def test_sla_capacity_is_the_largest_load_meeting_the_target() -> None:
    x = [5, 10, 15, 20]
    p95 = [0.020, 0.050, 0.180, None]
    cap = sla_capacity(x, p95, 0.100)
    assert cap is not None and (cap.index, cap.x, cap.p95_s) == (1, 10.0, 0.050)
    assert sla_capacity(x, p95, 0.010) is None
    assert sla_capacity(x, p95, 1.0).x == 15.0  # type: ignore[union-attr]
