"""Bit arithmetic on int64 words, for compiled code: written once, inlined where used.

The frame kernel's event queue finds its next bucket with entries in a bitmap of its buckets
(emu.net.kernel), and the compiled replay walks a board set's boards bit by bit
(emu.engine.boards): both ask for the lowest set bit of a word.
"""

from __future__ import annotations

from numba import njit

from . import compiled_cache  # noqa: F401  (before any compiled function: their cache stamp)

_inline = njit(cache=True, inline="always", _nrt=False)


@_inline
def lowest(x):
    """The index of the lowest set bit of the nonzero word ``x`` (bit 63 too: the shifts are
    arithmetic, and the lowest bit's tests see only zeros below it)."""
    b = x & -x
    n = 0
    if b & 0xFFFFFFFF == 0:
        n += 32
        b >>= 32
    if b & 0xFFFF == 0:
        n += 16
        b >>= 16
    if b & 0xFF == 0:
        n += 8
        b >>= 8
    if b & 0xF == 0:
        n += 4
        b >>= 4
    if b & 0x3 == 0:
        n += 2
        b >>= 2
    if b & 0x1 == 0:
        n += 1
    return n
