"""The compose testbed: both files validate with both CLIs, and the README quickstart runs.

The quickstart test runs what the README says — in ``compose/``, ``docker compose up -d`` then
``docker compose run --rm mqbed run SCENARIO`` — with the offline override (chosen by
``COMPOSE_FILE`` in the generated env file: no registry here), its own env file and project
name, and a shortened quickstart scenario, with Locust's web UI (``--ui``, as the README says),
which the host reaches on ``127.0.0.1:$MQBED_LOCUST_WEB_PORT`` while the run is on; then it
checks the run directory's ledger (lost = 0) and that the compose Prometheus scraped the run's
exporters.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.backends.compose import COMPOSE_DIR, compose_files, write_compose_env
from tests.docker.conftest import ComposeCLI, timing

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "workloads" / "scenarios" / "quickstart.yaml"


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    path = tmp_path / "compose.env"
    write_compose_env(path, runs_dir=tmp_path / "runs")
    return path


def _cli(request: pytest.FixtureRequest, which: str) -> ComposeCLI:
    return request.getfixturevalue(f"compose_{which}")  # type: ignore[no-any-return]


@pytest.mark.parametrize("offline", [False, True], ids=["official", "offline"])
@pytest.mark.parametrize("which", ["v2", "v1"])
def test_compose_files_validate(
    request: pytest.FixtureRequest, which: str, offline: bool, env_file: Path
) -> None:
    cli = _cli(request, which)
    base = [*compose_files(offline), "--env-file", str(env_file)]
    checked = cli.run(*base, "config", "-q")
    assert checked.returncode == 0, f"{cli.argv} {cli.version}: {checked.stderr}"
    everything = cli.run(*base, "--profile", "run", "--profile", "cluster", "config")
    assert everything.returncode == 0, everything.stderr
    config = yaml.safe_load(everything.stdout)
    services: dict[str, Any] = config["services"]
    assert {"rabbitmq", "activemq", "fault-proxy", "prometheus", "mqbed"} <= set(services)
    assert {"rabbitmq-1", "rabbitmq-2", "rabbitmq-3"} <= set(services)
    assert "guest" not in everything.stdout
    # docker compose v2 lists the services of active profiles; docker-compose 1.29 lists all
    services = {
        n: svc
        for n, svc in services.items()
        if not svc.get("profiles") or {"run", "cluster"} & set(svc["profiles"])
    }
    assert ("grafana" in services) is (not offline), "grafana: official file only"
    for name, svc in services.items():
        if offline:
            assert svc.get("network_mode") == "host", name
            continue
        for port in svc.get("ports", []):
            if isinstance(port, dict):  # v2 long form
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:  # v1 short form "127.0.0.1:HOST:CONTAINER"
                assert str(port).startswith("127.0.0.1:"), (name, port)
    for name in ("rabbitmq", "activemq", "prometheus", "fault-proxy"):
        assert "healthcheck" in services[name], name
    assert services["mqbed"]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"


def _short_quickstart(path: Path) -> None:
    scenario = yaml.safe_load(QUICKSTART.read_text())
    scenario.update(name="quickstart-compose", duration="8s", warmup="1s", drain_timeout="20s")
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))


def _prometheus(port: str, promql: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": promql})
    url = f"http://127.0.0.1:{port}/api/v1/query?{query}"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _watch_locust_ui(port: str, seen: dict[str, Any], stop: threading.Event) -> threading.Thread:
    """A thread asking Locust's web UI for its stats from the host until it answers running
    (kept in ``seen``) or `stop` is set."""

    def poll() -> None:
        while not stop.is_set():
            try:
                url = f"http://127.0.0.1:{port}/stats/requests"
                with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310
                    stats = json.loads(resp.read())
                if stats.get("state") == "running":
                    seen.update(stats)
                    return
            except (OSError, ValueError):
                pass
            stop.wait(0.3)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


def test_readme_quickstart_runs_through_compose(
    compose_v2: ComposeCLI, offline_images: dict[str, str], tmp_path: Path
) -> None:
    """README: ``python -m testbed.backends.compose env --offline``, then in ``compose/``:
    ``docker compose up -d`` and ``docker compose run --rm mqbed run SCENARIO``. Here the env
    file is a temporary one (``--env-file``, own project name) and the scenario a short one."""
    runs = tmp_path / "runs"
    env_path = tmp_path / "compose.env"
    env = write_compose_env(env_path, runs_dir=runs, offline=True)
    _short_quickstart(runs / "quickstart-compose.yaml")
    base = ["--env-file", str(env_path), "-p", "mqbed-quickstart"]
    t0 = time.monotonic()
    try:
        up = compose_v2.run(*base, "up", "-d", timeout=240, cwd=COMPOSE_DIR)
        assert up.returncode == 0, up.stderr[-3000:]
        t_up = time.monotonic() - t0
        ui_stats: dict[str, Any] = {}
        stop = threading.Event()
        watcher = _watch_locust_ui(env["MQBED_LOCUST_WEB_PORT"], ui_stats, stop)
        try:
            run = compose_v2.run(
                *base, "run", "--rm", "mqbed", "run", "runs/quickstart-compose.yaml", "--ui",
                "--calibration", "cached",  # the compose machinery is tested here, not accuracy
                timeout=420, cwd=COMPOSE_DIR,
            )  # fmt: skip
        finally:
            stop.set()
            watcher.join(timeout=10)
        assert run.returncode == 0, f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
        assert ui_stats.get("state") == "running", "the host never reached Locust's web UI"
        t_total = time.monotonic() - t0
        (run_dir,) = [p for p in runs.iterdir() if p.name.endswith("-quickstart-compose")]
        ledger = json.loads((run_dir / "measured" / "ledger.json").read_text())
        assert ledger["sent"] > 0 and ledger["lost"] == 0, ledger
        assert ledger["delivered_unique"] == ledger["confirmed"] == ledger["sent"], ledger
        assert (run_dir / "measured" / "messages.parquet").exists()
        environment = json.loads((run_dir / "environment.json").read_text())
        assert environment["backend"] == "external" and not environment["interrupted"]
        published = _prometheus(
            env["MQBED_PROMETHEUS_PORT"], "sum(max_over_time(mqbed_published_total[15m]))"
        )
        assert published and float(published[0]["value"][1]) > 0, published
        rabbit = _prometheus(env["MQBED_PROMETHEUS_PORT"], 'up{job="rabbitmq"}')
        assert rabbit and rabbit[0]["value"][1] == "1", rabbit
        timing("compose quickstart: up -d", f"{t_up:.1f} s")
        timing("compose quickstart: up -d + run (8 s scenario, predict)", f"{t_total:.1f} s")
    finally:
        down = compose_v2.run(
            *base, "--profile", "run", "down", "-v", "-t", "10", timeout=120, cwd=COMPOSE_DIR
        )
        assert down.returncode == 0, down.stderr[-2000:]


def test_cluster_profile_forms_three_nodes_with_quorum_queues(
    compose_v2: ComposeCLI, broker_images: dict[str, str], tmp_path: Path
) -> None:
    """``--profile cluster``: three RabbitMQ nodes join one cluster (classic peer discovery,
    shared cookie); a quorum queue declared on node 1 has members on all three."""
    from testbed.backends.base import BrokerEndpoint
    from testbed.brokers import QueueDecl, make_adapter

    env_path = tmp_path / "compose.env"
    env = write_compose_env(env_path, runs_dir=tmp_path / "runs", offline=True)
    base = ["--env-file", str(env_path), "-p", "mqbed-cluster"]
    nodes = ["rabbitmq-1", "rabbitmq-2", "rabbitmq-3"]
    try:
        up = compose_v2.run(
            *base, "--profile", "cluster", "up", "-d", "--wait", "--wait-timeout", "150",
            "rabbitmq-epmd", *nodes, timeout=200, cwd=COMPOSE_DIR,
        )  # fmt: skip
        assert up.returncode == 0, up.stderr[-3000:]
        status = compose_v2.run(
            *base, "--profile", "cluster", "exec", "-T", "rabbitmq-1",
            "rabbitmqctl", "-q", "cluster_status", "--formatter", "json",
            timeout=60, cwd=COMPOSE_DIR,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        running = json.loads(status.stdout)["running_nodes"]
        assert sorted(running) == [f"mqbed-c{i}@localhost" for i in (1, 2, 3)], running
        ep = BrokerEndpoint(
            "rabbitmq", "rabbitmq-1", "127.0.0.1", int(env["MQBED_CLUSTER1_AMQP_PORT"]),
            env["MQBED_USER"], env["MQBED_PASSWORD"],
        )  # fmt: skip
        adapter = make_adapter(ep, "pika")
        adapter.connect()
        try:
            adapter.declare([QueueDecl("cluster.orders", kind="quorum")])
        finally:
            adapter.close()
        api = f"http://127.0.0.1:{env['MQBED_CLUSTER1_MANAGEMENT_PORT']}/api/queues/%2F/cluster.orders"
        request = urllib.request.Request(api)
        import base64

        token = base64.b64encode(f"{env['MQBED_USER']}:{env['MQBED_PASSWORD']}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
            queue = json.loads(resp.read())
        assert queue["type"] == "quorum"
        assert sorted(queue["members"]) == sorted(running), queue.get("members")
    finally:
        down = compose_v2.run(
            *base, "--profile", "cluster", "down", "-v", "-t", "10", timeout=120, cwd=COMPOSE_DIR
        )
        assert down.returncode == 0, down.stderr[-2000:]


def _locust_logs(runs: Path) -> str:
    """The tail of every Locust log of the runs under `runs` (why a distributed run failed)."""
    return "\n".join(
        f"== {log.name}\n{log.read_text(errors='replace')[-1500:]}"
        for log in sorted(runs.glob("*/measured/locust/*.log"))
    )


def test_distributed_profile_scales_locust_workers(
    compose_v2: ComposeCLI, offline_images: dict[str, str], tmp_path: Path
) -> None:
    """README: ``docker compose --profile distributed up -d --scale locust-worker=2`` then
    ``docker compose run --rm mqbed run SCENARIO --external-workers 2``: the run's master in
    the mqbed container, its users in the two worker containers (records from slots 1 and 2)."""
    import pyarrow.parquet as pq

    runs = tmp_path / "runs"
    env_path = tmp_path / "compose.env"
    write_compose_env(env_path, runs_dir=runs, offline=True)
    scenario = yaml.safe_load(QUICKSTART.read_text())
    scenario.update(name="distributed-compose", duration="5s", warmup="1s", drain_timeout="20s")
    (runs / "distributed.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    base = ["--env-file", str(env_path), "-p", "mqbed-distributed"]
    try:
        up = compose_v2.run(
            *base, "--profile", "distributed", "up", "-d", "--scale", "locust-worker=2",
            timeout=240, cwd=COMPOSE_DIR,
        )  # fmt: skip
        assert up.returncode == 0, up.stderr[-3000:]
        run = compose_v2.run(
            *base, "run", "--rm", "mqbed", "run", "runs/distributed.yaml",
            "--external-workers", "2", "--no-predict", "--no-report",
            timeout=300, cwd=COMPOSE_DIR,
        )  # fmt: skip
        assert run.returncode == 0, (
            f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}\n{_locust_logs(runs)}"
        )
        (run_dir,) = [p for p in runs.iterdir() if p.name.endswith("-distributed-compose")]
        measured = run_dir / "measured"
        ledger = json.loads((measured / "ledger.json").read_text())
        assert ledger["lost"] == 0 and ledger["sent"] == ledger["delivered_unique"] > 0, (
            f"{ledger}\n{run.stdout[-2000:]}\n{_locust_logs(runs)}"
        )
        m = pq.read_table(measured / "messages.parquet").to_pandas()
        d = pq.read_table(measured / "deliveries.parquet").to_pandas()
        slots = set(m.msg_id.str.split(".").str[3]) | set(d.consumer.str.split(".").str[1])
        assert slots == {"1", "2"}, slots
        assert sorted(p.name for p in (measured / "locust").glob("r0-worker*.log")) == [
            "r0-worker1.log", "r0-worker2.log"]  # fmt: skip
    finally:
        down = compose_v2.run(
            *base, "--profile", "distributed", "--profile", "run", "down", "-v", "-t", "10",
            timeout=120, cwd=COMPOSE_DIR,
        )  # fmt: skip
        assert down.returncode == 0, down.stderr[-2000:]
