"""Large freed arrays go back to the system at once (glibc's malloc).

glibc serves a request above its mmap threshold (128 KiB at first) with a mapping of its
own, unmapped when freed; but each such free raises the threshold, up to 32 MiB, so once a
table build's first temporaries are freed, the next arrays of a few MiB come from the heap,
where memory freed stays with the process. Building the replay's tables for MARS 16K on 64
boards left 0.8 GB so (docs/engine.md, "Memory"). A fixed threshold keeps every array of
1 MiB or more in a mapping of its own, whatever was freed before.
"""

from __future__ import annotations

import ctypes

MALLOPT_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
THRESHOLD = 1 << 20


def return_large_frees() -> bool:
    """Fix glibc's mmap threshold at THRESHOLD; False where the C library has no mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # another C library: its own policy stands
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(MALLOPT_MMAP_THRESHOLD, THRESHOLD))
