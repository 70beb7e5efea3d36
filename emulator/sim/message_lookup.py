"""A recorded message's columns read back by its number, wherever the message is by now.

A message of a streamed replication (`emulator.sim.recorder`) is in one of three places: the
current chunk's ``array`` buffers, the sealed chunk (numpy), or — once retired — its chunk's
Arrow IPC file (``emulator.sim.spool.ChunkFiles``, cached). `lookup` reads a column for a batch
of messages from all three (a flushed batch of deliveries, the ledger's order check);
`retired_value` reads one value of a retired message; `SizeMap` and `FlowMap` are the recorder's
``m_size`` and ``m_flow``, dicts whose misses read the message back from its chunk.
"""

from __future__ import annotations

__all__ = ["FlowMap", "SizeMap", "lookup", "retired_value"]

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from emulator.sim.recorder import Recorder


class SizeMap(dict[int, float]):
    """Message → size for unretired messages; an older one is read back (C-speed hits)."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __missing__(self, m: int) -> float:
        return float(retired_value(self.rec, m, "size_list"))


class FlowMap(dict[int, int]):
    """Message → flow name index, always through ``__missing__`` (follow-ups read it)."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __missing__(self, m: int) -> int:
        return int(lookup(self.rec, np.array([m], dtype=np.int64), "flow")[0])


def retired_value(rec: Recorder, m: int, column: str) -> Any:
    """One value of a retired message (a late lookup)."""
    if not 0 <= m < rec.retired_hi:
        raise KeyError(m)
    k = m // rec.R
    return rec.files().column(k, column)[m - k * rec.R]


def lookup(rec: Recorder, msgs: np.ndarray, column: str) -> np.ndarray:
    """Column ``flow``, ``producer`` or ``t_publish`` of ``msgs``, wherever they are."""
    dtype: type[np.generic] = np.int32 if column in ("flow", "producer") else np.float64
    out = np.empty(len(msgs), dtype=dtype)
    cur = msgs >= rec.cur_lo
    if cur.any():
        a = np.frombuffer(rec.c[column], dtype=dtype)
        out[cur] = a[msgs[cur] - rec.cur_lo]
        del a  # the array must not stay exported (it grows)
    rest = ~cur
    if rec.sealed is not None:
        s = rest & (msgs >= rec.sealed_lo)
        out[s] = rec.sealed[column][msgs[s] - rec.sealed_lo]
        rest &= ~s
    if rest.any():
        files = rec.files()
        old = msgs[rest]
        ks = old // rec.R
        vals = np.empty(len(old), dtype=dtype)
        for k in np.unique(ks):
            sel = ks == k
            vals[sel] = files.column(int(k), column)[old[sel] - int(k) * rec.R]
        out[rest] = vals
    return out
