"""The warm-up's connect is time-bound (`testbed.backends.warm_up`): a peer that accepts the
TCP connection and never answers — what a paused broker does — ends it with a clear error."""

from __future__ import annotations

import socket
import time

import pytest

from testbed.backends import warm_up as w
from testbed.backends.base import BrokerEndpoint
from testbed.exceptions import BackendError


def test_a_silent_broker_fails_the_warm_up_within_its_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    port = silent.getsockname()[1]
    ep = BrokerEndpoint(kind="activemq", name="activemq0", host="127.0.0.1", port=port,
                        username="u", password="p", vhost="/")  # fmt: skip
    monkeypatch.setattr(w, "CONNECT_TIMEOUT", 0.5)
    t0 = time.monotonic()
    try:
        with pytest.raises(BackendError) as e:
            w.warm_up(ep, messages=10)
    finally:
        silent.close()
    assert time.monotonic() - t0 < 5
    assert "warm-up of activemq0: connect failed: no CONNECTED frame within 0.5 s" in str(e.value)
