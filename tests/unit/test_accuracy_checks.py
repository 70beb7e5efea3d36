"""The accuracy suite's checks beyond the metrics (testbed/accuracy_checks.py): order
violations, the elastic pool's claim on both sides of a run, and the checks across two cases
(the QoS BE − PC gap against the closed form, in-order against out-of-order)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from testbed.accuracy import _write, all_cases
from testbed.accuracy_checks import (
    boot_waits,
    elastic_checks,
    mean_member_length,
    order_check,
    pair_checks,
)
from testbed.accuracy_doc import accuracy_misses, kept_notes

SCENARIOS = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def _ledgers(measured: int | None, predicted: int | None) -> dict:
    side = lambda n: None if n is None else {"order_violations": n}  # noqa: E731
    return {"ledger": {"measured": side(measured), "predicted": side(predicted)}}


def test_order_check_wants_none_in_order_and_some_out_of_order() -> None:
    assert order_check(_ledgers(0, 0), in_order=True)["ok"] is True
    assert order_check(_ledgers(0, 2), in_order=True)["ok"] is False  # the simulator reorders
    assert order_check(_ledgers(5, 7), in_order=False)["ok"] is True
    assert order_check(_ledgers(0, 7), in_order=False)["ok"] is False  # live kept order
    missing = order_check(_ledgers(0, None), in_order=True)
    assert missing["ok"] is None and missing["value"] == {"measured": 0, "predicted": None}


def _scale(t: float, *starts: tuple[float, str]) -> dict:
    detail = {"action": "up", "starts": [
        {"slot": i, "ready_at": r, "source": s} for i, (r, s) in enumerate(starts)]}  # fmt: skip
    return {"t": t, "kind": "scale", "target": "workers", "detail": json.dumps(detail),
            "replication": 0}  # fmt: skip


def test_boot_waits_are_starts_ready_after_their_decision() -> None:
    events = pd.DataFrame([
        _scale(10.0, (10.0, "pool")),
        _scale(20.0, (20.0, "slot"), (25.0, "cold")),  # the second waits 5 s for a boot
        {"t": 21.0, "kind": "fault_start", "target": "b", "detail": "{}", "replication": 0},
    ])  # fmt: skip
    assert boot_waits(events) == [(20.0, {"slot": 1, "ready_at": 25.0, "source": "cold"})]


def test_a_start_ready_at_the_live_decisions_own_time_is_no_wait() -> None:
    """Live, the decision's time is the clock's unrounded reading and a booted host's start is
    ready at that time, stored to 6 decimals: rounded up it is no later than the decision
    (the NPP ramp counted 7 such waits a run on both brokers, all of 0.0000005 s or less)."""
    t = 13.1234565001
    events = pd.DataFrame([_scale(t, (round(t, 6), "pool")), _scale(20.0, (20.000001, "cold"))])
    assert round(t, 6) > t
    assert boot_waits(events) == [(20.0, {"slot": 0, "ready_at": 20.000001, "source": "cold"})]


def _ts(rows: list[tuple[int, float, str, int, int, int]]) -> pd.DataFrame:
    cols = ["replication", "t", "queue", "depth_ready", "depth_unacked", "consumers"]
    return pd.DataFrame(rows, columns=cols)


def test_mean_member_length_averages_the_members_in_use_only() -> None:
    ts = _ts([
        (0, 1.0, "work.0", 100, 5, 1), (0, 1.0, "work.1", 0, 0, 0),  # work.1 not in use yet
        (0, 2.0, "work.0", 50, 5, 1), (0, 2.0, "work.1", 30, 5, 1),
        (0, 2.0, "work", 999, 0, 0), (0, 2.0, "other.0", 999, 0, 1),  # not members
        (1, 1.0, "work.0", 10, 0, 1),
    ])  # fmt: skip
    # replication 0: t=1 → 105, t=2 → (55 + 35) / 2 = 45: mean 75; replication 1: 10
    assert mean_member_length(ts, "work") == pytest.approx((75 + 10) / 2)


def _side(folder: Path, waits: bool, length: int) -> None:
    folder.mkdir(parents=True)
    late = (14.0, "cold") if waits else (9.0, "pool")
    pd.DataFrame([_scale(9.0, late)]).to_parquet(folder / "events.parquet")
    _ts([(0, 1.0, "work.0", length, 0, 1)]).to_parquet(folder / "timeseries.parquet")


def test_elastic_checks_judge_both_sides_against_twice_max_load(tmp_path: Path) -> None:
    shutil.copy(SCENARIOS / "elastic-ramp-500-pool1.yaml", tmp_path / "scenario.yaml")
    _side(tmp_path / "measured", waits=False, length=120)
    _side(tmp_path / "predicted", waits=False, length=399)  # max_load 200: the bound is 400
    wait, length = elastic_checks(tmp_path)
    assert wait["ok"] is True and wait["value"] == {"measured": 0, "predicted": 0}
    assert length["ok"] is True and length["target"] == "< 2 × max_load = 400"
    shutil.rmtree(tmp_path / "predicted")
    _side(tmp_path / "predicted", waits=True, length=401)
    wait, length = elastic_checks(tmp_path)
    assert wait["ok"] is False and wait["value"]["predicted"] == 1
    assert length["ok"] is False
    shutil.rmtree(tmp_path / "predicted")  # a run without prediction: not judged
    assert [c["ok"] for c in elastic_checks(tmp_path)] == [None, None]


def _qos(closed: tuple[float, float], measured: list[int], simulated: list[int]) -> dict:
    """A qos_loss section over a 50 s production window: ``closed`` is the closed form's
    (lost, unroutable) rate, the sides' counts are accepted messages lost, split 1:3 into lost
    and unroutable; every replication also missed 1,000 sends while the broker was down."""
    side = lambda name, n: {"source": name, "lost": [k // 4 for k in n],  # noqa: E731
                            "unroutable": [k - k // 4 for k in n],
                            "undelivered": [k + 1000 for k in n]}  # fmt: skip
    rows = [side("measured", measured), side("simulated", simulated),
            {"source": "closed_form", "loss_rate": 99.0, "lost_rate": closed[0],
             "unroutable_rate": closed[1]}]  # fmt: skip
    return {"qos": "?", "window": [5.0, 55.0], "rows": rows}


def _case(name: str, scenario: str, **extra: object) -> dict:
    return {"case": name, "scenario": scenario, "rows": [], "checks": [], **extra}


def test_the_qos_gap_pairs_replications_and_compares_with_the_closed_form() -> None:
    # closed form BE − PC = (0.5 + 4.5) − (1.0 + 0) = 4 msg/s; measured gaps by replication
    # (50 s each): (250 − 60) / 50 = 3.8, (240 − 40) / 50 = 4.0, (230 − 50) / 50 = 3.6: mean 3.8
    # (−5 %); the refused sends (undelivered) are not counted
    be = _case("QoS experiment, BE [rabbitmq]", "qos-be.yaml",
               qos_loss=_qos((0.5, 4.5), [250, 240, 230], [260, 250, 240]))  # fmt: skip
    pc = _case("QoS experiment, PC [rabbitmq]", "qos-pc.yaml",
               qos_loss=_qos((1.0, 0.0), [60, 40, 50], [50, 50, 50]))  # fmt: skip
    # the ActiveMQ BE alone: no pair; an errored case never pairs
    lone = _case("QoS experiment, BE [activemq]", "qos-be.yaml", qos_loss=be["qos_loss"])
    broken = _case("QoS experiment, PC [activemq]", "qos-pc.yaml", error="boom",
                   qos_loss=pc["qos_loss"])  # fmt: skip
    (gap,) = pair_checks([be, pc, lone, broken])
    assert gap["check"] == "QoS BE − PC gap, accepted messages lost, msg/s [rabbitmq]"
    assert gap["value"] == {"closed form": 4.0, "measured": 3.8, "simulated": 4.0}
    assert gap["ok"] is True and "measured 95 % interval [3.3" in gap["note"]
    pc["qos_loss"] = _qos((1.0, 0.0), [110, 90, 100], [50, 50, 50])  # measured 2.8: −30 %
    assert pair_checks([be, pc])[0]["ok"] is False


def _latency(measured: float, predicted: float) -> list[dict]:
    return [{"metric": "latency_mean_s", "queue": None, "measured": measured,
             "measured_ci": None, "predicted": predicted, "rel_error": None, "target": 0.15,
             "within_target": None, "inside_measured_ci": None}]  # fmt: skip


def test_in_order_must_be_markedly_slower_on_both_sides() -> None:
    ino = _case("in-order delivery under failures [activemq]", "visibility-in-order.yaml",
                rows=_latency(0.24, 0.20))  # fmt: skip
    ooo = _case("out-of-order delivery under failures [activemq]",
                "visibility-out-of-order.yaml", rows=_latency(0.03, 0.04))  # fmt: skip
    (slower,) = pair_checks([ino, ooo])
    assert slower["value"] == {"measured": 8.0, "predicted": 5.0} and slower["ok"] is True
    ino["rows"] = _latency(0.24, 0.06)  # predicted only 1.5 × slower
    assert pair_checks([ino, ooo])[0]["ok"] is False


def test_the_document_lists_the_pairs_and_a_failed_pair_is_a_miss(tmp_path: Path) -> None:
    ino = _case("in-order delivery under failures [rabbitmq]", "visibility-in-order.yaml",
                rows=_latency(0.24, 0.06), wall_s=1.0)  # fmt: skip
    ooo = _case("out-of-order delivery under failures [rabbitmq]",
                "visibility-out-of-order.yaml", rows=_latency(0.03, 0.04), wall_s=1.0)  # fmt: skip
    doc = {"command": "mqbed bench", "date": "d", "host": {}, "replications": 3, "quick": False,
           "cases": [ino, ooo]}  # fmt: skip
    out = tmp_path / "accuracy.md"
    _write(doc, out, None, False)
    written = json.loads(out.with_suffix(".json").read_text())
    assert written["totals"]["pairs"] == 1 and written["totals"]["pairs_ok"] == 0
    text = out.read_text()
    assert "checks across two cases passed: 0 of 1" in text
    assert (
        "- **in-order vs out-of-order mean latency [rabbitmq]**: measured 8, predicted 1.5" in text
    )
    assert accuracy_misses(out.with_suffix(".json")) == [
        "pair: in-order vs out-of-order mean latency [rabbitmq]"
    ]


def test_the_suite_runs_the_semantics_experiments_on_their_brokers() -> None:
    """Issue 17's experiments in the suite: in order and out of order on both brokers, the
    tandem on ActiveMQ (its stages are the ``threads`` model's), the elastic pool's claim judged
    on the NPP ramp."""
    cases = {c.name: c for c in all_cases()}
    for kind in ("rabbitmq", "activemq"):
        assert cases[f"in-order delivery under failures [{kind}]"].checks == ("in_order",)
        assert cases[f"out-of-order delivery under failures [{kind}]"].checks == ("out_of_order",)
        assert cases[f"elastic ramp (500 msg/s, NPP pool) [{kind}]"].checks == ("elastic",)
    assert "tandem N1 = 1, N2 = 3 [activemq]" in cases
    assert "tandem N1 = 1, N2 = 3 [rabbitmq]" not in cases


def test_a_rewrite_keeps_the_documents_hand_written_notes(tmp_path: Path) -> None:
    """The notes between the title and the generated ``Produced by`` line (the state of the
    document and the log of accuracy sessions) survive a run that rewrites the tables."""
    out = tmp_path / "accuracy.md"
    doc = {"command": "mqbed bench", "date": "d", "host": {}, "replications": 3, "quick": False,
           "cases": []}  # fmt: skip
    _write(doc, out, None, False)
    assert kept_notes(out.read_text()) == ""  # a first document has none
    first = out.read_text().splitlines()
    notes = "**State of this document.** Two sessions:\n\n- *day 2*: ...\n- *day 1*: ..."
    out.write_text("\n".join([first[0], "", notes, "", *first[2:]]))
    _write({**doc, "command": "mqbed bench again"}, out, None, False)
    text = out.read_text()
    assert text.startswith(f"# Prediction accuracy\n\n{notes}\n\nProduced by `mqbed bench again`")
    assert text.count("Produced by `") == 1 and "mqbed bench`" not in text
    assert (
        kept_notes("no title\nProduced by `x`") == "" and kept_notes("# T\nno generated part") == ""
    )


def test_the_recorded_command_holds_no_absolute_path_of_the_machine() -> None:
    from testbed.accuracy_doc import ROOT, shown_command

    argv = ["mqbed", "bench", "--home", "/tmp/x/home", f"--report={ROOT}/docs/accuracy.md",
            "--only", "quickstart [rabbitmq]", "--out", "runs/s1"]  # fmt: skip
    assert shown_command(argv) == (
        "mqbed bench --home '<home>' --report=docs/accuracy.md --only 'quickstart [rabbitmq]'"
        " --out runs/s1"
    )
