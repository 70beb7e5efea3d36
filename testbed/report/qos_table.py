"""The "Loss by QoS" table of the report (summary.json ``qos_loss``; see
:mod:`testbed.analysis.qos`): measured, simulated and closed-form loss rates side by side."""

from __future__ import annotations

__all__ = ["qos_rows", "qos_markdown", "qos_note"]

from typing import Any

LABELS = {"measured": "measured", "simulated": "simulated", "closed_form": "closed form (§6)"}


def _rate(v: Any) -> str:
    return "–" if v is None else f"{v:.3f}"


def _ci(v: Any) -> str:
    return "–" if not v else f"[{v[0]:.3f}, {v[1]:.3f}]"


def qos_rows(summary: dict[str, Any]) -> list[dict[str, str]]:
    """One row per source: loss rate (msg/s) and its interval, lost rate, broker availability,
    undelivered/lost counts (per replication) or the closed form's terms."""
    table = summary.get("qos_loss") or {}
    rows = []
    for r in table.get("rows", []):
        if r["source"] == "closed_form":
            counts = ", ".join(f"{k} {v:.3f}" for k, v in r.get("terms", {}).items() if v)
        else:
            counts = (
                f"undelivered {r.get('undelivered')}, lost {r.get('lost')}, unroutable "
                f"{r.get('unroutable')} of sent {r.get('sent')}"
            )
        a = r.get("availability_broker")
        rows.append(
            {
                "source": LABELS.get(r["source"], r["source"]),
                "loss_rate": _rate(r.get("loss_rate")),
                "ci": _ci(r.get("loss_rate_ci")),
                "lost_rate": _rate(r.get("lost_rate")),
                "unroutable_rate": _rate(r.get("unroutable_rate")),
                "availability": "–" if a is None else f"{a:.3f}",
                "detail": counts,
            }
        )
    return rows


def qos_note(summary: dict[str, Any]) -> str:
    table = summary.get("qos_loss") or {}
    if not table:
        return ""
    i = table.get("inputs", {})
    return (
        f"QoS {table.get('qos')}: loss rate = (sent − delivered − dead-lettered) per second of "
        f"production {table.get('window')}; lost rate = confirmed but never delivered; "
        f"unroutable rate = returned because no queue took them (a transient subscription's "
        f"consumer was away). Closed "
        f"form inputs: λ {i.get('lam'):g}/s, μ {i.get('mu'):g}/s, K {i.get('k')}, "
        f"A_M {i.get('a_m'):.3f}, A_C {i.get('a_c'):.3f} (broker restart "
        f"{i.get('restart_s'):g} s added to its MTTR)."
    )


def qos_markdown(summary: dict[str, Any]) -> str:
    rows = qos_rows(summary)
    if not rows:
        return ""
    lines = [
        "",
        "#### Loss by QoS (msg/s)",
        "",
        "| source | loss rate | 95 % CI | lost rate | unroutable rate | broker availability "
        "| detail |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['source']} | {r['loss_rate']} | {r['ci']} | {r['lost_rate']} | "
            f"{r['unroutable_rate']} | {r['availability']} | {r['detail']} |"
        )
    lines += ["", qos_note(summary)]
    return "\n".join(lines) + "\n"
