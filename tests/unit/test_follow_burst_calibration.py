"""The burst stream's gap (`testbed.calibration.follow_burst`), on records laid out as a
calibration run writes them: a broken reader pools gaps across bursts or of other streams, or
keeps bursts a member of which is missing or spread over more than one handler."""

from __future__ import annotations

import pandas as pd
import pytest

from testbed.calibration.follow_burst import _bursts, follow_gap
from testbed.calibration.path_scenario import calibration_scenario
from testbed.calibration.path_streams import BURST

GAP = 0.00015


def _records(n: int) -> pd.DataFrame:
    sends = []
    for b in range(n):
        t0 = 100.0 + 0.1 * b
        for i in range(3):
            msg = f"w.cal-{BURST}.0.0.f{3 * b + i}"
            sends.append((msg, f"cal-{BURST}.0.0", f"mqbed-cal-{BURST}-{i}", t0 + i * GAP, None))
    return pd.DataFrame(sends, columns=["msg_id", "producer", "queue", "t_publish", "t_confirm"])


def test_the_gap_of_whole_bursts() -> None:
    assert follow_gap(_records(60)) == pytest.approx(GAP)


def test_partial_bursts_and_other_streams_are_left_out() -> None:
    s = _records(60)
    other = pd.DataFrame(  # another stream's sends, close together, are no burst
        [("x.f1", "p", "mqbed-cal-small", 100.0001, None)], columns=s.columns
    )
    s = s[~s.msg_id.isin([f"w.cal-{BURST}.0.0.f{k}" for k in range(30, 60, 3)])]  # ten lose one
    late = s.index[s.msg_id == f"w.cal-{BURST}.0.0.f4"]
    s.loc[late, "t_publish"] += 1.0  # one burst spread over a second: not one handler's
    s2 = pd.concat([s, other], ignore_index=True)
    assert _bursts(s2).burst.nunique() == 49
    assert follow_gap(s2) == pytest.approx(GAP)


def test_too_few_bursts_measure_nothing() -> None:
    assert follow_gap(_records(5)) is None
    assert follow_gap(_records(5).iloc[0:0]) is None


def test_the_calibration_scenario_has_the_burst_stream() -> None:
    spec = calibration_scenario("rabbitmq", "pika")
    (handler,) = [c for c in spec["consumers"] if c["queue"] == f"mqbed-cal-{BURST}"]
    assert [f["queue"] for f in handler["follow_ups"]] == [
        f"mqbed-cal-{BURST}-{i}" for i in range(3)
    ]
    assert any(p["name"] == BURST for p in spec["producers"])
