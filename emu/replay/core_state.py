"""The compiled replay's state: every table, kernel and replay, behind one numba struct reference.

Compiled functions take this one object (``s``) and read its tables as fields
(``s.OP``, ``s.SC``), so a call passes one reference instead of thirty arrays, and a
table can be replaced by a bigger one inside the loop (``s.HIST = grown(s.HIST, n)``).
The kernel's tables are emu.net.network.Network's (the names of emu.net.kernel);
the replay's are named in emu.replay.core_layout.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import types
from numba.experimental import structref

from . import core_cache  # noqa: F401  (before any compiled function: their cache stamp)

KERNEL = ("SC", "LK", "LF", "LR", "LD", "ND", "NS", "DL", "FP", "FREE", "HP", "LG", "FW", "MS", "MD", "BITS",
          "UP", "SP", "SL", "SFREE",
          "LB")     # per-link statistics bins, accumulated in the frame loop
REPLAY = ("RS", "OP", "PT", "SLOT", "NT", "RQ", "TR", "MX", "KB", "KR", "IDX", "DF", "GP",
          "SIM",    # the event heap: time, seq, kind, a, b
          "WORK",   # the work stack: kind, a, b, c
          "HIST",   # directory history: t, node, owner, replica, transient, blocks, replicas
          "ERR",    # directory errors: t, code, node, kv, state
          # reliable delivery (emu.replay.core_reliable): the protocol's sender tables
          "OUT",    # per message: emu.nic.protocol's O_* columns
          "OD",     # per message destination (rows as MD): node, acked
          "RT",     # per board, per peer: emu.nic.rto's SRTT, RTTVAR, RTO
          "NKB")    # nack payloads (missing-fragment bitmaps), bytes
FIELDS = KERNEL + REPLAY


@structref.register
class StateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class State(structref.StructRefProxy):
    """Build with ``State(**tables)``; read a table back with ``state.table(name)``."""

    def __new__(cls, **tables):
        return structref.StructRefProxy.__new__(cls, *(tables[f] for f in FIELDS))

    def table(self, name: str) -> np.ndarray:
        return _tables(self)[FIELDS.index(name)]


structref.define_proxy(State, StateType, list(FIELDS))


@njit(cache=True)
def _tables(s):
    return (s.SC, s.LK, s.LF, s.LR, s.LD, s.ND, s.NS, s.DL, s.FP, s.FREE, s.HP, s.LG, s.FW, s.MS, s.MD,
            s.BITS, s.UP, s.SP, s.SL, s.SFREE, s.LB, s.RS, s.OP, s.PT, s.SLOT, s.NT, s.RQ, s.TR, s.MX, s.KB, s.KR,
            s.IDX, s.DF, s.GP, s.SIM, s.WORK, s.HIST, s.ERR, s.OUT, s.OD, s.RT, s.NKB)


@njit(cache=True)
def grown(a, need):
    """``a`` with at least ``need`` rows (doubling), zero-filled beyond its rows."""
    if need <= a.shape[0]:
        return a
    b = np.zeros((max(need, 2 * a.shape[0]), a.shape[1]), a.dtype)
    b[: a.shape[0]] = a
    return b
