"""A run that measured nothing is an error, never a quiet success: Locust's own exceptions
(a user that died before its process had a recorder) join the users' errors, and a
replication whose producers published nothing fails the run (the compose distributed test
once saw a run exit 0 with an all-zero ledger)."""

from __future__ import annotations

from pathlib import Path

from testbed.core.records import Ledger
from testbed.core.scenario_loader import parse_scenario
from testbed.observe.ledger import locust_exceptions, silent_replications

SCENARIO = """\
name: quiet
duration: 5s
topology: {queues: [{name: q}]}
producers: [{name: p, queue: q, arrival: 10/s}]
consumers: [{name: c, queue: q, service_time: 1ms}]
"""
CSV = (
    "Count,Message,Traceback,Nodes\n"
    "2,\"RuntimeError('run.json: the run did not fix its start')\","
    '"  File ""x.py"", line 1\\n    raise RuntimeError","w1, w2"\n'
)


def test_locust_exceptions_are_read_from_the_masters_csv(tmp_path: Path) -> None:
    (tmp_path / "r0_exceptions.csv").write_text(CSV)
    (tmp_path / "r1_exceptions.csv").write_text("Count,Message,Traceback,Nodes\n")
    (found,) = locust_exceptions(tmp_path)
    assert found["target"] == "locust r0_exceptions.csv"
    assert found["detail"].startswith("2x RuntimeError('run.json: the run did not fix its start')")


def test_no_csv_means_no_exception(tmp_path: Path) -> None:
    assert locust_exceptions(tmp_path / "absent") == []


def test_a_replication_that_published_nothing_is_an_error() -> None:
    scenario, _ = parse_scenario(SCENARIO)
    busy, quiet = Ledger(sent=10, confirmed=10, delivered_unique=10), Ledger()
    (err,) = silent_replications(scenario, [busy, quiet])
    assert err["target"] == "replication r1" and "no message was published" in err["detail"]
    assert silent_replications(scenario, [busy, busy]) == []


MASTER_LOG = """\
[2026-11-26 02:13:53,1] vm/INFO/locust.runners: Worker vm_1 failed to send heartbeat, setting state to missing.
[2026-11-26 02:13:53,2] vm/INFO/locust.runners: The last worker went missing, stopping test.
 Aggregated   0     0(0.00%) |      0       0       0      0 |    0.00        0.00
"""


def test_a_silent_replication_quotes_why_its_locust_stopped(tmp_path: Path) -> None:
    """The detail names the replication's own Locust log lines that explain an early stop
    (a master that dropped its workers), not another replication's."""
    (tmp_path / "r1-master.log").write_text(MASTER_LOG)
    (tmp_path / "r0-master.log").write_text("[x] vm/WARNING/locust.main: r0 only\n")
    scenario, _ = parse_scenario(SCENARIO)
    busy = Ledger(sent=10, confirmed=10, delivered_unique=10)
    (err,) = silent_replications(scenario, [busy, Ledger()], tmp_path)
    assert err["target"] == "replication r1"
    assert "r1-master.log: The last worker went missing, stopping test." in err["detail"]
    assert "failed to send heartbeat" in err["detail"] and "r0 only" not in err["detail"]
