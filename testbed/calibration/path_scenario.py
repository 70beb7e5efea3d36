"""The generated scenario of the client-path calibration: its load phases and streams.

`testbed.calibration.client_path` runs it through the live workload and tabulates its records;
what each stream is for is said at ``PHASES`` and in `testbed.calibration.path_streams`.
"""

from __future__ import annotations

__all__ = [
    "CHAINS",
    "END",
    "PHASES",
    "PRIME",
    "Phase",
    "at",
    "calibration_scenario",
    "phase_of",
]

from dataclasses import dataclass
from typing import Any

import pandas as pd

from testbed.calibration.path_streams import (
    BURST,
    BURST_RATE,
    BURST_START,
    BURST_STOP,
    BURST_WIDTH,
    CONFIRMED_TRANSIENT,
    FAN,
    FAN_SERVICE,
    FAN_WIDTH,
    HOLD_SERVICE,
    IDLE,
    IDLE_RATE,
    IDLE_START,
    IDLE_STOP,
    LARGE,
    SMALL,
    SPREAD,
    SPREAD_RATE,
    SPREAD_SERVICE,
    SPREAD_START,
    SPREAD_STOP,
    SPREAD_WIDTH,
)


@dataclass(frozen=True)
class Phase:
    name: str
    start: float
    stop: float
    small: float  # msg/s of each stream
    large: float
    persistent: float
    confirmed: float
    confirmed_transient: float
    hold: float
    hold_consumers: int = 0
    turn: float = 0.0
    """msg/s to one prefetch-1 consumer of ``HOLD_SERVICE`` (the turnaround, ``TURN``)."""
    fan: float = 0.0
    """msg/s published to the fan-out of ``FAN_WIDTH`` queues (the copy gap, ``FAN``)."""

    @property
    def chained(self) -> float:
        """msg/s of follow-ups the delivery consumers publish (``CHAINS``)."""
        return sum(getattr(self, src) * p for src, (_, p, _) in CHAINS.items())

    @property
    def total(self) -> float:
        return (self.small + self.large + self.persistent + self.confirmed
                + self.confirmed_transient + self.hold + self.turn + self.fan * FAN_WIDTH
                + self.chained)  # fmt: skip

    @property
    def hold_queue(self) -> str:
        return f"hold-{self.name}"

    @property
    def turn_queue(self) -> str:
        return f"turn-{self.name}"


CHAINS = {"small": ("chained", 0.5, False), "large": ("chained-persistent", 1.0, True)}
"""Follow-ups (queue, probability, persistent) the consumers of the small and large streams
publish from their handlers, each to a zero-service consumer of its own: the delivery of a
message published by a consumer that is running, not by a timer-driven producer. Measured on
SPECjms2007 interaction 1 on RabbitMQ, such a message reached its consumer ~0.5 ms sooner (the
ShipConf follow-up's p50 1.03 ms, predicted 1.64 ms from the producers' table): the publishing
process and the broker's connection are already awake."""

