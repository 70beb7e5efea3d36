"""How each field of a calibrated profile was derived, in words: the comments of its YAML.

`testbed.calibration.assemble` derives the profile's numbers; `derivation_comments` says, per
field, what they were derived from — the configuration, load, sizes and kind of fit — in the
short texts `testbed.calibration.profile_files.render_yaml` writes next to the fields. The texts
read the calibration plan, the pipe bursts' sizes, the memory probe used and the routing fit's r;
``network_delay``'s comment is set by `assemble` itself.
"""

from __future__ import annotations

__all__ = ["derivation_comments"]

from testbed.calibration.bench import MemoryProbe, PipeProbe
from testbed.calibration.fitting import LineFit
from testbed.calibration.protocol import CalibrationData, size_label


def derivation_comments(
    data: CalibrationData,
    route: LineFit | None,
    pipes: list[PipeProbe],
    ref_mem: MemoryProbe | None,
) -> dict[str, str]:
    """How each profile field was derived, as the rendered YAML's comments say."""
    p = data.protocol
    ref = float(p.reference_size)
    small = f"sizes ≤ {size_label(int(10 * ref))}"
    return {
        "latency": "end-to-end publish -> deliver: a + b*size over per-point medians; "
        f"sd = (p95 - median)/1.645 at {small}",
        "persistence": "median write(persistent) - write(transient), with confirms, "
        f"{p.low_rate:g} msg/s",
        "confirm_overhead": f"median latency confirms - base, {p.low_rate:g} msg/s",
        "prefetch_overhead": f"median latency prefetch1 - base, {p.low_rate:g} msg/s",
        "routing": "slope of the median copy latency on the bound queues "
        f"({'/'.join(map(str, p.routing_fanouts))}), r={_fmt_r(route)}",
        "publish_time": f"publish call without confirms (base, {small}): mean, sd",
        "write_time": f"publish -> confirm, transient ({small}, {p.low_rate:g} msg/s): mean, sd",
        "read_time": f"deliver -> ack returned (base, {small}): mean, sd",
        "queue_service": "per-message time of a burst through one queue (upper bound; "
        "relative least squares), "
        f"sizes {', '.join(size_label(s) for s in sorted({x.size for x in pipes}))}",
        "threads": "threads model: each stage serves in the burst time per message at "
        f"{size_label(int(ref))} (cv 1), one thread per stage: the measured single-queue capacity",
        "memory.per_message_overhead": f"(delta memory / n) - size at {size_label(int(ref))}"
        + (f", n={ref_mem.n}" if ref_mem else ""),
        "memory.base_bytes": "broker memory with no queued messages",
        "memory.high_watermark": "not measured (see testbed/calibration/assemble.py)",
    }


def _fmt_r(f: LineFit | None) -> str:
    return "n/a" if f is None or f.r is None else f"{f.r:.3f}"
