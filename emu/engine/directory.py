"""The replica directory inside the compiled replay: the state changes of emu.nic.directory.

A replica's state change is ``emu.nic.directory.replica_transition`` itself (the compiled
function ``Directory`` calls); this module keeps the tables it changes.

Per KV block its owner and bytes (KB), per (node, block) a replica state and bytes
(KR, row node * nkv + block), per node its owner / replica / transient bytes (NT),
and per (op, destination) slot the transient bytes held (SW). Every change appends
a history row (t, node, owner, replica, transient, blocks, replicas) exactly where
``Directory._record`` does, its wide values in HIST and its node and counts beside them in
HN; errors are rows (t, code, node, kv, state) that Python
words as ``Directory`` does.
"""

from __future__ import annotations

from ..nic.directory import OP_DRAIN, OP_INVALIDATE, OP_KV_REPLICA, State, replica_transition
from .layout import (DERR_DRAIN, DERR_INVALIDATE, DERR_READ, ERR_CODE, ERR_KV, ERR_NODE, ERR_STATE, ERR_T,
                     HIST_OWNER_BYTES, HIST_REPLICA_BYTES, HIST_T_PS, HIST_TRANSIENT_BYTES, HN_BLOCKS, HN_NODE,
                     HN_REPLICAS, KB_BYTES, KB_OWNER, KR_BYTES, KR_STATE, NT_OWNER, NT_REPLICA,
                     NT_TRANSIENT, RS_KVMIN, RS_LIVE_REP, RS_NERR, RS_NHIST, RS_NKV, RS_NOWNERS, SW_TRANS)
from .state import compiled, compiled_inline, more_err, more_hist

INVALID = int(State.INVALID)
VALID = int(State.VALID)
DRAINING = int(State.DRAINING)


@compiled
def record(s, t, node):
    RS, NT = s.RS, s.NT
    n = RS[RS_NHIST]
    if n == s.HIST.shape[0]:
        more_hist(s, n + 1)
    h, hn = s.HIST, s.HN
    h[n, HIST_T_PS] = t
    hn[n, HN_NODE] = node
    h[n, HIST_OWNER_BYTES] = NT[node, NT_OWNER]
    h[n, HIST_REPLICA_BYTES] = NT[node, NT_REPLICA]
    h[n, HIST_TRANSIENT_BYTES] = NT[node, NT_TRANSIENT]
    hn[n, HN_BLOCKS] = RS[RS_NOWNERS]
    hn[n, HN_REPLICAS] = RS[RS_LIVE_REP]
    RS[RS_NHIST] = n + 1


@compiled_inline
def error(s, t, code, node, kv, state):
    n = s.RS[RS_NERR]
    if n == s.ERR.shape[0]:
        more_err(s, n + 1)
    e = s.ERR
    e[n, ERR_T] = t
    e[n, ERR_CODE] = code
    e[n, ERR_NODE] = node
    e[n, ERR_KV] = kv
    e[n, ERR_STATE] = state
    s.RS[RS_NERR] = n + 1


@compiled
def add_owner(s, node, kv, nbytes, t):
    """``node`` owns block ``kv`` from now on; a previous owner (a PD handoff) frees its copy."""
    RS, NT, KB = s.RS, s.NT, s.KB
    b = kv - RS[RS_KVMIN]
    prev = KB[b, KB_OWNER]
    if prev >= 0:
        if prev == node:
            return
        NT[prev, NT_OWNER] -= KB[b, KB_BYTES]
        record(s, t, prev)
    else:
        RS[RS_NOWNERS] += 1
    KB[b, KB_OWNER] = node
    KB[b, KB_BYTES] = nbytes
    NT[node, NT_OWNER] += nbytes
    record(s, t, node)


@compiled_inline
def owner_bytes(s, kv, default):
    b = kv - s.RS[RS_KVMIN]
    return s.KB[b, KB_BYTES] if s.KB[b, KB_OWNER] >= 0 else default


@compiled
def _rep(s, node, kv):
    return node * s.RS[RS_NKV] + kv - s.RS[RS_KVMIN]


@compiled_inline
def add_replica(s, node, kv, nbytes, t):
    KR = s.KR
    r = _rep(s, node, kv)
    new, _ = replica_transition(KR[r, KR_STATE], OP_KV_REPLICA)
    if new == KR[r, KR_STATE]:
        return  # a duplicate copy changes nothing
    KR[r, KR_STATE] = new
    KR[r, KR_BYTES] = nbytes
    s.NT[node, NT_REPLICA] += nbytes
    s.RS[RS_LIVE_REP] += 1
    record(s, t, node)


@compiled_inline
def drain(s, node, kv, t):
    r = _rep(s, node, kv)
    new, ok = replica_transition(s.KR[r, KR_STATE], OP_DRAIN)
    if not ok:
        error(s, t, DERR_DRAIN, node, kv, s.KR[r, KR_STATE])
        return
    s.KR[r, KR_STATE] = new


@compiled_inline
def invalidate(s, node, kv, t):
    KR = s.KR
    r = _rep(s, node, kv)
    new, ok = replica_transition(KR[r, KR_STATE], OP_INVALIDATE)
    if not ok:
        error(s, t, DERR_INVALIDATE, node, kv, KR[r, KR_STATE])
        return
    KR[r, KR_STATE] = new
    s.NT[node, NT_REPLICA] -= KR[r, KR_BYTES]
    s.RS[RS_LIVE_REP] -= 1
    record(s, t, node)


@compiled_inline
def read_in_flight(s, node, kv, t):
    """A read by attention already under way: an owner copy, a VALID or a DRAINING replica."""
    if s.KB[kv - s.RS[RS_KVMIN], KB_OWNER] == node:
        return
    st = s.KR[_rep(s, node, kv), KR_STATE]
    if st == VALID or st == DRAINING:
        return
    error(s, t, DERR_READ, node, kv, st)


@compiled_inline
def add_transient(s, node, slot, nbytes, t):
    s.SW[slot, SW_TRANS] += nbytes
    s.NT[node, NT_TRANSIENT] += nbytes
    record(s, t, node)


@compiled
def free_transient(s, node, slot, t):
    s.NT[node, NT_TRANSIENT] -= s.SW[slot, SW_TRANS]
    s.SW[slot, SW_TRANS] = 0
    record(s, t, node)
