"""A run interrupted by Ctrl-C leaves a readable run directory and no stray process; a consumer
killed with unacked messages gets them redelivered to another consumer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter
from testbed.brokers.base import QueueDecl

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _cmdlines_mentioning(text: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd and int(pid) != os.getpid():
            found.append(f"{pid}: {cmd[:160]}")
    return found


def test_ctrl_c_leaves_a_readable_run_and_no_process(tmp_path: Path) -> None:
    """`mqbed run` with its own broker (nothing up in its home), SIGINT in the load phase."""
    scenario = tmp_path / "long.yaml"
    scenario.write_text(
        textwrap.dedent("""\
        name: interrupted
        duration: 120s
        topology: {queues: [{name: q}]}
        producers: [{name: p, queue: q, arrival: {kind: poisson, rate: 1000/s}}]
        consumers: [{name: c, queue: q}]
        """)
    )
    home = tmp_path / "home"
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(scenario),
            "--no-predict",
            "--out",
            str(out),
            "--home",
            str(home),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 90
        parts: list[Path] = []
        while time.monotonic() < deadline and not parts:
            time.sleep(0.5)
            parts = list(out.glob("*/measured/messages.parts/*.parquet"))
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert parts, "the run never recorded a batch"
        flushed = sum(pq.read_metadata(p).num_rows for p in parts)  # parts appear renamed whole
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output.decode()
    (run_dir,) = list(out.iterdir())
    env = json.loads((run_dir / "environment.json").read_text())
    assert env["interrupted"] is True
    messages = pq.read_table(run_dir / "measured" / "messages.parquet")
    assert messages.num_rows >= flushed > 0  # at least what was flushed before Ctrl-C
    assert (
        json.loads((run_dir / "measured" / "ledger.json").read_text())["sent"] == messages.num_rows
    )
    assert (run_dir / "scenario.yaml").exists()
    # nothing left: no broker under the run's home, no Locust with the run's config
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
        _cmdlines_mentioning(str(home)) or _cmdlines_mentioning(str(run_dir))
    ):
        time.sleep(0.5)
    assert _cmdlines_mentioning(str(home)) == []
    assert _cmdlines_mentioning(str(run_dir)) == []


HOLDER = """
import sys, time, json
from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter
ep = BrokerEndpoint.from_json(json.loads(sys.argv[1]))
a = make_adapter(ep); a.connect()
c = a.consumer(sys.argv[2], prefetch=10, ack_mode="manual")
held = []
while len(held) < 10:
    held += c.drain(1.0)
print("holding", len(held), flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_killed_consumer_messages_are_redelivered(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    endpoint: BrokerEndpoint = request.getfixturevalue(kind)
    queue = f"crash-{kind}-{os.getpid()}"
    adapter = make_adapter(endpoint)
    adapter.connect()
    try:
        adapter.declare([QueueDecl(queue)])
        producer = adapter.producer(queue, confirms=True, persistent=True)
        for i in range(30):
            producer.publish(b"x", msg_id=f"m{i}")
        confirmed: set[str] = set()
        deadline = time.monotonic() + 20
        while len(confirmed) < 30 and time.monotonic() < deadline:
            confirmed |= {c.msg_id for c in producer.poll_confirms(0.5) if c.ok}
        assert len(confirmed) == 30
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, json.dumps(endpoint.to_json()), queue],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().decode().strip() == "holding 10"
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
        consumer = adapter.consumer(queue, prefetch=50, ack_mode="manual")
        got: dict[str, bool] = {}
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            for d in consumer.drain(0.5):
                assert d.msg_id not in got, f"{d.msg_id} delivered twice"
                got[d.msg_id] = d.redelivered
                d.ack()
        consumer.close()
    finally:
        adapter.close()
    assert len(got) == 30
    assert sum(got.values()) == 10  # exactly the ten the killed consumer held
