"""Binary min-heaps over table rows, for compiled code: written once, inlined where used.

A heap is rows ``lo .. lo + n - 1`` of a 2-D int64 table, ordered by the row's first two
columns, (time, key) compared in that order; any further columns are the entry's payload
and move with it. The replay's event heap (emu.engine.events: time, sequence number, kind,
a, b), the compute engines' ready queues (emu.engine.compute: op id, 0, one heap per node in
its segment of one table) and the far entries of the frame kernel's event queue
(emu.net.kernel: rows time, link key, behind its calendar) are such heaps; their keys are
unique, so their order is total.

An entry in motion is a tuple of int64 of the row's width (what the caller holds: a new
entry, or the last row of a heap being popped; a link id from a forwarding row is int32,
so callers make each value int64). Both sifts move it with a hole: rows move
into the hole one by one and the entry is written once, where it stops. The sift down
picks the smaller child without a branch (which child is smaller is data: a branch
would mispredict half the time), and a caller can put a new entry into the root's
place instead of popping the root and pushing (one sift instead of two).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import compiled_cache  # noqa: F401  (before any compiled function: their cache stamp)

_inline = njit(cache=True, inline="always", _nrt=False)


@_inline
def _put(H, r, x):
    for c in range(len(x)):
        H[r, c] = x[c]


@_inline
def _move(H, dst, src, width):
    for c in range(width):
        H[dst, c] = H[src, c]


@_inline
def sift_up(H, lo, i, x):
    """Entry ``x`` into the hole at row ``lo + i`` (a push: ``i`` is the heap's size), moving
    up: each parent that ``x`` comes before moves down into the hole."""
    while i > 0:
        p = (i - 1) >> 1
        pt = H[lo + p, 0]
        if pt < x[0] or (pt == x[0] and H[lo + p, 1] <= x[1]):
            break
        _move(H, lo + i, lo + p, len(x))
        i = p
    _put(H, lo + i, x)


@_inline
def sift_down(H, lo, n, i, x):
    """Entry ``x`` into the hole at row ``lo + i`` of a heap of ``n`` rows (a pop: the root,
    with ``x`` its last row and ``n`` the size without it), moving down: the smaller child
    that comes before ``x`` moves up into the hole."""
    while True:
        l = 2 * i + 1
        if l >= n:
            break
        c = l
        if l + 1 < n:
            lt = H[lo + l, 0]
            rt = H[lo + l + 1, 0]
            c = l + np.int64((rt < lt) | ((rt == lt) & (H[lo + l + 1, 1] < H[lo + l, 1])))
        ct = H[lo + c, 0]
        if x[0] < ct or (x[0] == ct and x[1] <= H[lo + c, 1]):
            break
        _move(H, lo + i, lo + c, len(x))
        i = c
    _put(H, lo + i, x)
