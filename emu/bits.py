"""Integer arithmetic on int64 words, for compiled code: written once, inlined where used.

The frame kernel's event queue finds its next bucket with entries in a bitmap of its buckets
(emu.net.kernel), and the compiled replay walks a board set's boards bit by bit
(emu.engine.boards): both ask for the lowest set bit of a word, one instruction (``tzcnt``).

``larger`` and ``smaller`` are the builtin ``max`` and ``min`` of two integers. numba compiles
those builtins as functions of their own, which the engine's code calls (the call, its
arguments and status on the stack, the function's body), where these compile to a compare and
a conditional move inside the caller; the frame kernel takes the later of two times on every
frame-hop (docs/engine.md, "Where the cycles go": where the instructions go).
"""

from __future__ import annotations

from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros  # llvm.cttz: one instruction

from . import compiled_cache  # noqa: F401  (before any compiled function: their cache stamp)

_inline = njit(cache=True, inline="always", _nrt=False)


@_inline
def lowest(x):
    """The index of the lowest set bit of the nonzero word ``x`` (bit 63 too)."""
    return trailing_zeros(x)


@_inline
def larger(a, b):
    """The larger of integers ``a`` and ``b`` (``max(a, b)``, inlined)."""
    return a if a >= b else b


@_inline
def smaller(a, b):
    """The smaller of integers ``a`` and ``b`` (``min(a, b)``, inlined)."""
    return a if a <= b else b
