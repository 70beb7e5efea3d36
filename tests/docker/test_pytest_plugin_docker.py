"""The pytest plugin's testcontainers backend, as a user meets it: a user-style suite, run by
`pytester` in a child process (as in tests/integration/test_pytest_plugin.py), whose broker is a RabbitMQ container started through testcontainers on the
session's private Docker engine (``$DOCKER_HOST``; the offline image), with host networking.
One live run of two seconds; the container is gone when the user's session ends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.plugin_suite import TINY, plugin_args

pytestmark = pytest.mark.docker
pytest_plugins = ["pytester"]

USER_SUITE = """
import json

import pytest

from testbed.pytest_plugin import assert_thresholds


@pytest.mark.mqbed(backend="testcontainers")
def test_orders_flow(mqbed_broker, mqbed_run, mqbed_testbed):
    container = mqbed_testbed.container("rabbitmq").container.get_wrapped_container()
    container.reload()
    assert container.status == "running"
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    assert container.image.tags and container.image.tags[0].startswith("mqbed/rabbitmq:")
    assert mqbed_broker.name == "testcontainers-rabbitmq" and mqbed_broker.host == "127.0.0.1"
    print("mqbed container:", container.name)
    result = mqbed_run("tiny.yaml", rate="60/s", predict=False, report=False)
    env = json.loads((result.run_dir / "environment.json").read_text())
    assert env["backend"] == "external" and env["broker"]["name"] == "external-rabbitmq0"
    assert env["broker"]["version"]  # asked of the container's management API
    assert result.backend == "testcontainers"
    assert_thresholds(result, "lost == 0", "duplicated == 0", "sent >= 100")
"""


def test_user_suite_on_testcontainers(
    pytester: pytest.Pytester, broker_images: dict[str, str], docker_client: Any
) -> None:
    pytester.makefile(".yaml", tiny=TINY)
    pytester.makepyfile(test_user=USER_SUITE)
    result = pytester.runpytest_subprocess(*plugin_args(), "-rA", "-s", timeout=300)
    out = result.stdout.str()
    result.assert_outcomes(passed=1)
    name = next(line for line in out.splitlines() if "mqbed container:" in line).split()[-1]
    left = [c.name for c in docker_client.containers.list(all=True, filters={"name": name})]
    assert left == [], f"the plugin left its container behind: {left}"
