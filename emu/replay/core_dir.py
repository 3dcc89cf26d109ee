"""The replica directory inside the compiled replay: the same state changes as emu.nic.directory.

Per KV block its owner and bytes (KB), per (node, block) a replica state and bytes
(KR, row node * nkv + block), per node its owner / replica / transient bytes (NT),
and per (op, destination) slot the transient bytes held (SLOT). Every change appends
a history row (t, node, owner, replica, transient, blocks, replicas) exactly where
``Directory._record`` does; errors are rows (t, code, node, kv, state) that Python
words as ``Directory`` does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .core_layout import (ERR_DRAIN, ERR_INVALIDATE, ERR_READ, GT_ERR, GT_HIST, K_BYTES, K_OWNER, N_OWNER,
                          N_REPLICA, N_TRANSIENT, R_BYTES, R_KVMIN, R_LIVE_REP, R_NERR, R_NHIST, R_NKV,
                          R_NOWNERS, R_STATE, S_TRANS)

INVALID = 0
VALID = 1
DRAINING = 2


@njit(cache=True)
def room(GT, which, need):
    """Table ``which`` of the growable list with at least ``need`` rows (doubling)."""
    a = GT[which]
    if need > a.shape[0]:
        b = np.zeros((max(need, 2 * a.shape[0]), a.shape[1]), np.int64)
        b[: a.shape[0]] = a
        GT[which] = b
        return b
    return a


@njit(cache=True)
def record(RS, NT, GT, t, node):
    n = RS[R_NHIST]
    h = room(GT, GT_HIST, n + 1)
    h[n, 0] = t
    h[n, 1] = node
    h[n, 2] = NT[node, N_OWNER]
    h[n, 3] = NT[node, N_REPLICA]
    h[n, 4] = NT[node, N_TRANSIENT]
    h[n, 5] = RS[R_NOWNERS]
    h[n, 6] = RS[R_LIVE_REP]
    RS[R_NHIST] = n + 1


@njit(cache=True)
def error(RS, GT, t, code, node, kv, state):
    n = RS[R_NERR]
    e = room(GT, GT_ERR, n + 1)
    e[n, 0] = t
    e[n, 1] = code
    e[n, 2] = node
    e[n, 3] = kv
    e[n, 4] = state
    RS[R_NERR] = n + 1


@njit(cache=True)
def add_owner(RS, NT, KB, GT, node, kv, nbytes, t):
    """``node`` owns block ``kv`` from now on; a previous owner (a PD handoff) frees its copy."""
    b = kv - RS[R_KVMIN]
    prev = KB[b, K_OWNER]
    if prev >= 0:
        if prev == node:
            return
        NT[prev, N_OWNER] -= KB[b, K_BYTES]
        record(RS, NT, GT, t, prev)
    else:
        RS[R_NOWNERS] += 1
    KB[b, K_OWNER] = node
    KB[b, K_BYTES] = nbytes
    NT[node, N_OWNER] += nbytes
    record(RS, NT, GT, t, node)


@njit(cache=True)
def owner_bytes(RS, KB, kv, default):
    b = kv - RS[R_KVMIN]
    return KB[b, K_BYTES] if KB[b, K_OWNER] >= 0 else default


@njit(cache=True)
def _rep(RS, node, kv):
    return node * RS[R_NKV] + kv - RS[R_KVMIN]


@njit(cache=True)
def add_replica(RS, NT, KR, GT, node, kv, nbytes, t):
    r = _rep(RS, node, kv)
    if KR[r, R_STATE] != INVALID:
        return  # a duplicate copy changes nothing
    KR[r, R_STATE] = VALID
    KR[r, R_BYTES] = nbytes
    NT[node, N_REPLICA] += nbytes
    RS[R_LIVE_REP] += 1
    record(RS, NT, GT, t, node)


@njit(cache=True)
def drain(RS, KR, GT, node, kv, t):
    r = _rep(RS, node, kv)
    if KR[r, R_STATE] == INVALID:
        error(RS, GT, t, ERR_DRAIN, node, kv, INVALID)
        return
    KR[r, R_STATE] = DRAINING


@njit(cache=True)
def invalidate(RS, NT, KR, GT, node, kv, t):
    r = _rep(RS, node, kv)
    if KR[r, R_STATE] == INVALID:
        error(RS, GT, t, ERR_INVALIDATE, node, kv, INVALID)
        return
    KR[r, R_STATE] = INVALID
    NT[node, N_REPLICA] -= KR[r, R_BYTES]
    RS[R_LIVE_REP] -= 1
    record(RS, NT, GT, t, node)


@njit(cache=True)
def read_in_flight(RS, KB, KR, GT, node, kv, t):
    """A read by attention already under way: an owner copy, a VALID or a DRAINING replica."""
    if KB[kv - RS[R_KVMIN], K_OWNER] == node:
        return
    s = KR[_rep(RS, node, kv), R_STATE]
    if s == VALID or s == DRAINING:
        return
    error(RS, GT, t, ERR_READ, node, kv, s)


@njit(cache=True)
def add_transient(RS, NT, SL, GT, node, slot, nbytes, t):
    SL[slot, S_TRANS] += nbytes
    NT[node, N_TRANSIENT] += nbytes
    record(RS, NT, GT, t, node)


@njit(cache=True)
def free_transient(RS, NT, SL, GT, node, slot, t):
    NT[node, N_TRANSIENT] -= SL[slot, S_TRANS]
    SL[slot, S_TRANS] = 0
    record(RS, NT, GT, t, node)
