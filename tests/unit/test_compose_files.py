"""The compose testbed's files, checked statically (no docker): the .env parser, the Locust web
UI's published port, the scenarios mounted into the mqbed image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.backends.compose import COMPOSE_DIR as COMPOSE
from testbed.backends.compose import ENV_PORT_KEYS, read_env_file
from testbed.workload.launcher import ENV_WEB_HOST, ENV_WEB_PORT, LocustLauncher


def test_env_file_is_read_with_compose_syntax(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(
        "# comment\n\nexport MQBED_USER=mqbed-abc\nMQBED_PASSWORD='se cret#1'\n"
        'MQBED_REPO="/src/my repo"  # where\nEMPTY=\nNOVALUE\nLITERAL=${MQBED_USER}\n'
    )
    assert read_env_file(path) == {
        "MQBED_USER": "mqbed-abc",
        "MQBED_PASSWORD": "se cret#1",
        "MQBED_REPO": "/src/my repo",
        "EMPTY": "",
        "LITERAL": "${MQBED_USER}",  # read back as written
    }
    assert read_env_file(tmp_path / "missing.env") == {}


def _services(name: str) -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((COMPOSE / name).read_text())["services"]
    return services


def test_locust_web_ui_is_published_on_the_port_it_listens_on() -> None:
    official, published = _services("docker-compose.yml"), _services("docker-compose.override.yml")
    mqbed = official["mqbed"]
    assert mqbed["network_mode"] == "service:fault-proxy"  # its ports are fault-proxy's
    env = mqbed["environment"]
    assert env[ENV_WEB_PORT] == "${MQBED_LOCUST_WEB_PORT:?}"
    assert env[ENV_WEB_HOST] == "0.0.0.0"  # inside the container: docker forwards to its eth0
    assert (
        "127.0.0.1:${MQBED_LOCUST_WEB_PORT:?}:${MQBED_LOCUST_WEB_PORT:?}"
        in (published["fault-proxy"]["ports"])
    )
    assert "MQBED_LOCUST_WEB_PORT" in ENV_PORT_KEYS  # .env has a number for it
    offline = _services("docker-compose.offline.yml")["mqbed"]["environment"]
    assert offline[ENV_WEB_PORT] == "${MQBED_LOCUST_WEB_PORT:?}"
    assert offline[ENV_WEB_HOST] == "127.0.0.1"  # host network: nothing is published


@pytest.mark.parametrize(
    "name", ["docker-compose.yml", "docker-compose.offline.yml"], ids=["official", "offline"]
)
def test_mqbed_services_see_the_checkouts_workloads(name: str) -> None:
    services = _services(name)
    for service in ("mqbed", "locust-worker"):
        volumes = services[service]["volumes"]
        assert "../workloads:/mqbed/workloads:ro" in volumes, (name, service)
        assert "${MQBED_RUNS_DIR:?}:/mqbed/runs" in volumes, (name, service)


def test_launcher_takes_the_web_port_and_host_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []
    launcher = LocustLauncher(tmp_path / "c.json", tmp_path, users=1, run_time=1.0, ui=True)
    monkeypatch.setattr(launcher, "_spawn", lambda args, *_: started.append(args))
    monkeypatch.setenv(ENV_WEB_PORT, "18089")
    monkeypatch.setenv(ENV_WEB_HOST, "0.0.0.0")
    launcher.start("locust")
    (args,) = started
    assert args[args.index("--web-port") + 1] == "18089"
    assert args[args.index("--web-host") + 1] == "0.0.0.0"
    assert launcher.web_url == "http://127.0.0.1:18089"  # where the host reaches it
    monkeypatch.delenv(ENV_WEB_PORT)
    monkeypatch.delenv(ENV_WEB_HOST)
    launcher.start("again")
    args = started[1]
    assert args[args.index("--web-host") + 1] == "127.0.0.1"
    assert args[args.index("--web-port") + 1] != "18089"
