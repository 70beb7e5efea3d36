"""Visibility-timeout leases with plain numbers (docs/models.md §4)."""

from __future__ import annotations

import pytest

from testbed.core.policies import LeaseBook


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
