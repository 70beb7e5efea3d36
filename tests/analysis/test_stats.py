"""Intervals, bootstrap weights, histogram quantiles and relative errors on plain numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.analysis.stats import (
    block_length,
    bootstrap_weights,
    hist_quantile,
    percentile_interval,
    poisson_interval,
    rel_error,
    t_interval,
)


def test_t_interval_is_the_student_t_interval() -> None:
    x = [10.0, 12.0, 11.0, 13.0]
    mean, sd = 11.5, math.sqrt(((1.5**2) * 2 + 0.5**2 * 2) / 3)
    t975_3 = 3.182446305284263  # Student t, 3 degrees of freedom, 0.975 quantile
    lo, hi = t_interval(x)  # type: ignore[misc]
    assert lo == pytest.approx(mean - t975_3 * sd / 2)
    assert hi == pytest.approx(mean + t975_3 * sd / 2)
    assert t_interval([1.0]) is None
    assert t_interval([1.0, None, float("nan")]) is None


def test_poisson_interval_is_garwood() -> None:
    assert poisson_interval(0) == pytest.approx([0.0, 3.6888794541139363])
    lo, hi = poisson_interval(10)
    assert (lo, hi) == pytest.approx((4.795389, 18.390356), rel=1e-6)


def test_block_bootstrap_weights_draw_n_windows_in_consecutive_blocks() -> None:
    n = 27
    w = bootstrap_weights(n, resamples=500, seed=3)
    assert w.shape == (500, n)
    assert (w.sum(axis=1) == n).all()
    assert block_length(n) == 3 and block_length(1) == 1
    # the mean of a constant series never moves; of a trend it brackets the true mean
    assert percentile_interval(w @ np.full(n, 4.0) / n) == pytest.approx([4.0, 4.0])
    lo, hi = percentile_interval(w @ np.arange(n, dtype=float) / n)  # type: ignore[misc]
    assert lo < 13.0 < hi


def test_hist_quantile_matches_numpy_on_the_expanded_sample() -> None:
    values = np.array([1.0, 2.0, 5.0, 7.0])
    counts = np.array([[3, 0, 5, 2], [0, 1, 0, 0], [0, 0, 0, 0]])
    for q in (0.3, 0.5, 0.95):
        got = hist_quantile(counts, values, q)
        for row, g in zip(counts[:2], got[:2], strict=True):
            sample = np.repeat(values, row)
            assert g == np.quantile(sample, q, method="inverted_cdf")
        assert math.isnan(got[2])


@pytest.mark.parametrize(
    ("p", "m", "expected"),
    [
        (110.0, 100.0, 0.1),
        (90.0, 100.0, -0.1),
        (0.0, 0.0, 0.0),
        (1.0, 0.0, None),
        (None, 1.0, None),
        (-3.0, -2.0, -0.5),
    ],
)
def test_rel_error(p: float | None, m: float | None, expected: float | None) -> None:
    got = rel_error(p, m)
    assert got == (pytest.approx(expected) if expected is not None else None)
