"""Pooling the machine's recent calibrations (`testbed.calibration.pooling`): one slow draw is
voted out, only comparable recent draws pool, and ``--calibration fresh`` pools what it
measures with what this machine measured before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import testbed.calibration.machine as machine
from testbed.calibrate import pool_profile_files
from testbed.calibration import pooling
from testbed.calibration.machine import cache_path, machine_profile, write_profile
from testbed.core.client_path import ClientPath, CpuSplit
from testbed.core.profile import default_profile, load_profile
from testbed.core.quantiles import QuantileTable
from testbed.exceptions import ConfigurationError


def _draw(scale: float, minutes_ago: float, **prov: Any) -> ClientPath:
    """The shipped pika client path with every delivery table scaled by `scale`, measured
    `minutes_ago` on host "here"."""
    cp = default_profile("rabbitmq", "pika").client_path
    assert cp is not None
    when = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).isoformat(timespec="seconds")
    points = [
        p.model_copy(update={"table": QuantileTable(n=p.table.n, q=[x * scale for x in p.table.q])})
        for p in cp.delivery
    ]
    update = {"date": when, "hostname": "here", "busy": False, "foreign_cores": 0.01, **prov}
    return cp.model_copy(
        update={
            "delivery": points,
            "cpu_per_op": 1e-4 * scale,
            "provenance": cp.provenance.model_copy(update=update),
        }  # fmt: skip
    )


def test_one_slow_draw_of_three_is_voted_out() -> None:
    calm_a, slow, calm_b = _draw(1.0, 30), _draw(1.6, 20), _draw(1.1, 10)
    pooled = pooling.pool_client_paths([calm_a, slow, calm_b])
    for mine, a, b in zip(pooled.delivery, calm_a.delivery, calm_b.delivery, strict=True):
        # the median of 1.0x, 1.6x and 1.1x at every quantile is the 1.1x draw's
        assert mine.table.q == pytest.approx(b.table.q) and mine.table.n == 3 * a.table.n
        QuantileTable.model_validate(mine.table.model_dump())  # still a valid table
    assert pooled.cpu_per_op == pytest.approx(1.1e-4)
    # everything else is the newest draw's, and the provenance names the three dates
    assert pooled.wake == calm_b.wake and pooled.provenance.date == calm_b.provenance.date
    assert pooled.provenance.pooled == [d.provenance.date for d in (calm_a, slow, calm_b)]
    # a mean would have kept a third of the slow draw's excess
    mean = (1.0 + 1.6 + 1.1) / 3
    assert pooled.delivery[0].table.q[10] < mean * calm_a.delivery[0].table.q[10]


def test_a_point_pools_only_with_the_same_point() -> None:
    old, new = _draw(1.0, 20), _draw(2.0, 5)
    new = new.model_copy(update={"delivery": new.delivery[:-1]})  # one point it lacks
    pooled = pooling.pool_client_paths([old, new])
    assert len(pooled.delivery) == len(new.delivery)  # the older draw adds no point
    first = pooled.delivery[0].table.q
    assert first == pytest.approx([1.5 * x for x in old.delivery[0].table.q])


def test_only_recent_comparable_quiet_draws_pool(tmp_path: Path) -> None:
    cache = tmp_path / "here-rabbitmq-3.10.8-pika.yaml"
    calm_a, calm_b = _draw(1.0, 20), _draw(1.2, 10)
    for cp in (
        _draw(3.0, 60 * 7),  # older than the window
        _draw(3.0, 50, broker_version="3.9.0"),  # another broker version
        _draw(3.0, 40, busy=True),  # taken under foreign load
        _draw(3.0, 30, hostname="elsewhere"),  # another machine
        calm_a,
        _draw(3.0, 15, foreign_cores=0.25),  # not rejected, but measured on a contended host
        calm_b,
        _draw(3.0, 5, foreign_cores=None),  # foreign load not recorded
    ):
        pooling.record_draw(cache, cp)
    (cache.with_name(cache.stem + ".draws") / "0-torn.yaml").write_text("delivery: [")
    pooled = pooling.pooled_with_recent(cache, _draw(1.4, 0))
    assert len(pooled.provenance.pooled) == pooling.POOL == 3
    assert pooled.provenance.pooled[:2] == [calm_a.provenance.date, calm_b.provenance.date]
    assert pooled.delivery[0].table.q == pytest.approx(calm_b.delivery[0].table.q)
    # the new draw is kept as its own (not pooled) for the next calibration
    assert len(list(cache.with_name(cache.stem + ".draws").glob("*.yaml"))) == 10


def test_a_draw_at_the_quiet_limit_pools_and_one_above_it_does_not(tmp_path: Path) -> None:
    cache = tmp_path / "here-activemq-5.17.2-stomp.yaml"
    limit = pooling.POOL_FOREIGN_LIMIT
    pooling.record_draw(cache, _draw(1.0, 20, foreign_cores=limit))
    pooling.record_draw(cache, _draw(3.0, 10, foreign_cores=limit + 0.01))
    pooled = pooling.pooled_with_recent(cache, _draw(1.4, 0, foreign_cores=0.3))
    # the busy newcomer itself pools (its run is on the same machine), with the quiet draw only
    assert len(pooled.provenance.pooled) == 2
    assert pooled.delivery[0].table.q == pytest.approx(_draw(1.2, 0).delivery[0].table.q)


def test_fresh_pools_with_the_machines_earlier_calibrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cached profile measured before pooling counts as the first draw; each fresh run
    adds one, and at most `POOL` pool."""
    path = cache_path(tmp_path, "rabbitmq", "3.10.8", "pika")
    base = default_profile("rabbitmq", "pika")
    write_profile(base.model_copy(update={"client_path": _draw(1.0, 30)}), path)
    lines: list[str] = []
    for i, scale in enumerate((5.0, 1.2, 1.1)):
        new = _draw(scale, 3 - i)
        monkeypatch.setattr(machine, "measure_client_path", lambda *_, _n=new, **__: _n)
        choice = machine_profile(tmp_path, kind="rabbitmq", client="pika", version="3.10.8",
                                 replicate=None, progress=lines.append,  # type: ignore[arg-type]
                                 fresh=True)  # fmt: skip
        assert choice.origin == "calibrated"
    kept = load_profile(path).client_path
    assert kept is not None and len(kept.provenance.pooled) == 3
    # the 5x draw is one of the three last, and the median of 5.0, 1.2 and 1.1 is 1.2
    assert kept.delivery[0].table.q == pytest.approx(_draw(1.2, 0).delivery[0].table.q)
    assert any(line.startswith("pooled with 2 recent calibration(s)") for line in lines), lines


