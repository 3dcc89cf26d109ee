"""Reliable delivery inside the compiled replay: acks, probes, nacks, resends and timers.

The compiled twin of the reliability half of the Python reference NICs (tests/pycluster.py) (``_send_part`` with
``reliable``, ``_on_event``'s "sent", ``_control``, ``_act``, ``_answer_acts``, ``_acked``,
``_timeout``, ``_probed``, ``_nacked``), changing the same state in the same order. Every
decision is the board protocol's own compiled function, the dispatchers ``BoardProtocol``
calls (so the Python Cluster and ``emu hw serve`` too): ``left_wire`` / ``resend_left`` /
``resend_started`` / ``arm`` (when the timer is due), ``ack`` (Karn, RTT sample, who is still
silent), ``timeout`` (probe, back off, or give up), ``nack_accepted`` and the nack bitmap
(``nack_bitmap`` written by the receiver, ``nack_named`` read by the sender). What stays
here is the driver's part, as in the Cluster: the sender tables' rows (one per kernel
message, ``OUT``; one per message destination, ``OD``, rows as the kernel's MD; an RTO
table per board, ``RT[board]``), the control frames as kernel messages, timers as events
of the loop's heap, resends as kernel streams over a fragment list (SL), and the counters
of the summary.

A timer is an ``E_TIMER`` event; ``MX[m, MX_TIMER]`` holds 1 + the sequence number of the
live one, so re-arming or stopping it leaves the old event in the heap as a cancelled
one (emu.engine.events.cancelled), as ``Event.cancel`` does.

The loop's functions are compiled without reference counting (emu.engine.state): the
tables reliable delivery grows (message rows MS, MD, MX, OUT, OD and the bitmaps BITS; the
streams SP, SFREE and the kernel heap HP; the resend lists SL; the nack payloads NKB) are
replaced only by the ``more_*`` functions here, and read from ``s`` again after any call
that may replace them.
"""

from __future__ import annotations

from ..net import kernel as K
from ..net.framing import fragments
from ..nic.protocol import (OD_ACKED, OD_NODE, OUT_DEND, OUT_DPTR, OUT_LEFT_AT, OUT_LIVE, OUT_MSG_ID, OUT_NFRAGS,
                            OUT_RESENDING, OUT_RETRIES, OUT_SEQ, OUT_DUE, OUT_RTO, OUT_RESENT, ack, arm, left_wire,
                            nack_accepted, nack_bitmap, nack_gap, nack_named, resend_left, resend_started, timeout)
from .events import at, push, rearm
from .layout import (CTRL_ACK, CTRL_ANSWER, CTRL_DATA, CTRL_NACK, CTRL_PROBE, E_TIMER, RS_CTRL_ACK, RS_CTRL_NACK, RS_CTRL_PROBE,
                          RS_HDR, RS_MARGIN, RS_MAX_RETRIES, RS_NBITS, RS_NMD, RS_NMSG, RS_NNKB, RS_NOW,
                          RS_NSL, RS_PER, RS_RETX, RS_RTO_MAX, RS_RTO_MIN, RS_V, TR_DMASK, TR_SET_FAILED, TR_FAIL_RETRIES, RS_MASKW, MX_ABOUT,
                          MX_CTRL, MX_NACK, MX_PEER, MX_SENT, MX_TIMER, MX_TR, W_SETTLED)
from . import boards
from .state import allocating, compiled, compiled_inline, doubled_pool, grown, more_heap


# ---- room: control frames and resends are not counted when the tables are built -----------

@allocating
def more_messages(s, n, m, nbits):
    """Message tables of at least ``n`` rows, destination tables of ``m``, ``nbits`` bitmap bytes."""
    s.MS = grown(s.MS, n)  # grown returns a table with room as it is
    s.MX = grown(s.MX, n)
    s.OUT = grown(s.OUT, n)
    s.MD = grown(s.MD, m)
    s.OD = grown(s.OD, m)
    s.BITS = grown(s.BITS, nbits)


@compiled_inline
def message_room(s, nd, nbits):
    """Rows for one more message of at most ``nd`` destinations and ``nbits`` bitmap bytes
    (MS, MD, MX, OUT, OD, BITS may be replaced: read them from ``s`` after)."""
    RS = s.RS
    n = RS[RS_NMSG] + 1
    m = RS[RS_NMD] + nd
    b = RS[RS_NBITS] + nbits
    if (n > s.MS.shape[0] or n > s.MX.shape[0] or n > s.OUT.shape[0] or m > s.MD.shape[0]
            or m > s.OD.shape[0] or b > s.BITS.shape[0]):
        more_messages(s, n, m, b)


