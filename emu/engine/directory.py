"""The replica directory inside the compiled replay: the state changes of emu.nic.directory.

A replica's state change is ``emu.nic.directory.replica_transition`` itself (the compiled
function ``Directory`` calls); this module keeps the tables it changes.

Per KV block its owner and bytes (KB), per (node, block) a replica state and bytes
(KR, row node * nkv + block), per node its owner / replica / transient bytes (NT),
and per (op, destination) slot the transient bytes held (SLOT). Every change appends
a history row (t, node, owner, replica, transient, blocks, replicas) exactly where
``Directory._record`` does; errors are rows (t, code, node, kv, state) that Python
words as ``Directory`` does.
"""

from __future__ import annotations

from ..nic.directory import OP_DRAIN, OP_INVALIDATE, OP_KV_REPLICA, State, replica_transition
from .layout import (ERR_DRAIN, ERR_INVALIDATE, ERR_READ, K_BYTES, K_OWNER, N_OWNER, N_REPLICA,
                          N_TRANSIENT, R_KVMIN, R_LIVE_REP, R_NERR, R_NHIST, R_NKV, R_NOWNERS, RP_BYTES,
                          RP_STATE, S_TRANS)
from .state import compiled, compiled_inline, more_err, more_hist

INVALID = int(State.INVALID)
VALID = int(State.VALID)
DRAINING = int(State.DRAINING)


@compiled
def record(s, t, node):
    RS, NT = s.RS, s.NT
    n = RS[R_NHIST]
    if n == s.HIST.shape[0]:
        more_hist(s, n + 1)
    h = s.HIST
    h[n, 0] = t
    h[n, 1] = node
    h[n, 2] = NT[node, N_OWNER]
    h[n, 3] = NT[node, N_REPLICA]
    h[n, 4] = NT[node, N_TRANSIENT]
    h[n, 5] = RS[R_NOWNERS]
    h[n, 6] = RS[R_LIVE_REP]
    RS[R_NHIST] = n + 1


@compiled_inline
def error(s, t, code, node, kv, state):
    n = s.RS[R_NERR]
    if n == s.ERR.shape[0]:
        more_err(s, n + 1)
    e = s.ERR
    e[n, 0] = t
    e[n, 1] = code
    e[n, 2] = node
    e[n, 3] = kv
    e[n, 4] = state
    s.RS[R_NERR] = n + 1


@compiled
def add_owner(s, node, kv, nbytes, t):
    """``node`` owns block ``kv`` from now on; a previous owner (a PD handoff) frees its copy."""
    RS, NT, KB = s.RS, s.NT, s.KB
    b = kv - RS[R_KVMIN]
    prev = KB[b, K_OWNER]
    if prev >= 0:
        if prev == node:
            return
        NT[prev, N_OWNER] -= KB[b, K_BYTES]
        record(s, t, prev)
    else:
        RS[R_NOWNERS] += 1
    KB[b, K_OWNER] = node
    KB[b, K_BYTES] = nbytes
    NT[node, N_OWNER] += nbytes
    record(s, t, node)


@compiled_inline
def owner_bytes(s, kv, default):
    b = kv - s.RS[R_KVMIN]
    return s.KB[b, K_BYTES] if s.KB[b, K_OWNER] >= 0 else default


@compiled
def _rep(s, node, kv):
    return node * s.RS[R_NKV] + kv - s.RS[R_KVMIN]


@compiled_inline
def add_replica(s, node, kv, nbytes, t):
    KR = s.KR
    r = _rep(s, node, kv)
    new, _ = replica_transition(KR[r, RP_STATE], OP_KV_REPLICA)
    if new == KR[r, RP_STATE]:
        return  # a duplicate copy changes nothing
    KR[r, RP_STATE] = new
    KR[r, RP_BYTES] = nbytes
    s.NT[node, N_REPLICA] += nbytes
    s.RS[R_LIVE_REP] += 1
    record(s, t, node)


@compiled_inline
def drain(s, node, kv, t):
    r = _rep(s, node, kv)
    new, ok = replica_transition(s.KR[r, RP_STATE], OP_DRAIN)
    if not ok:
        error(s, t, ERR_DRAIN, node, kv, s.KR[r, RP_STATE])
        return
    s.KR[r, RP_STATE] = new


@compiled_inline
def invalidate(s, node, kv, t):
    KR = s.KR
    r = _rep(s, node, kv)
    new, ok = replica_transition(KR[r, RP_STATE], OP_INVALIDATE)
    if not ok:
        error(s, t, ERR_INVALIDATE, node, kv, KR[r, RP_STATE])
        return
    KR[r, RP_STATE] = new
    s.NT[node, N_REPLICA] -= KR[r, RP_BYTES]
    s.RS[R_LIVE_REP] -= 1
    record(s, t, node)


@compiled_inline
def read_in_flight(s, node, kv, t):
    """A read by attention already under way: an owner copy, a VALID or a DRAINING replica."""
    if s.KB[kv - s.RS[R_KVMIN], K_OWNER] == node:
        return
    st = s.KR[_rep(s, node, kv), RP_STATE]
    if st == VALID or st == DRAINING:
        return
    error(s, t, ERR_READ, node, kv, st)


@compiled_inline
def add_transient(s, node, slot, nbytes, t):
    s.SLOT[slot, S_TRANS] += nbytes
    s.NT[node, N_TRANSIENT] += nbytes
    record(s, t, node)


@compiled
def free_transient(s, node, slot, t):
    s.NT[node, N_TRANSIENT] -= s.SLOT[slot, S_TRANS]
    s.SLOT[slot, S_TRANS] = 0
    record(s, t, node)