def _with_split(cp: ClientPath, rest: float | None, receive: float) -> ClientPath:
    split = CpuSplit(publish=1e-4, receive=receive, ack=2e-4, publish_rest=rest)
    return cp.model_copy(update={"cpu": split})


def test_draws_whose_cpu_was_split_pool_only_with_each_other(tmp_path: Path) -> None:
    """A draw measured before the spread stream holds its publishes' CPU outside the spans in
    ``receive`` (`CpuSplit.publish_rest` None); pooled with split draws its median receive
    would mean neither. Split draws pool their publish_rest as they pool the rest."""
    cache = tmp_path / "here-rabbitmq-3.10.8-pika.yaml"
    pooling.record_draw(cache, _with_split(_draw(1.0, 30), None, 4.6e-4))
    pooling.record_draw(cache, _with_split(_draw(1.0, 20), 4.0e-4, 0.5e-4))
    pooling.record_draw(cache, _with_split(_draw(1.0, 10), 3.0e-4, 0.7e-4))
    pooled = pooling.pooled_with_recent(cache, _with_split(_draw(1.0, 0), 3.6e-4, 0.6e-4))
    assert len(pooled.provenance.pooled) == 3  # the unsplit draw is left out
    assert pooled.cpu is not None
    assert pooled.cpu.publish_rest == pytest.approx(3.6e-4)
    assert pooled.cpu.receive == pytest.approx(0.6e-4)
    old = pooling.pooled_with_recent(cache, _with_split(_draw(1.0, 0), None, 4.0e-4))
    assert old.cpu is not None and old.cpu.publish_rest is None
    assert len(old.provenance.pooled) == 2  # and an unsplit newcomer pools only with its kind


def test_pool_profile_files_pools_the_files_client_paths(tmp_path: Path) -> None:
    """The accuracy gate's second opinion: three profile files, one slow, written as one whose
    tables are the median draw's, with the pooled dates and the header saying so."""
    files = []
    for i, (scale, ago) in enumerate(((1.0, 30), (1.6, 20), (1.1, 10))):
        base = default_profile("rabbitmq", "pika")
        f = tmp_path / f"draw{i}.yaml"
        write_profile(base.model_copy(update={"client_path": _draw(scale, ago)}), f)
        files.append(f)
    out = pool_profile_files(files, tmp_path / "pooled.yaml")
    got = load_profile(out).client_path
    newest = load_profile(files[-1]).client_path
    assert got is not None and newest is not None
    for mine, b in zip(got.delivery, newest.delivery, strict=True):
        assert mine.table.q == pytest.approx(b.table.q)  # the 1.1x draw, not a mean
    assert len(got.provenance.pooled) == 3
    assert "Tables pooled (median of each quantile) over 3 draws" in out.read_text()
    # a file without a client path cannot be pooled: said, nothing written
    bare = tmp_path / "bare.yaml"
    write_profile(
        default_profile("rabbitmq", "pika").model_copy(update={"client_path": None}), bare
    )
    with pytest.raises(ConfigurationError, match="each needs a client path"):
        pool_profile_files([files[0], bare], tmp_path / "never.yaml")
    assert not (tmp_path / "never.yaml").exists()


def test_zero_draws_are_refused_before_any_broker_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from testbed.calibrate import calibrate_machine
    from testbed.cli import app

    def never(*_: object) -> object:
        raise AssertionError("no calibration run may start")

    with pytest.raises(ConfigurationError) as e:
        calibrate_machine("rabbitmq", client=None, home=tmp_path, out=None, micro=None,
                          scale=1.0, replicate_on=never, console_line=print, draws=0)  # fmt: skip
    assert str(e.value) == "--draws 0: measure the client path at least once"
    got = CliRunner().invoke(app, ["calibrate", "--broker", "rabbitmq", "--draws", "6"])
    assert got.exit_code == 2
    assert "Invalid value for '--draws': Input should be less than or equal to 5" in got.output
    assert not (tmp_path / "state.json").exists()
