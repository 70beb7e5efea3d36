"""Machinery shared by the adapters (not part of the contract in `testbed.brokers.base`).

- `ConfirmBook`: pending publishes matched to the broker's confirms by tag or receipt id.
- `PumpedProducer` / `PumpedConsumer`: waiting loops for clients that progress only while the
  caller runs their I/O (pika's BlockingConnection, py-amqp under kombu). Each adapter supplies
  `_pump(timeout)`, which reads frames for at most `timeout` s, and callbacks that fill the
  book or the delivery buffer.
"""

from __future__ import annotations

import contextlib

__all__ = ["ConfirmBook", "PumpedConsumer", "PumpedProducer"]

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from testbed.brokers.base import AdapterError, Confirm, ConfirmTimeout, Delivery


class ConfirmBook:
    """Pending publishes keyed by delivery tag or receipt id, matched when the broker answers.

    Tags must be added in increasing order for `multiple` acknowledgements (AMQP) to work.
    Anything the broker confirms that is not pending becomes a failed `Confirm`.
    """

    def __init__(self) -> None:
        self._pending: dict[Any, str] = {}
        self._returned: dict[str, str] = {}  # msg_id -> reason: basic.return before its ack
        self.ready: list[Confirm] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, key: Any, msg_id: str) -> None:
        self._pending[key] = msg_id

    def discard(self, key: Any) -> None:
        """Forget a pending key (the publish itself failed and will be retried)."""
        self._pending.pop(key, None)

    def returned(self, msg_id: str, reason: str, confirms: bool) -> None:
        """The broker returned `msg_id` unroutable (basic.return): with confirms its coming ack
        reports it, failed; without, a failed `Confirm` is ready now (nothing else will come)."""
        if confirms:
            self._returned[msg_id] = reason
        else:
            self.ready.append(Confirm(msg_id, False, time.time_ns(), reason, returned=True))

    def settle(self, key: Any, ok: bool, *, multiple: bool = False, detail: str = "") -> None:
        now = time.time_ns()
        if multiple:
            keys = []
            for k in self._pending:  # insertion order == tag order
                if k > key:
                    break
                keys.append(k)
            if not keys:
                self.ready.append(Confirm("", False, now, f"unknown multiple tag {key!r}"))
        else:
            keys = [key] if key in self._pending else []
            if not keys:
                self.ready.append(Confirm("", False, now, f"unknown tag {key!r}"))
        for k in keys:
            msg_id = self._pending.pop(k)
            back = self._returned.pop(msg_id, None) if self._returned else None
            if back is not None:
                self.ready.append(Confirm(msg_id, False, now, back, returned=True))
            else:
                self.ready.append(Confirm(msg_id, ok, now, detail))

    def fail_all(self, reason: str) -> None:
        """Every pending publish failed (connection lost before the broker answered)."""
        now = time.time_ns()
        for msg_id in self._pending.values():
            self.ready.append(Confirm(msg_id, False, now, reason))
        self._pending.clear()
        self._returned.clear()

    def take(self) -> list[Confirm]:
        out, self.ready = self.ready, []
        return out

    def take_id(self, msg_id: str) -> Confirm | None:
        """Remove and return the confirm for `msg_id`, if it has arrived."""
        for i, c in enumerate(self.ready):
            if c.msg_id == msg_id:
                return self.ready.pop(i)
        return None


def shut_socket(sock: Any) -> None:
    """Shut and close a client socket whatever state its protocol library is in."""
    import socket

    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class PumpedProducer(ABC):
    """`poll_confirms` and `publish_and_wait` over `_pump` and a `ConfirmBook`."""

    where: str
    confirms: bool

    def __init__(self) -> None:
        self._book = ConfirmBook()

    @abstractmethod
    def _pump(self, timeout: float) -> None: ...

    @abstractmethod
    def publish(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        flush: bool = True,
    ) -> int: ...

    def flush(self) -> None:  # noqa: B027 - adapters that buffer override it
        """Write publishes held back by ``publish(..., flush=False)``."""

    @property
    def in_flight(self) -> int:
        return len(self._book)

    def poll_confirms(self, timeout: float = 0.0) -> list[Confirm]:
        deadline = time.monotonic() + timeout
        self._pump(0)
        while not self._book.ready and self.in_flight and time.monotonic() < deadline:
            self._pump(deadline - time.monotonic())
        return self._book.take()

    def publish_and_wait(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        timeout: float = 5.0,
    ) -> Confirm:
        if not self.confirms:
            raise AdapterError(f"publish_and_wait({msg_id!r}) needs a producer with confirms=True")
        self.publish(body, msg_id=msg_id, headers=headers, routing_key=routing_key)
        deadline = time.monotonic() + timeout
        while True:
            found = self._book.take_id(msg_id)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConfirmTimeout(
                    f"no confirm for {msg_id!r} within {timeout} s on {self.where}"
                )
            self._pump(left)


class PumpedConsumer(ABC):
    """`drain` over `_pump` and a delivery buffer filled by the client's message callback."""

    queue: str

    def __init__(self) -> None:
        self._buf: list[Delivery] = []
        self._unsettled: set[Any] = set()

    @abstractmethod
    def _pump(self, timeout: float) -> None: ...

    @property
    def unsettled(self) -> int:
        return len(self._unsettled)

    def drain(self, timeout: float, max_messages: int | None = None) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        self._pump(0)
        while not self._buf and time.monotonic() < deadline:
            self._pump(deadline - time.monotonic())
        n = len(self._buf) if max_messages is None else max_messages
        out, self._buf = self._buf[:n], self._buf[n:]
        return out
