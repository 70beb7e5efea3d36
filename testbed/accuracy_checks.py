"""The accuracy suite's checks beyond the whole-run metrics (`testbed.accuracy` runs them).

A check is a dict ``{check, target, value, ok, note}``: ``ok`` is True, False, or None when a
side is missing. Per case (the case's ``checks`` names which):

- ``fanout``: the publish/subscribe latency mean within ``TARGETS["fanout_latency_mean"]``;
- ``per_type``: SPECjms2007's per-type median and p95 latency, worst type;
- ``ledger_exact``: lost, duplicated and dead-lettered counts equal on both sides;
- ``in_order`` / ``out_of_order``: the ledger's order violations, 0 on both sides for a queue
  with ``in_order`` (docs/models.md §4) and some on both sides for its out-of-order twin;
- ``elastic``: the elastic pool's claim (docs/models.md §7) on each side — no consumer waited
  for a host to boot, and the mean queue length of the members in use stayed below
  2 × ``max_load``.

Across two cases of one broker (``pair_checks``, over the suite's results):

- the QoS experiment's BE − PC gap in the rate of accepted messages lost (lost + unroutable),
  measured and simulated, within 25 % of the closed form's (issue 17: the best-effort level's
  transient subscription loses what arrives while its consumer is down, which PC's durable
  queue keeps; the consumer-down term is most of it);
- in-order delivery markedly slower than out-of-order under the same failures: the ratio of
  their mean latencies at least ``IN_ORDER_SLOWER`` on both sides.
"""

from __future__ import annotations

__all__ = [
    "IN_ORDER_SLOWER",
    "QOS_GAP_TARGET",
    "TARGETS",
    "boot_waits",
    "check",
    "elastic_checks",
    "fanout_check",
    "ledger_check",
    "mean_member_length",
    "order_check",
    "pair_checks",
    "per_type_check",
]

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.core.figures import t_interval
from testbed.core.scenario_loader import load_scenario

TARGETS = {
    "fanout_latency_mean": 0.15,
    "per_type_p50": 0.15,
    "per_type_p95": 0.25,
}
QOS_GAP_TARGET = 0.25
"""Issue 17: the measured and simulated BE − PC loss-rate gaps within 25 % of the closed form's."""
IN_ORDER_SLOWER = 2.0
"""The published claim is that in-order delivery is *markedly* slower once failures occur; the
library's pair (visibility-in-order.yaml) is simulated about 8 × slower, so twice is the floor
that still tells "markedly" from noise."""
SIDES = ("measured", "predicted")


def check(name: str, target: Any, value: Any, ok: bool | None, note: str = "") -> dict[str, Any]:
    return {"check": name, "target": target, "value": value, "ok": ok, "note": note}


def _overall(rows: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["metric"] == metric and r["queue"] is None), None)


def fanout_check(rows: list[dict[str, Any]]) -> dict[str, Any]:
    err = (_overall(rows, "latency_mean_s") or {}).get("rel_error")
    ok = None if err is None else abs(err) <= TARGETS["fanout_latency_mean"]
    return check("fan-out latency mean", TARGETS["fanout_latency_mean"], err, ok)


def per_type_check(run_dir: Path, figure: str = "latency_p50_s") -> dict[str, Any]:
    """Worst relative error over message types of one per-type latency figure."""
    target = TARGETS["per_type_p50" if figure == "latency_p50_s" else "per_type_p95"]
    name = f"per-type {figure.removeprefix('latency_').removesuffix('_s')} latency, worst type"
    path = run_dir / "analysis" / "latency_by_type.parquet"
    if not path.is_file():
        return check(name, target, None, None, "no per-type table")
    t = pd.read_parquet(path)
    med = t.groupby(["source", "flow"])[figure].median().unstack(0)
    if "predicted" not in med or "measured" not in med:
        return check(name, target, None, None, "one side missing")
    err = ((med.predicted - med.measured) / med.measured).dropna()
    worst = float(err.abs().max()) if len(err) else math.nan
    detail = {str(k): round(float(v), 4) for k, v in err.items()}
    return check(name, target, worst, bool(worst <= target), json.dumps(detail))


