"""The compiled replay's event heap and work stack: the order of emu.sim and of Python's calls.

Events are (time, seq) ordered, seq in scheduling order, as ``emu.sim.Simulator``
runs them (a heap of emu.heap: rows time, seq, kind, a, b); a cancelled network wake-up stays in the heap and is skipped, as a
cancelled ``Event`` is. The work stack replaces the Python path's nested calls:
a callback that would call another and then go on pushes its continuation first
and the call on top, so work runs depth first in exactly the Python order.
"""

from __future__ import annotations

import numpy as np

from .. import heap
from ..net import kernel as K
from .layout import (E_TIMER, E_WAKE, MX_TIMER, RS_NOW, RS_NSIM, RS_NWORK, RS_SEQ, RS_WAKE_AT, RS_WAKE_SEQ, SIM_A, SIM_B, SIM_KIND,
                     SIM_SEQ, SIM_TIME, WORK_A, WORK_B, WORK_C, WORK_KIND)
from .state import compiled, compiled_inline, more_sim, more_work


@compiled_inline
def at(s, time, kind, a, b):
    """Schedule event ``kind(a, b)`` at ``time``; returns its sequence number."""
    RS = s.RS
    n = RS[RS_NSIM]
    if n == s.SIM.shape[0]:
        more_sim(s, n + 1)
    seq = RS[RS_SEQ]
    RS[RS_SEQ] = seq + 1
    RS[RS_NSIM] = n + 1
    heap.sift_up(s.SIM, 0, n, (np.int64(time), seq, np.int64(kind), np.int64(a), np.int64(b)))
    return seq


@compiled
def pop(s):
    """Remove the first event; the caller has read it at row 0."""
    H = s.SIM
    n = s.RS[RS_NSIM] - 1
    s.RS[RS_NSIM] = n
    heap.sift_down(H, 0, n, 0, (H[n, SIM_TIME], H[n, SIM_SEQ], H[n, SIM_KIND], H[n, SIM_A], H[n, SIM_B]))


@compiled
def cancelled(s, row):
    """A network wake-up superseded by an earlier one, or a retransmission timer re-armed or
    stopped since (Event.cancel)."""
    kind = s.SIM[row, SIM_KIND]
    if kind == E_WAKE:
        return s.SIM[row, SIM_SEQ] != s.RS[RS_WAKE_SEQ]
    return kind == E_TIMER and s.MX[s.SIM[row, SIM_A], MX_TIMER] != s.SIM[row, SIM_SEQ] + 1


@compiled_inline
def peek(s):
    """Time of the next live event (-1: none), dropping cancelled ones (Simulator.peek)."""
    while s.RS[RS_NSIM] > 0 and cancelled(s, 0):
        pop(s)
    return s.SIM[0, SIM_TIME] if s.RS[RS_NSIM] > 0 else -1


@compiled
def rearm(s):
    """Network._rearm: one pending wake-up, at the kernel's next real event (or now). A
    wake-up armed for an earlier time whose entry has gone stale (a cut train's old end) is
    moved too: left there, it would let the kernel run the frame events of a later instant
    before the replay events of that instant, which the Python path runs first."""
    RS = s.RS
    K.drop_stale(s)
    if s.SC[K.SC_HEAP] == 0:
        return
    nxt = max(s.HP[0, 0], RS[RS_NOW])
    if RS[RS_WAKE_SEQ] >= 0 and RS[RS_WAKE_AT] == nxt:
        return
    RS[RS_WAKE_AT] = nxt
    RS[RS_WAKE_SEQ] = at(s, nxt, E_WAKE, 0, 0)  # the old one, if any, is cancelled from here on


@compiled_inline
def push(s, kind, a, b, c):
    n = s.RS[RS_NWORK]
    if n == s.WORK.shape[0]:
        more_work(s, n + 1)
    W = s.WORK
    W[n, WORK_KIND] = kind
    W[n, WORK_A] = a
    W[n, WORK_B] = b
    W[n, WORK_C] = c
    s.RS[RS_NWORK] = n + 1
