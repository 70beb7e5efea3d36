"""An epoll selector whose timeouts are not rounded up to whole milliseconds.

Hand-written because no library offers it for asyncio: ``epoll_wait`` takes whole milliseconds,
and ``selectors.EpollSelector`` rounds a timeout *up* to the next one, so a timer of the fault
proxy's event loop (a latency toxic's "send this chunk at t + 50 ms") fires 0–1 ms late. A
latency toxic of 50 ms thus added 50.85 ms at the median to a delivery in the live broker-kill
runs of 2026-11-28, where the simulator adds 50 ms. Timers at fractions of a millisecond on
this machine class (`python -m testbed.faults.precise_selector`, 2026-11-29, beside a test
run): 0.60 ms median lateness (p90 1.0 ms) with the stdlib selector, 0.11 ms (p90 0.16 ms)
with this one.

The whole milliseconds are waited on epoll as before; the rest with ``select()`` on the epoll
descriptor itself (readable when an event is ready), whose timeout is in microseconds. When the
descriptor is beyond ``select()``'s range (FD_SETSIZE) it falls back to rounding up.
"""

from __future__ import annotations

__all__ = ["PreciseEpollSelector", "precise_event_loop"]

import argparse
import asyncio
import math
import select
import selectors
import time
from typing import Any

_FD_SETSIZE = 1024


# A gevent-patched process (a Locust worker imports the proxy's modules too) has no epoll
# selector; it never runs the proxy's loop, and gets the stdlib loop if it asks.
_Epoll: Any = getattr(selectors, "EpollSelector", selectors.DefaultSelector)


class PreciseEpollSelector(_Epoll):  # type: ignore[misc]
    """`selectors.EpollSelector` with sub-millisecond timeouts (module docstring)."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        fd = self._selector.fileno()  # type: ignore[attr-defined]
        if timeout is None or timeout <= 0 or fd >= _FD_SETSIZE:
            return super().select(timeout)
        deadline = time.monotonic() + timeout
        whole = math.floor(timeout * 1e3) * 1e-3
        if whole > 0:
            ready = super().select(whole - 1e-7)  # exactly `whole` ms, not one more
            if ready:
                return ready
        rest = deadline - time.monotonic()
        if rest > 0:
            select.select([fd], [], [], rest)
        return super().select(0)


def precise_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop on `PreciseEpollSelector` (the stdlib default where epoll is absent)."""
    if not hasattr(selectors, "EpollSelector"):  # no epoll, or a gevent-patched process
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


def _lateness(loop: asyncio.AbstractEventLoop, n: int = 300) -> list[float]:
    async def run() -> list[float]:
        out: list[float] = []
        for i in range(n):
            fut: asyncio.Future[Any] = loop.create_future()
            when = loop.time() + 0.001 + (i % 19) * 0.00037  # fractions of a ms, as chunks
            loop.call_at(when, fut.set_result, None)
            await fut
            out.append(loop.time() - when)
        return sorted(out)

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> None:
    """Print the timer lateness of the stdlib selector and of this one (about 3 s)."""
    ap = argparse.ArgumentParser(
        prog="python -m testbed.faults.precise_selector",
        description="Measure how late asyncio timers fire: 300 timers 1-8 ms ahead (fractions "
        "of a millisecond) on the stdlib epoll selector, then on the fault proxy's precise one; "
        "prints the median and p90 lateness of each (about 3 s).",
    )
    ap.parse_args(argv)
    for name, make in (("stdlib epoll", asyncio.new_event_loop), ("precise", precise_event_loop)):
        late = _lateness(make())
        p50, p90 = late[len(late) // 2], late[int(len(late) * 0.9)]
        print(f"{name:>12}: timer lateness p50 {p50 * 1e3:.3f} ms, p90 {p90 * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
