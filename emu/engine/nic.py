"""The NICs inside the compiled replay: packetizer FIFO, messages, deliveries, reductions, all-to-all.

Each function is the compiled twin of a step of the Python reference NICs (tests/pycluster.py), changing the same
state in the same order (reliable delivery's acks, probes, nacks and timers:
emu.engine.reliable):

- ``send``: a payload with its Meta joins its source's packetizer wait line; ``admit``
  takes sends while they fit (entries and bytes, the first one always), the compute
  engine stalled by a waiting op send resumes when it is taken (Cluster._admit);
- ``launch``: the local copy is an event at now, the rest goes out as messages of at
  most MAX_FRAGS fragments on the part's route (Cluster._launch/_send_part), each a
  message row and one stream per first-hop port in the kernel (Network.send);
- ``message_sent`` / ``message_done``: the kernel's UP_SENT and UP_DONE upcalls;
  a send's FIFO room is freed when all its messages have left, it is delivered at a
  board when all its messages are whole there (Cluster._on_event/_delivered_part);
- ``delivered``: the directory follows the Meta (replica, drain, invalidate: emu.engine.directory,
  with ``emu.nic.directory.replica_transition``), then
  the owner hears of it: an op's part, a control op, a reduction fold, an all-to-all pair;
- ``fold``: a reduction member's contributions (own + children's); when all are in
  (``emu.nic.protocol.reduction_complete``) it sends its combined state where
  ``reduction_next`` says: to its parent, or the root completes the op (Reduction);
- ``a2a_step``: an exchange member's next pair of the shift schedule (AllToAll._step);
- ``signals``: an event whose waiters are on other boards sends each of those boards a
  signal, a header-only message of its own transfer that the NIC makes itself (no
  packetizer room, the ports' priority class) and that releases them where it arrives
  (Cluster.signal; docs/nic.md, "Signals").

What the Python path would call next in the replay (Replay._part_delivered, _delivered)
is pushed on the work stack instead, so this module needs nothing of the replay loop.
"""

from __future__ import annotations

import numpy as np

from .. import bits
from ..net import kernel as K
from ..codec.enums import Op
from ..nic.directory import OP_DRAIN, OP_INVALIDATE, OP_KV_REPLICA  # Meta ops the directory acts on
from ..nic.protocol import RED_HERE, RED_PARENT, reduction_complete, reduction_next
from .compute import slot_of, try_compute
from .directory import add_replica, drain, invalidate
from .events import at, push, rearm
from .reliable import (complete, control_done, first_hop_streams, first_hops, frame_sizes, message_room, resent,
                            sent, source_drop, track)
from .layout import (CB_A2A, CB_CTRL, CB_RED, CB_SEND, CB_SIG, E_LOCAL, GP_FOLD_OWN, GP_FOLD_UP, GP_MEMBER, GP_PARENT,
                          GP_WAIT, NT_FIFO_B, OPS_DST, RS_MASKW,
                          NT_FIFO_E, NT_QHEAD, NT_QTAIL, NT_STALL, OW_BYTES, OPS_GRP, OPS_MSGOP, RS_CHUNK,
                          RS_CTRL_DRAIN, RS_CTRL_INV, RS_FIFO_B, RS_FIFO_E, RS_NBITS, RS_NFOLD, RS_NMD, RS_NMSG, RS_NODES, RS_NOW,
                          RS_NTR, RS_V, TR_ACCEPTED, TR_ARG, TR_ARG2, TR_CB, TR_SET_DELIVERED, TR_DMASK, TR_SET_FAILED, TR_KV, TR_M0, TR_M1,
                          TR_LEFT, TR_MSGOP, TR_NBYTES, TR_NEXT, TR_OP, TR_ROUTE, TR_SENT, TR_SRC, W_A2A_STEP, W_OP_DLV,
                          W_PART_DLV, MX_SENT, MX_TR, CTRL_DATA, E_PARTLEFT, RS_RELIABLE, TR_FAIL_RETRIES,
                          MX_CTRL, MX_TIMER, OPS_SIG, OW_KV, RS_CTRL_SIG, TR_SETTLED, W_RELEASE)
from . import boards
from .rows import md_rows, new_transfer, retire, take_messages
from .state import compiled, compiled_inline

COLL_REDUCE = 3  # emu.codec.Collective.reduce: the trace's reductions end at their root
OP_SIGNAL = int(Op.signal)


