"""A CPU span counts its own greenlet's work only (`testbed.observe.process_cpu.CpuSpans`).

Every user of a Locust process runs on one thread; a span that yields (pika's ack flushes its
connection through gevent's hub) must not count what the other users did meanwhile. Measured on
RabbitMQ's fan-out 1→10 the thread-clock spans summed to more than the whole process's CPU.
The figures below are CPU seconds of this thread (``time.thread_time``), not wall time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import greenlet
import pytest

from testbed.observe import process_cpu
from testbed.observe.process_cpu import CpuSpans, trace_switches

OWN, OTHER = 0.02, 0.06


def _burn(seconds: float) -> None:
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


@pytest.fixture
def no_trace() -> Iterator[None]:
    """The thread's greenlet trace and `trace_switches`' bookkeeping restored afterwards."""
    before = greenlet.gettrace()
    traced = dict(process_cpu._TRACED)
    greenlet.settrace(None)
    process_cpu._TRACED.clear()
    yield
    greenlet.settrace(before)
    process_cpu._TRACED.clear()
    process_cpu._TRACED.update(traced)


def _span_that_yields(spans: CpuSpans) -> float:
    """A span of this greenlet that burns OWN in two halves and, between them, switches to a
    greenlet that burns OTHER (as another user would while an ack flushes)."""
    main = greenlet.getcurrent()

    def other() -> None:
        _burn(OTHER)
        main.switch()

    spans.start()
    _burn(OWN / 2)
    greenlet.greenlet(other).switch()
    _burn(OWN / 2)
    return spans.stop()


def test_a_span_leaves_out_the_work_of_greenlets_that_ran_while_it_yielded(no_trace: None) -> None:
    spans = CpuSpans()
    greenlet.settrace(spans.switched)
    own = _span_that_yields(spans)
    assert OWN <= own < OWN + OTHER / 2


def test_without_the_trace_the_thread_clock_counts_the_other_greenlet(no_trace: None) -> None:
    """What the trace is for: the same span read off the thread's clock alone."""
    assert _span_that_yields(CpuSpans()) >= OWN + OTHER


def test_a_span_without_a_switch_is_the_thread_clock_and_stop_without_start_is_zero(
    no_trace: None,
) -> None:
    spans = CpuSpans()
    greenlet.settrace(spans.switched)
    assert spans.stop() == 0.0
    spans.start()
    _burn(OWN)
    assert spans.stop() >= OWN
    assert spans.stop() == 0.0  # closed: nothing left open


def test_trace_switches_makes_the_process_spans_exclusive(
    no_trace: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a Locust process does: no trace before, `trace_switches`, then the process's own
    `SPANS` (a first version installed nothing when no earlier trace was set)."""
    monkeypatch.setattr(process_cpu.SPANS, "every", 1)  # time this span for sure
    trace_switches()
    assert greenlet.gettrace() is not None
    before = process_cpu.SPANS.ack_s
    process_cpu.SPANS.ack_s += _span_that_yields(process_cpu.SPANS)
    assert OWN <= process_cpu.SPANS.ack_s - before < OWN + OTHER / 2


def test_trace_switches_installs_once_and_calls_on_to_an_earlier_trace(no_trace: None) -> None:
    seen: list[str] = []

    def earlier(event: str, args: tuple[Any, Any]) -> None:
        seen.append(event)

    greenlet.settrace(earlier)
    trace_switches()
    installed = greenlet.gettrace()
    assert installed is not earlier and installed is not None
    trace_switches()  # a second user of the process starts: nothing more
    assert greenlet.gettrace() is installed
    greenlet.greenlet(lambda: None).switch()
    assert "switch" in seen  # the earlier trace still hears of switches


def test_spans_of_another_thread_keep_that_threads_clock(no_trace: None) -> None:
    """Threads have clocks of their own: a span in a thread is that thread's CPU only."""
    trace_switches()
    spans = CpuSpans()
    got: list[float] = []

    def worker() -> None:
        spans.start()
        _burn(OWN)
        got.append(spans.stop())

    t = threading.Thread(target=worker)
    t.start()
    _burn(OTHER)
    t.join(10)
    assert not t.is_alive()
    assert OWN <= got[0] < OWN + OTHER / 2


def test_one_span_in_every_is_timed_and_the_sums_stay_unbiased(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fake CPU clock that advances 1 s a read: every span is 1 s of CPU. With every = 8,
    about one span in eight reads the clock (twice) and counts 8 s; the sum over 8,000 spans
    is 8,000 s within sampling noise (a seeded draw: the figures are exact for this seed)."""
    reads = [0]

    def clock() -> float:
        reads[0] += 1
        return float(reads[0])

    monkeypatch.setattr(process_cpu, "now_cpu", clock)
    spans = CpuSpans(every=8, seed=7)
    total = 0.0
    for _ in range(8000):
        spans.start()
        total += spans.stop()
    timed = reads[0] // 2
    assert 900 <= timed <= 1100  # ~1,000 of 8,000 timed, two clock reads each
    assert total == 8.0 * timed
    assert 7200 <= total <= 8800  # the estimate of the true 8,000 s
    assert not spans._open


def test_the_process_spans_sample_and_test_spans_time_everything() -> None:
    assert process_cpu.SPANS.every == process_cpu.SPAN_EVERY > 1
    assert CpuSpans().every == 1
