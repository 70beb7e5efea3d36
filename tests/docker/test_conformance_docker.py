"""The broker conformance suite (tests/integration/test_conformance.py), against containers.

Every test function and fixture of that suite is taken over as it is (so tests added there run
here too); only the brokers differ: `rabbitmq`, `activemq` and `fresh_backend` come from
tests/docker/conftest.py — RabbitMQ and ActiveMQ from the offline images, started by the docker
backend with host networking. The restart test restarts a container (same ports and data).
"""

from __future__ import annotations

import pytest

from tests.integration import test_conformance as _suite

pytestmark = pytest.mark.docker

_TAKEN = [n for n in vars(_suite) if n.startswith("test_") or n in ("flavour", "make", "name")]
globals().update({n: getattr(_suite, n) for n in _TAKEN})


def test_the_whole_suite_is_taken_over() -> None:
    tests = [n for n in _TAKEN if n.startswith("test_")]
    assert len(tests) >= 11, tests
    assert {"flavour", "make", "name"} <= set(_TAKEN)