@compiled_inline
def send(s, src, dop, dnode, nbytes, msgop, kv, cb, op, arg, arg2, route):
    """Cluster.send: hand a payload to ``src``'s NIC, for op ``dop``'s destinations (dop >= 0)
    or board ``dnode``; returns the transfer."""
    RS, NT, TR = s.RS, s.NT, s.TR
    tr = new_transfer(s)
    w = RS[RS_MASKW]
    TR[tr, TR_SRC] = src
    TR[tr, TR_NBYTES] = nbytes
    boards.clear(TR, tr, TR_DMASK, w)
    if dop >= 0:  # the op's destination boards: its list in IDX (no board set per op kept)
        OP, IDX = s.OP, s.IDX
        for e in range(OP[dop, OPS_DST], OP[dop + 1, OPS_DST]):
            boards.add(TR, tr, TR_DMASK, np.int64(IDX[e]))
    else:
        boards.add(TR, tr, TR_DMASK, dnode)
    boards.clear(TR, tr, TR_DMASK + TR_SET_DELIVERED * w, w)
    TR[tr, TR_MSGOP] = msgop
    TR[tr, TR_KV] = kv
    TR[tr, TR_CB] = cb
    TR[tr, TR_OP] = op
    TR[tr, TR_ARG] = arg
    TR[tr, TR_ARG2] = arg2
    TR[tr, TR_ROUTE] = route
    TR[tr, TR_M0] = 0
    TR[tr, TR_M1] = 0
    TR[tr, TR_SENT] = 0
    TR[tr, TR_SETTLED] = 0
    TR[tr, TR_NEXT] = -1
    TR[tr, TR_ACCEPTED] = -1
    tail = NT[src, NT_QTAIL]
    if tail == -1:
        NT[src, NT_QHEAD] = tr
    else:
        TR[tail, TR_NEXT] = tr
    NT[src, NT_QTAIL] = tr
    admit(s, src)
    return tr


@compiled
def admit(s, node):
    """Move sends from the packetizer's wait line into it while they fit."""
    RS, NT, TR = s.RS, s.NT, s.TR
    while NT[node, NT_QHEAD] != -1:
        tr = NT[node, NT_QHEAD]
        size = TR[tr, TR_NBYTES]
        e = NT[node, NT_FIFO_E]
        if e and (e + 1 > RS[RS_FIFO_E] or NT[node, NT_FIFO_B] + size > RS[RS_FIFO_B]):
            return  # full: the compute engine stalls until a send has left
        nxt = TR[tr, TR_NEXT]
        NT[node, NT_QHEAD] = nxt
        if nxt == -1:
            NT[node, NT_QTAIL] = -1
        NT[node, NT_FIFO_E] = e + 1
        NT[node, NT_FIFO_B] += size
        TR[tr, TR_ACCEPTED] = RS[RS_NOW]
        if TR[tr, TR_CB] == CB_SEND:
            # The packetization buffer took the payload: the compute engine may go on.
            NT[node, NT_STALL] -= 1
            try_compute(s, node)
        launch(s, tr)


@compiled_inline
def launch(s, tr):
    RS, NT, TR = s.RS, s.NT, s.TR
    src = TR[tr, TR_SRC]
    if boards.has(TR, tr, TR_DMASK, src):
        at(s, RS[RS_NOW], E_LOCAL, tr, src)
    TR[tr, TR_M0] = RS[RS_NMSG]
    TR[tr, TR_M1] = RS[RS_NMSG]
    if not boards.beyond(TR, tr, TR_DMASK, RS[RS_MASKW], src):
        # Nothing for the wire: its room is free at once (Cluster._left; the admit loop goes on).
        NT[src, NT_FIFO_E] -= 1
        NT[src, NT_FIFO_B] -= TR[tr, TR_NBYTES]
        return
    nbytes = TR[tr, TR_NBYTES]
    chunk = RS[RS_CHUNK]
    n = (max(nbytes, 1) + chunk - 1) // chunk
    m0 = take_messages(s, n)
    TR[tr, TR_M0] = m0
    TR[tr, TR_M1] = m0 + n
    for k in range(n):
        send_part(s, tr, m0 + k, min(chunk, nbytes - k * chunk), 0)


