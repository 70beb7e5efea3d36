"""Columnar recording of one replication → the record tables (docs/architecture.md), streamed.

The one seam for measurement: producers, queues and consumers call ``new_message``,
``confirm``, ``delivery``, ``event`` and ``sample``; nothing else writes records. Hot columns
live in ``array.array`` buffers (8 bytes a value, not a Python object). Memory stays bounded by
the messages in flight, not by the run's length (issue 18 §3):

- messages are numbered in chunks of ``chunk_rows``; a full chunk is *sealed* (numpy), and
  retired to an Arrow IPC file (``emulator.sim.spool``) when the next one is sealed — after the
  deliveries buffer was flushed, so the deliveries of its messages are mostly recorded by then;
- ``m_size`` (message → size, read by the broker, queues and consumers) holds the unretired
  messages; an older message still in flight is read back from its chunk's file (cached;
  ``emulator.sim.message_lookup``); ``m_flow`` is looked up the same way; confirms wait in
  a dict until their chunk retires (a later one is patched in at the end);
- deliveries go to ``deliveries.r<N>.parquet`` every ``chunk_rows`` rows, with
  ``latency_s`` from the message's publish time; the ledger's rows (acked, dead-lettered)
  go to a side file per message chunk; ``listeners`` (the summary's ``FigureStream``) see
  every flushed batch of deliveries and, at the end, every chunk of messages;
- ``finish`` writes ``messages.r<N>.parquet`` chunk by chunk and computes the ledger from
  the side files. ``tables()`` does the same into a private directory and reads it back (the
  in-memory API of ``Model.run``): one code path, so both give the same rows.

Tables have exactly the schemas of ``testbed.core.records`` — the same tables a live run
writes. Conventions of the predicted tables:

- ``msg_id`` is the decimal message number within the replication (``"0"``, ``"1"``, ...);
  ``replication`` tells replications apart.
- ``messages.queue`` is the publish destination (a queue or an exchange name), as the producer
  knows it; per-queue figures come from ``deliveries.queue``. ``flow`` is the message type
  (``message_type`` or the producer group's name).
- ``producer`` and ``consumer`` name instances ``<group>-<i>``; a follow-up message's producer
  is the consumer instance that published it.
- ``t_confirm`` is the confirm time, or ``t_publish`` for a producer without publisher confirms
  (as the live client records it; null when never confirmed).
- ``latency_s`` = ``t_deliver - t_publish``; ``t_deliver`` is when the consumer's handler starts
  on the message (a live handler timestamps there), ``t_done`` when it finishes.
"""

from __future__ import annotations

__all__ = ["Recorder", "OUTCOME_CODES", "Streamed"]

import itertools
import json
import shutil
import tempfile
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from emulator.sim.chunkpass import check_order, deliveries_table
from emulator.sim.message_lookup import FlowMap, SizeMap, lookup
from emulator.sim.spool import LEDGER_ROW, ChunkFiles, PartWriter, SideFile
from testbed.core.ordering import OrderCheck
from testbed.core.records import DELIVERIES, MESSAGES, OUTCOMES, Ledger

OUTCOME_CODES = {name: i for i, name in enumerate(OUTCOMES)}
"""Outcome name → small integer used in the hot path."""
_ACKED = OUTCOME_CODES["acked"]
_DEAD = OUTCOME_CODES["dead_lettered"]
_UNROUTABLE = OUTCOME_CODES["unroutable"]
_NAN = float("nan")
_CHUNK_SCHEMA = pa.schema(
    [
        ("flow", pa.int32()),
        ("dest", pa.int32()),
        ("producer", pa.int32()),
        ("size", pa.float64()),
        ("t_intended", pa.float64()),
        ("t_publish", pa.float64()),
        ("t_confirm", pa.float64()),
    ]
)


class Listener(Protocol):
    """Receives the records as they leave memory (``emulator.sim.summary.FigureStream``)."""

    def deliveries(self, cols: dict[str, np.ndarray]) -> None: ...

    def messages(self, cols: dict[str, np.ndarray]) -> None: ...


@dataclass
class Streamed:
    """What ``Recorder.finish`` wrote: the two big tables' part files and the small tables."""

    parts: dict[str, Path]
    small: dict[str, pa.Table]
    ledger: Ledger
    messages: int


