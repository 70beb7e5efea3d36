"""The streamed simulator (issue 18 §3) gives the rows and figures of the in-memory one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.predict import predict
from emulator.sim import recorder as sim_recorder
from emulator.sim import select
from emulator.sim.model import Model
from emulator.sim.summary import replication_metrics, summarize
from testbed.core.ledger import compute_ledger
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_quantiles_equal_numpy_bit_for_bit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(select, "_LIMIT", 40)  # force the deeper radix passes too
    rng = np.random.default_rng(seed)
    for x in (
        rng.exponential(0.005, 997),
        rng.normal(0.0, 1.0, 1500),
        np.round(rng.normal(0.0, 1.0, 800), 1),  # many ties
        np.full(300, 0.0042),
        np.array([3.0]),
    ):
        blocks = [x[i : i + 89] for i in range(0, len(x), 89)]
        qs = [0.0, 0.001, 0.25, 0.37, 0.5, 0.95, 0.99, 1.0]
        want = list(np.quantile(x, qs, method="inverted_cdf"))  # the judged definition
        assert select.quantiles(lambda b=blocks: iter(b), len(x), qs) == want


@pytest.mark.parametrize("name", ["vt-retries-p0.2", "fanout-1to10", "faults-broker-kill-pcm"])
def test_streamed_prediction_equals_the_in_memory_tables(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small chunks force retirement, late lookups, late confirms and many batches."""
    s = load_scenario(SCENARIOS / f"{name}.yaml")
    s = s.model_copy(update={"duration": min(s.duration, 20.0)})
    prof = default_profile(s.broker.kind, s.broker.client)
    ref = [Model(s, prof, r).run() for r in range(2)]  # one chunk: the whole run in memory
    monkeypatch.setattr(sim_recorder.Recorder.__init__, "__defaults__", (500,))
    res = predict(s, tmp_path, replications=2, processes=1)
    out = tmp_path / "predicted"
    for table in ("messages", "deliveries", "timeseries", "events"):
        got = pq.read_table(out / f"{table}.parquet")

        want = pa.concat_tables([r.tables[table] for r in ref])
        assert got.equals(want), table
    ledgers = [compute_ledger(r.tables["messages"], r.tables["deliveries"]) for r in ref]
    assert res.ledgers == ledgers
    expected = summarize(
        [replication_metrics(r.tables, lg) for r, lg in zip(ref, ledgers, strict=True)], ledgers
    )
    got_metrics = {(m["metric"], m["queue"], m["flow"]): m for m in res.summary["metrics"]}
    want_metrics = {(m["metric"], m["queue"], m["flow"]): m for m in expected["metrics"]}
    assert got_metrics.keys() == want_metrics.keys()
    for key, want_m in want_metrics.items():
        for g, w in zip(got_metrics[key]["values"], want_m["values"], strict=True):
            if key[0].endswith("_mean_s") or key[0] == "queue_depth_mean":
                # sums over batches (depth: areas of the records): summation order only
                assert g == pytest.approx(w, rel=1e-12, abs=1e-15), key
            else:  # counts, rates, exact quantiles: identical
                assert g == w or (g is None and w is None) or (math.isnan(g) and math.isnan(w)), key
