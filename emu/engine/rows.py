"""Rows of the transfer and message tables: taken new, or taken again after a transfer ends.

A transfer takes a TR row, its messages a range of message rows (the kernel's MS, with MX
beside them), and each message a range of MD rows, one per board other than its source.
Without recycling a row serves one transfer for the whole run, so these tables grow with
the run's sends (at 64 boards more than half of the loop's memory, and most of the fresh
pages the kernel zeroes while it runs).

With RS_RECYCLE, a finished transfer's rows go back on free lists and the next transfer
takes them, so the rows in use are the transfers in flight. Finished means nothing will name
those rows again: every message has left (UP_SENT), every board other than the source has
had every message whole (one UP_DONE each, TR_LEFT counts them down) and the source's own
copy is delivered. A run recycles only where nothing names a row after that (Tables sets
the flag): not with reliable delivery (a resend or an ack can arrive after a message is
whole), nor a timeline (a re-routed multicast can bring a duplicate), nor a capture (its
log names frames by message row when it is written out), nor functional mode (it reads
every transfer after the run).

The lists are kept by size: a range of n message rows (or n MD rows) goes back on list n
and is taken whole by the next transfer of n messages (message of n boards), so a
transfer's messages stay contiguous (TR_M0..TR_M1). A list links its ranges through a
column of their first row (RS_FL_* in emu.engine.layout).
"""

from __future__ import annotations

from ..net import kernel as K
from . import boards
from .layout import (MX_TR, RS_FL_MD, RS_FL_MSG, RS_FL_TR, RS_MASKW, RS_NMD, RS_NMSG, RS_NSENDS, RS_NTR,
                     RS_RECYCLE, TR_ACCEPTED, TR_DMASK, TR_LEFT, TR_M0, TR_M1, TR_NEXT, TR_SENT, TR_SEQ,
                     TR_SET_DELIVERED, TR_SRC)
from .state import compiled, compiled_inline


@compiled_inline
def _pop(RS, head, T, col):
    """The first range on list ``head`` (-1: none), taken off it."""
    r = RS[head]
    if r >= 0:
        RS[head] = T[r, col]
    return r


@compiled_inline
def _push(RS, head, T, col, r):
    T[r, col] = RS[head]
    RS[head] = r


@compiled_inline
def new_transfer(s):
    """A row for a transfer being opened, cleared, with its sequence number."""
    RS, TR = s.RS, s.TR
    tr = _pop(RS, RS_FL_TR, TR, TR_NEXT) if RS[RS_RECYCLE] else -1
    if tr < 0:
        tr = RS[RS_NTR]
        RS[RS_NTR] = tr + 1
    else:
        TR[tr, :] = 0
    TR[tr, TR_SEQ] = RS[RS_NSENDS]
    RS[RS_NSENDS] += 1
    return tr


@compiled_inline
def _take(RS, lists, nlists, T, col, counter, n):
    """``n`` contiguous rows of ``T``: a free range of n from the size lists whose heads start at
    RS[lists] (``nlists`` of them), else n new rows (RS[counter] counts those made)."""
    if RS[RS_RECYCLE] and 0 < n < nlists:
        r = _pop(RS, lists + n, T, col)
        if r >= 0:
            return r
    r = RS[counter]
    RS[counter] = r + n
    return r


@compiled_inline
def take_messages(s, n):
    """The first of a transfer's ``n`` contiguous message rows. (With reliable delivery the
    tables grow as each message is opened: emu.engine.reliable.message_room makes room past
    RS_NMSG.)"""
    RS = s.RS
    return _take(RS, RS[RS_FL_MSG], RS[RS_FL_MD] - RS[RS_FL_MSG], s.MX, MX_TR, RS_NMSG, n)


@compiled_inline
def md_rows(s, nd):
    """The first of ``nd`` contiguous MD rows for a message's destinations."""
    RS = s.RS
    return _take(RS, RS[RS_FL_MD], RS.shape[0] - RS[RS_FL_MD], s.MD, K.D_NODE, RS_NMD, nd)


@compiled
def retire(s, tr):
    """Put transfer ``tr``'s rows back on the free lists if it has finished (see above)."""
    RS, TR = s.RS, s.TR
    if RS[RS_RECYCLE] == 0 or TR[tr, TR_LEFT] != 0 or TR[tr, TR_ACCEPTED] < 0:
        return
    m0, m1 = TR[tr, TR_M0], TR[tr, TR_M1]
    if TR[tr, TR_SENT] != m1 - m0:
        return
    src = TR[tr, TR_SRC]
    if boards.has(TR, tr, TR_DMASK, src) and not boards.has(TR, tr, TR_DMASK + TR_SET_DELIVERED * RS[RS_MASKW], src):
        return  # its own copy is still to come (E_LOCAL)
    MS, MD = s.MS, s.MD
    for m in range(m0, m1):
        d0 = MS[m, K.M_DPTR]
        nd = MS[m, K.M_DEND] - d0
        if nd > 0:
            _push(RS, RS[RS_FL_MD] + nd, MD, K.D_NODE, d0)
    if 0 < m1 - m0 < RS[RS_FL_MD] - RS[RS_FL_MSG]:
        _push(RS, RS[RS_FL_MSG] + m1 - m0, s.MX, MX_TR, m0)
    _push(RS, RS_FL_TR, TR, TR_NEXT, tr)