@compiled_inline
def send_part(s, tr, mid, size, prio):
    """Message ``mid`` of a transfer: header arithmetic (emu.net.framing.fragments), then the
    wire (``prio`` 1: in the ports' priority class, as a signal goes)."""
    RS, TR = s.RS, s.TR
    nfrags, full, last = frame_sizes(s, size)
    src, route = TR[tr, TR_SRC], TR[tr, TR_ROUTE]
    if route < 0:
        raise ValueError("compiled replay: a multicast tree the re-route could not build")
    streams = first_hops(s.FW, route * RS[RS_V] + src)
    if TR[tr, TR_MSGOP] == OP_DRAIN:
        RS[RS_CTRL_DRAIN] += nfrags * streams
    elif TR[tr, TR_MSGOP] == OP_INVALIDATE:
        RS[RS_CTRL_INV] += nfrags * streams
    elif TR[tr, TR_MSGOP] == OP_SIGNAL:
        RS[RS_CTRL_SIG] += nfrags * streams
    net_send(s, tr, mid, src, nfrags, full, last, route, prio)
    MX = s.MX  # reliable delivery may have grown it
    MX[mid, MX_TR] = tr
    MX[mid, MX_SENT] = 0
    if RS[RS_RELIABLE]:
        MX[mid, MX_TIMER] = 0
        MX[mid, MX_CTRL] = CTRL_DATA
        track(s, mid)  # even with no way out now: its timer retries until a route comes back
    if streams == 0 and RS[RS_RELIABLE]:
        # Held: it counts as sent now (an event of its own, Cluster._part_left), its timer
        # starts then, and its probes find the receivers once a re-route reaches them.
        MX[mid, MX_SENT] = 1
        TR[tr, TR_SENT] += 1
        at(s, RS[RS_NOW], E_PARTLEFT, mid, 0)
    elif streams == 0:
        # No way out (a failure cut the source off): the send fails, its part counts as sent
        # now and leaves the packetizer at an event of its own (Cluster._send_part).
        w = RS[RS_MASKW]
        boards.copy_without(TR, tr, TR_DMASK + TR_SET_FAILED * w, TR, tr, TR_DMASK, w, src)
        TR[tr, TR_FAIL_RETRIES] = -1
        MX[mid, MX_SENT] = 1
        TR[tr, TR_SENT] += 1
        TR[tr, TR_SETTLED] += 1  # nothing to wait an ack for
        at(s, RS[RS_NOW], E_PARTLEFT, mid, 0)