@allocating
def more_streams(s):
    """Twice the stream rows, the new ones on the free stack (Network._add_stream's order)."""
    n = s.SP.shape[0]
    pool = doubled_pool(s.SP, s.SFREE, s.SC[K.SC_SFREE])
    s.SP = pool[0]
    s.SFREE = pool[1]
    s.SC[K.SC_SFREE] += n


@compiled_inline
def stream_room(s):
    """Room for one more stream (emu.net.network.Network._add_stream grows the same way;
    SP, SFREE, HP may be replaced: read them from ``s`` after)."""
    if s.SC[K.SC_SFREE] == 0:
        more_streams(s)
    if K.HEAP_LO + s.SC[K.SC_HEAP] + s.RS[RS_MARGIN] > s.HP.shape[0]:
        more_heap(s)


@compiled_inline
def frame_sizes(s, size):
    """emu.net.framing.fragments at the run's MTU: (fragments, full frame bytes, last frame bytes)."""
    return fragments(size, s.RS[RS_PER], s.RS[RS_HDR])


@compiled_inline
def first_hops(FW, row):
    """How many first-hop ports forwarding row ``row`` has (a stream each)."""
    n = 0
    for k in range(1, FW.shape[1]):
        if FW[row, k] >= 0:
            n += 1
    return n


@compiled_inline
def first_hop_streams(s, row, m, key, n, lst, room, prio):
    """A stream of ``n`` fragments of ``m`` (from SL[lst:], or 0..n-1 with ``lst`` -1) on each
    first-hop port of forwarding row ``row``, as Network.send and Network.resend open them;
    with ``room``, first room for each (reliable delivery's streams were not counted); ``prio``
    1: in the ports' priority class (control frames, resends). Returns how many ports took one."""
    FW = s.FW
    now = s.RS[RS_NOW]
    hops = 0
    for k in range(1, FW.shape[1]):
        link = FW[row, k]
        if link >= 0:
            hops += 1
            if room:
                stream_room(s)
            K.add_stream(s, link, m, key, 0, n, lst, now, prio)
    return hops


@allocating
def more_sl(s, need):
    s.SL = grown(s.SL, need)


@allocating
def more_nkb(s, need):
    s.NKB = grown(s.NKB, need)


# ---- the sender -------------------------------------------------------------------------

@compiled_inline
def track(s, m):
    """BoardProtocol.track: message ``m`` (just opened, ACK_REQ) waits for an ack of each destination."""
    MS, MD, OUT, OD = s.MS, s.MD, s.OUT, s.OD
    d0, d1 = MS[m, K.M_DPTR], MS[m, K.M_DEND]
    for d in range(d0, d1):
        OD[d, OD_NODE] = MD[d, K.D_NODE]
        OD[d, OD_ACKED] = 0
    OUT[m, OUT_MSG_ID] = m
    OUT[m, OUT_SEQ] = 0
    OUT[m, OUT_NFRAGS] = MS[m, K.M_NFRAGS]
    OUT[m, OUT_RETRIES] = 0
    OUT[m, OUT_LEFT_AT] = -1
    OUT[m, OUT_DUE] = -1
    OUT[m, OUT_RESENDING] = 0
    OUT[m, OUT_DPTR] = d0
    OUT[m, OUT_DEND] = d1
    OUT[m, OUT_LIVE] = 1
    OUT[m, OUT_RTO] = 0
    OUT[m, OUT_RESENT] = 0


@compiled
def set_timer(s, m, due):
    """The protocol's ARM: the old timer (if any) is cancelled, a new one runs if due >= 0."""
    if due >= 0:
        s.MX[m, MX_TIMER] = at(s, due, E_TIMER, m, 0) + 1
    else:
        s.MX[m, MX_TIMER] = 0


@compiled_inline
def sent(s, m):
    """Every first-hop stream of data message ``m`` has left the wire: its timer starts
    (Cluster._part_left)."""
    OUT, RS = s.OUT, s.RS
    if OUT[m, OUT_LIVE]:  # (not if every receiver acked already)
        set_timer(s, m, left_wire(OUT, s.OD, s.RT[s.MS[m, K.M_SRC]], m, RS[RS_NOW], RS[RS_MAX_RETRIES],
                                  RS[RS_RTO_MAX]))


@compiled_inline
def resent(s, m):
    """A resend of data message ``m`` has left the wire: its timer starts again (the "sent"
    of a resend; nothing for a control frame, which has no sender row)."""
    OUT, RS = s.OUT, s.RS
    if OUT[m, OUT_LIVE] and OUT[m, OUT_RESENDING]:
        set_timer(s, m, resend_left(OUT, s.OD, s.RT[s.MS[m, K.M_SRC]], m, RS[RS_NOW], RS[RS_MAX_RETRIES]))


