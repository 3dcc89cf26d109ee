"""Copying many variable-length byte segments between flat uint8 buffers.

Frames, capture records and payloads are laid out back to back, so segments
usually come in runs of equal length at constant strides: each such run is one
strided numpy copy. Runs that are too short to pay for that use a gathered
index instead.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

_CHUNK_BYTES = 1 << 22  # index arrays of the fallback path stay a few tens of MB


def run_starts(lengths: np.ndarray, src_starts: np.ndarray, dst_starts: np.ndarray) -> np.ndarray:
    """Indices where a run of equal-length, equally-spaced segments begins."""
    n = len(lengths)
    brk = np.ones(n, dtype=bool)
    if n > 1:
        brk[1:] = lengths[1:] != lengths[:-1]
    if n > 2:
        ds, dd = np.diff(src_starts), np.diff(dst_starts)
        # a stride change only splits a run whose first two members share a length
        brk[2:] |= (lengths[:-2] == lengths[1:-1]) & ((ds[1:] != ds[:-1]) | (dd[1:] != dd[:-1]))
    return np.flatnonzero(brk)


def copy_segments(dst: np.ndarray, dst_starts, src: np.ndarray, src_starts, lengths) -> None:
    """``dst[dst_starts[i]:+lengths[i]] = src[src_starts[i]:+lengths[i]]`` for every i.

    Both buffers are 1-D uint8; segments must not overlap in ``dst``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n == 0:
        return
    src_starts = np.asarray(src_starts, dtype=np.int64)
    dst_starts = np.asarray(dst_starts, dtype=np.int64)
    runs = run_starts(lengths, src_starts, dst_starts)
    if len(runs) > 64 and len(runs) * 4 > n and lengths.mean() <= 512:
        _gather_copy(dst, dst_starts, src, src_starts, lengths)
        return
    ends = np.append(runs[1:], n)
    for s, e, ln, a, b in zip(runs.tolist(), ends.tolist(), lengths[runs].tolist(),
                              dst_starts[runs].tolist(), src_starts[runs].tolist()):
        if ln == 0:
            continue
        k = e - s
        if k == 1:
            dst[a : a + ln] = src[b : b + ln]
            continue
        sd = int(dst_starts[s + 1] - a)
        ss = int(src_starts[s + 1] - b)
        out = as_strided(dst[a:], shape=(k, ln), strides=(sd, 1))
        out[...] = as_strided(src[b:], shape=(k, ln), strides=(ss, 1), writeable=False)


def _gather_copy(dst, dst_starts, src, src_starts, lengths) -> None:
    n = len(lengths)
    i = 0
    while i < n:
        # take segments until the chunk holds about _CHUNK_BYTES bytes
        cum = np.cumsum(lengths[i : i + max(1, _CHUNK_BYTES // 64)])
        j = i + max(1, int(np.searchsorted(cum, _CHUNK_BYTES)))
        j = min(j, n)
        lens = lengths[i:j]
        total = int(lens.sum())
        if total:
            first = np.repeat(np.cumsum(lens) - lens, lens)
            rel = np.arange(total, dtype=np.int64) - first
            dst[np.repeat(dst_starts[i:j], lens) + rel] = src[np.repeat(src_starts[i:j], lens) + rel]
        i = j
