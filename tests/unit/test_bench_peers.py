"""bench_sim's peers (issue 18 §4): SimPy, Ciw and mqbed agree on the same queueing models."""

from __future__ import annotations

import pytest

from emulator import analytic
from tests.bench.peers import QueueModel, agree, compare


@pytest.mark.parametrize(
    ("model", "theory"),
    [
        (QueueModel("mm2", 160.0, (100.0,), 2), analytic.mmn(160.0, 100.0, 2).w),
        (QueueModel("tandem", 60.0, (100.0, 80.0)), 1 / (100 - 60) + 1 / (80 - 60)),
    ],
)
def test_three_engines_agree_on_mean_sojourn(model: QueueModel, theory: float) -> None:
    res = compare(model, horizon=80.0, reps=5)
    assert agree(res), res
    for name, r in res.items():  # and each is near the closed form (M/M/2 Erlang C, Jackson)
        assert r["mean"] == pytest.approx(theory, rel=0.2), (name, r)
        assert r["msg_s"] > 0


def test_agree_rejects_disjoint_intervals() -> None:
    res = {"a": {"ci": (1.0, 2.0)}, "b": {"ci": (1.5, 2.5)}, "c": {"ci": (3.0, 4.0)}}
    assert not agree(res)
    assert agree({k: v for k, v in res.items() if k != "c"})
