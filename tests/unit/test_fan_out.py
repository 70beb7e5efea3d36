"""What a fan-out costs on the client path (`testbed.calibration.fan_out`), and the simulator's
use of it: the copy gap between one message's copies and the delay of all its copies per extra
queue (``ClientPath.fan_delay``), measured against the one-queue small stream."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from emulator.sim.costs import derive_costs
from testbed.calibration.client_path import tables_from_records
from testbed.calibration.fan_out import MIN_FIRST, copy_gap, fan_delay
from testbed.calibration.path_scenario import PHASES, at
from testbed.calibration.path_streams import FAN, FAN_WIDTH
from testbed.calibration.wake import machine_idle
from testbed.core.client_path import PROTOCOL, CpuSplit
from testbed.core.profile import default_profile
from tests.unit.pathkit import one_table_path

COLS = ["queue", "consumer", "msg_id", "t_deliver", "latency_s", "service_s", "t_done"]
LOW = next(ph for ph in PHASES if ph.name == "low")


def _frame(rows: list[tuple]) -> pd.DataFrame:
    d = pd.DataFrame(rows, columns=COLS)
    d["outcome"] = "acked"
    return d


def test_the_copy_gap_is_the_median_gap_between_the_starts_of_one_messages_copies() -> None:
    rng = np.random.default_rng(8)
    rows = []
    for i, t in enumerate(np.linspace(at(LOW.start, 1.0) + 1.1, at(LOW.stop, 1.0) - 0.1, 60)):
        start = t + 0.001
        for k in rng.permutation(FAN_WIDTH):  # copies start one after another, queue order free
            rows.append((f"mqbed-cal-{FAN}-{k}", f"c{k}", f"m{i}", start, start - t, None, start))
            start += 0.0001 + rng.uniform(0.0, 0.00004)
        rows.append(("mqbed-cal-small", "s", f"s{i}", t + 0.002, 0.002, None, t + 0.002))
    d = _frame(rows)
    assert copy_gap(d) == pytest.approx(0.00012, abs=5e-6)
    assert copy_gap(d[d.msg_id.isin(["m0", "m1"])]) is None  # 8 gaps: too few
    paths, _, _ = tables_from_records(d)  # the fan-out's copies are no delivery point
    assert [p.table.floor for p in paths] == [pytest.approx(0.002)]


def _fan_run(first: float, single: float, n: int = 40, keep_awake: bool = True) -> pd.DataFrame:
    """``n`` fanned-out messages (first copy after ``first`` s, then 0.1 ms apart) and ``n``
    small ones (``single`` s) in the low phase, each consumer idle ~0.25 s before its next
    message; a busy stream publishing every 2 ms keeps the machine awake (``keep_awake``)."""
    rng = np.random.default_rng(3)
    rows = []
    for i, t in enumerate(np.linspace(at(LOW.start, 1.0) + 1.1, at(LOW.stop, 1.0) - 0.5, n)):
        t = float(t)
        for k in range(FAN_WIDTH):
            start = t + first + 1e-4 * k
            # t_deliver - latency_s differs between copies by rounding, as recorded
            rows.append((f"mqbed-cal-{FAN}-{k}", f"f{k}", f"m{i}", start, start - t + k * 1e-12,
                         None, start + 0.01))  # fmt: skip
        u = t + 0.13 + rng.uniform(0, 0.001)
        rows.append(("mqbed-cal-small", "s", f"s{i}", u + single, single, None, u + single))
    if keep_awake:
        for j, t in enumerate(np.arange(at(LOW.start, 1.0) + 1.0, at(LOW.stop, 1.0), 0.002)):
            rows.append(("mqbed-cal-persistent", "p", f"p{j}", t + 0.0005, 0.0005, None, t + 5e-4))
    return _frame(rows)


def test_the_fan_delay_is_the_first_copys_lateness_per_extra_queue() -> None:
    """First copies 0.4 ms later than one-queue messages, five queues: 0.1 ms a queue."""
    d = _fan_run(first=0.0012, single=0.0008)
    assert fan_delay(d) == pytest.approx(0.0004 / (FAN_WIDTH - 1), abs=1e-9)
    assert fan_delay(_fan_run(first=0.0006, single=0.0008)) == 0.0  # never negative
    assert fan_delay(_fan_run(0.0012, 0.0008, n=MIN_FIRST - 1)) is None  # too few
    assert fan_delay(d.iloc[0:0]) is None


def test_the_fan_delay_compares_only_deliveries_published_while_the_machine_was_awake() -> None:
    """Without the busy stream every publish follows 0.1 s of idle time: that is the wake-up's
    (`ClientPath.wake`), not the fan-out's, and nothing is left to compare."""
    assert fan_delay(_fan_run(0.0012, 0.0008, keep_awake=False)) is None


def test_a_copys_own_siblings_do_not_count_as_activity_before_its_publish() -> None:
    """The copies of one message give its publish time a rounding apart: the machine's idle time
    before it is measured from the previous message's activity, not from a sibling copy."""
    d = _fan_run(0.0012, 0.0008, keep_awake=False)
    idle = machine_idle(d)
    fan = d.queue.str.startswith(f"mqbed-cal-{FAN}-")
    assert idle[fan].iloc[FAN_WIDTH:].min() > 0.05  # not ~1e-12


def test_the_simulator_delays_every_copy_by_the_fan_delay_per_extra_queue() -> None:
    """With the Locust process's CPU measured the profile's routing slope is left out (it is
    mostly that work) and the client path's ``fan_delay`` is the per-destination cost; a path
    measured before revision 8 (no fan delay) adds none."""
    sample = np.linspace(0.0005, 0.0015, 200)
    split = CpuSplit(publish=0.0, receive=1e-4, ack=0.0)
    for kind, model in (("rabbitmq", "amqp"), ("activemq", "threads")):
        for fan, want in ((0.00005, 0.00005), (None, 0.0)):
            path = one_table_path(kind, sample, cpu_per_op=1e-4, cpu=split, fan_delay=fan)
            p = default_profile(kind).model_copy(update={"client_path": path})
            assert derive_costs(p, model, 1, 1e9, table_stages=True).per_destination == want
    assert PROTOCOL >= 8  # a cached profile without the fan delay is measured again
