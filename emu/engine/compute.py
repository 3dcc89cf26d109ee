"""The compute engines inside the compiled replay: one op at a time per node, lowest op id first.

As ``Replay._try_compute``: a node whose engine is idle and not stalled by a full
packetizer takes the lowest-numbered ready op (a binary min-heap per node, the
order of ``heapq``), records its start, checks the KV replicas it reads and
schedules its end after its roofline duration.
"""

from __future__ import annotations

from .directory import read_in_flight
from .events import at
from .layout import (DF_REPLICA, E_FINISH, NT_BUSY, NT_RQ, NT_RQLEN, NT_STALL, OPS_DEP, OPS_DEPEND, OPS_DST,
                          OPS_DSTEND, OW_DUR, OW_KV, OW_START, RS_NOW)
from .state import compiled, compiled_inline


@compiled
def slot_of(OP, IDX, op, node):
    """The (op, node) delivery slot, or -1 when ``node`` is not one of the op's destinations."""
    for s in range(OP[op, OPS_DST], OP[op, OPS_DSTEND]):
        if IDX[s] == node:
            return s
    return -1


@compiled_inline
def ready_push(NT, RQ, node, op):
    base = NT[node, NT_RQ]
    i = NT[node, NT_RQLEN]
    NT[node, NT_RQLEN] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if RQ[base + p] <= op:
            break
        RQ[base + i] = RQ[base + p]
        i = p
    RQ[base + i] = op


@compiled_inline
def ready_pop(NT, RQ, node):
    base = NT[node, NT_RQ]
    top = RQ[base]
    n = NT[node, NT_RQLEN] - 1
    NT[node, NT_RQLEN] = n
    x = RQ[base + n]
    i = 0
    while True:
        l = 2 * i + 1
        if l >= n:
            break
        c = l
        if l + 1 < n and RQ[base + l + 1] < RQ[base + l]:
            c = l + 1
        if RQ[base + c] >= x:
            break
        RQ[base + i] = RQ[base + c]
        i = c
    if n > 0:
        RQ[base + i] = x
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
    for e in range(OP[op, OPS_DEP], OP[op, OPS_DEPEND]):
        if DF[e] & DF_REPLICA:
            x = IDX[e]
            if slot_of(OP, IDX, x, node) >= 0:
                read_in_flight(s, node, OW[x, OW_KV], now)
    at(s, now + OW[op, OW_DUR], E_FINISH, op, node)