def ledger_check(summary: dict[str, Any]) -> dict[str, Any]:
    led = summary.get("ledger") or {}
    m, p = led.get("measured") or {}, led.get("predicted") or {}
    keys = ("lost", "duplicated", "dead_lettered")
    diff = {k: (m.get(k), p.get(k)) for k in keys if m.get(k) != p.get(k)}
    return check("ledger exact (lost, duplicated, dead-lettered)", "equal",
                 {k: (m.get(k), p.get(k)) for k in keys}, not diff)  # fmt: skip


def order_check(summary: dict[str, Any], in_order: bool) -> dict[str, Any]:
    """The ledger's order violations on both sides: none for an in-order queue, some for its
    out-of-order twin (where a retried message is acked after newer ones)."""
    led = summary.get("ledger") or {}
    value = {side: (led.get(side) or {}).get("order_violations") for side in SIDES}
    counts = [int(v) for v in value.values() if v is not None]
    if len(counts) < len(SIDES):
        return check("order violations", "0" if in_order else "> 0", value, None, "a side missing")
    ok = all(v == 0 for v in counts) if in_order else all(v > 0 for v in counts)
    name = "order violations (in order)" if in_order else "order violations (out of order)"
    return check(name, "0 on both sides" if in_order else "> 0 on both sides", value, ok)


def boot_waits(events: pd.DataFrame) -> list[tuple[float, dict[str, Any]]]:
    """Consumers added by a scale-up that could not take messages at once: their host was still
    booting (``ready_at`` after the decision). ``events``: a run side's events table.

    The decision's time is compared at the 6 decimals its ``ready_at`` is stored with: a
    consumer on a booted host is ready at the decision's own time, which rounded up by up to
    0.5 µs looked later than the live clock's unrounded reading (7 spurious waits a run)."""
    out = []
    for row in events[events.kind == "scale"].itertuples():
        detail = json.loads(row.detail or "{}")
        t = round(float(row.t), 6)
        out += [(float(row.t), st) for st in detail.get("starts", []) if st["ready_at"] > t]
    return out


def mean_member_length(ts: pd.DataFrame, alias: str) -> float:
    """Time average of the mean length (ready + unacked) of the alias's member queues in use
    (a consumer attached, or messages held), per replication, averaged over replications."""
    members = ts[ts.queue.astype(str).str.fullmatch(re.escape(alias) + r"\.\d+")]
    members = members.assign(length=members.depth_ready + members.depth_unacked)
    used = members[(members.consumers > 0) | (members.length > 0)]
    if used.empty:
        return math.nan
    per_t = used.groupby(["replication", "t"]).length.mean()
    return float(per_t.groupby(level=0).mean().mean())


def elastic_checks(run_dir: Path) -> list[dict[str, Any]]:
    """The elastic pool's claim on each side of the run (module docstring)."""
    s = load_scenario(run_dir / "scenario.yaml")
    spec = next(a for a in s.autoscaling if a.policy == "elastic")
    bound = 2 * float(spec.max_load)
    waits: dict[str, Any] = {}
    lengths: dict[str, Any] = {}
    for side in SIDES:
        folder = run_dir / side
        if not (folder / "events.parquet").is_file():
            waits[side] = lengths[side] = None
            continue
        waits[side] = len(boot_waits(pd.read_parquet(folder / "events.parquet")))
        ts = pd.read_parquet(folder / "timeseries.parquet")
        lengths[side] = round(mean_member_length(ts, str(spec.alias)), 2)
    has_both = None not in waits.values()
    return [
        check("consumers that waited for a host to boot", "0 on both sides", waits,
              all(v == 0 for v in waits.values()) if has_both else None),
        check("mean queue length of the members in use", f"< 2 × max_load = {bound:g}", lengths,
              all(v < bound for v in lengths.values()) if has_both else None),
    ]  # fmt: skip


def _variant(case: dict[str, Any]) -> str:
    """The ``[...]`` of a case name: the broker (and client) it ran on."""
    found = re.search(r"\[([^\]]+)\]$", case.get("case", ""))
    return found.group(1) if found else ""


