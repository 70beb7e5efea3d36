"""The scripts' side of the figure protocol, fed canned measurements (nothing is benchmarked):
every catalogued figure of an area comes out under its key, with the right anchor, and a figure
a run leaves out says why."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.bench.catalogue import expected
from testbed.bench.figures import Figure, parse
from tests.bench import bench_correlate, bench_workload

RATE = {
    "target_msg_s": 5000.0,
    "achieved_msg_s": 4990.0,
    "scheduled_msg_s": 5010.0,
    "publish_delay_ms": {"p50": 0.3, "p99": 1.1, "p999": 35.3, "max": 65.9},
}
STEPS: dict[str, dict[str, Any]] = {
    "rate_fidelity": RATE,
    "generator_pika": {
        "locust_worker_msg_s": 25815.0,
        "bare_pika_msg_s": 24180.0,
        "locust_cpu_us_per_publish": 21.5,
    },
    "generator_kombu": {
        "locust_worker_msg_s": 9000.0,
        "bare_kombu_msg_s": 12000.0,
        "locust_cpu_us_per_publish": 40.1,
    },
    "generator_stomp": {
        "locust_worker_msg_s": 25483.0,
        "bare_stomp_msg_s": 56300.0,
        "locust_cpu_us_per_publish": 12.4,
    },
    "recording": {
        "rows": 10**6,
        "append_us_per_row": 1.83,
        "rss_growth_mb_while_running": 0.0,
        "disk_bytes_per_row": 13.57,
    },  # fmt: skip
    "broker_startup": {"rabbitmq_s": 5.13, "activemq_s": 1.07},
    "activemq_warm_up": {
        "cold_p50_ms": 0.78,
        "warm_up_s": 7.44,
        "messages": 30_000,
        "warm_p50_ms": 0.27,
    },  # fmt: skip
}


def _printed(capsys: pytest.CaptureFixture[str]) -> dict[str, Figure]:
    return {f.key: f for f in parse(capsys.readouterr().out).figures}


def test_workload_prints_every_catalogued_figure(capsys: pytest.CaptureFixture[str]) -> None:
    for step, result in STEPS.items():
        bench_workload.figures(step, result)
    got = _printed(capsys)
    assert list(got) == [f.key for f in expected("workload")]
    assert got["workload.generator_kombu"].ratio == pytest.approx(0.75)
    assert got["workload.generator_kombu"].status == "fail"
    assert got["workload.generator_stomp"].anchor.value == 56300.0  # type: ignore[union-attr]
    cpu = got["workload.generator_cpu_stomp"]
    assert cpu.value == 12.4 and cpu.unit == "µs" and cpu.status == "no target"
    rate = got["workload.rate_vs_schedule"]
    assert rate.ratio == pytest.approx(4990 / 5010) and rate.status == "pass"
    assert got["workload.publish_delay_p999"].status == "fail"  # 35.3 ms against < 20 ms
    assert got["workload.record_disk"].value == 13.57
    warm = got["workload.warm_light_p50_activemq"]  # the same stream, before the warm-up
    assert warm.anchor.value == 0.78 and warm.ratio == pytest.approx(0.27 / 0.78)  # type: ignore[union-attr]
    assert got["workload.warm_up_activemq"].note == "30,000 messages"


def test_rate_fidelity_at_another_rate_is_not_judged(capsys: pytest.CaptureFixture[str]) -> None:
    bench_workload.figures("rate_fidelity", RATE | {"target_msg_s": 1000.0})
    got = _printed(capsys)
    assert {f.status for f in got.values()} == {"not judged"}
    assert got["workload.publish_delay_p99"].note == "at 1,000 msg/s: not judged"


def test_correlation_rows_per_size_and_the_sizes_left_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fig = {"job_s": 52.6, "warm_cpu_s": 69.9, "peak_rss_sum_mib": 3093.0}
    bench_correlate.figures(10**7, fig)
    bench_correlate.figures(10**5, fig | {"job_s": 23.9})
    bench_correlate.not_run(["1e5", "1e7"])
    got = _printed(capsys)
    job = got["correlation.job_s@1e7"]
    assert job.target is not None and job.status == "pass"  # the catalogued < 180 s
    assert got["correlation.cpu_per_row@1e7"].value == pytest.approx(69.9 / 2e7 * 1e6)
    small = got["correlation.job_s@1e5"]
    assert small.target is None and small.name.endswith("1e5 rows per side (fresh JVM)")
    for key in ("correlation.job_s@1e8", "correlation.rss@1e8"):
        assert got[key].value is None and "--sizes 1e8" in (got[key].note or "")
    assert [bench_correlate._tag(n) for n in (10**5, 10**8, 250_000)] == [
        "1e5",
        "1e8",
        "250,000",
    ]
