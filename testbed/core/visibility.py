"""Visibility-timeout rules both sides follow (docs/models.md §4): when a failed or expired attempt
is dead-lettered, and what the dead-letter and delay queues are called.

The live consumers (`testbed.control.visibility`, through the `LeaseBook` of
`testbed.core.policies.visibility`), the simulator (`emulator.sim.consumers`, `emulator.sim.model`)
and the closed forms (`emulator.closed_form`) all decide with these functions.
"""

from __future__ import annotations

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "DELAY_SUFFIX",
    "dead_letter_probability",
    "dead_letter_queue",
    "dead_letter_queue_of",
    "dead_letters",
    "delay_queue_of",
]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario, VisibilitySpec

DEAD_LETTER_SUFFIX = ".dlq"
"""A queue's dead-letter queue is ``<queue>.dlq`` unless the scenario names one."""
DELAY_SUFFIX = ".vt-delay"
"""RabbitMQ's holding queue of failed attempts: ``<queue>.vt-delay`` (TTL = VT, dead-letters
back into the queue). Internal: the analysis leaves its samples out of the queue depths."""


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
