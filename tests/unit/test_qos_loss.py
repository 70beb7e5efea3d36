"""The QoS experiment (issue 6 point 5): the three library scenarios, the closed-form inputs, and
the three-way loss table (measured, simulated, closed form) and its rendering."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from emulator import analytic
from testbed.analysis.qos import closed_form_inputs, loss_table, qos_level
from testbed.core.records import Ledger
from testbed.core.scenario_loader import load_scenario
from testbed.report.qos_table import qos_markdown, qos_rows

LIBRARY = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"
LEVELS = {"qos-be": "BE", "qos-pc": "PC", "qos-pcm": "PCM"}


def lib(name: str):  # type: ignore[no-untyped-def]
    return load_scenario(LIBRARY / f"{name}.yaml")


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_each_file_is_its_qos_level(name: str) -> None:
    assert qos_level(lib(name)) == LEVELS[name]


def test_the_three_files_differ_only_in_the_qos_settings() -> None:
    def core(name: str) -> dict:  # type: ignore[type-arg]
        d = lib(name).model_dump()
        for k in ("name", "description"):
            d.pop(k)
        for k in ("durable", "exclusive", "auto_delete"):  # BE: a transient subscription
            d["topology"]["queues"][0].pop(k)
        for p in d["producers"]:
            p.pop("persistent"), p.pop("confirms"), p.pop("mandatory")
        for c in d["consumers"]:
            c.pop("ack")
        return d

    assert core("qos-be") == core("qos-pc") == core("qos-pcm")


def test_closed_form_inputs_follow_the_scenario() -> None:
    i = closed_form_inputs(lib("qos-pcm"))
    assert i is not None
    assert (i["lam"], i["mu"], i["k"], i["a_s"]) == (50.0, pytest.approx(100.0), 10_000, 1.0)
    restart = i["restart_s"]
    assert restart > 0  # a kill costs the broker's restart time on top of the MTTR
    # the failure clock runs during the restart (live schedule): mean up time 30·e^(−R/30)
    up = 30 * math.exp(-restart / 30)
    assert i["a_m"] == pytest.approx(up / (up + 1 + restart))
    assert i["gamma_eq_m"] == pytest.approx(1 / up)
    assert i["a_c"] == pytest.approx(15 / 17) and i["tau_eq_c"] == pytest.approx(0.5)


def test_no_table_without_stochastic_faults() -> None:
    assert closed_form_inputs(lib("quickstart")) is None
    assert loss_table(lib("faults-broker-kill-pcm"), {}) is None


def _ledger(sent: int, delivered: int, lost: int) -> Ledger:
    return Ledger(sent=sent, confirmed=delivered + lost, delivered_unique=delivered, lost=lost)


def test_loss_table_puts_three_sources_side_by_side() -> None:
    s = lib("qos-be")
    events = pd.DataFrame(
        {
            "t": [10.0, 16.0, 5.0],
            "kind": ["broker_down", "broker_up", "broker_down"],
            "target": ["broker"] * 3,
            "source": ["measured", "measured", "predicted"],
            "replication": [0, 0, 0],
        }
    )
    ledgers = {
        "measured": [_ledger(3000, 2700, 30)],
        "predicted": [_ledger(3000, 2400, 0), _ledger(3000, 2520, 6)],
    }
    t = loss_table(s, ledgers, events)
    assert t is not None and t["qos"] == "BE" and t["window"] == [0.0, 60.0]
    rows = {r["source"]: r for r in t["rows"]}
    assert list(rows) == ["measured", "simulated", "closed_form"]
    assert rows["measured"]["loss_rate"] == pytest.approx(300 / 60)
    assert rows["measured"]["lost_rate"] == pytest.approx(30 / 60)
    assert rows["measured"]["availability_broker"] == pytest.approx(1 - 6 / 60)
    assert rows["measured"]["loss_rate_ci"] is None  # one replication
    assert rows["simulated"]["loss_rate"] == pytest.approx((600 + 480) / 2 / 60)
    lo, hi = rows["simulated"]["loss_rate_ci"]
    assert lo < (600 + 480) / 2 / 60 < hi
    assert rows["simulated"]["availability_broker"] == pytest.approx(1 - 55 / 60)  # never up
    i = t["inputs"]
    expect = analytic.loss_rate(
        "BE", 50.0, i["mu"], 10_000, 1.0, i["a_m"], i["a_c"], i["gamma_eq_m"], 1 / 15, 0.5
    )
    assert rows["closed_form"]["loss_rate"] == pytest.approx(expect)
    terms = rows["closed_form"]["terms"]
    assert sum(terms.values()) == pytest.approx(expect)
    assert terms["consumer_down"] > 0 and terms["consumer_crash"] > 0  # BE terms present


def test_pcm_closed_form_has_no_broker_crash_term_and_the_table_renders() -> None:
    s = lib("qos-pcm")
    t = loss_table(s, {"measured": [_ledger(3000, 2800, 0)]})
    assert t is not None
    closed = t["rows"][-1]
    assert closed["terms"]["broker_crash"] == 0.0
    assert closed["lost_rate"] == pytest.approx(
        closed["loss_rate"] - closed["terms"]["broker_down"]
    )
    summary = {"qos_loss": t}
    rows = qos_rows(summary)
    assert [r["source"] for r in rows] == ["measured", "closed form (§6)"]
    assert rows[0]["loss_rate"] == f"{200 / 60:.3f}"
    md = qos_markdown(summary)
    assert "#### Loss by QoS" in md and "QoS PCM" in md and md.count("\n| ") == 3


def test_be_with_a_transient_subscription_counts_the_consumer_down_term_as_unroutable() -> None:
    """qos-be's queue is a transient subscription fed by a mandatory producer: the closed
    form's consumer-down term (sends while the consumer is away) is its unroutable rate, the
    counterpart of the ledger's ``unroutable``, and not part of its lost rate."""
    s = lib("qos-be")
    assert s.topology.queues[0].exclusive and s.producers[0].mandatory
    measured = Ledger(sent=3000, confirmed=2900, delivered_unique=2600, lost=40, unroutable=360)
    t = loss_table(s, {"measured": [measured]})
    assert t is not None
    m, closed = t["rows"]
    assert m["unroutable_rate"] == pytest.approx(360 / 60) and m["unroutable"] == [360]
    terms = closed["terms"]
    assert closed["unroutable_rate"] == terms["consumer_down"] > 0
    assert closed["lost_rate"] == pytest.approx(
        closed["loss_rate"] - terms["broker_down"] - terms["consumer_down"]
    )
    md = qos_markdown({"qos_loss": t})
    assert "unroutable rate" in md and "unroutable [360] of sent [3000]" in md
    # PC keeps the queue while the consumer is down: nothing is unroutable there
    pc = loss_table(lib("qos-pc"), {"measured": [measured]})
    assert pc is not None and pc["rows"][-1]["unroutable_rate"] == 0.0
