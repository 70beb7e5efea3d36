"""How soon after its declaration a durable RabbitMQ queue survives a SIGKILL.

Each iteration starts a fresh local RabbitMQ, declares a durable queue, publishes 20 persistent
messages with confirms, waits `--wait` s, SIGKILLs the broker, restarts it and counts what is
left. Evidence for `DURABLE_SETTLE_S` in tests/integration/faultkit.py (RabbitMQ 3.10.8 lost
the queue in 2 of 8 runs at --wait 0, 1 of 10 at 0.5, 0 of 10 at 2.5, with both cores and the
disk busy). Bounded: `--iterations` brokers, 5 s of draining each.

    python tests/bench/durable_declare_kill.py --iterations 8 --wait 0
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from testbed.backends.local import LocalBackend
from testbed.brokers import QueueDecl, make_adapter
from testbed.faults.injector import LocalBrokerFaults


def one(home: Path, wait: float) -> int:
    """Messages of the 20 confirmed ones found after the kill and restart."""
    backend = LocalBackend(home)
    (ep,) = backend.up(["rabbitmq"], detach=False)
    faults = LocalBrokerFaults(backend)
    try:
        a = make_adapter(ep)
        a.connect()
        a.declare([QueueDecl("kill.q", durable=True)])
        producer = a.producer("kill.q", persistent=True, confirms=True)
        for i in range(20):
            assert producer.publish_and_wait(b"x" * 100, msg_id=f"k{i}", timeout=5).ok
        time.sleep(wait)
        faults.kill(ep.name)
        a.abort()
        faults.start(ep.name)
        r = make_adapter(ep)
        r.connect()
        r.declare([QueueDecl("kill.q", durable=True)])  # as a reconnecting client does
        consumer = r.consumer("kill.q", prefetch=100)
        got: list[object] = []
        deadline = time.monotonic() + 5
        while len(got) < 20 and time.monotonic() < deadline:
            got += consumer.drain(0.3)
        r.close()
        return len(got)
    finally:
        backend.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--wait", type=float, default=0.0, help="seconds from declare to kill")
    args = ap.parse_args()
    lost = 0
    with tempfile.TemporaryDirectory(prefix="mqbed-durable-") as tmp:
        for it in range(args.iterations):
            n = one(Path(tmp) / f"it{it}", args.wait)
            lost += n == 0
            print(f"iteration {it}: wait {args.wait} s, {n}/20 confirmed messages survived")
    print(f"queue lost in {lost} of {args.iterations} runs")


if __name__ == "__main__":
    main()