PHASES = (
    Phase(
        "low", 2.0, 14.0, small=20.0, large=10.0, persistent=20.0, confirmed=20.0,
        confirmed_transient=20.0, hold=0.0, fan=4.0,
    ),
    Phase(
        "mid", 16.0, 28.0, small=20.0, large=10.0, persistent=20.0, confirmed=20.0,
        confirmed_transient=20.0, hold=67.0, hold_consumers=1, turn=67.0,
    ),
    Phase(
        "high", 30.0, 44.0, small=60.0, large=10.0, persistent=20.0, confirmed=20.0,
        confirmed_transient=20.0, hold=201.0, hold_consumers=3, turn=67.0,
    ),
    Phase(
        "quiet", 68.0, 88.0, small=6.0, large=3.0, persistent=5.0, confirmed=5.0,
        confirmed_transient=5.0, hold=0.0,
    ),
)  # fmt: skip
"""Offered rates per phase (s, msg/s): totals 130, 244, 438 and 30 with the chained follow-ups
and the low phase's five copies of each fanned-out message (90, 224 and 418 before revision 5 added
the transient confirmed stream and the fan-out); a hold stream offers n × HOLD_UTILISATION / (8 ms +
~1 ms), and so does the turnaround stream to its one prefetch-1 consumer (``TURN``; its 67 msg/s
came out of the hold streams, which had one consumer more, so the totals stayed those of the
earlier tables). The delivery streams keep one consumer each at ≤ 60 msg/s (busy ~6 % of the
time): spreading a faster small stream over five consumers made ActiveMQ's deliveries slower even
at 50 msg/s (p50 2.33 vs 1.93 ms), and one consumer at 182 msg/s was busy a fifth of the time and
queued. Persistent messages are measured in every phase, as transient ones are: measured only in
the high phase, a scenario of persistent messages at 9 msg/s (SPECjms2007 interaction 1) drew its
deliveries from the 358 msg/s table, whose p90 is twice that of the quiet machine, and was
predicted +52 % mean latency on RabbitMQ. The *confirmed* stream is persistent too, from a
producer that asks for confirms (a receipt on STOMP): the broker's persistent path with the
store's acknowledgement in it. Without it a PCM scenario (persistent, confirmed 1 KB messages at
100 msg/s, under a broker kill) drew from the unconfirmed persistent table and was predicted ~0.5
ms low at every quantile on ActiveMQ (p10 0.90 vs 1.44 ms, KS 0.32). The *confirmed-transient*
stream is its transient sibling (``CONFIRMED_TRANSIENT``).

The *quiet* phase (revision 10, 30 msg/s in all, after the sparse stream so that it leaves its
idle times alone; its small and large streams fast enough that their follow-ups reach
``MIN_SAMPLE`` deliveries at scale 1) is the low end of the rate axis: below 130 msg/s the tables
were clamped to the low phase's, whose tails are those of a loaded machine. On ActiveMQ
(2026-11-29, one calibration run with the quiet streams added) confirmed persistent deliveries
took longer than 2 ms 2.8-4.1 % of the time in the three load phases and 0.5 % at 17.5 msg/s (p99
5.25 / 4.14 / 3.24 ms against 1.64 ms), and SPECjms2007 interaction 1 at ~10 msg/s, drawn from the
130 msg/s tables, was predicted a p99 of 3.7 ms where it measured 2.0 ms. Its deliveries go
through the same `awake` and cold-consumer corrections as the others': the simulator adds the
wake-up of the machine's longer idle times itself."""


END = max(IDLE_STOP, BURST_STOP, SPREAD_STOP, *(ph.stop for ph in PHASES))
"""The protocol's time (s) at which its last stream stops."""

PRIME = 8.0
"""Seconds (never stretched by the scale) the first phase's streams run before its window opens
(revision 9): nothing published then is tabulated. The first seconds of a calibration are cold —
new connections, destinations and consumers, however warm the broker: on a warmed ActiveMQ the
first phase's small-message medians were 1.66, 1.31, 1.11 and 1.08 ms in its four 3 s slices and
its persistent ones 2.82, 1.53, 1.30 and 1.17 ms, where the same streams at the same rates 66 s
later measured 1.04-1.15 and 1.12-1.25 ms throughout (p90 3.1 against 1.7 ms). The 130 msg/s
tables so came out slower than the 244 msg/s ones in every ActiveMQ calibration, and scenarios
at low rates were predicted late (visibility timeout p=0.2: first deliveries measured 0.92 ms,
predicted 1.43)."""


def at(t: float, scale: float) -> float:
    """Run time (s) of the protocol's time ``t`` (phase bounds, the sparse stream's window)."""
    return PRIME + t * scale


