"""Calibration maths and profile assembly on plain numbers (docs/models.md §9)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from emulator.sim.costs import derive_costs
from testbed.calibration.assemble import assemble
from testbed.calibration.bench import MemoryProbe, PipeProbe, PointStats, StreamRecord, StreamSpec
from testbed.calibration.bench import point_stats as reduce_point
from testbed.calibration.fitting import (
    difference_fit,
    linear_fit,
    moments,
    pearson,
    pooled_moments,
    summarize,
    union_moments,
)
from testbed.calibration.profile_files import render_yaml, sidecar_path, write_outputs
from testbed.calibration.protocol import CalibrationData, Protocol
from testbed.calibration.reassemble import load_measurements, reassemble
from testbed.core.profile import Profile, load_profile
from testbed.core.threads import StageThreads

SIZES = [100, 1_000, 10_000, 100_000, 1_000_000]


def _independent(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """a, b, r, R² from the textbook formulas, computed another way than the module does."""
    n = len(x)
    sx, sy = x.sum(), y.sum()
    sxy, sxx, syy = (x * y).sum(), (x * x).sum(), (y * y).sum()
    b = (n * sxy - sx * sy) / (n * sxx - sx**2)
    a = (sy - b * sx) / n
    r = (n * sxy - sx * sy) / math.sqrt((n * sxx - sx**2) * (n * syy - sy**2))
    resid = y - (a + b * x)
    r2 = 1 - (resid**2).sum() / ((y - y.mean()) ** 2).sum()
    return a, b, r, r2


# --- fitting -----------------------------------------------------------------------------------


def test_known_line_with_noise_is_recovered() -> None:
    rng = np.random.default_rng(7)
    a_true, b_true = 4.0e-4, 2.0e-9
    x = np.repeat(np.array(SIZES, dtype=float), 3)
    y = a_true + b_true * x + rng.normal(0, 2e-5, x.size)
    f = linear_fit(x, y)
    a, b, r, r2 = _independent(x, y)
    assert f.a == pytest.approx(a, rel=1e-9)
    assert f.b == pytest.approx(b, rel=1e-9)
    assert f.r == pytest.approx(r, rel=1e-9)
    assert f.r2 == pytest.approx(r2, rel=1e-9)
    assert f.r2 == pytest.approx(f.r**2, rel=1e-9)  # type: ignore[operator]
    assert f.a == pytest.approx(a_true, abs=3e-5)
    assert f.b == pytest.approx(b_true, rel=0.02)
    assert f.r > 0.999  # type: ignore[operator]
    assert not f.constrained and f.n == x.size
    assert f.at(200) == pytest.approx(f.a + 200 * f.b)


def test_weighted_fit() -> None:
    x = np.array(SIZES, dtype=float)
    rng = np.random.default_rng(11)
    y = (2.5e-4 + 3e-8 * x) * (1 + rng.normal(0, 0.05, x.size))
    w = 1 / y**2
    f = linear_fit(x, y, weights=w)
    # the weighted normal equations, solved independently
    A = np.vstack([np.ones_like(x), x]).T
    a, b = np.linalg.solve(A.T @ (w[:, None] * A), A.T @ (w * y))
    assert (f.a, f.b) == pytest.approx((a, b), rel=1e-9)
    # relative weighting keeps the small-size intercept; plain LS serves the 1 MB point
    assert f.a == pytest.approx(2.5e-4, rel=0.2)
    assert linear_fit(x, y, weights=np.ones_like(x)) == linear_fit(x, y)
    with pytest.raises(ValueError):
        linear_fit([1, 2], [1.0, 2.0], weights=[1.0, 0.0])


def test_exact_line() -> None:
    f = linear_fit([1, 2, 3], [3, 5, 7])
    assert (f.a, f.b) == pytest.approx((1.0, 2.0))
    assert f.r == pytest.approx(1.0) and f.r2 == pytest.approx(1.0)


def test_nonneg_constraint_picks_the_best_feasible_line() -> None:
    # falling data: the OLS slope is negative, the best line with b >= 0 is the mean
    x, y = [0, 1, 2, 3], [4.0, 3.0, 2.0, 1.0]
    f = linear_fit(x, y, nonneg=True)
    assert f.b_ols == pytest.approx(-1.0) and f.a_ols == pytest.approx(4.0)
    assert (f.a, f.b) == pytest.approx((2.5, 0.0))
    assert f.constrained and f.r == pytest.approx(-1.0) and f.r2 == pytest.approx(0.0)
    # negative intercept: the best line through the origin
    x2, y2 = [1.0, 2.0, 3.0], [0.5, 2.5, 4.5]
    g = linear_fit(x2, y2, nonneg=True)
    assert g.a_ols < 0
    assert g.a == 0.0
    assert g.b == pytest.approx(sum(a * b for a, b in zip(x2, y2, strict=True)) / 14.0)
    # feasible OLS is left alone
    h = linear_fit([0, 1, 2], [1.0, 2.0, 3.0], nonneg=True)
    assert not h.constrained and (h.a, h.b) == pytest.approx((1.0, 1.0))


def test_degenerate_inputs() -> None:
    f = linear_fit([5, 5, 5], [1.0, 2.0, 3.0])
    assert f.b == 0.0 and f.a == pytest.approx(2.0) and f.r is None
    g = linear_fit([1, 2, 3], [2.0, 2.0, 2.0])
    assert g.r is None and g.r2 is None and g.a == pytest.approx(2.0) and g.b == 0.0
    assert pearson([1, 2], [3, 3]) is None
    with pytest.raises(ValueError):
        linear_fit([], [])
    with pytest.raises(ValueError):
        linear_fit([1, 2], [1.0])
    with pytest.raises(ValueError):
        linear_fit([1, 2], [1.0, math.nan])


def test_difference_fit_regresses_matched_points() -> None:
    keys = [(s, r) for s in SIZES for r in range(3)]
    base = {k: 5e-4 + 2e-9 * k[0] + 1e-6 * k[1] for k in keys}
    over = {k: base[k] + 3e-5 + 1e-10 * k[0] for k in keys}
    over[(7, 0)] = 1.0  # unmatched keys are ignored
    f = difference_fit(over, base)
    assert f is not None and f.n == len(keys)
    assert (f.a, f.b) == pytest.approx((3e-5, 1e-10), rel=1e-6)
    assert difference_fit({(1, 0): 1.0}, {(2, 0): 1.0}) is None
    # a negative overhead is clamped (a profile cannot hold it); r keeps the data's sign
    neg = difference_fit({k: v - 1e-5 for k, v in base.items()}, base)
    assert neg is not None and neg.a == 0.0 and neg.b == 0.0


def test_moments_and_summaries() -> None:
    assert moments([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0))
    assert moments([4.0]) == (4.0, 0.0)
    assert union_moments([[1.0, 2.0], [], [3.0]]) == pytest.approx((2.0, 1.0))
    assert union_moments([[], []]) is None
    s = summarize(list(range(1, 101)))
    assert s is not None and s.n == 100 and s.median == pytest.approx(50.5)
    assert s.p99 == pytest.approx(np.percentile(range(1, 101), 99))
    assert summarize([]) is None


def test_pooled_moments_equal_the_union() -> None:
    rng = np.random.default_rng(3)
    groups = [rng.exponential(1e-3, n) for n in (1, 5, 40, 400)]
    exact = union_moments(groups)
    pooled = pooled_moments((g.size, *moments(g)) for g in groups)
    assert exact is not None and pooled is not None
    assert pooled == pytest.approx(exact, rel=1e-9)
    assert pooled_moments([]) is None and pooled_moments([(1, 2.0, 0.0)]) == (2.0, 0.0)


def test_point_reduction_drops_warmup_and_flags_backlog() -> None:
    spec = StreamSpec("t", "base", "high", 100, 10.0, warmup=1.0, duration=4.0)
    assert spec.n_warm == 10 and spec.n_total == 50
    rec = StreamRecord(spec)
    t0 = 1_000_000_000_000
    for i in range(spec.n_total):
        t_pub = t0 + i * 100_000_000
        rec.sent[i] = (t_pub, 20_000, 0.0)
        rec.received.append((i, 0, 1_000_000 if i >= 10 else 50_000_000, 30_000))
    rec.published = spec.n_total
    ps = reduce_point(rec)
    assert ps.sent == 40 and ps.received == 40 and not ps.saturated
    assert ps.latency is not None and ps.latency.mean == pytest.approx(1e-3)
    assert ps.read is not None and ps.read.mean == pytest.approx(3e-5)
    assert ps.achieved_rate == pytest.approx(10.0)
    # a growing latency (backlog) and losses mark the point saturated
    rec2 = StreamRecord(spec)
    for i in range(spec.n_total):
        rec2.sent[i] = (t0 + i * 100_000_000, 20_000, 0.0)
        if i < 45:
            rec2.received.append((i, 0, (i + 1) ** 2 * 100_000, 30_000))
    ps2 = reduce_point(rec2)
    assert ps2.saturated and "not delivered" in ps2.reason and "grows" in ps2.reason


def test_a_backlog_that_stays_is_saturation() -> None:
    """100 kB at 100 msg/s with every delivery ~394 ms late (the CI run of 2026-12-02 on
    ActiveMQ): no trend through the point, but 39 messages in flight at once (Little's law) is
    a queue at its capacity, not the light-load latency the size fit wants; 1.3 ms is not."""
    spec = StreamSpec("t", "base", "high", 100_000, 100.0, warmup=1.0, duration=4.0)
    t0 = 1_000_000_000_000
    for lat_ns, saturated in ((394_000_000, True), (1_300_000, False), (19_000_000, False)):
        rec = StreamRecord(spec)
        for i in range(spec.n_total):
            rec.sent[i] = (t0 + i * 10_000_000, 20_000, 0.0)
            rec.received.append((i, 0, lat_ns + (i % 7) * 100_000, 30_000))
        ps = reduce_point(rec)
        assert ps.saturated is saturated, (lat_ns, ps.reason)
        assert ("in flight" in ps.reason) is saturated and "grows" not in ps.reason


def test_one_stalled_message_at_the_end_of_a_light_point_is_no_backlog() -> None:
    """Ten messages at 5 msg/s, the last stalled 68 ms by the disk: the point is light load
    with one slow delivery, not a queue building up (a quarter's median is two messages)."""
    spec = StreamSpec("t", "prefetch1", "low", 100, 5.0, warmup=0.0, duration=2.0)
    rec = StreamRecord(spec)
    t0 = 1_000_000_000_000
    for i in range(spec.n_total):
        rec.sent[i] = (t0 + i * 200_000_000, 20_000, 0.0)
        stall = 68_700_000 if i == spec.n_total - 1 else 0
        rec.received.append((i, 0, 1_200_000 + stall, 30_000))
    ps = reduce_point(rec)
    assert ps.received == 10 and not ps.saturated, ps.reason


# --- assembly ----------------------------------------------------------------------------------


def _point(config: str, load: str, size: int, rep: int, lat: float, **extra: float) -> PointStats:
    rng = np.random.default_rng(abs(hash((config, load, size, rep))) % 2**32)
    lat_s = list(lat + rng.normal(0, lat * 0.05, 50))
    samples = {"latency": lat_s, "read": [6e-5] * 50, "publish": [3e-5] * 50, "write": []}
    if "write" in extra:
        samples["write"] = list(extra["write"] + rng.normal(0, 1e-5, 50))
    return PointStats(
        config=config, load=load, rate=1.0 if load == "low" else 100.0, size=size, repeat=rep,
        fanout=int(extra.get("fanout", 0)), sent=50, expected=50, received=50,
        achieved_rate=1.0, max_lateness=0.0, latency=summarize(lat_s),
        write=summarize(samples["write"]), read=summarize(samples["read"]),
        publish=summarize(samples["publish"]), saturated=bool(extra.get("saturated", 0)),
        reason="backlog" if extra.get("saturated") else "", errors=[], samples=samples,
    )  # fmt: skip


def _data() -> CalibrationData:
    p = Protocol.standard(60, 3)
    lines = {
        "base": (5e-4, 4e-9),
        "prefetch1": (5.3e-4, 4.2e-9),
        "confirms": (5.5e-4, 4.1e-9),
        "confirms_transient": (5.4e-4, 4.1e-9),
    }
    pts = []
    for rep in range(3):
        for s in SIZES:
            for cfg, (a, b) in lines.items():
                w = {"confirms": 1.2e-3 + 3e-9 * s, "confirms_transient": 4e-4 + 1e-9 * s}
                extra = {"write": w[cfg]} if cfg in w else {}
                pts.append(_point(cfg, "low", s, rep, a + b * s, **extra))
                if cfg != "confirms_transient":
                    sat = 1.0 if s == 1_000_000 else 0.0
                    lat = (a + b * s) * (40 if sat else 0.9)
                    pts.append(_point(cfg, "high", s, rep, lat, saturated=sat, **extra))
    routing = [
        _point("fanout", "routing", 200, rep, 6e-4 + 2e-5 * n, fanout=n)
        for rep in range(3)
        for n in (1, 5, 10)
    ]
    pipes = [
        PipeProbe(s, rep, 1000, 1000, 1000 * (5e-5 + 1e-9 * s), 5e-5 + 1e-9 * s)
        for s in (100, 10_000, 100_000)
        for rep in range(3)
    ]
    memory = [MemoryProbe(200, 50_000, 1.0e8, 1.0e8 + 50_000 * 1100, 1100.0)]
    return CalibrationData(
        kind="rabbitmq", version="3.10.8", protocol=p, points=pts, routing=routing,
        pipes=pipes, memory=memory, rtts=[4e-5] * 10, started="2026-11-21T00:00:00+00:00",
        finished="2026-11-21T00:50:00+00:00", wall_seconds=3000.0,
        load_start=(8.0, 7.0, 6.0), load_end=(7.5, 7.0, 6.5),
    )  # fmt: skip


def test_assembled_profile_validates_and_holds_the_fits() -> None:
    asm = assemble(_data(), host="test-host")
    prof = Profile.model_validate(asm.profile)
    assert prof.source == "measured" and prof.broker.kind == "rabbitmq"
    base = prof.latency["base"]
    assert base.low_load.rate == 1 and base.high_load.rate == 100
    assert base.low_load.a == pytest.approx(5e-4, rel=0.05)
    assert base.low_load.b == pytest.approx(4e-9, rel=0.05)
    assert base.low_load.r is not None and base.low_load.r > 0.99
    assert base.low_load.sd > 0
    # the saturated 1 MB high-load points are left out of the fit
    assert asm.fits["latency.base.high"]["sizes"] == SIZES[:-1]
    assert asm.fits["latency.base.high"]["on"] == "per-point median latency"
    assert base.high_load.a == pytest.approx(0.9 * 5e-4, rel=0.05)
    assert any("left out" in n and "base/high/1 MB/r0" in n for n in asm.notes)
    assert prof.prefetch_overhead.a == pytest.approx(3e-5, rel=0.5)
    assert prof.confirm_overhead.a == pytest.approx(5e-5, rel=0.5)
    assert prof.persistence.a == pytest.approx(8e-4, rel=0.05)
    assert prof.persistence.b == pytest.approx(2e-9, rel=0.05)
    assert prof.write_time.mean == pytest.approx(4e-4 + 1e-9 * 550, rel=0.05)
    assert prof.read_time.mean == pytest.approx(6e-5)
    assert prof.publish_time.mean == pytest.approx(3e-5)
    assert prof.routing.per_destination == pytest.approx(2e-5, rel=0.1)
    assert prof.queue_service.a == pytest.approx(5e-5)
    assert prof.queue_service.b == pytest.approx(1e-9)
    assert prof.network_delay == pytest.approx(2e-5)
    assert prof.memory.per_message_overhead == pytest.approx(900.0)
    assert prof.memory.base_bytes == pytest.approx(1e8)
    # the threads model: one thread whose stages serve at the burst capacity
    t = prof.threads
    assert t.count == StageThreads(receive=1, dispatch=1)
    assert t.receive.mean == t.dispatch.mean == pytest.approx(prof.queue_service.at(200))
    # and the simulator can derive its costs from it
    for model in ("amqp", "threads", "shared_lock"):
        derive_costs(prof, model, 1, 1e9)


def test_written_profile_loads_and_has_a_sidecar(tmp_path: Path) -> None:
    out = tmp_path / "rabbitmq-local.yaml"
    prof = write_outputs(_data(), out, command="mqbed calibrate --broker rabbitmq")
    text = out.read_text()
    assert text.startswith("# Calibration profile: RabbitMQ 3.10.8")
    assert "mqbed calibrate --broker rabbitmq" in text and "loaded by concurrent work" in text
    again = load_profile(out)
    assert again == prof
    assert again.latency["base"].low_load.a == pytest.approx(prof.latency["base"].low_load.a)
    side = sidecar_path(out)
    assert side.name == "rabbitmq-local.points.json"
    data = yaml.safe_load(side.read_text())  # JSON is YAML
    assert len(data["points"]) == 105 and data["points"][0]["latency"]["median"] > 0
    assert data["protocol"]["duration"] == 60


def test_high_load_points_near_capacity_are_left_out() -> None:
    data = _data()
    # a queue that needs 6 ms per 1 MB message: 100 msg/s of 1 MB is 60 % of its capacity
    data.pipes = [PipeProbe(s, 0, 100, 100, 1.0, 5e-5 + 6e-9 * s) for s in (100, 1_000_000)]
    for x in data.points:
        x.saturated = False
    asm = assemble(data, host="h")
    assert asm.fits["latency.base.high"]["sizes"] == SIZES[:-1]
    assert asm.fits["latency.base.low"]["sizes"] == SIZES  # 1 msg/s: far from capacity
    assert any("queue utilisation 0.60" in n for n in asm.notes)


def test_profile_can_be_derived_again_from_its_sidecar(tmp_path: Path) -> None:
    out = tmp_path / "activemq-local.yaml"
    data = _data()
    data.kind, data.version = "activemq", "5.17.2"
    first = write_outputs(data, out, command="measure-cmd")
    again = reassemble(sidecar_path(out), derived_by="reassemble-cmd")
    assert again == first
    text = out.read_text()
    assert "measure-cmd" in text and "reassemble-cmd" in text
    loaded, side = load_measurements(sidecar_path(out))
    assert side["derived_by"] == "reassemble-cmd"
    assert len(loaded.points) == len(data.points) and loaded.protocol == data.protocol


def test_rendered_numbers_round_trip() -> None:
    asm = assemble(_data(), host="h")
    asm.profile["notes"] = "n"
    text = render_yaml(asm, ["header"], "n")
    parsed = yaml.safe_load(text)
    for key in ("network_delay", "reference_size"):
        assert isinstance(parsed[key], int | float)
    lo = parsed["latency"]["base"]["low_load"]
    assert lo["a"] == pytest.approx(asm.profile["latency"]["base"]["low_load"]["a"], rel=1e-3)
    assert isinstance(parsed["memory"]["high_watermark"], float)


def test_every_protocol_gives_a_light_load_point_enough_messages_for_a_median() -> None:
    """A median of two messages is one stall away from a 40 ms point: the quick protocol once
    had 2 s points at 1 msg/s, and one stalled 100 KB message zeroed the fit's intercept."""
    for p in (Protocol.quick_protocol(), Protocol.standard(60, 3), Protocol.standard(20, 1)):
        assert p.low_rate * p.duration >= 10, p
        assert p.low_rate * 10 <= p.high_rate, p  # still a light load beside the high one