@compiled_inline
def timer_due(s, m):
    """Message ``m``'s timer expired (BoardProtocol.timer_due, Cluster._act): probe each silent
    receiver and re-arm, or give up after max_retries."""
    RS, MS, MX, OUT, OD = s.RS, s.MS, s.MX, s.OUT, s.OD
    MX[m, MX_TIMER] = 0
    src = MS[m, K.M_SRC]
    rt = s.RT[src]
    r = timeout(OUT, OD, rt, m, RS[RS_NOW], RS[RS_MAX_RETRIES], RS[RS_RTO_MAX])
    if r == 0:
        return
    if r == 2:
        set_timer(s, m, OUT[m, OUT_DUE])  # the estimator learnt a longer round trip: no probe
        return
    d0, d1 = OUT[m, OUT_DPTR], OUT[m, OUT_DEND]
    if r < 0:
        tr, w = MX[m, MX_TR], RS[RS_MASKW]
        silent = TR_DMASK + TR_SET_FAILED * w
        boards.clear(s.TR, tr, silent, w)
        for d in range(d0, d1):
            if OD[d, OD_ACKED] == 0:
                boards.add(s.TR, tr, silent, OD[d, OD_NODE])
        s.TR[tr, TR_FAIL_RETRIES] = OUT[m, OUT_RETRIES]  # 1 + the retries it had
        push(s, W_SETTLED, tr, 0, 0)  # given up: its buffer is freed
        return
    for d in range(d0, d1):
        # s.OD, not OD: a probe's message row may have replaced it (and OUT)
        if s.OD[d, OD_ACKED] == 0:
            peer = s.OD[d, OD_NODE]
            control(s, src, peer, CTRL_PROBE, m, peer, 0, -1)
    set_timer(s, m, arm(s.OUT, s.OD, rt, m, RS[RS_NOW], RS[RS_MAX_RETRIES]))


@compiled_inline
def acked(s, m, node, answer):
    """An ack of ``m`` from ``node`` reached the source (Cluster._acked); ``answer`` 1: it
    answers a probe."""
    OUT, OD, RS = s.OUT, s.OD, s.RS
    if OUT[m, OUT_LIVE] == 0:
        return  # every receiver had acked already
    left = ack(OUT, OD, s.RT[s.MS[m, K.M_SRC]], m, node, RS[RS_NOW], answer, RS[RS_RTO_MIN], RS[RS_RTO_MAX])
    if left == 0:
        s.MX[m, MX_TIMER] = 0
    for d in range(OUT[m, OUT_DPTR], OUT[m, OUT_DEND]):
        if OD[d, OD_ACKED] == 0:
            return
    OUT[m, OUT_LIVE] = 0  # released
    push(s, W_SETTLED, s.MX[m, MX_TR], 0, 0)  # its bytes leave the packetization buffer


