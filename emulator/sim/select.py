"""Exact quantiles of values that do not fit in memory at once (streamed replications).

``quantiles(blocks, n, qs)`` gives exactly what ``np.quantile(x, qs, method="inverted_cdf")``
gives for the ``n`` values that ``blocks()`` yields, block by block, each call a fresh pass
(a file read back): the percentile definition of every judged figure
(`testbed.core.figures.percentile_index`). The order statistic of each quantile is found by radix
selection on the values' order-preserving 64-bit keys: a pass counts the keys per top-16-bit
bucket, and a second pass keeps only the buckets that hold a wanted rank (a few per cent of
the values); a bucket still too big is split on its next 16 bits. Memory: the histogram and
the kept buckets, never all values.

Hand-written because no maintained library does exact (not sketch) quantiles out of core in a
few passes; a t-digest or DDSketch would change the figures. A streamed summary equals an
in-memory one bit for bit; tests/unit/test_sim_stream.py holds the two together.
"""

from __future__ import annotations

__all__ = ["quantiles", "order_statistics"]

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from testbed.core.figures import percentile_index

Blocks = Callable[[], Iterable[np.ndarray]]
"""A fresh pass over the values (float64 blocks) at each call."""

_SIGN = np.uint64(1 << 63)
_LIMIT = 1 << 21
"""At most this many keys are kept in memory to sort (16 MiB)."""


def _keys(x: np.ndarray) -> np.ndarray:
    """float64 → uint64 in the same order (negative values have their bits flipped)."""
    u = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    return np.where(u & _SIGN, ~u, u | _SIGN)


def _value(k: np.uint64) -> float:
    u = k & ~_SIGN if k & _SIGN else ~k
    return float(np.array([u], dtype=np.uint64).view(np.float64)[0])


def _select(blocks: Blocks, ranks: list[int], prefix: int, bits: int) -> dict[int, float]:
    """Order statistics ``ranks`` (0-based, counted among keys with top ``bits`` = prefix)."""
    shift = np.uint64(64 - bits - 16)
    top = np.uint64(64 - bits) if bits else None
    hist = np.zeros(1 << 16, dtype=np.int64)
    for block in blocks():
        k = _keys(block)
        if top is not None:
            k = k[(k >> top) == prefix]
        hist += np.bincount(((k >> shift) & np.uint64(0xFFFF)).astype(np.intp), minlength=1 << 16)
    cum = np.cumsum(hist)
    wanted: dict[int, list[tuple[int, int]]] = {}  # bucket → [(rank, rank within bucket)]
    for r in ranks:
        b = int(np.searchsorted(cum, r, side="right"))
        wanted.setdefault(b, []).append((r, r - (int(cum[b - 1]) if b else 0)))
    out: dict[int, float] = {}
    small = [b for b in wanted if hist[b] <= _LIMIT or bits + 16 == 64]
    for b in wanted:
        if b not in small:
            sub = _select(blocks, [w for _, w in wanted[b]], (prefix << 16) | b, bits + 16)
            out.update({r: sub[w] for r, w in wanted[b]})
    if small:
        nb = np.uint64(64 - bits - 16)
        keep: dict[int, list[np.ndarray]] = {b: [] for b in small}
        sel = np.array(small, dtype=np.uint64)
        for block in blocks():
            k = _keys(block)
            if top is not None:
                k = k[(k >> top) == prefix]
            bucket = (k >> nb) & np.uint64(0xFFFF)
            hit = np.isin(bucket, sel)
            for b in small:
                keep[b].append(k[hit & (bucket == b)])
        for b in small:
            got = np.sort(np.concatenate(keep[b]))
            out.update({r: _value(got[w]) for r, w in wanted[b]})
    return out


def order_statistics(blocks: Blocks, ranks: Sequence[int]) -> dict[int, float]:
    """The values of 0-based sorted ranks ``ranks`` among all values of ``blocks()``."""
    if not ranks:
        return {}
    return _select(blocks, sorted(set(ranks)), 0, 0)


def quantiles(blocks: Blocks, n: int, qs: Sequence[float]) -> list[float]:
    """``np.quantile(values, qs, method="inverted_cdf")`` of the ``n`` values of ``blocks()``
    (n ≥ 1): each an order statistic (`testbed.core.figures.percentile_index`)."""
    idx = [percentile_index(float(q), n) for q in qs]
    stats = order_statistics(blocks, idx)
    return [float(stats[i]) for i in idx]
