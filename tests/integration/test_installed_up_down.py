"""``mqbed up`` with several nodes and Prometheus, then ``mqbed down``, through the installed
console script: two RabbitMQ nodes that each take an AMQP connection, a Prometheus that scrapes
both, an idempotent second ``up``, and a ``down`` that stops all three, frees their ports and
leaves nothing recorded; and ``up --backend external`` on such a broker, which mqbed neither
records nor stops."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pika
import psutil
import pytest

from tests.integration.test_installed_cli import mqbed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) != 0


def _targets(prometheus: str) -> dict[str, str]:
    """Prometheus's active targets: scrape URL -> health."""
    with urllib.request.urlopen(f"{prometheus}/api/v1/targets", timeout=5) as r:
        doc = json.load(r)
    return {t["scrapeUrl"]: t["health"] for t in doc["data"]["activeTargets"]}


def test_up_two_nodes_with_prometheus_then_down_stops_everything(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = mqbed("up", "--broker", "rabbitmq", "--nodes", "2", "--with-prometheus", "--json",
               "--home", str(home), cwd=tmp_path)  # fmt: skip
    assert up.returncode == 0, up.stderr[-3000:]
    doc = json.loads(up.stdout)
    nodes, prometheus = doc["brokers"], doc["prometheus_url"]
    try:
        assert [n["name"] for n in nodes] == ["rabbitmq0", "rabbitmq1"]
        assert len({n["port"] for n in nodes}) == 2 and {n["host"] for n in nodes} == {"127.0.0.1"}
        assert prometheus.startswith("http://127.0.0.1:")
        for n in nodes:  # each node is a broker of its own, with its own credentials
            creds = pika.PlainCredentials(n["username"], n["password"])
            params = pika.ConnectionParameters("127.0.0.1", n["port"], credentials=creds)
            conn = pika.BlockingConnection(params)
            assert conn.channel().queue_declare("", exclusive=True).method.queue
            conn.close()
        # Prometheus scrapes both nodes' metrics endpoints (first scrape within its interval)
        wanted = {f"{n['prometheus_url']}/metrics" for n in nodes}
        deadline, health = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            health = _targets(prometheus)
            if all(health.get(u) == "up" for u in wanted):
                break
            time.sleep(1.0)
        assert all(health.get(u) == "up" for u in wanted), health
        # a second up reuses what is running: the same processes
        again = mqbed("up", "--broker", "rabbitmq", "--nodes", "2", "--with-prometheus",
                      "--json", "--home", str(home), cwd=tmp_path)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        assert [n["pid"] for n in json.loads(again.stdout)["brokers"]] == [n["pid"] for n in nodes]
    finally:
        down = mqbed("down", "--home", str(home), "--json", cwd=tmp_path)
    assert down.returncode == 0, down.stderr[-3000:]
    assert json.loads(down.stdout)["stopped"] == ["rabbitmq0", "rabbitmq1", "prometheus"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(n["pid"]) for n in nodes):
        time.sleep(0.1)
    assert not any(_running(n["pid"]) for n in nodes)
    prom_port = int(prometheus.rsplit(":", 1)[1])
    assert all(_refused(p) for p in [*(n["port"] for n in nodes), prom_port])
    assert not (home / "state.json").exists()
    assert json.loads(mqbed("down", "--home", str(home), "--json", cwd=tmp_path).stdout)[
        "stopped"
    ] == []  # fmt: skip


def _amqp_ok(n: dict) -> bool:
    creds = pika.PlainCredentials(n["username"], n["password"])
    conn = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", n["port"], credentials=creds)
    )
    ok = conn.is_open
    conn.close()
    return ok


def test_up_external_names_the_brokers_and_down_leaves_them_running(tmp_path: Path) -> None:
    own, other = tmp_path / "own", tmp_path / "other"
    up = mqbed("up", "--broker", "rabbitmq", "--json", "--home", str(own), cwd=tmp_path)
    assert up.returncode == 0, up.stderr[-3000:]
    (node,) = json.loads(up.stdout)["brokers"]
    url = f"amqp://{node['username']}:{node['password']}@127.0.0.1:{node['port']}/"
    env = {"MQBED_BROKER_URLS": url}
    try:
        ext = ["up", "--backend", "external", "--broker", "rabbitmq", "--home", str(other)]
        doc = json.loads(mqbed(*ext, "--json", cwd=tmp_path, env=env).stdout)
        (e,) = doc["brokers"]
        assert doc["ok"] and doc["backend"] == "external" and e["pid"] is None
        assert (e["port"], e["username"]) == (node["port"], node["username"])
        text = mqbed(*ext, cwd=tmp_path, env=env)
        assert text.returncode == 0, text.stderr[-3000:]
        said = " ".join((text.stdout + text.stderr).split())
        assert "external brokers: mqbed started none of them" in said, said
        assert node["password"] not in said  # masked
        # only the brokers it has none of: all kinds asked, no ActiveMQ URL given -> exit 3
        every = mqbed("up", "--backend", "external", "--json", "--home", str(other),
                      cwd=tmp_path, env=env)  # fmt: skip
        assert every.returncode == 3 and "no activemq URL" in json.loads(every.stdout)["error"]
        gone = json.loads(mqbed("down", "--home", str(other), "--json", cwd=tmp_path).stdout)
        assert gone["ok"] and gone["stopped"] == []
        assert _running(node["pid"]) and _amqp_ok(node)  # not ours to stop through that home
    finally:
        down = mqbed("down", "--home", str(own), "--json", cwd=tmp_path)
    assert json.loads(down.stdout)["stopped"] == ["rabbitmq0"]