def calibration_scenario(kind: str, client: str, scale: float = 1.0) -> dict[str, Any]:
    """The generated scenario (a mapping, as YAML would give); ``scale`` stretches phases."""
    return {
        "name": "calibration-client-path",
        "description": "Generated by mqbed: the client path of this machine.",
        "seed": 7,
        "duration": f"{at(END, scale) + 2}s",
        "warmup": "1s",
        "drain_timeout": "20s",
        "broker": {"kind": kind, "client": client},
        "topology": {
            "exchanges": [
                {"name": f"mqbed-cal-{name}", "type": "fanout"} for name in (FAN, SPREAD)
            ],
            "queues": [
                {"name": "mqbed-cal-small", "durable": False},
                {"name": "mqbed-cal-large", "durable": False},
                {"name": "mqbed-cal-persistent", "durable": True},
                {"name": "mqbed-cal-confirmed", "durable": True},
                {"name": f"mqbed-cal-{CONFIRMED_TRANSIENT}", "durable": False},
                {"name": f"mqbed-cal-{IDLE}", "durable": False},
                *({"name": f"mqbed-cal-{to}", "durable": True} for to, _, _ in CHAINS.values()),
                *(
                    {"name": f"mqbed-cal-{ph.hold_queue}", "durable": False}
                    for ph in PHASES
                    if ph.hold_consumers
                ),  # fmt: skip
                *(
                    {"name": f"mqbed-cal-{ph.turn_queue}", "durable": False}
                    for ph in PHASES
                    if ph.turn
                ),  # fmt: skip
                *(
                    {"name": f"mqbed-cal-{q}", "durable": False}
                    for q in (BURST, *(f"{BURST}-{i}" for i in range(BURST_WIDTH)))
                ),
                *_fanout_queues(FAN, FAN_WIDTH),
                *_fanout_queues(SPREAD, SPREAD_WIDTH),
            ],
        },
        "producers": _producers(scale),
        "consumers": [
            _consumer("small", 1, 0.0, CHAINS["small"]),
            _consumer("large", 1, 0.0, CHAINS["large"]),
            _consumer("persistent", 1, 0.0),
            _consumer("confirmed", 1, 0.0),
            _consumer(CONFIRMED_TRANSIENT, 1, 0.0),
            _consumer(IDLE, 1, 0.0),
            *(_consumer(to, 1, 0.0) for to, _, _ in CHAINS.values()),
            *(
                _consumer(ph.hold_queue, ph.hold_consumers, HOLD_SERVICE)
                for ph in PHASES
                if ph.hold_consumers
            ),  # fmt: skip
            *(_consumer(ph.turn_queue, 1, HOLD_SERVICE, prefetch=1) for ph in PHASES if ph.turn),
            *(_consumer(f"{FAN}-{i}", 1, FAN_SERVICE, constant=True) for i in range(FAN_WIDTH)),
            _burst_consumer(),
            *(
                _consumer(f"{BURST}-{i}", 1, FAN_SERVICE, constant=True) for i in range(BURST_WIDTH)
            ),  # fmt: skip
            *(
                _consumer(f"{SPREAD}-{i}", 1, SPREAD_SERVICE, constant=True)
                for i in range(SPREAD_WIDTH)
            ),  # fmt: skip
        ],
    }


def _fanout_queues(name: str, width: int) -> list[dict[str, Any]]:
    """The ``width`` queues bound to the fanout exchange of stream ``name``."""
    exchange = f"mqbed-cal-{name}"
    return [
        {"name": f"{exchange}-{i}", "durable": False, "bindings": [{"exchange": exchange}]}
        for i in range(width)
    ]


