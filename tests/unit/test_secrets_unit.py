"""Credentials stay out of what mqbed writes: URL redaction, the worker configuration split into a
masked copy and a 0600 credentials file, the ways a Locust process gets them back, and the
compose helper's argument handling (``--help`` must not write a file named ``--help``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from testbed.core.redact import MASK, redact_text, redact_url, redact_value, url_passwords
from testbed.workload.config import ENV_VAR, WorkerConfig
from testbed.workload.credentials import ENV_SECRETS, fill_credentials
from testbed.workload.launcher import worker_env
from testbed.workload.worker_service import _secrets

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("amqp://u:s3cret@127.0.0.1:5672/vh", "amqp://u:***@127.0.0.1:5672/vh"),
        ("amqp://u:p@ss:w@h:5672/", "amqp://u:***@h:5672/"),  # '@' and ':' in the password
        ("stomp://u:%40x@h", "stomp://u:***@h"),
        ("amqp://u:p@h/?management=http://h:15672", "amqp://u:***@h/?management=http://h:15672"),
        ("http://127.0.0.1:15672", "http://127.0.0.1:15672"),  # host:port is no password
        ("stomp://user@h:61613", "stomp://user@h:61613"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_text(f"urls: ['{url}', x]") == f"urls: ['{expected}', x]"


def test_redact_text_known_secrets_and_documents() -> None:
    text = 'broker:\n  urls:\n  - "amqp://mq:Zq9@127.0.0.1:5672/"\nnote: Zq9 again\n'
    out = redact_text(text, url_passwords(["amqp://mq:Zq9@127.0.0.1:5672/"]))
    assert "Zq9" not in out and "amqp://mq:***@127.0.0.1:5672/" in out
    doc = {"password": "Zq9", "urls": ["amqp://a:b@h"], "n": 3, "empty": {"password": ""}}
    assert redact_value(doc) == {
        "password": MASK,
        "urls": ["amqp://a:***@h"],
        "n": 3,
        "empty": {"password": ""},
    }


def _config(tmp_path: Path) -> WorkerConfig:
    ep = {
        "kind": "rabbitmq",
        "name": "external-rabbitmq0",
        "host": "127.0.0.1",
        "port": 5672,
        "username": "mq",
        "password": "pw-123",
        "management_url": "http://mq:pw-123@127.0.0.1:15672",
    }
    return WorkerConfig(
        scenario_file=str(tmp_path / "s.yaml"),
        measured_dir=str(tmp_path),
        endpoint=ep,
        t0_ns=1,
        consumer_endpoint={**ep, "port": 6000},
    )


def test_worker_config_keeps_the_password_in_a_private_file(tmp_path: Path) -> None:
    config = _config(tmp_path)
    public, secrets = tmp_path / "run" / "worker-config.json", tmp_path / "home" / "s.json"
    public.parent.mkdir()
    config.write(public, secrets=secrets)
    assert b"pw-123" not in public.read_bytes()
    assert json.loads(public.read_text())["endpoint"]["password"] == MASK
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert stat.S_IMODE(secrets.parent.stat().st_mode) == 0o700
    back = WorkerConfig.read(public, {ENV_SECRETS: str(secrets)})
    assert back.endpoint["password"] == back.consumer_endpoint["password"] == "pw-123"  # type: ignore[index]
    assert back.consumer_endpoint["port"] == 6000  # type: ignore[index]
    # without the file, the worker's own broker URLs (compose) give the same endpoint's login
    urls = {"MQBED_BROKER_URLS": "stomp://x:y@h amqp://mq:from-env@rabbitmq:5672/"}
    assert WorkerConfig.read(public, urls).endpoint["password"] == "from-env"
    with pytest.raises(RuntimeError, match="MQBED_BROKER_URLS"):
        WorkerConfig.read(public, {ENV_SECRETS: str(tmp_path / "gone.json")})


def test_rewriting_the_configuration_never_hides_the_credentials(tmp_path: Path) -> None:
    """A run rewrites the configuration and its credentials file when t=0 is fixed, while its
    Locust processes read them: a reader must always find both whole (the credentials file was
    once removed and created again, and a user starting in between failed the run)."""
    config = _config(tmp_path)
    public, secrets = tmp_path / "run" / "worker-config.json", tmp_path / "home" / "s.json"
    public.parent.mkdir()
    config.write(public, secrets=secrets)
    stop, failures, reads = threading.Event(), [], [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                WorkerConfig.read(public, {ENV_SECRETS: str(secrets)})
                reads[0] += 1
            except (RuntimeError, ValueError, OSError) as e:
                failures.append(repr(e))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(2000):
            config.write(public, secrets=secrets)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not failures, failures[:3]
    assert reads[0] > 0
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert [p.name for p in secrets.parent.iterdir()] == ["s.json"]  # no temporary file left


def test_unmasked_configurations_are_read_as_written(tmp_path: Path) -> None:
    doc = {"endpoint": {"name": "r", "password": "plain"}}
    assert fill_credentials(doc, {}) == doc


def test_locust_environment_names_the_credentials_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SECRETS, "/stale/from/parent")
    assert ENV_SECRETS not in worker_env(tmp_path / "c.json", 1)
    env = worker_env(tmp_path / "c.json", 2, tmp_path / "s.json")
    assert env[ENV_SECRETS] == str(tmp_path / "s.json") and env[ENV_VAR] == str(tmp_path / "c.json")
    # an external worker service uses the run's file only without broker URLs of its own
    secrets = tmp_path / "s.json"
    secrets.write_text("{}")
    monkeypatch.delenv("MQBED_BROKER_URLS", raising=False)
    assert _secrets({"secrets": str(secrets)}) == str(secrets)
    assert _secrets({"secrets": str(tmp_path / "missing.json")}) is None
    monkeypatch.setenv("MQBED_BROKER_URLS", "amqp://a:b@h/")
    assert _secrets({"secrets": str(secrets)}) is None


def test_compose_env_help_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "testbed.backends.compose", "env"]
    shown = subprocess.run([*cmd, "--help"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert shown.returncode == 0 and "--offline" in shown.stdout
    bad = subprocess.run([*cmd, "--nope"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2
    assert list(tmp_path.iterdir()) == []  # no file named '--help' (or '--nope')
