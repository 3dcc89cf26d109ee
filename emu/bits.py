"""Bit arithmetic on int64 words, for compiled code: written once, inlined where used.

The frame kernel's event queue finds its next bucket with entries in a bitmap of its buckets
(emu.net.kernel), and the compiled replay walks a board set's boards bit by bit
(emu.engine.boards): both ask for the lowest set bit of a word.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import compiled_cache  # noqa: F401  (before any compiled function: their cache stamp)

_inline = njit(cache=True, inline="always", _nrt=False)


@_inline
def lowest(x):
    """The index of the lowest set bit of the nonzero word ``x`` (bit 63 too: the shifts are
    arithmetic, and the lowest bit's tests see only zeros below it)."""
    b = x & -x
    n = 0
    step = 32
    while step > 0:  # halve the width the bit can be in: 32, 16, 8, 4, 2, 1
        if b & ((np.int64(1) << step) - 1) == 0:
            n += step
            b >>= step
        step >>= 1
    return n
