"""How many acks does a broker kill forget, by the shape of the acked load before it?

The calibration measures the acks a kill forgets (`testbed.calibration.ack_loss`) with one
consumer serving a paced 100 msg/s load for 2 s. This script kills a broker of its own under
other shapes of the same load — one or two consumers, 2 s or 15 s of load before the kill,
paced or Poisson arrivals (with exponential service) — and prints the forgotten acks of each
kill. Evidence for docs/accuracy.md (2026-11-28, RabbitMQ 3.10.8/pika): every shape forgot 0-2
acks a kill, mostly exactly one, where the broker-kill runs of the library forgot 2-3 (their
duplicates). Bounded: `--kills` kills per shape, each a 5 s restart and a ≤ 15 s drain.

    python tests/bench/ack_loss_shapes.py --broker rabbitmq --kills 3
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from testbed.backends.local import LocalBackend
from testbed.brokers import Consumer, Destination
from testbed.calibration.ack_loss import BODY, END_S, HOLD_S, PREFETCH, RATE, AckLoad, KillLosses

CLIENT = {"rabbitmq": "pika", "activemq": "stomp"}
SHAPES = (  # (consumers, seconds of load before the kill, Poisson arrivals and service)
    (1, 2.0, False),
    (2, 2.0, False),
    (1, 15.0, False),
    (2, 15.0, False),
    (2, 2.0, True),
)


class ShapedLoad(AckLoad):
    """The calibration's acked load with `consumers` consumers, optionally Poisson."""

    def __init__(self, endpoint: Any, client: str, consumers: int, poisson: bool) -> None:
        super().__init__(endpoint, client)
        self.n_consumers, self.poisson = consumers, poisson
        self.rng = random.Random(7)

    def _hold(self) -> float:
        return self.rng.expovariate(1 / HOLD_S) if self.poisson else HOLD_S

    def _loop(self, rate: float, limit_s: float) -> None:
        producer = self.adapter.producer(
            Destination.queue(self.queue), persistent=True, confirms=True
        )
        consumers: list[Consumer] = [
            self.adapter.consumer(self.queue, prefetch=PREFETCH, ack_mode="manual")
            for _ in range(self.n_consumers)
        ]
        helds: list[deque[tuple[float, Any]]] = [deque() for _ in consumers]
        start, n, at = time.monotonic(), 0, 0.0
        while not self._stop.is_set() and at < limit_s:
            producer.publish(BODY, msg_id=f"a{n}")
            self.sent[f"a{n}"] = time.monotonic()
            n += 1
            at += self.rng.expovariate(rate) if self.poisson else 1 / rate
            while (wait := start + at - time.monotonic()) > 0 and not self._stop.is_set():
                for c, held in zip(consumers, helds, strict=True):
                    if held:
                        wait = max(0.0, min(wait, held[0][0] - time.monotonic()))
                    for d in c.drain(timeout=wait / len(consumers)):
                        free = held[-1][0] if held else 0.0
                        held.append((max(time.monotonic(), free) + self._hold(), d))
                    self._ack_due(held)
                self.confirmed.update(x.msg_id for x in producer.poll_confirms(0.0) if x.ok)


def one_kill(
    backend: LocalBackend, node: str, client: str, shape: tuple[int, float, bool]
) -> KillLosses:
    consumers, load_s, poisson = shape
    endpoint = next(e for e in backend.endpoints() if e.name == node)
    load = ShapedLoad(endpoint, client, consumers, poisson)
    load.start(RATE, load_s + END_S)
    time.sleep(load_s)
    t_kill = time.monotonic()
    backend.kill_node(node)
    t_killed = time.monotonic()
    load.halt()
    backend.restart_node(node, timeout=120.0)
    load.stop()
    load.abort()
    endpoint = next(e for e in backend.endpoints() if e.name == node)
    return load.losses(endpoint, t_kill, t_killed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", choices=sorted(CLIENT), default="rabbitmq")
    ap.add_argument("--kills", type=int, default=3, help="kills per shape (default 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mqbed-ack-loss-") as tmp:
        backend = LocalBackend(Path(tmp))
        (endpoint,) = backend.up([args.broker], detach=False)
        try:
            for shape in SHAPES:
                got = [one_kill(backend, endpoint.name, CLIENT[args.broker], shape)
                       for _ in range(args.kills)]  # fmt: skip
                consumers, load_s, poisson = shape
                kind = "Poisson" if poisson else "paced"
                print(f"{consumers} consumer(s), {load_s:g} s of {kind} load: forgotten "
                      f"{[k.forgotten for k in got]} at {[round(k.ack_rate) for k in got]} acks/s",
                      flush=True)  # fmt: skip
        finally:
            backend.down()


if __name__ == "__main__":
    main()
