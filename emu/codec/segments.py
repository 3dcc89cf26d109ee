"""Copying many variable-length byte segments between flat uint8 buffers.

Frames, capture records and payloads sit back to back, so segments usually
come in long runs of equal length at constant strides: each run is one 2-D
strided copy. When runs are short, every segment is instead split by the bits
of its length (a 1400-byte segment = 1024 + 256 + 64 + 32 + 16 + 8 bytes) and
each bit is one fancy-indexed copy of fixed-width windows: at most 17 numpy
calls whatever the mix of lengths, with no byte written outside a segment.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view


def as_uint8(buf) -> np.ndarray:
    """Any bytes-like object or array as a flat uint8 array, without copying."""
    if isinstance(buf, np.ndarray):
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


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

    Both buffers are 1-D uint8; segments must lie inside them and not overlap in ``dst``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n == 0:
        return
    src_starts = np.asarray(src_starts, dtype=np.int64)
    dst_starts = np.asarray(dst_starts, dtype=np.int64)
    runs = run_starts(lengths, src_starts, dst_starts)
    if len(runs) > 16 and len(runs) * 64 > n:
        _copy_by_bits(dst, dst_starts, src, src_starts, lengths)
        return
    ends = np.append(runs[1:], n)
    steps_dst = np.append(np.diff(dst_starts), 0)[runs]
    steps_src = np.append(np.diff(src_starts), 0)[runs]
    for k, ln, a, b, sd, ss in zip((ends - runs).tolist(), lengths[runs].tolist(), dst_starts[runs].tolist(),
                                   src_starts[runs].tolist(), steps_dst.tolist(), steps_src.tolist()):
        if ln == 0:
            continue
        if k == 1:
            dst[a : a + ln] = src[b : b + ln]
            continue
        _rows(dst, a, sd, k, ln)[...] = _rows(src, b, ss, k, ln)


def _rows(buf: np.ndarray, start: int, step: int, k: int, ln: int) -> np.ndarray:
    """(k, ln) view of ``buf`` rows ``start + i * step``; a plain reshape unless it would overrun."""
    if step >= ln and start + k * step <= len(buf):
        return buf[start : start + k * step].reshape(k, step)[:, :ln]
    return as_strided(buf[start:], shape=(k, ln), strides=(step, 1))


def _copy_windows(dst, dst_at, src, src_at, width: int) -> None:
    """Copy ``width`` bytes from each ``src_at`` to the matching ``dst_at``."""
    if width and len(dst_at):
        sliding_window_view(dst, width, writeable=True)[dst_at] = sliding_window_view(src, width)[src_at]


def _copy_by_bits(dst, dst_starts, src, src_starts, lengths) -> None:
    longest = int(lengths.max())
    full = lengths == longest
    if full.sum() * 4 > len(lengths):
        # full-MTU fragments dominate: copy them whole, split only the others
        _copy_windows(dst, dst_starts[full], src, src_starts[full], longest)
        if full.all():
            return
        rest = ~full
        dst_starts, src_starts, lengths = dst_starts[rest], src_starts[rest], lengths[rest]
    done = np.zeros(len(lengths), dtype=np.int64)  # bytes of each segment already copied
    for bit in range(int(lengths.max()).bit_length() - 1, -1, -1):
        width = 1 << bit
        sel = np.flatnonzero(lengths & width)
        at = done[sel]
        _copy_windows(dst, dst_starts[sel] + at, src, src_starts[sel] + at, width)
        done[sel] += width


def scatter_rows(dst: np.ndarray, starts, rows: np.ndarray, lengths=None) -> None:
    """Write row i of the (n, width) array ``rows`` (its first ``lengths[i]`` bytes) at ``dst[starts[i]:]``."""
    n, width = rows.shape
    lengths = np.full(n, width, dtype=np.int64) if lengths is None else lengths
    copy_segments(dst, starts, np.ascontiguousarray(rows).reshape(-1), np.arange(n, dtype=np.int64) * width, lengths)


def gather_rows(buf: np.ndarray, starts, lengths, width: int) -> np.ndarray:
    """(n, width) array: row i holds ``buf[starts[i]:][:lengths[i]]`` (lengths <= width), zero-padded."""
    n = len(starts)
    out = np.zeros((n, width), dtype=np.uint8)
    copy_segments(out.reshape(-1), np.arange(n, dtype=np.int64) * width, buf, starts, lengths)
    return out
