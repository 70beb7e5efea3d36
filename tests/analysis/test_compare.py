"""`compare_runs` on synthetic run directories (Spark, the session's shared local session).

Three one-replication runs: A and B draw from the same law with two seeds (nothing may be
significant), C has latencies 1.5× longer (every latency figure must be, throughput not).
Then replicated runs of two differently named scenarios (replications resampled, a warning).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from testbed.compare import compare_runs
from testbed.compare.core import COMPARED
from tests.analysis.synthetic import write_run

LATENCIES = ["latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s"]


def by_metric(comparison: dict) -> dict[str, dict]:
    return {m["metric"]: m for m in comparison["metrics"]}


def recorded(run_dir: Path, warmup: float, end: float) -> tuple[float, float]:
    """Throughput and mean latency straight from the Parquet records (the report's
    definitions: acks done in the load window per second; latency of acked messages
    published in it)."""
    d = pq.read_table(run_dir / "measured" / "deliveries.parquet").to_pandas()
    acked = d[d.outcome == "acked"]
    done = acked[(acked.t_done >= warmup) & (acked.t_done < end)]
    t_pub = acked.t_deliver - acked.latency_s
    sample = acked[(t_pub >= warmup) & (t_pub < end)]
    return len(done) / (end - warmup), float(sample.latency_s.mean())


@pytest.mark.usefixtures("spark")
def test_two_seeds_differ_in_nothing_and_slower_latency_is_found(tmp_path: Path) -> None:
    kw = {"messages": 3000, "rate": 300.0, "predicted": False, "latency_median": 0.002}
    a = write_run(tmp_path / "a", seed=1, **kw)
    b = write_run(tmp_path / "b", seed=2, **kw)
    c = write_run(tmp_path / "c", seed=3, **{**kw, "latency_median": 0.003})
    console = Console(stderr=True, record=True, width=160)
    doc = compare_runs([a, b, c], tmp_path / "cmp", console)

    assert doc["baseline"] == a.name
    (few,) = doc["warnings"]  # single runs: the intervals cannot hold run-to-run noise
    assert few.startswith(f"{a.name}, {b.name}, {c.name}: fewer than 3 replications"), few
    assert doc["per_metric_level"] == pytest.approx(1 - 0.05 / len(COMPARED))
    same, slower = doc["comparisons"]
    assert same["same_scenario"] and same["same_settings"]
    assert same["significant"] == [], same["metrics"]
    m = by_metric(same)
    assert list(m) == COMPARED
    for name in ("throughput_msg_s", *LATENCIES, "queue_depth_mean"):
        assert m[name]["method"] == "blocks", m[name]
    assert m["throughput_msg_s"]["resampled"].startswith("41 vs 41 slices of 225 ms"), m
    assert m["queue_depth_mean"]["resampled"].startswith("9 vs 9 broker samples"), m
    assert m["losses"]["method"] == "poisson" and m["losses"]["interval"] == [0.0, 0.0]

    throughput, latency = recorded(a, 1.0, 10.0)
    assert m["throughput_msg_s"]["baseline"] == pytest.approx(throughput, rel=1e-9)
    assert m["latency_mean_s"]["baseline"] == pytest.approx(latency, rel=1e-9)
    assert m["latency_mean_s"]["difference"] == pytest.approx(
        m["latency_mean_s"]["other"] - latency
    )

    s = by_metric(slower)
    assert set(slower["significant"]) >= set(LATENCIES[:3]), slower["metrics"]
    for name in LATENCIES[:3]:
        low, high = s[name]["interval"]
        assert 0 < low <= s[name]["difference"] <= high, s[name]
        assert s[name]["rel_difference"] == pytest.approx(0.5, abs=0.15)
    assert "throughput_msg_s" not in slower["significant"]

    files = {k: Path(v) for k, v in doc["files"].items()}
    assert json.loads(files["json"].read_text()) == doc
    html = files["html"].read_text()
    for plot in ("cdf", "throughput", "latency", "depth"):
        assert f'id="plot-{plot}" alt=' in html and "data:image/png;base64," in html
    assert html.count('class="comparison"') == 2
    assert 'data-metric="latency_p95_s" data-significant="True"' in html
    assert 'data-metric="throughput_msg_s" data-significant="False"' in html
    md = files["markdown"].read_text()
    assert md.count("| latency p95 (ms) |") == 2 and "▲ significant" in md
    shown = console.export_text()
    assert "latency p95 (ms)" in shown and "▲" in shown and "Bonferroni" in shown


@pytest.mark.usefixtures("spark")
def test_replications_are_resampled_and_other_scenarios_warned(tmp_path: Path) -> None:
    kw = {"messages": 1500, "rate": 300.0, "predicted": False, "replications": 3}
    a = write_run(tmp_path / "a", seed=1, name="before", **kw)
    b = write_run(tmp_path / "b", seed=2, name="after", **kw)
    console = Console(stderr=True, record=True, width=160)
    doc = compare_runs([a, b], None, console)
    assert doc["files"] == {} and not (tmp_path / "cmp").exists()
    (comp,) = doc["comparisons"]
    assert not comp["same_scenario"]
    assert len(doc["warnings"]) == 1 and "'after'" in doc["warnings"][0]
    assert "warning:" in console.export_text()
    assert [r["replications"] for r in doc["runs"]] == [3, 3]
    for entry in comp["metrics"]:
        assert entry["method"] == "replications", entry
        assert entry["resampled"] == "3 vs 3 replications, Welch t"
