"""The fault proxy's selector waits sub-millisecond timeouts instead of rounding them up."""

from __future__ import annotations

import socket
import time
from typing import Any

from testbed.faults.precise_selector import PreciseEpollSelector, precise_event_loop


class _Spy:
    """Stands in for the selector's epoll object: records every poll timeout."""

    def __init__(self, ep: Any) -> None:
        self.ep = ep
        self.timeouts: list[float] = []

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return self.ep.poll(timeout, maxevents)

    def fileno(self) -> int:
        return self.ep.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ep, name)


def test_a_fractional_timeout_waits_whole_ms_on_epoll_and_the_rest_finer() -> None:
    sel = PreciseEpollSelector()
    spy = _Spy(sel._selector)  # type: ignore[attr-defined]
    sel._selector = spy  # type: ignore[attr-defined]
    try:
        t0 = time.monotonic()
        assert sel.select(0.0024) == []
        waited = time.monotonic() - t0
        # the stdlib rounds 2.4 ms up to one epoll wait of 3 ms; here 2 ms, then a poll
        assert len(spy.timeouts) == 2 and spy.timeouts[1] == 0
        assert 0.0019 < spy.timeouts[0] <= 0.002
        assert waited >= 0.0024  # never early
    finally:
        sel.close()


def test_a_ready_descriptor_ends_the_fine_wait() -> None:
    a, b = socket.socketpair()
    sel = PreciseEpollSelector()
    try:
        sel.register(a, 1)  # EVENT_READ
        b.send(b"x")
        ready = sel.select(0.0005)  # below a millisecond: straight to the fine wait
        assert [key.fileobj for key, _ in ready] == [a]
    finally:
        sel.close()
        a.close()
        b.close()


def test_the_proxy_loop_runs_on_it_and_its_timers_are_never_early() -> None:
    loop = precise_event_loop()
    try:
        assert isinstance(loop._selector, PreciseEpollSelector)  # type: ignore[attr-defined]

        async def lateness() -> float:
            fut = loop.create_future()
            when = loop.time() + 0.00137
            loop.call_at(when, fut.set_result, None)
            await fut
            return loop.time() - when

        assert loop.run_until_complete(lateness()) >= 0
    finally:
        loop.close()
