"""The bootstrap intervals of `mqbed compare` on hand-made measured runs (numpy only, no Spark):
which method each case takes, and that a real difference is found and a null one is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.latency import BUCKETS_PER_DECADE
from testbed.compare.intervals import (
    MIN_REPLICATIONS,
    block_weights,
    bonferroni_level,
    diff_interval,
    welch_interval,
)
from testbed.compare.runs import MeasuredRun
from testbed.core.records import Ledger


def run(
    rep_values: dict[str, list[float]],
    *,
    windows: int = 60,
    latency_s: float = 0.01,
    rate: float = 100.0,
    seed: int = 0,
) -> MeasuredRun:
    """A run with the given per-replication metric values and `windows` load windows per
    replication: Poisson ack counts at `rate`, lognormal latencies of median `latency_s`."""
    rng = np.random.default_rng(seed)
    reps = len(next(iter(rep_values.values())))
    metrics = pd.DataFrame(
        [
            {"replication": r, "metric": m, "value": float(v)}
            for m, values in rep_values.items()
            for r, v in enumerate(values)
        ]
    )
    urows, hrows, drows = [], [], []
    for r in range(reps):
        for k in range(windows):
            n = int(rng.poisson(rate))
            lat = rng.lognormal(np.log(latency_s), 0.5, n)
            buckets = np.floor(np.log10(lat) * BUCKETS_PER_DECADE).astype(int)
            for b, c in zip(*np.unique(buckets, return_counts=True), strict=True):
                hrows.append({"replication": r, "slice": k, "bucket": int(b), "n": int(c)})
            urows.append(
                {"replication": r, "slice": k, "length": 1.0, "acks": n, "lat_n": n,
                 "lat_sum": float(lat.sum())}
            )  # fmt: skip
            drows.append({"replication": r, "t": float(k + 1), "depth": float(rng.poisson(3))})
    return MeasuredRun(
        run_dir=Path("runs/x"), run_id=f"run-{seed}", scenario="s", scenario_digest="d",
        window_s=1.0, slice_s=1.0, replications=list(range(reps)), metrics=metrics,
        windows=pd.DataFrame(), units=pd.DataFrame(urows), histogram=pd.DataFrame(hrows),
        depth=pd.DataFrame(drows), cdf=pd.DataFrame(columns=["bucket", "upper_s", "cdf", "n"]),
        ledgers=[Ledger() for _ in range(reps)],
    )  # fmt: skip


def test_bonferroni_splits_the_level_over_the_metrics() -> None:
    assert bonferroni_level(0.95, 8) == pytest.approx(1 - 0.05 / 8)
    assert bonferroni_level(0.95, 1) == pytest.approx(0.95)


def test_replications_are_resampled_when_both_runs_have_enough() -> None:
    reps = MIN_REPLICATIONS
    a = run({"throughput_msg_s": [100.0, 101.0, 99.0][:reps]}, windows=2)
    b = run({"throughput_msg_s": [120.0, 119.0, 121.0][:reps]}, windows=2, seed=1)
    ci = diff_interval(a, b, "throughput_msg_s", 0.99)
    assert ci.method == "replications"
    assert ci.detail == f"{reps} vs {reps} replications, Welch t"
    # difference 20, standard error √(1/3 + 1/3), 4 degrees of freedom: t(0.995, 4) = 4.604
    assert ci.low == pytest.approx(20 - 4.604 * (2 / 3) ** 0.5, abs=1e-3)
    assert ci.high == pytest.approx(20 + 4.604 * (2 / 3) ** 0.5, abs=1e-3) and ci.significant


def test_three_against_three_replications_keep_their_level() -> None:
    """Two runs of the same law, 3 replications each, compared 4,000 times at 95 %: at most
    about 5 % come out significant (Welch is a little conservative here: 3.2 %). The widened
    bootstrap of the 3 values this replaced flagged 15 %: its resampled means take at most 10
    values, and its interval shrinks to about the range of the values."""
    rng = np.random.default_rng(7)
    flagged = 0
    for _ in range(4000):
        x, y = rng.normal(1.0, 0.2, 3), rng.normal(1.0, 0.2, 3)
        low, high = welch_interval(list(x), list(y), 0.95)
        flagged += low > 0 or high < 0
    assert 0.02 < flagged / 4000 < 0.06, flagged


def test_seeds_that_shifted_together_are_not_a_difference() -> None:
    """The per-replication mean latencies (ms) of two seeds of one live scenario that CI once
    called significantly different at 99 % over 8 metrics: Welch's interval holds 0."""
    low, high = welch_interval([2.31, 1.93, 2.30], [3.09, 3.01, 3.27], bonferroni_level(0.99, 8))
    assert low < 0 < high


