"""Adapters under gevent monkey-patching (how Locust runs them).

Each case runs in a fresh interpreter that calls ``gevent.monkey.patch_all()`` before anything
else, then publishes, confirms and consumes through one adapter while a ticker greenlet keeps
counting milliseconds. If a wait blocked the event loop instead of yielding, the ticker would
stall: the idle `drain`, the confirm round trip and the whole exchange must each let it run.

The client talks through the fault proxy with 5 ms added to every broker reply, so each confirm
round trip really waits: over a bare loopback a reply can be in the socket before the client
reads it (the client descheduled by the other test worker), and a read that need not wait does
not yield — correct, but then the ticker proves nothing (CI saw 2 ticks in 48 ms so).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import uuid

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.faults.proxy import FaultProxy

pytestmark = pytest.mark.integration

SCRIPT = r"""
from gevent import monkey

monkey.patch_all()

import json, sys, time
import gevent
from testbed.backends.base import BrokerEndpoint
from testbed.faults.proxy import FaultProxy
from testbed.brokers import QueueDecl, make_adapter

ep = BrokerEndpoint.from_json(json.loads(sys.argv[1]))
client, queue, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
closed_loop = 200
ticks = 0
out = {"patched": monkey.is_module_patched("socket") and monkey.is_module_patched("threading")}

def ticker():
    global ticks
    while True:
        gevent.sleep(0.001)
        ticks += 1

def consume(expected):  # a Locust-style consumer user: its own adapter, its own greenlet
    b = make_adapter(ep, client)
    b.connect()
    c = b.consumer(queue, prefetch=50)
    got, deadline = 0, time.monotonic() + 30
    while got < expected and time.monotonic() < deadline:
        batch = c.drain(0.5)
        for d in batch:
            d.ack()
        got += len(batch)
    b.close()
    return got

gevent.spawn(ticker)
a = make_adapter(ep, client)
a.connect()
a.declare([QueueDecl(queue), QueueDecl(queue + ".idle")])
idle = a.consumer(queue + ".idle", prefetch=10)
t0 = ticks
out["idle_drain"] = len(idle.drain(0.5))
out["ticks_idle_drain"] = ticks - t0

consumer = gevent.spawn(consume, closed_loop + n)
p = a.producer(queue, confirms=True)
t0, start = ticks, time.monotonic()
out["closed_loop_ok"] = sum(
    p.publish_and_wait(b"w", msg_id=f"w{i}", timeout=5).ok for i in range(closed_loop)
)
out["ticks_closed_loop"] = ticks - t0
out["ms_closed_loop"] = 1000 * (time.monotonic() - start)
for i in range(n):
    p.publish(b"x" * 200, msg_id=f"m{i}")
confirms, deadline = [], time.monotonic() + 20
while len(confirms) < n and time.monotonic() < deadline:
    confirms += p.poll_confirms(1.0)
out["confirmed_ok"] = sum(1 for x in confirms if x.ok)
out["consumed"] = consumer.get(timeout=40)
a.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    "kind,client", [("rabbitmq", "pika"), ("rabbitmq", "kombu"), ("activemq", "stomp")]
)
def test_adapter_yields_under_gevent(
    kind: str, client: str, request: pytest.FixtureRequest
) -> None:
    ep: BrokerEndpoint = request.getfixturevalue(kind)
    n = 300
    queue = f"gevent.{client}.{uuid.uuid4().hex[:8]}"
    with FaultProxy(seed=1) as proxy:
        slow = dataclasses.replace(ep, port=proxy.add_link("gevent", ep.host, ep.port))
        proxy.add_toxic("gevent", {"type": "latency", "attributes": {"latency": 5}})
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, json.dumps(slow.to_json()), client, queue, str(n)],
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert proc.returncode == 0, f"gevent script failed:\n{proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["patched"]
    assert out["idle_drain"] == 0
    # 0.5 s of waiting with a 1 ms ticker: hundreds of ticks unless the wait blocked the hub
    assert out["ticks_idle_drain"] >= 100, out
    assert out["closed_loop_ok"] == 200, out
    # the confirm waits yielded: 200 round trips of >= 5 ms each, a 1 ms ticker kept running
    assert out["ms_closed_loop"] >= 1000, out
    assert out["ticks_closed_loop"] >= 200, out
    assert out["confirmed_ok"] == n, out
    assert out["consumed"] == 200 + n, out  # the consumer greenlet ran alongside
