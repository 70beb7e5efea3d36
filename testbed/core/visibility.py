"""Visibility-timeout rules both sides follow (docs/models.md §4): when a failed or expired attempt
is dead-lettered, what the dead-letter and delay queues are called, and what in-order delivery
changes (`holds_head_of_line`, `consumer_prefetch`).

The live consumers (`testbed.control.visibility`, through the `LeaseBook` of
`testbed.core.policies.visibility`), the simulator (`emulator.sim.consumers`, `emulator.sim.model`)
and the closed forms (`emulator.closed_form`) all decide with these functions.
"""

from __future__ import annotations

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "DELAY_SUFFIX",
    "IN_ORDER_PREFETCH",
    "consumer_prefetch",
    "dead_letter_probability",
    "dead_letter_queue",
    "dead_letter_queue_of",
    "dead_letters",
    "delay_queue_of",
    "holds_head_of_line",
]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario, VisibilitySpec

DEAD_LETTER_SUFFIX = ".dlq"
"""A queue's dead-letter queue is ``<queue>.dlq`` unless the scenario names one."""
DELAY_SUFFIX = ".vt-delay"
"""RabbitMQ's holding queue of failed attempts: ``<queue>.vt-delay`` (TTL = VT, dead-letters
back into the queue). Internal: the analysis leaves its samples out of the queue depths."""
IN_ORDER_PREFETCH = 1
"""How many deliveries of an in-order queue may be unacked at once, queue-wide."""


def dead_letters(attempt: int, max_deliveries: int) -> bool:
    """After attempt number `attempt` (1-based) failed or its lease expired: True when that was
    the last attempt allowed (the copy goes to the dead-letter queue), False when the message
    becomes visible again for attempt ``attempt + 1``."""
    return attempt >= max_deliveries


def dead_letter_probability(failure_probability: float, max_deliveries: int) -> float:
    """Share of messages dead-lettered when each attempt fails independently with
    `failure_probability`: all `max_deliveries` attempts failed (`dead_letters`)."""
    return failure_probability**max_deliveries


def dead_letter_queue(queue: str, visibility: VisibilitySpec) -> str:
    """Where `queue` (with visibility timeout `visibility`) dead-letters exhausted messages."""
    return visibility.dead_letter_queue or f"{queue}{DEAD_LETTER_SUFFIX}"


def dead_letter_queue_of(scenario: Scenario, queue: str) -> str | None:
    """Where `queue` dead-letters exhausted messages (None without a visibility timeout)."""
    q = scenario.queue(queue)
    if q is None or q.visibility is None:
        return None
    return dead_letter_queue(queue, q.visibility)


def delay_queue_of(queue: str) -> str:
    """RabbitMQ's holding queue for failed attempts of `queue` (TTL = VT, dead-letters back)."""
    return f"{queue}{DELAY_SUFFIX}"


def holds_head_of_line(visibility: VisibilitySpec | None) -> bool:
    """In-order delivery (``in_order: true``, docs/models.md §4): at most `IN_ORDER_PREFETCH`
    delivery of the queue is unacked at a time, and a failed attempt is not handed back: it
    keeps its lease, and with it the head of the line, until the lease runs out, then it is
    delivered again before any newer message (or dead-lettered after ``max_deliveries``,
    `dead_letters`). Otherwise (out of order) a failed attempt goes back at once as a copy that
    becomes visible VT later at the tail, and newer messages pass it.

    Live: one active consumer per queue (RabbitMQ ``x-single-active-consumer``, ActiveMQ
    exclusive consumers) with prefetch `consumer_prefetch` (`testbed.workload.consumer`,
    `testbed.control.visibility`); simulated: the queue dispatches only while nothing is
    unacked and the consumer keeps a failed copy leased (`emulator.sim.queues`, ``consumers``).
    """
    return visibility is not None and visibility.in_order


def consumer_prefetch(prefetch: int, visibility: VisibilitySpec | None) -> int:
    """The prefetch a live consumer asks for: the scenario's, or `IN_ORDER_PREFETCH` on an
    in-order queue (a newer message must not wait in the consumer behind a failed one)."""
    return IN_ORDER_PREFETCH if holds_head_of_line(visibility) else prefetch
