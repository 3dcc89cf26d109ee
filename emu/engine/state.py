"""The compiled replay's state and how its functions are compiled.

The State (emu.net.state) holds every table, the kernel's and the replay's; compiled
functions take this one object (``s``) and read its tables as fields (``s.OP``, ``s.SC``),
and a table can be replaced by a bigger one inside the loop (``more_hist(s, n)``).

The loop's functions are compiled without numba's reference counting (``compiled``,
as the frame kernel is): with it, every ``s.X`` read and every array argument was an
atomic increment and decrement, about a sixth of the loop's time. They never
allocate and only read tables through ``s``; the few functions that replace a
table by a bigger one (``more_*`` here and in emu.engine.reliable, the kernel
buffers' in emu.engine.loop) keep reference counting, so the old table is freed. A
table that can be replaced (SIM, WORK, HIST, ERR; the kernel's FP, FREE, UP, HP, LB;
with reliable delivery also MS, MD, MX, OUT, OD, BITS, SP, SFREE, SL, NKB) is read from
``s`` again after any call that may replace it, never through a local name taken
before. Python replaces kernel tables only between two calls of ``drive`` (a timeline
change, emu.engine.runner).
The kernel's tables are emu.net.network.Network's (the names of emu.net.kernel);
the replay's are named in emu.engine.layout.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any compiled function: their cache stamp)
from ..net.state import FIELDS, KERNEL, REPLAY, State, set_kernel  # noqa: F401  (the engine's names)
# numba's cache indexes written before the State moved to emu.net name its type here: unpickling
# them must find it (then their stamps differ and the functions recompile) instead of failing
from ..net.state import StateType  # noqa: F401

# The loop's functions: no reference counting (they borrow every table from ``s``).
compiled = njit(cache=True, _nrt=False)
compiled_inline = njit(cache=True, inline="always", _nrt=False)
# The functions that allocate a table, with reference counting: said explicitly, since a
# function compiled without an ``_nrt`` of its own takes its first caller's.
allocating = njit(cache=True, _nrt=True)


@allocating
def grown(a, need):
    """``a`` with at least ``need`` rows (doubling), zero-filled beyond its rows."""
    if need <= a.shape[0]:
        return a
    b = np.zeros((max(need, 2 * a.shape[0]),) + a.shape[1:], a.dtype)
    b[: a.shape[0]] = a
    return b


@allocating
def doubled_pool(table, free, nfree):
    """A pool table of twice the rows and its free stack: the ``nfree`` free rows, then the new
    ones, lowest on top (emu.net.network._grow_pool's order). The caller adds the new rows to
    its free count."""
    n = table.shape[0]
    stack = np.empty(2 * n, np.int64)
    stack[:nfree] = free[:nfree]
    stack[nfree: nfree + n] = np.arange(2 * n - 1, n - 1, -1)
    return grown(table, 2 * n), stack


# Replacing a table: called by the loop only when a table is full.
@allocating
def more_heap(s):
    s.HP = grown(s.HP, 2 * s.HP.shape[0])


@allocating
def more_sim(s, need):
    s.SIM = grown(s.SIM, need)


@allocating
def more_work(s, need):
    s.WORK = grown(s.WORK, need)


@allocating
def more_hist(s, need):
    s.HIST = grown(s.HIST, need)
    s.HN = grown(s.HN, need)


@allocating
def more_err(s, need):
    s.ERR = grown(s.ERR, need)