class Recorder:
    """Collects one replication's records, streaming them out in chunks (module docstring)."""

    def __init__(self, chunk_rows: int = 1 << 16) -> None:
        self.names: list[str] = []
        self._name_index: dict[str, int] = {}
        self.R = chunk_rows
        self.dir: Path | None = None  # the spool directory (``configure``), else private
        self._private: Path | None = None
        self.replication = 0
        self.listeners: list[Listener] = []
        # the current chunk of messages (size → m_size, confirm → confirms)
        self.c: dict[str, array[Any]] = {
            "flow": array("i"),
            "dest": array("i"),
            "producer": array("i"),
            "t_intended": array("d"),
            "t_publish": array("d"),
        }
        self.cur_lo = 0
        self.sealed: dict[str, np.ndarray] | None = None
        self.sealed_lo = 0
        self.retired_hi = 0  # messages below are in chunk files
        self.m_size = SizeMap(self)
        self.m_flow = FlowMap(self)
        self.confirms: dict[int, float] = {}
        self.d: dict[str, array[Any]] = {
            "msg": array("q"),
            "queue": array("i"),
            "consumer": array("i"),
            "attempt": array("i"),
            "t_deliver": array("d"),
            "t_done": array("d"),
            "outcome": array("b"),
        }
        self.redeliveries = 0
        self.order = OrderCheck()  # the ledger's order_violations (testbed.core.ordering)
        self.events: list[tuple[float, str, str, str]] = []
        self.series: list[tuple[Any, ...]] = []
        self._files: ChunkFiles | None = None
        self._dparts: PartWriter | None = None
        self._ledger_sides: dict[int, SideFile] = {}
        self._bind()

    def _bind(self) -> None:
        c, d, R = self.c, self.d, self.R
        m = (c["flow"].append, c["dest"].append, c["producer"].append)
        m_int, m_pub = c["t_intended"].append, c["t_publish"].append
        pub = c["t_publish"]
        dl = tuple(d[k].append for k in d)
        dmsg = d["msg"]
        sizes = self.m_size
        next_n = itertools.count().__next__

        def new_message(
            flow: int, dest: int, producer: int, size: float, t_int: float, t_pub: float
        ) -> int:
            """Record a publish; returns the message number."""
            n = next_n()
            m[0](flow)
            m[1](dest)
            m[2](producer)
            m_int(t_int)
            m_pub(t_pub)
            sizes[n] = size
            if len(pub) >= R:
                self._seal()
            return n

        def delivery(
            msg: int, queue: int, consumer: int, attempt: int, t_del: float, t_done: float, out: int
        ) -> None:
            """Record one delivery attempt (outcome code from OUTCOME_CODES)."""
            dl[0](msg)
            dl[1](queue)
            dl[2](consumer)
            dl[3](attempt)
            dl[4](t_del)
            dl[5](t_done)
            dl[6](out)
            if len(dmsg) >= R:
                self.flush_deliveries()

        self.new_message = new_message
        self.delivery = delivery
        self.confirm = self.confirms.__setitem__  # (msg, t): the last one wins

    # -- set-up ---------------------------------------------------------------------------

    def configure(self, directory: Path, replication: int) -> None:
        """Stream into ``directory`` (before anything was recorded beyond names and events)."""
        self.dir = Path(directory)
        self.replication = replication

    def _spool(self) -> Path:
        if self.dir is None:
            self._private = Path(tempfile.mkdtemp(prefix="mqbed-sim-"))
            self.dir = self._private
        return self.dir

    def files(self) -> ChunkFiles:
        if self._files is None:
            self._files = ChunkFiles(self._spool() / f"spool-r{self.replication}")
        return self._files

    # -- names ----------------------------------------------------------------------------

    def name(self, text: str) -> int:
        """Index of a string (queue, producer, consumer, flow) in the name table."""
        i = self._name_index.get(text)
        if i is None:
            i = self._name_index[text] = len(self.names)
            self.names.append(text)
        return i

    # -- small tables ---------------------------------------------------------------------

    def event(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None:
        self.events.append((t, kind, target, json.dumps(detail, sort_keys=True)))

    def sample(
        self,
        t: float,
        queue: str,
        depth_ready: int,
        depth_unacked: int,
        publish_rate: float,
        deliver_rate: float,
        ack_rate: float,
        consumers: int,
        producers_blocked: int,
        broker_up: bool,
        memory_bytes: int,
    ) -> None:
        self.series.append(
            (
                t,
                queue,
                depth_ready,
                depth_unacked,
                publish_rate,
                deliver_rate,
                ack_rate,
                consumers,
                producers_blocked,
                broker_up,
                memory_bytes,
            )
        )

    @property
    def messages(self) -> int:
        return self.cur_lo + len(self.c["t_publish"])

    # -- chunks of messages ---------------------------------------------------------------

    def _seal(self) -> None:
        """The current chunk is full: retire the previous sealed one, seal this one."""
        if self.sealed is not None:
            self.flush_deliveries()
            self._retire()
        self.sealed = {
            k: np.frombuffer(a, dtype=np.int32 if a.typecode == "i" else np.float64).copy()
            for k, a in self.c.items()
        }
        self.sealed_lo = self.cur_lo
        for a in self.c.values():
            del a[:]
        self.cur_lo += len(self.sealed["t_publish"])

    def _retire(self) -> None:
        assert self.sealed is not None
        cols, lo = self.sealed, self.sealed_lo
        hi = lo + len(cols["t_publish"])
        pop, cpop = self.m_size.pop, self.confirms.pop
        size = np.array([pop(m) for m in range(lo, hi)], dtype=np.float64)
        conf = np.array([cpop(m, _NAN) for m in range(lo, hi)], dtype=np.float64)
        arrays = [cols["flow"], cols["dest"], cols["producer"], size]
        arrays += [cols["t_intended"], cols["t_publish"], conf]
        batch = pa.RecordBatch.from_arrays([pa.array(a) for a in arrays], schema=_CHUNK_SCHEMA)
        self.files().write(lo // self.R, batch)
        self.sealed = None
        self.retired_hi = hi

    # -- deliveries -----------------------------------------------------------------------

    def flush_deliveries(self) -> None:
        """Write the buffered deliveries; hand them to the ledger side files and listeners."""
        d = self.d
        if not len(d["msg"]):
            return
        types: dict[str, type[np.generic]] = {
            "q": np.int64,
            "i": np.int32,
            "d": np.float64,
            "b": np.int8,
        }
        cols = {k: np.frombuffer(a, dtype=types[a.typecode]).copy() for k, a in d.items()}
        for a in d.values():
            del a[:]
        msg = cols["msg"]
        t_pub = lookup(self, msg, "t_publish")
        cols["t_publish"] = t_pub
        table = deliveries_table(self.names, cols, self.replication)
        attempt = cols["attempt"]
        if self._dparts is None:
            path = self._spool() / f"deliveries.r{self.replication}.parquet"
            self._dparts = PartWriter(path, "deliveries")
        self._dparts.write(table)
        self.redeliveries += int(np.count_nonzero(attempt > 1))
        check_order(self, cols)
        self._ledger_rows(cols)
        if self.listeners:
            cols["flow"] = lookup(self, msg, "flow")
            for listener in self.listeners:
                listener.deliveries(cols)

    def _ledger_rows(self, cols: dict[str, np.ndarray]) -> None:
        out = cols["outcome"]
        keep = (out == _ACKED) | (out == _DEAD) | (out == _UNROUTABLE)
        rows = np.empty(int(np.count_nonzero(keep)), dtype=LEDGER_ROW)
        rows["m"], rows["q"], rows["o"] = cols["msg"][keep], cols["queue"][keep], out[keep]
        ks = rows["m"] // self.R
        for k in np.unique(ks):
            side = self._ledger_sides.get(int(k))
            if side is None:
                path = self.files().dir / f"ledger-{k:06d}.bin"
                side = self._ledger_sides[int(k)] = SideFile(path, LEDGER_ROW)
            side.append(rows[ks == k])

    # -- the end --------------------------------------------------------------------------

    def finish(self) -> Streamed:
        """Flush everything: part files of messages and deliveries, the small tables, ledger."""
        from emulator.sim.chunkpass import write_messages

        self.flush_deliveries()
        if self.sealed is not None:
            self._retire()
        if self.messages > self.cur_lo:
            self._seal()
            self._retire()
        if self._dparts is None:
            path = self._spool() / f"deliveries.r{self.replication}.parquet"
            self._dparts = PartWriter(path, "deliveries")
        dpath = self._dparts.close()
        mpath, ledger = write_messages(self)
        shutil.rmtree(self.files().dir, ignore_errors=True)
        return Streamed(
            parts={"messages": mpath, "deliveries": dpath},
            small=self.small_tables(),
            ledger=ledger,
            messages=self.messages,
        )

    def tables(self, replication: int) -> dict[str, pa.Table]:
        """The four record tables, in memory (for ``Model.run``: small replications)."""
        flushed = self.replication  # deliveries already written carry it (Model sets none)
        self.replication = replication
        try:
            done = self.finish()
            dels = pq.read_table(done.parts["deliveries"], schema=DELIVERIES)
            if flushed != replication:
                rep = pa.array(np.full(dels.num_rows, replication, dtype=np.int32))
                dels = dels.set_column(
                    DELIVERIES.get_field_index("replication"), "replication", rep
                )
            messages = pq.read_table(done.parts["messages"], schema=MESSAGES)
            return {"messages": messages, "deliveries": dels, **done.small}
        finally:
            if self._private is not None:
                shutil.rmtree(self._private, ignore_errors=True)

    def small_tables(self) -> dict[str, pa.Table]:
        """``timeseries`` and ``events`` (a few rows a second: kept in memory)."""
        from emulator.sim.chunkpass import small_tables

        return small_tables(self.events, self.series, self.replication)