def _producers(scale: float) -> list[dict[str, Any]]:
    """Every phase's producers, one per stream with a positive rate."""
    producers: list[dict[str, Any]] = [
        {
            "name": IDLE,
            "queue": f"mqbed-cal-{IDLE}",
            "arrival": {"kind": "poisson", "rate": f"{IDLE_RATE}/s"},
            "size": f"{SMALL}B",
            "persistent": False,
            "confirms": False,
            "start": f"{at(IDLE_START, scale)}s",
            "stop": f"{at(IDLE_STOP, scale)}s",
        },
        {
            "name": BURST,
            "queue": f"mqbed-cal-{BURST}",
            "arrival": {"kind": "poisson", "rate": f"{BURST_RATE}/s"},
            "size": f"{SMALL}B",
            "persistent": False,
            "confirms": False,
            "start": f"{at(BURST_START, scale)}s",
            "stop": f"{at(BURST_STOP, scale)}s",
        },
        {
            "name": SPREAD,
            "exchange": f"mqbed-cal-{SPREAD}",
            "arrival": {"kind": "poisson", "rate": f"{SPREAD_RATE}/s"},
            "size": f"{SMALL}B",
            "start": f"{at(SPREAD_START, scale)}s",
            "stop": f"{at(SPREAD_STOP, scale)}s",
        },
    ]
    for ph in PHASES:
        streams = [
            ("small", ph.small, SMALL, False, "poisson"),
            ("large", ph.large, LARGE, False, "poisson"),
            ("persistent", ph.persistent, SMALL, True, "poisson"),
            ("confirmed", ph.confirmed, SMALL, True, "poisson"),
            (CONFIRMED_TRANSIENT, ph.confirmed_transient, SMALL, False, "poisson"),
            (ph.hold_queue, ph.hold, SMALL, False, "poisson"),
            (ph.turn_queue, ph.turn, SMALL, False, "poisson"),
        ]
        if ph.fan:
            producers.append(
                {
                    "name": f"{ph.name}-{FAN}",
                    "exchange": f"mqbed-cal-{FAN}",
                    "arrival": {"kind": "poisson", "rate": f"{ph.fan}/s"},
                    "size": f"{SMALL}B",
                    "start": f"{_start(ph, scale)}s",
                    "stop": f"{at(ph.stop, scale)}s",
                }
            )
        for queue, rate, size, persistent, arrival in streams:
            if rate <= 0:
                continue
            producers.append(
                {
                    "name": f"{ph.name}-{queue}",
                    "queue": f"mqbed-cal-{queue}",
                    "arrival": {"kind": arrival, "rate": f"{rate}/s"},
                    "size": f"{size}B",
                    "persistent": persistent,
                    "confirms": queue in ("confirmed", CONFIRMED_TRANSIENT),
                    "start": f"{_start(ph, scale)}s",
                    "stop": f"{at(ph.stop, scale)}s",
                }
            )

    return producers


def _start(ph: Phase, scale: float) -> float:
    """When a phase's producers start: the first phase's at once, to prime (``PRIME``)."""
    return 0.0 if ph is PHASES[0] else at(ph.start, scale)


def _consumer(
    queue: str,
    count: int,
    service: float,
    chain: tuple[str, float, bool] | None = None,
    prefetch: int = 10,
    constant: bool = False,
) -> dict[str, Any]:
    law = (
        {"kind": "exponential", "mean": f"{service * 1000:g}ms"}
        if service > 0 and not constant
        else {"kind": "deterministic", "value": f"{service * 1000:g}ms"}
    )
    spec: dict[str, Any] = {
        "name": f"cal-{queue}",
        "queue": f"mqbed-cal-{queue}",
        "count": count,
        "prefetch": prefetch,
        "ack": "after_processing",
        "service_time": law,
    }
    if chain is not None:  # a follow-up published from the handler (see CHAINS)
        to, probability, persistent = chain
        spec["follow_ups"] = [
            {
                "message_type": to,
                "queue": f"mqbed-cal-{to}",
                "size": f"{SMALL}B",
                "probability": probability,
                "persistent": persistent,
            }
        ]
    return spec


def _burst_consumer() -> dict[str, Any]:
    """The burst stream's consumer: ``BURST_WIDTH`` follow-ups from each handler (``BURST``)."""
    spec = _consumer(BURST, 1, 0.0)
    spec["follow_ups"] = [
        {
            "message_type": f"{BURST}-{i}",
            "queue": f"mqbed-cal-{BURST}-{i}",
            "size": f"{SMALL}B",
            "persistent": False,
        }
        for i in range(BURST_WIDTH)
    ]
    return spec


def phase_of(t_publish: pd.Series, scale: float) -> pd.Series:
    """Phase name of each publish time, trimming one second at each phase's start."""
    out = pd.Series([None] * len(t_publish), index=t_publish.index, dtype=object)
    for ph in PHASES:
        inside = (t_publish >= at(ph.start + 1, scale)) & (t_publish < at(ph.stop, scale))
        out[inside] = ph.name
    return out