@compiled_inline
def nacked(s, m, node, c):
    """Nack ``c`` of ``m`` from ``node`` reached the source: resend exactly what it names (Cluster._nacked)."""
    RS, MS, OUT = s.RS, s.MS, s.OUT
    if OUT[m, OUT_LIVE] == 0:
        return  # an ack overtook this nack
    src = MS[m, K.M_SRC]
    routed = first_hops(s.FW, node * RS[RS_V] + src) > 0
    if not nack_accepted(OUT, s.OD, m, node):
        return
    nfr = MS[m, K.M_NFRAGS]
    off = RS[RS_NSL]
    if off + nfr > s.SL.shape[0]:
        more_sl(s, off + nfr)
    n = nack_named(s.NKB, s.MX[c, MX_NACK], (nfr + 7) // 8, nfr, s.SL, off)
    if n == 0:
        return
    due = resend_started(OUT, s.OD, s.RT[src], m, RS[RS_NOW], routed, RS[RS_MAX_RETRIES])
    RS[RS_RETX] += n
    RS[RS_NSL] = off + n
    resend(s, m, src, node, off, n)
    set_timer(s, m, due)


@compiled_inline
def resend(s, m, src, dst, off, n):
    """Network.resend: fragments SL[off:off+n] of ``m`` again, unicast towards ``dst``."""
    RS = s.RS
    if first_hop_streams(s, dst * RS[RS_V] + src, m, dst, n, off, 1, 1) == 0:
        MS, SL = s.MS, s.SL
        nb = 0
        for i in range(off, off + n):
            nb += MS[m, K.M_LLEN] if SL[i] == MS[m, K.M_NFRAGS] - 1 else MS[m, K.M_FLEN]
        source_drop(s, src, n, nb)
    rearm(s)


@compiled_inline
def source_drop(s, src, frames, nbytes):
    """Network._count_source_drop: frames with no way out of their source."""
    NS, ND = s.NS, s.ND
    NS[src, K.N_OFF_F] += frames
    NS[src, K.N_OFF_B] += nbytes
    ND[src, K.DROP_NOROUTE, 0] += frames
    ND[src, K.DROP_NOROUTE, 1] += nbytes


# ---- the receiver ---------------------------------------------------------------------------

@compiled_inline
def complete(s, m, node):
    """Data message ``m`` is whole at ``node``: it asked for an ack (message_complete)."""
    control(s, node, s.MS[m, K.M_SRC], CTRL_ACK, m, node, 0, -1)


@compiled_inline
def gap(s, m, node, frag):
    """Fragment ``frag`` of data message ``m`` reached ``node`` right after a missing one: the
    receiver nacks that gap at once (BoardProtocol.gap_seen)."""
    if s.MX[m, MX_CTRL] == CTRL_DATA:
        _nack(s, m, node, K.dest_row(s.MS, s.MD, m, node), frag)


@compiled_inline
def probed(s, m, node):
    """A probe of ``m`` reached receiver ``node``: it answers from its bitmap as it is now
    (BoardProtocol.probe_arrived; the emulator answers every probe)."""
    d = K.dest_row(s.MS, s.MD, m, node)
    if s.MD[d, K.D_GOT] == s.MS[m, K.M_NFRAGS]:
        control(s, node, s.MS[m, K.M_SRC], CTRL_ANSWER, m, node, 0, -1)
    else:
        _nack(s, m, node, d, -1)


@compiled_inline
def _nack(s, m, node, d, gap_at):
    """Receiver ``node`` (MD row ``d``) nacks ``m`` to its source: the run of missing fragments
    just before fragment ``gap_at`` (a gap), or with ``gap_at`` -1 every missing one (a
    probe's answer). The bitmap goes into NKB, where the nack's payload is read from."""
    RS, MS = s.RS, s.MS
    nfr = MS[m, K.M_NFRAGS]
    nb = (nfr + 7) // 8
    off = RS[RS_NNKB]
    if off + nb > s.NKB.shape[0]:
        more_nkb(s, off + nb)
    if gap_at < 0:
        RS[RS_NNKB] = off + nack_bitmap(s.BITS, s.MD[d, K.D_BITS], nfr, s.NKB, off)
    else:
        RS[RS_NNKB] = off + nack_gap(s.BITS, s.MD[d, K.D_BITS], gap_at, nfr, s.NKB, off)
    control(s, node, MS[m, K.M_SRC], CTRL_NACK, m, node, nb, off)


@compiled_inline
def control_done(s, c):
    """Control frame ``c`` arrived whole where it was sent."""
    MX = s.MX
    kind, m, peer = MX[c, MX_CTRL], MX[c, MX_ABOUT], MX[c, MX_PEER]
    if kind == CTRL_ACK or kind == CTRL_ANSWER:
        acked(s, m, peer, 1 if kind == CTRL_ANSWER else 0)
    elif kind == CTRL_PROBE:
        probed(s, m, peer)
    else:
        nacked(s, m, peer, c)


# ---- control frames ---------------------------------------------------------------------

@compiled_inline
def control(s, src, dst, kind, about, peer, plen, nack):
    """Cluster._control: an ack, probe or nack (``plen`` payload bytes) from ``src`` to ``dst``
    about message ``about``, an untracked unicast message (Network.send)."""
    RS = s.RS
    nfrags, full, last = frame_sizes(s, plen)
    hops = first_hops(s.FW, dst * RS[RS_V] + src)
    if kind == CTRL_ACK or kind == CTRL_ANSWER:
        RS[RS_CTRL_ACK] += nfrags * hops
    elif kind == CTRL_PROBE:
        RS[RS_CTRL_PROBE] += nfrags * hops
    else:
        RS[RS_CTRL_NACK] += nfrags * hops
    message_room(s, 1, 0)
    MD, MX = s.MD, s.MX
    mid = RS[RS_NMSG]
    RS[RS_NMSG] = mid + 1
    nmd = RS[RS_NMD]
    MD[nmd, K.D_NODE] = dst
    RS[RS_NBITS] += K.open_message(s, mid, src, nfrags, full, last, 0, nmd, 1, RS[RS_NBITS])
    RS[RS_NMD] = nmd + 1
    MX[mid, MX_TR] = -1
    MX[mid, MX_SENT] = 1  # its "sent" means nothing to the NIC
    MX[mid, MX_TIMER] = 0
    MX[mid, MX_CTRL] = kind
    MX[mid, MX_ABOUT] = about
    MX[mid, MX_PEER] = peer
    MX[mid, MX_NACK] = nack
    if first_hop_streams(s, dst * RS[RS_V] + src, mid, dst, nfrags, -1, 1, 1) == 0:
        source_drop(s, src, nfrags, (nfrags - 1) * full + last)
    rearm(s)
