"""Visibility-timeout leases with plain numbers and the shared visibility rules (docs/models.md §4)."""

from __future__ import annotations

import pytest

from testbed.core.policies import LeaseBook
from testbed.core.scenario_loader import parse_scenario
from testbed.core.visibility import (
    DELAY_SUFFIX,
    dead_letter_probability,
    dead_letter_queue_of,
    dead_letters,
    delay_queue_of,
)
from testbed.workload.topology import parked_queue_names


def test_lease_expires_after_timeout_and_redelivers() -> None:
    book = LeaseBook(timeout=2.0, max_deliveries=3)
    book.lease("d1", "m1", attempt=1, now=10.0)
    assert book.next_expiry() == 12.0
    assert book.expired(11.999) == []
    [(lease, action)] = book.expired(12.0)
    assert (lease.msg_id, lease.attempt, action) == ("m1", 1, "redeliver")
    assert len(book) == 0 and book.next_expiry() is None


def test_settled_lease_never_expires() -> None:
    book = LeaseBook(timeout=1.0, max_deliveries=3)
    book.lease("d1", "m1", 1, now=0.0)
    assert book.settle("d1") is not None
    assert book.settle("d1") is None  # a second ack finds nothing
    assert book.expired(100.0) == []


def test_last_attempt_dead_letters() -> None:
    book = LeaseBook(timeout=1.0, max_deliveries=3)
    book.lease("a", "m", 2, now=0.0)
    book.lease("b", "m", 3, now=0.0)
    actions = {lease.key: action for lease, action in book.expired(1.0)}
    assert actions == {"a": "redeliver", "b": "dead_letter"}


def test_extend_moves_expiry_and_old_entry_is_ignored() -> None:
    book = LeaseBook(timeout=1.0, max_deliveries=5)
    book.lease("d", "m", 1, now=0.0)
    new = book.extend("d", 5.0, now=0.5)
    assert new.expires == 5.5 and new.started == 0.0
    assert book.expired(1.0) == []  # the original expiry is stale
    assert book.next_expiry() == 5.5
    assert [lease.expires for lease, _ in book.expired(5.5)] == [5.5]


def test_expiry_order_is_by_time() -> None:
    book = LeaseBook(timeout=3.0, max_deliveries=5)
    book.lease("late", "m2", 1, now=1.0)
    book.lease("early", "m1", 1, now=0.0)
    assert [lease.key for lease, _ in book.expired(10.0)] == ["early", "late"]


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="visibility timeout must be > 0 s, got 0"):
        LeaseBook(0, 3)
    with pytest.raises(ValueError, match="max_deliveries must be >= 1, got 0"):
        LeaseBook(1.0, 0)
    book = LeaseBook(1.0, 2)
    with pytest.raises(KeyError, match="no live lease for delivery 'x'"):
        book.extend("x", 1.0, now=0.0)


def test_visibility_rules_shared_by_live_and_simulated_consumers() -> None:
    assert [dead_letters(a, 3) for a in (1, 2, 3, 4)] == [False, False, True, True]
    book = LeaseBook(timeout=1.0, max_deliveries=3)
    assert [book.decide(a) for a in (2, 3)] == ["redeliver", "dead_letter"]
    # a message is dead-lettered iff all max_deliveries attempts failed
    assert dead_letter_probability(0.5, 3) == pytest.approx(0.125)
    s, issues = parse_scenario(VT_QUEUES)
    assert s is not None, [str(i) for i in issues]
    assert dead_letter_queue_of(s, "jobs") == "jobs.dlq"
    assert dead_letter_queue_of(s, "named") == "graveyard"
    assert dead_letter_queue_of(s, "plain") is None
    assert delay_queue_of("jobs") == "jobs.vt-delay" and "jobs.vt-delay".endswith(DELAY_SUFFIX)


def test_a_drain_does_not_wait_for_dead_letters_nobody_reads() -> None:
    """A live drain ends when every queue is empty but these: a dead-lettered message stays
    where it went (the run used to wait out its whole drain timeout after any dead letter)."""
    s, _ = parse_scenario(VT_QUEUES)
    assert s is not None
    assert parked_queue_names(s) == {"jobs.dlq", "graveyard"}
    read = VT_QUEUES.replace("- {name: plain}", "- {name: plain}\n    - {name: graveyard}")
    read += "  - {name: g, queue: graveyard, service_time: {kind: deterministic, value: 1ms}}\n"
    s, issues = parse_scenario(read)
    assert s is not None, [str(i) for i in issues]
    assert parked_queue_names(s) == {"jobs.dlq"}  # a consumer empties it: the drain waits


VT_QUEUES = """
name: vt-names
duration: 10s
topology:
  queues:
    - {name: jobs, visibility: {timeout: 1s}}
    - {name: named, visibility: {timeout: 1s, dead_letter_queue: graveyard}}
    - {name: plain}
producers:
  - {name: p, queue: jobs, arrival: {kind: constant, rate: 1/s}, size: 10B}
consumers:
  - {name: c, queue: jobs, service_time: {kind: deterministic, value: 1ms}}
"""
