"""The streams of the client-path calibration beside its load phases: what each is for.

`testbed.calibration.path_scenario` puts them into the generated scenario;
`testbed.calibration.client_path` and its helpers read their records.
"""

from __future__ import annotations

__all__ = [
    "BURST",
    "BURST_RATE",
    "BURST_START",
    "BURST_STOP",
    "BURST_WIDTH",
    "CONFIRMED_TRANSIENT",
    "FAN",
    "FAN_SERVICE",
    "FAN_WIDTH",
    "HOLD_SERVICE",
    "HOLD_UTILISATION",
    "IDLE",
    "IDLE_RATE",
    "IDLE_START",
    "IDLE_STOP",
    "LARGE",
    "SMALL",
    "SPREAD",
    "SPREAD_RATE",
    "SPREAD_SERVICE",
    "SPREAD_START",
    "SPREAD_STOP",
    "SPREAD_WIDTH",
    "TURN",
    "WAITING_FOR",
]

SMALL, LARGE = 200, 16_000
HOLD_SERVICE = 0.008
"""Mean service time (s, exponential) of the consumers whose client cost gives the hold table."""
HOLD_UTILISATION = 0.6
"""Offered load of each hold consumer: rate × (HOLD_SERVICE + ~1 ms client cost)."""
CONFIRMED_TRANSIENT = "confirmed-transient"
"""The stream of transient messages from a producer that asks for confirms (revision 5): most
scenarios confirm transient messages (the quickstart does). Before it, such a message drew the
unconfirmed transient table plus the broker micro-benchmark's confirm overhead, measured with
pika (0.11 ms on RabbitMQ): the kombu quickstart's body came out 0.11-0.18 ms high."""
FAN, FAN_WIDTH, FAN_SERVICE = "fan", 5, 0.01
"""A fanout exchange bound to ``FAN_WIDTH`` queues whose consumers share the Locust process,
each serving ``FAN_SERVICE`` (constant: its handler sleeps through the burst, so no ack is
sent while the copies arrive): the median gap between the handler starts of consecutive copies
of one message is the work a delivery costs its process *before* its handler, the part of the
fitted receive CPU on that path (``ClientPath.copy_gap``). The fitted figure spaced simulated
copies twice as far apart as measured (SPECjms2007 interaction 3 on ActiveMQ: 0.2-0.25 ms a
copy, measured 0.08-0.1 ms; the fan-out 1→10 on both brokers alike): it holds work done after
the handler has started too (its timers, the service's wake-up)."""
TURN = "turn"
"""The stream whose one consumer takes one message at a time (prefetch 1) at utilisation
``HOLD_UTILISATION``: when the next message was already waiting at the broker, the gap from the
consumer's ack to its next start is the *turnaround* — the ack's way to the broker, its dispatch
of the waiting message and the way back — all a waiting message still has ahead of it. The
delivery tables hold the whole publish → start path of a message nobody waited for; after a
wait at the broker its publish side is long past (measured on the ActiveMQ prefetch-1 holdout:
turnaround median 0.34 ms where the delivery table's was 0.94 ms)."""
IDLE, IDLE_RATE, IDLE_START, IDLE_STOP = "idle", 10.0, 46.0, 66.0
"""The sparse stream after the load phases (revision 6): small transient messages at
``IDLE_RATE`` msg/s (Poisson) to one zero-service consumer, alone on the machine from
``IDLE_START`` to ``IDLE_STOP`` (s, stretched by the scale), so that the idle time before a
publish spreads from a few milliseconds to a few hundred: its deliveries by idle time give the
wake-up of an idle machine (``ClientPath.wake``, `testbed.calibration.wake`). The load phases
never leave the machine idle long enough to show it: a quiet phase of 24 msg/s in all measured
tables 0.3-0.5 ms slower, but as a rate point it also slowed the follow-ups of a sparse
scenario, which are published right after a handler ran."""
BURST, BURST_WIDTH, BURST_RATE, BURST_START, BURST_STOP = "burst", 3, 10.0, 90.0, 102.0
"""The burst stream after the quiet phase (added to revision 10 on 2026-11-29), alone on the
machine from ``BURST_START`` to ``BURST_STOP`` (s, stretched by the scale): small transient
messages at ``BURST_RATE`` msg/s (Poisson) to a zero-service consumer whose handler publishes
``BURST_WIDTH`` follow-ups, one to each of ``BURST_WIDTH`` queues whose consumers share the
Locust process and serve ``FAN_SERVICE`` (constant: each handler sleeps while the next starts).
It gives how far apart one handler's follow-ups are sent (``ClientPath.follow_gap``):
SPECjms2007 interaction 1's distribution centre sends three per order, whose stamps were
0.13-0.19 ms apart on ActiveMQ where the simulator spaced them by the publish CPU (0.06 ms,
2026-11-29), and 0.43-0.45 ms apart on RabbitMQ (0.13 ms): per type, OrderConf, ShipDep and
StatInfo were predicted 29-33, 14-18 and 8-25 % low on ActiveMQ."""
WAITING_FOR = 0.005
"""A message published this long (s) before an ack was waiting at the consumer when it acked."""
SPREAD, SPREAD_WIDTH, SPREAD_RATE, SPREAD_SERVICE = "spread", 5, 50.0, 0.002
SPREAD_START, SPREAD_STOP = 104.0, 112.0
"""The spread stream (added to revision 10 on 2026-11-29), alone on the machine after the burst
from ``SPREAD_START`` to ``SPREAD_STOP`` (s, stretched by the scale): ``SPREAD_RATE`` msg/s
(Poisson) to a fanout exchange bound to ``SPREAD_WIDTH`` queues whose consumers share the Locust
process and serve ``SPREAD_SERVICE`` (constant). Five deliveries a publish, where every other
stream delivers one: it spreads the ratio of deliveries to publishes, so that the CPU the
process spends outside the publish and ack spans can be split between the two
(`testbed.observe.process_cpu.cpu_split`). Without it the two rates correlated at 0.9985 and
the fit put all of it on the deliveries: 0.46 ms a delivery on RabbitMQ (2026-11-29), where
three runs that changed the ratio (one Locust process, ten queues at 100/100, 100/1,000 and
1,000/1,000 publishes/deliveries a second) measured 0.055 ms a delivery and 0.139 ms a publish
(its timer's wake-up); the fan-out 1→10 was predicted a generator busy 0.69 of a core where it
measured 0.35, and a median latency of 8.2 ms where it measured 5.0 ms."""