def _accepted_losses(row: dict[str, Any]) -> list[int]:
    """Per replication, messages the broker accepted and no consumer got: ``lost`` plus
    ``unroutable`` (a transient subscription's drops). The sends refused while the broker was
    down are left out: both levels refuse them alike, and how many depends on how long each
    restart took and when the clients' reconnect backoff found the broker up again (7.2-9.4 s
    a kill in one RabbitMQ run, 978-1,425 refused sends a PC replication): noise far larger
    than the gap itself."""
    lost, unroutable = row.get("lost") or [], row.get("unroutable") or []
    return [a + b for a, b in zip(lost, unroutable, strict=False)]


def _loss_gaps(be: dict[str, Any], pc: dict[str, Any], source: str) -> tuple[float, Any] | None:
    """BE − PC rate of accepted messages lost (``_accepted_losses``) on one side, replication
    by replication (both runs draw the same seeded faults in their n-th replication), with the
    t interval of the differences."""
    rows = [next((r for r in q["rows"] if r["source"] == source), None) for q in (be, pc)]
    counts = [_accepted_losses(r) if r else [] for r in rows]
    if not all(counts):
        return None
    spans = [q["window"][1] - q["window"][0] for q in (be, pc)]
    diffs = [x / spans[0] - y / spans[1] for x, y in zip(*counts, strict=False)]
    return sum(diffs) / len(diffs), t_interval(diffs)


def _qos_gap(be: dict[str, Any], pc: dict[str, Any], label: str) -> dict[str, Any]:
    """Against the closed form's gap of the same quantity: BE − PC of its ``lost_rate +
    unroutable_rate`` (its total without the broker-down term, which both levels share)."""
    closed = [next(r for r in q["rows"] if r["source"] == "closed_form") for q in (be, pc)]
    form = sum(closed[0][k] - closed[1][k] for k in ("lost_rate", "unroutable_rate"))
    measured, simulated = _loss_gaps(be, pc, "measured"), _loss_gaps(be, pc, "simulated")
    value: dict[str, Any] = {"closed form": round(form, 3)}
    ok: bool | None = None
    if measured is not None and simulated is not None:
        value["measured"], value["simulated"] = round(measured[0], 3), round(simulated[0], 3)
        errors = [abs(x[0] - form) / form for x in (measured, simulated)]
        ok = form > 0 and max(errors) <= QOS_GAP_TARGET
    ci = measured[1] if measured else None
    note = "" if ci is None else f"measured 95 % interval [{ci[0]:.3g}, {ci[1]:.3g}] msg/s"
    return check(f"QoS BE − PC gap, accepted messages lost, msg/s [{label}]",
                 f"measured and simulated within {100 * QOS_GAP_TARGET:g} % of the closed form",
                 value, ok, note)  # fmt: skip


def _slower(in_order: dict[str, Any], twin: dict[str, Any], label: str) -> dict[str, Any]:
    means = [_overall(c.get("rows", []), "latency_mean_s") or {} for c in (in_order, twin)]
    value: dict[str, Any] = {}
    for side in SIDES:
        a, b = means[0].get(side), means[1].get(side)
        value[side] = round(a / b, 2) if a is not None and b else None
    ok = None if None in value.values() else all(v >= IN_ORDER_SLOWER for v in value.values())
    return check(f"in-order vs out-of-order mean latency [{label}]",
                 f"in order ≥ {IN_ORDER_SLOWER:g} × slower on both sides", value, ok)  # fmt: skip


def pair_checks(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checks that compare two cases of one broker (module docstring), for every broker on
    which both cases of a pair ran without error."""
    by = {(c.get("scenario"), _variant(c)): c for c in cases if not c.get("error")}
    out = []
    for label in sorted({v for _, v in by}):
        be, pc = by.get(("qos-be.yaml", label)), by.get(("qos-pc.yaml", label))
        if be and pc and be.get("qos_loss") and pc.get("qos_loss"):
            out.append(_qos_gap(be["qos_loss"], pc["qos_loss"], label))
        ino = by.get(("visibility-in-order.yaml", label))
        ooo = by.get(("visibility-out-of-order.yaml", label))
        if ino and ooo:
            out.append(_slower(ino, ooo, label))
    return out
