"""End-to-end tests use the real brokers of the integration suite (same session fixtures)."""

from __future__ import annotations

from tests.integration.conftest import activemq, local_backend, rabbitmq  # noqa: F401
