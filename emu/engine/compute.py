"""The compute engines inside the compiled replay: one op at a time per node, lowest op id first.

As ``Replay._try_compute``: a node whose engine is idle and not stalled by a full
packetizer takes the lowest-numbered ready op (a binary min-heap per node, the
order of ``heapq``; emu.heap), records its start, checks the KV replicas it reads and
schedules its end after its roofline duration.
"""

from __future__ import annotations

import numpy as np

from .. import heap
from .directory import read_in_flight
from .events import at
from .layout import (DF_REPLICA, E_FINISH, NT_BUSY, NT_RQ, NT_RQLEN, NT_STALL, OPS_DEP, OPS_DST,
                          OW_DUR, OW_KV, OW_START, RS_NOW)
from .state import compiled, compiled_inline


@compiled
def slot_of(OP, IDX, op, node):
    """The (op, node) delivery slot, or -1 when ``node`` is not one of the op's destinations."""
    for s in range(OP[op, OPS_DST], OP[op + 1, OPS_DST]):
        if IDX[s] == node:
            return s
    return -1


@compiled_inline
def ready_push(NT, RQ, node, op):
    """Op ``op`` is ready on ``node``: into the node's ready queue (rows op, 0 of an emu.heap)."""
    n = NT[node, NT_RQLEN]
    NT[node, NT_RQLEN] = n + 1
    heap.sift_up(RQ, NT[node, NT_RQ], n, (np.int64(op), np.int64(0)))


@compiled_inline
def ready_pop(NT, RQ, node):
    """The lowest ready op of ``node``, out of its ready queue."""
    base = NT[node, NT_RQ]
    top = RQ[base, 0]
    n = NT[node, NT_RQLEN] - 1
    NT[node, NT_RQLEN] = n
    heap.sift_down(RQ, base, n, 0, (RQ[base + n, 0], RQ[base + n, 1]))
    return top


@compiled
def try_compute(s, node):
    RS, OP, OW, NT, RQ, IDX, DF = s.RS, s.OP, s.OW, s.NT, s.RQ, s.IDX, s.DF
    if NT[node, NT_BUSY] or NT[node, NT_STALL] or NT[node, NT_RQLEN] == 0:
        return
    op = ready_pop(NT, RQ, node)
    NT[node, NT_BUSY] = 1
    now = RS[RS_NOW]
    OW[op, OW_START] = now
    # Attention reading a replica multicast here: the directory must still hold it.
    for e in range(OP[op, OPS_DEP], OP[op + 1, OPS_DEP]):
        if DF[e] & DF_REPLICA:
            x = np.int64(IDX[e])  # IDX is int32: one compiled slot_of
            if slot_of(OP, IDX, x, node) >= 0:
                read_in_flight(s, node, OW[x, OW_KV], now)
    at(s, now + OW[op, OW_DUR], E_FINISH, op, node)
