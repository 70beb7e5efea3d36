"""Which attempts of which messages a failing consumer fails.

A consumer group with ``failure_probability`` p fails each attempt with probability p. On a
queue with a visibility timeout the draw is keyed by the message and the attempt
(`testbed.core.seeds.failure_uniform`), as the live consumer draws it: the predicted twin of
live replication *r* fails the same attempts of the same messages (common random numbers).
There one failure holds a message, in order the whole line, for the timeout, so which
messages fail decides a short run; two independent draws of it could not be compared within
the latency targets (docs/models.md §4).

The key of a message is its producer instance and number (`testbed.core.seeds.message_key`),
kept in ``Broker.crn_keys`` from its publish until a consumer deletes it
(``Queue.remove``). Messages with no key (a consumer's follow-up, a copy fanned out to
several queues) and groups whose failures are not keyed draw from the instance's stream.
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.sim.broker import Broker
from testbed.core.scenario import ConsumerSpec, Scenario
from testbed.core.seeds import failure_uniform, keyed_failures, message_key

__all__ = ["keyed_groups", "key_prefix", "failure_draw"]


def keyed_groups(scenario: Scenario) -> set[str]:
    """The consumer groups whose failures are keyed (`testbed.core.seeds.keyed_failures`)."""
    out = set()
    for c in scenario.consumers:
        q = scenario.queue(c.queue)
        if keyed_failures(c.failure_probability, c.ack, q is not None and q.visibility is not None):
            out.add(c.name)
    return out


def key_prefix(group: str, instance: int) -> str:
    """What a simulated producer instance puts before a message's number to name it: the
    live name of worker 0's instance (the one `testbed.core.seeds.arrival_rng` pairs)."""
    return message_key(group, instance, 0)[:-1]


def failure_draw(
    broker: Broker, spec: ConsumerSpec, keyed: bool, seed: int, stream: Callable[[], float]
) -> Callable[[int, int], float]:
    """The consumer's draw for (message, attempt): keyed in replication seed `seed` when
    `keyed` and the message has a key, else the next of `stream`."""
    keys = broker.crn_keys
    if not keyed or keys is None:
        return lambda m, attempt: stream()
    group = spec.name

    def draw(m: int, attempt: int) -> float:
        key = keys.get(m)
        return stream() if key is None else failure_uniform(seed, group, key, attempt)

    return draw