@compiled_inline
def net_send(s, tr, mid, src, nfrags, full, last, route, prio):
    """Network.send: message row ``mid`` for transfer ``tr``'s boards other than ``src``, its
    kernel rows (tracked with reliable delivery) and a stream per first-hop port."""
    RS = s.RS
    if RS[RS_RELIABLE]:  # control frames take message rows the tables did not count
        message_room(s, RS[RS_NODES], RS[RS_NODES] * ((nfrags + 7) // 8))
    TR = s.TR
    nd = boards.size_without(TR, tr, TR_DMASK, RS[RS_MASKW], src)
    nmd = md_rows(s, nd)
    MD = s.MD
    j = nmd
    # Destinations in ascending order, as Cluster hands them over: the set's bits in turn
    # (a cost per destination, not per board of the cluster).
    for i in range(RS[RS_MASKW]):
        x = TR[tr, TR_DMASK + i]
        if i == src >> 6:
            x &= ~(1 << (src & 63))
        while x != 0:
            MD[j, K.D_NODE] = 64 * i + bits.lowest(x)
            j += 1
            x &= x - 1
    TR[tr, TR_LEFT] += nd  # an UP_DONE from each
    flags = K.MF_TRACK | K.MF_GAP_UPCALL if RS[RS_RELIABLE] else 0
    RS[RS_NBITS] += K.open_message(s, mid, src, nfrags, full, last, flags, nmd, nd, RS[RS_NBITS])
    hops = first_hop_streams(s, route * RS[RS_V] + src, mid, route, nfrags, -1, RS[RS_RELIABLE], prio)
    if hops == 0:  # every fragment is a no_route drop at the source
        source_drop(s, src, nfrags, (nfrags - 1) * full + last)
    rearm(s)
    return mid


@compiled_inline
def message_sent(s, mid, live):
    """UP_SENT: a stream of ``mid`` has left; ``live`` of its streams are still unsent."""
    if live:
        return
    TR, MX = s.TR, s.MX
    if MX[mid, MX_SENT]:
        if s.RS[RS_RELIABLE]:
            resent(s, mid)  # a resend has left (nothing for a control frame)
        return
    MX[mid, MX_SENT] = 1
    tr = MX[mid, MX_TR]
    TR[tr, TR_SENT] += 1
    n = TR[tr, TR_M1] - TR[tr, TR_M0]
    if TR[tr, TR_SENT] == n and (s.RS[RS_RELIABLE] == 0 or TR[tr, TR_SETTLED] == n):
        # Every frame of the send is out of the packetizer (and, with reliable delivery,
        # acked): its FIFO room is free again.
        free_room(s, tr)
    if s.RS[RS_RELIABLE]:
        sent(s, mid)  # its retransmission timer starts
    retire(s, tr)


@compiled
def free_room(s, tr):
    """Transfer ``tr``'s packetization buffer room is free again (Cluster._left); a signal
    never took any."""
    NT, TR = s.NT, s.TR
    if TR[tr, TR_CB] == CB_SIG:
        return
    src = TR[tr, TR_SRC]
    NT[src, NT_FIFO_E] -= 1
    NT[src, NT_FIFO_B] -= TR[tr, TR_NBYTES]
    admit(s, src)


@compiled_inline
def settled(s, tr):
    """W_SETTLED: a message of ``tr`` is acked by every receiver or given up; its room is
    free once every message is, and every frame has left (Cluster._settle). A NIC resends
    from its own buffer, so with reliable delivery the bytes stay until then."""
    TR = s.TR
    TR[tr, TR_SETTLED] += 1
    n = TR[tr, TR_M1] - TR[tr, TR_M0]
    if TR[tr, TR_SETTLED] == n and TR[tr, TR_SENT] == n:
        free_room(s, tr)


@compiled_inline
def part_left(s, mid):
    """A message with no first hop has left (Cluster._part_left): the send's FIFO room is
    freed once all its messages count as sent."""
    TR = s.TR
    tr = s.MX[mid, MX_TR]
    if s.RS[RS_RELIABLE]:
        sent(s, mid)  # held: its timer starts (its room waits for its acks: settled)
        return
    # its messages fail one after another, each with an event: the last one frees the room
    if (mid == TR[tr, TR_M1] - 1 and TR[tr, TR_SENT] == TR[tr, TR_M1] - TR[tr, TR_M0]
            and TR[tr, TR_CB] != CB_SIG):
        NT = s.NT
        src = TR[tr, TR_SRC]
        NT[src, NT_FIFO_E] -= 1
        NT[src, NT_FIFO_B] -= TR[tr, TR_NBYTES]
        admit(s, src)


@compiled
def _whole(MS, MD, m, node):
    d = K.dest_row(MS, MD, m, node)
    return d >= 0 and MD[d, K.D_GOT] == MS[m, K.M_NFRAGS]


@compiled_inline
def message_done(s, mid, node):
    """UP_DONE: message ``mid`` is whole at ``node``; its send is when all its messages are."""
    if s.RS[RS_RELIABLE]:
        if s.MX[mid, MX_CTRL] != CTRL_DATA:
            control_done(s, mid)  # an ack, probe or nack
            return
        complete(s, mid, node)  # the receiver acks first (Cluster._delivered_part)
    TR = s.TR
    tr = s.MX[mid, MX_TR]
    TR[tr, TR_LEFT] -= 1
    m0, m1 = TR[tr, TR_M0], TR[tr, TR_M1]
    whole = True
    if m1 - m0 > 1:
        MS, MD = s.MS, s.MD
        for m in range(m0, m1):
            if not _whole(MS, MD, m, node):
                whole = False
                break
    if whole:
        delivered(s, tr, node)
    retire(s, tr)


@compiled_inline
def local_copy(s, tr, node):
    """E_LOCAL: a send's copy for its own source is delivered there."""
    delivered(s, tr, node)
    retire(s, tr)


@compiled
def delivered(s, tr, node):
    """Cluster._delivered: the directory follows the Meta of what arrived; the owner hears of it."""
    RS, TR = s.RS, s.TR
    dlv = TR_DMASK + TR_SET_DELIVERED * RS[RS_MASKW]
    if boards.has(TR, tr, dlv, node):
        return
    boards.add(TR, tr, dlv, node)
    now = RS[RS_NOW]
    mop, kv = TR[tr, TR_MSGOP], TR[tr, TR_KV]
    if mop == OP_KV_REPLICA:
        add_replica(s, node, kv, TR[tr, TR_NBYTES], now)
    elif mop == OP_DRAIN:
        drain(s, node, kv, now)
    elif mop == OP_INVALIDATE:
        invalidate(s, node, kv, now)
    cb, op = TR[tr, TR_CB], TR[tr, TR_OP]
    if cb == CB_SEND:
        push(s, W_PART_DLV, op, node, 0)
    elif cb == CB_CTRL:
        push(s, W_OP_DLV, op, node, 0)
    elif cb == CB_RED:
        fold(s, op, node, TR[tr, TR_SRC])
    elif cb == CB_SIG:
        g = TR[tr, TR_ARG]  # its group [node, n, parts...] in IDX
        push(s, W_RELEASE, g + 2, g + 2 + s.IDX[g + 1], 0)
    else:
        push(s, W_A2A_STEP, op, TR[tr, TR_ARG], TR[tr, TR_ARG2] + 1)  # one step in flight per member
        push(s, W_PART_DLV, op, node, 0)


@compiled
def fold(s, op, node, src):
    """``src``'s contribution to reduction ``op`` is in at member ``node`` (its own, src ==
    node, or a child's result). Each fold is numbered in the contributor's row (GP_FOLD_*): the
    order the board folds them in, which functional mode's merges follow."""
    RS, OP, GP = s.RS, s.OP, s.GP
    g0 = OP[op, OPS_GRP]
    g = g0
    while GP[g, GP_MEMBER] != node:
        g += 1
    if src == node:
        GP[g, GP_FOLD_OWN] = RS[RS_NFOLD]
    else:
        c = g0
        while GP[c, GP_MEMBER] != src:
            c += 1
        GP[c, GP_FOLD_UP] = RS[RS_NFOLD]
    RS[RS_NFOLD] += 1
    GP[g, GP_WAIT] -= 1
    expected = 1  # its own and each child's in the reduction tree
    for c in range(g0, OP[op + 1, OPS_GRP]):
        if GP[c, GP_PARENT] == node:
            expected += 1
    if not reduction_complete(expected - GP[g, GP_WAIT], expected):
        return
    parent = GP[g, GP_PARENT]
    mop, where = reduction_next(parent < 0, COLL_REDUCE)  # the board protocol's rule
    if where == RED_HERE:
        push(s, W_OP_DLV, op, node, 0)  # the root has the result
    elif where == RED_PARENT:
        send(s, node, -1, parent, s.OW[op, OW_BYTES], mop, 0, CB_RED, op, 0, 0, parent)
    else:
        raise ValueError("compiled replay: a reduction result for the whole group (all_reduce) is not modelled")


@compiled_inline
def a2a_step(s, op, i, step):
    """Member ``i`` of all-to-all ``op`` sends its block for member i + step, skipping pairs outside it."""
    OP, GP, IDX = s.OP, s.GP, s.IDX
    g0 = OP[op, OPS_GRP]
    n = OP[op + 1, OPS_GRP] - g0
    a = GP[g0 + i, GP_MEMBER]
    b = -1
    while step < n:
        b = GP[g0 + (i + step) % n, GP_MEMBER]
        if b != a and slot_of(OP, IDX, op, b) >= 0:
            break
        step += 1
    if step >= n:
        return
    send(s, a, -1, b, s.OW[op, OW_BYTES], OP[op, OPS_MSGOP], 0, CB_A2A, op, i, step, b)


@compiled
def signals(s, op, src):
    """Op ``op``'s event at board ``src`` (a compute op finished; a communication op delivered
    at src): one signal to each board of its signal groups (docs/nic.md, "Signals")."""
    e, end = s.OP[op, OPS_SIG], s.OP[op + 1, OPS_SIG]
    while e < end:
        signal(s, src, np.int64(s.IDX[e]), op, e)
        e += 2 + s.IDX[e + 1]


@compiled_inline
def signal(s, src, dst, op, g):
    """A signal from ``src`` to ``dst`` about ``op``, releasing group ``g``'s parts where it
    arrives: a header-only message the NIC makes itself (no packetizer room, so no wait
    behind the payloads there), in the ports' priority class, tracked as any data message
    with reliable delivery. Its transfer is as ``send`` opens one."""
    RS, TR = s.RS, s.TR
    tr = new_transfer(s)
    w = RS[RS_MASKW]
    TR[tr, TR_SRC] = src
    TR[tr, TR_NBYTES] = 0
    boards.clear(TR, tr, TR_DMASK, w)
    boards.add(TR, tr, TR_DMASK, dst)
    boards.clear(TR, tr, TR_DMASK + TR_SET_DELIVERED * w, w)
    TR[tr, TR_MSGOP] = OP_SIGNAL
    TR[tr, TR_KV] = max(s.OW[op, OW_KV], 0)
    TR[tr, TR_CB] = CB_SIG
    TR[tr, TR_OP] = op
    TR[tr, TR_ARG] = g
    TR[tr, TR_ARG2] = 0
    TR[tr, TR_ROUTE] = dst
    TR[tr, TR_SENT] = 0
    TR[tr, TR_NEXT] = -1
    TR[tr, TR_ACCEPTED] = RS[RS_NOW]
    m = take_messages(s, 1)
    TR[tr, TR_M0] = m
    TR[tr, TR_M1] = m + 1
    send_part(s, tr, m, 0, 1)