def test_overlapping_replications_are_not_significant() -> None:
    a = run({"latency_p95_s": [0.010, 0.014, 0.012]}, windows=2)
    b = run({"latency_p95_s": [0.011, 0.013, 0.015]}, windows=2, seed=1)
    ci = diff_interval(a, b, "latency_p95_s", 0.99)
    assert ci.method == "replications" and ci.significant is False


def test_one_replication_resamples_blocks_of_windows() -> None:
    """Same law, two seeds: no difference; latency ×1.3: found (one replication each)."""
    values = {
        "throughput_msg_s": [100.0],
        "latency_mean_s": [0.01],
        "latency_p95_s": [0.02],
        "queue_depth_mean": [3.0],
    }
    a, same = run(values, seed=1), run(values, seed=2)
    slower = run(values, seed=3, latency_s=0.013)
    for metric in values:
        ci = diff_interval(a, same, metric, bonferroni_level(0.95, 4))
        assert ci.method == "blocks" and ci.detail.startswith("60 vs 60 "), ci
        assert ci.significant is False, (metric, ci)
    for metric in ("latency_mean_s", "latency_p95_s"):
        ci = diff_interval(a, slower, metric, bonferroni_level(0.95, 4))
        assert ci.significant is True and ci.low is not None and ci.low > 0, (metric, ci)
    ci = diff_interval(a, slower, "throughput_msg_s", 0.95)
    assert ci.significant is False


def test_ledger_counts_of_single_replications_use_a_poisson_law() -> None:
    a = run({"losses": [0.0], "duplicates": [2.0]}, windows=2)
    b = run({"losses": [40.0], "duplicates": [3.0]}, windows=2, seed=1)
    losses = diff_interval(a, b, "losses", 0.99)
    assert losses.method == "poisson" and losses.significant is True
    assert losses.low is not None and 20 < losses.low < 40
    assert diff_interval(a, b, "duplicates", 0.99).significant is False
    none = diff_interval(a, a, "losses", 0.99)
    assert (none.low, none.high, none.significant) == (0.0, 0.0, False)


def test_a_metric_missing_in_one_run_has_no_interval() -> None:
    a = run({"throughput_msg_s": [1.0]}, windows=2)
    b = run({"latency_mean_s": [1.0]}, windows=2, seed=1)
    ci = diff_interval(a, b, "throughput_msg_s", 0.95)
    assert ci.method == "none" and ci.significant is None


def test_block_bootstrap_spreads_as_much_as_the_mean_does() -> None:
    """Over many independent samples of 9 units, the widened block-bootstrap spread of the
    mean matches its true spread (unwidened it is ~20 % too narrow)."""
    rng = np.random.default_rng(5)
    ratios = []
    for k in range(300):
        x = rng.normal(size=9)
        weights, factor = block_weights(9, k)
        ratios.append(((weights @ x / 9) * factor).std() / (1 / 3))
    assert factor == pytest.approx((9 / 6) ** 0.5)
    assert 0.92 < float(np.mean(np.square(ratios))) < 1.08


def test_a_significant_change_is_coloured_by_the_metric_s_better_direction() -> None:
    from testbed.compare.table import rows

    def doc(metric: str, diff: float, significant: bool | None) -> dict:
        entry = {"metric": metric, "baseline": 1.0, "other": 1.0 + diff, "difference": diff,
                 "rel_difference": diff, "interval": [diff / 2, diff * 2], "significant": significant}  # fmt: skip
        return {"comparisons": [{"other": "b", "metrics": [entry]}]}

    assert rows(doc("latency_p95_s", 0.5, True))[0].tone == "bad"
    assert rows(doc("latency_p95_s", -0.5, True))[0].tone == "ok"
    assert rows(doc("throughput_msg_s", 5.0, True))[0].tone == "ok"
    assert rows(doc("throughput_msg_s", 5.0, False))[0].tone == "na"
    assert [r.mark for r in rows(doc("losses", 3.0, True))] == ["▲"]


def test_a_percentile_with_too_few_latencies_beyond_it_is_not_judged() -> None:
    """~150 latencies per run: p50 gets an interval (it needs 20), p95 (200) and
    p99 (1,000) do not; a 10x slower run is still found by the mean and the median."""
    values = {"latency_p50_s": [0.01], "latency_p95_s": [0.02], "latency_p99_s": [0.03],
              "latency_mean_s": [0.01]}  # fmt: skip
    a = run(values, windows=15, rate=10.0, seed=1)
    slow = run(values, windows=15, rate=10.0, seed=2, latency_s=0.1)
    n = int(a.units.lat_n.sum())
    assert 100 < n < 200, n
    for metric in ("latency_p95_s", "latency_p99_s"):
        ci = diff_interval(a, slow, metric, 0.95)
        assert ci.method == "none" and ci.significant is None and "interval needs" in ci.detail
    for metric in ("latency_p50_s", "latency_mean_s"):
        assert diff_interval(a, slow, metric, 0.95).significant is True, metric
