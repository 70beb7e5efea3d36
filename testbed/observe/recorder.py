"""The one seam for measurement (Locust's `events.request` pattern).

Producer and consumer loops call :class:`Recorder`; the Parquet writers, Locust stats and the
Prometheus exporter are *listeners* that never import broker adapters. A listener that raises is
logged and counted (`listener_errors`), and the run goes on.
"""

from __future__ import annotations

__all__ = ["Recorder", "Listener"]

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from testbed.core.records import RecordWriter

log = logging.getLogger(__name__)


class Listener(Protocol):
    """Receives every record as it is made. All methods optional in spirit; implement all."""

    def on_message(
        self,
        flow: str,
        queue: str,
        size: int,
        t_publish: float,
        t_confirm: float | None,
        ok: bool,
    ) -> None: ...

    def on_delivery(
        self, queue: str, consumer: str, outcome: str, latency_s: float | None, size: int
    ) -> None: ...

    def on_event(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None: ...


class Recorder:
    """Per-process recorder writing the record tables in batches (see `RecordWriter`)."""

    def __init__(
        self,
        measured_dir: Path,
        worker: str,
        replication: int,
        batch_rows: int = 5000,
        listeners: Sequence[Listener] | None = None,
        id_prefix: str = "",
        flush_interval: float | None = None,
    ):
        self.replication = replication
        self.id_prefix = id_prefix or f"r{replication}."
        """Prefix of every message id this process makes: unique per run and replication."""
        every = flush_interval
        self.messages = RecordWriter(measured_dir, "messages", worker, batch_rows, every)
        self.deliveries = RecordWriter(measured_dir, "deliveries", worker, batch_rows, every)
        self.events = RecordWriter(measured_dir, "events", worker, max(1, batch_rows // 50), every)
        self.listeners: list[Listener] = list(listeners or [])
        self.listener_errors = 0
        self._closed = False

    def _notify(self, method: str, *args: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(*args)
            except Exception:  # a listener must never kill the run
                self.listener_errors += 1
                if self.listener_errors <= 5:
                    log.exception("recorder listener %r failed in %s", listener, method)

    def message(
        self,
        msg_id: str,
        flow: str,
        queue: str,
        producer: str,
        size: int,
        t_intended: float | None,
        t_publish: float | None,
        t_confirm: float | None,
        ok: bool = True,
    ) -> None:
        self.messages.append(
            (
                msg_id,
                flow,
                queue,
                producer,
                size,
                t_intended,
                t_publish,
                t_confirm,
                self.replication,
            )
        )
        if self.listeners:
            self._notify("on_message", flow, queue, size, t_publish, t_confirm, ok)

    def delivery(
        self,
        msg_id: str,
        queue: str,
        consumer: str,
        attempt: int,
        t_deliver: float,
        t_done: float | None,
        outcome: str,
        redelivered: bool,
        latency_s: float | None,
        size: int = 0,
        service_s: float | None = None,
    ) -> None:
        self.deliveries.append(
            (
                msg_id,
                queue,
                consumer,
                attempt,
                t_deliver,
                t_done,
                outcome,
                redelivered,
                latency_s,
                service_s,
                self.replication,
            )
        )
        if self.listeners:
            self._notify("on_delivery", queue, consumer, outcome, latency_s, size)

    def event(self, t: float, kind: str, target: str, detail: dict[str, Any] | None = None) -> None:
        detail = detail or {}
        self.events.append((t, kind, target, json.dumps(detail, default=str), self.replication))
        if self.listeners:
            self._notify("on_event", t, kind, target, detail)

    def flush(self) -> None:
        for w in (self.messages, self.deliveries, self.events):
            w.flush()

    def flush_due(self) -> None:
        """Flush each table whose oldest buffered row is `flush_interval` old (a timer calls
        this, so rows of an idle spell are not held longer than the bound)."""
        for w in (self.messages, self.deliveries, self.events):
            w.flush_due()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.flush()
