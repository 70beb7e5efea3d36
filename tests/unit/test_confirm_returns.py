"""Returns of ``mandatory`` publishes (basic.return) in the adapters' shared `ConfirmBook`: with
confirms the return turns the coming ack into a failed, ``returned`` confirm; without confirms
nothing else will come, so the failed confirm is ready at once (a producer polls for it)."""

from __future__ import annotations

from testbed.brokers.common import ConfirmBook


def test_with_confirms_the_return_marks_the_coming_ack() -> None:
    book = ConfirmBook()
    book.add(1, "a")
    book.add(2, "b")
    book.returned("a", "returned: NO_ROUTE", confirms=True)
    assert book.take() == []  # nothing until the broker's ack
    book.settle(2, True, multiple=True)
    a, b = book.take()
    assert (a.msg_id, a.ok, a.returned, a.detail) == ("a", False, True, "returned: NO_ROUTE")
    assert (b.msg_id, b.ok, b.returned) == ("b", True, False)
    assert len(book) == 0


def test_without_confirms_the_return_is_ready_at_once() -> None:
    book = ConfirmBook()
    book.returned("x", "returned: NO_ROUTE", confirms=False)
    (c,) = book.take()
    assert (c.msg_id, c.ok, c.returned) == ("x", False, True)
    assert len(book) == 0  # nothing is pending: a no-confirm producer's in_flight stays 0


def test_a_lost_connection_forgets_marked_returns() -> None:
    book = ConfirmBook()
    book.add(1, "a")
    book.returned("a", "returned", confirms=True)
    book.fail_all("connection lost")
    (c,) = book.take()
    assert (c.ok, c.returned, c.detail) == (False, False, "connection lost")
    book.add(1, "a")  # the same id again on a new channel: an ordinary confirm
    book.settle(1, True)
    assert book.take()[0].ok
