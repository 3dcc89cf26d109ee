"""The compiled replay loop: op DAG, compute engines, NICs and the frame kernel in one numba loop.

It is the Python reference path (the test suite's tests/pyreplay.py over tests/pycluster.py,
emu.net.Network and emu.sim.Simulator) for a timing run (with loss, reliable delivery and a timeline or
without), step for step, so its results are identical (docs/engine.md, "The compiled
replay loop"):

- events (compute ends, the network's wake-ups and upcall hand-overs, a send's local
  copy) run in (time, scheduling order), as the Simulator runs them;
- the network runs as ``Network._run`` does: the kernel advances up to the next event
  of the replay (all frame events at that time included); upcalls of the current
  instant are handled at once and the kernel goes on at that instant, upcalls of a
  later instant become an event there;
- the replay's callbacks (releases, deliveries, folds, steps) run depth first from a
  work stack, in the order the Python calls nest.

Python builds the tables (emu.engine.tables), calls ``drive`` and is called
back only to apply a timeline change (emu.engine.runner), flush the transmission log
into the link statistics or draw the progress bar.
"""

from __future__ import annotations

import numpy as np

from ..net import kernel as K
from ..workload.enums import KV_OPS_MASK, Kind, Residency
from .compute import ready_push, slot_of, try_compute
from .directory import add_owner, add_transient, free_transient, owner_bytes
from .events import at, cancelled, peek, pop, push, rearm
from .layout import (CB_CTRL, CB_SEND, DRIVE_CHANGE, DRIVE_DONE, DRIVE_HISTORY, DRIVE_PROGRESS, DF_READS, E_CHANGE, E_FINISH, E_LOCAL,
                          E_PARTLEFT, E_TIMER, E_UPCALLS, E_WAKE, GP_WAIT, KB_BYTES, KB_SNAP_OWNER, KB_OWNER,
                          KB_SNAP_BYTES, RS_CHG_KEY, RS_CHG_T, RS_IN_CHG, RS_SNAPPED,
                          NT_BUSY, NT_STALL, OPS_BLK, OW_BYTES, OPS_CHUNK, OPS_COMM, OPS_DEP,
                          OPS_DONE, OPS_DST, OW_END, OPS_GRP, OPS_KIND, OW_KV, OPS_LAYER, OPS_MSGOP,
                          OPS_NDLV, OPS_NODE, OPS_PART, OPS_RES, OPS_SRC, OW_START, PT_NEED, PT_NODE,
                          PT_OP, PT_ROUTE, RS_DONE_OPS, RS_IN_RUN, RS_KV_BYTES, RS_KVMIN, RS_LAYERS, RS_MARGIN, RS_NODES, RS_NOW,
                          RS_NSIM, RS_NWORK, RS_HIST_AT, RS_NHIST, RS_PROG_NEXT, RS_PROGRESS, RS_STARTED, RS_UPCALL_EV, RS_WAKE_SEQ, SIM_A, SIM_B, SIM_KIND,
                          SIM_TIME, SLOT_AT, SLOT_ATEND,
                          SLOT_GOT, SLOT_READERS, SW_TIME, W_A2A_STEP, W_CONSUMED, W_DELIVERED, W_OP_DLV,
                          W_PART_DLV, W_READY, W_RELEASE, W_SETTLED, W_TRY, W_UPCALLS, WORK_A, WORK_B, WORK_C,
                          WORK_KIND)
from .nic import a2a_step, fold, local_copy, message_done, message_sent, part_left, send, settled, signals
from .reliable import gap, timer_due
from .state import allocating, compiled, compiled_inline, doubled_pool, grown, more_heap

REDUCE, ALL_TO_ALL, DRAIN, INVALIDATE = int(Kind.reduce), int(Kind.all_to_all), int(Kind.drain), int(Kind.invalidate)
QKV, DECODE_QKV = int(Kind.qkv), int(Kind.decode_qkv)
TRANSIENT, OWNER = int(Residency.transient), int(Residency.owner)


# ---- the replay's callbacks (Replay in emu.replay.run) ---------------------------------------

@compiled
def ready(s, p):
    """Part ``p`` has all it needs: a compute op joins its node's queue, a communication part starts."""
    PT, OP = s.PT, s.OP
    op = np.int64(PT[p, PT_OP])  # PT and IDX are int32: values passed on are made int64 (one compiled callee)
    if OP[op, OPS_COMM]:
        start_comm(s, op, p)
    else:
        node = np.int64(OP[op, OPS_NODE])  # an int64 argument, as everywhere else (one compiled try_compute)
        ready_push(s.NT, s.RQ, node, op)
        try_compute(s, node)


@compiled_inline
def start_comm(s, op, p):
    RS, OP, OW, PT, NT = s.RS, s.OP, s.OW, s.PT, s.NT
    src = np.int64(PT[p, PT_NODE])
    if OW[op, OW_START] < 0:
        OW[op, OW_START] = RS[RS_NOW]
    kind = OP[op, OPS_KIND]
    if kind == REDUCE:
        if s.GP[OP[op, OPS_GRP], GP_WAIT] < 0:
            raise ValueError("compiled replay: a reduction tree the re-route could not build")
        if RS[RS_SNAPPED] == 0 and s.KB.shape[1] > KB_SNAP_OWNER:
            snapshot_owners(s)  # functional mode: the layout its first contribution finds
        push(s, W_CONSUMED, op, src, 0)  # after the contribution and what it completes
        fold(s, op, src, src)
        return
    if kind == DRAIN or kind == INVALIDATE:
        send(s, src, op, -1, 0, OP[op, OPS_MSGOP], OW[op, OW_KV], CB_CTRL, op, src, 0, np.int64(PT[p, PT_ROUTE]))
        return
    if kind == ALL_TO_ALL:
        g = OP[op, OPS_GRP]
        while s.GP[g, 0] != src:
            g += 1
        a2a_step(s, op, g - OP[op, OPS_GRP], 1)
        consumed(s, op, src)
        return
    NT[src, NT_STALL] += 1  # the compute engine waits until the packetizer takes the payload
    send(s, src, op, -1, OW[op, OW_BYTES], OP[op, OPS_MSGOP], max(OW[op, OW_KV], 0), CB_SEND, op, src,
         0, np.int64(PT[p, PT_ROUTE]))
    consumed(s, op, src)


@compiled
def snapshot_owners(s):
    """Each block's owner and bytes now, into KB's KB_SNAP_* columns (once)."""
    KB = s.KB
    for b in range(KB.shape[0]):
        KB[b, KB_SNAP_OWNER] = KB[b, KB_OWNER]
        KB[b, KB_SNAP_BYTES] = KB[b, KB_BYTES]
    s.RS[RS_SNAPPED] = 1


@compiled
def consumed(s, op, node):
    """A reader of transient copies at ``node`` is done with them (Replay._consumed)."""
    RS, OP, SLOT, IDX, DF = s.RS, s.OP, s.SLOT, s.IDX, s.DF
    for e in range(OP[op, OPS_DEP], OP[op + 1, OPS_DEP]):
        if DF[e] & DF_READS:
            x = np.int64(IDX[e])
            sl = slot_of(OP, IDX, x, node)
            if sl >= 0:
                SLOT[sl, SLOT_READERS] -= 1
                if SLOT[sl, SLOT_READERS] == 0 and OP[x, OPS_RES] == TRANSIENT:
                    free_transient(s, node, sl, RS[RS_NOW])


@compiled_inline
def finish_compute(s, op, node):
    RS, OP, OW, NT = s.RS, s.OP, s.OW, s.NT
    now = RS[RS_NOW]
    OW[op, OW_END] = now
    NT[node, NT_BUSY] = 0
    kind = OP[op, OPS_KIND]
    if (kind == QKV or kind == DECODE_QKV) and OW[op, OW_KV] >= 0 and OW[op, OW_BYTES] > 0:
        add_owner(s, node, OW[op, OW_KV], OW[op, OW_BYTES], now)
    consumed(s, op, node)
    push(s, W_TRY, node, 0, 0)
    op_done(s, op)


@compiled
def op_done(s, op):
    RS, OP = s.RS, s.OP
    RS[RS_DONE_OPS] += 1
    if not OP[op, OPS_COMM]:  # a compute op: its waiters on other boards hear of it by signal
        signals(s, op, np.int64(OP[op, OPS_NODE]))
    push(s, W_RELEASE, OP[op, OPS_DONE], OP[op + 1, OPS_DONE], 0)


@compiled_inline
def part_delivered(s, op, node):
    """One source's payload reached ``node``; the op is delivered there when every source's has."""
    OP, SLOT, IDX = s.OP, s.SLOT, s.IDX
    sl = slot_of(OP, IDX, op, node)
    SLOT[sl, SLOT_GOT] += 1
    nsrc = OP[op + 1, OPS_PART] - OP[op, OPS_PART]
    if OP[op, OPS_KIND] == ALL_TO_ALL:
        for e in range(OP[op, OPS_SRC], OP[op + 1, OPS_SRC]):
            if IDX[e] == node:
                nsrc -= 1
                break
    if SLOT[sl, SLOT_GOT] == nsrc:
        op_delivered(s, op, node)


@compiled
def op_delivered(s, op, node):
    """Replay._delivered up to releasing what waits for the delivery here (W_DELIVERED goes on)."""
    RS, OP, OW, SLOT, IDX = s.RS, s.OP, s.OW, s.SLOT, s.IDX
    now = RS[RS_NOW]
    kind = OP[op, OPS_KIND]
    nbytes = OW[op, OW_BYTES]
    nsrcs = OP[op + 1, OPS_SRC] - OP[op, OPS_SRC]
    if kind == ALL_TO_ALL:  # one block from every other source
        here = 0
        for e in range(OP[op, OPS_SRC], OP[op + 1, OPS_SRC]):
            if IDX[e] == node:
                here = 1
                break
        nbytes *= (OP[op + 1, OPS_PART] - OP[op, OPS_PART]) - here
    if (KV_OPS_MASK >> OP[op, OPS_MSGOP]) & 1:
        RS[RS_KV_BYTES] += nbytes
    sl = slot_of(OP, IDX, op, node)
    res = OP[op, OPS_RES]
    if res == TRANSIENT:
        add_transient(s, node, sl, nbytes, now)
        if SLOT[sl, SLOT_READERS] == 0:
            free_transient(s, node, sl, now)
    elif res == OWNER and kind == ALL_TO_ALL:
        # a head shard: node owns block (chunk, node, layer), its own part included
        kv = (OP[op, OPS_CHUNK] * RS[RS_NODES] + node) * RS[RS_LAYERS] + OP[op, OPS_LAYER]
        add_owner(s, node, kv, OW[op, OW_BYTES] * nsrcs, now)
    elif res == OWNER and OW[op, OW_KV] >= 0:
        nb = OP[op + 1, OPS_BLK] - OP[op, OPS_BLK]
        if nb:  # a bulk handoff: each block moves with the size its owner holds
            for e in range(OP[op, OPS_BLK], OP[op + 1, OPS_BLK]):
                kv = RS[RS_KVMIN] + IDX[e]  # IDX holds the block's offset
                add_owner(s, node, kv, owner_bytes(s, kv, nbytes // nb), now)
        else:
            add_owner(s, node, OW[op, OW_KV], nbytes, now)
    signals(s, op, node)  # its waiters for "delivered everywhere" count one signal from each destination
    push(s, W_DELIVERED, op, node, 0)
    push(s, W_RELEASE, np.int64(SLOT[sl, SLOT_AT]), np.int64(SLOT[sl, SLOT_ATEND]), 0)


@compiled_inline
def delivered_tail(s, op, node):
    RS, OP = s.RS, s.OP
    sl = slot_of(OP, s.IDX, op, node)
    s.SW[sl, SW_TIME] = RS[RS_NOW]
    OP[op, OPS_NDLV] += 1
    if OP[op, OPS_NDLV] == OP[op + 1, OPS_DST] - OP[op, OPS_DST]:
        s.OW[op, OW_END] = RS[RS_NOW]
        op_done(s, op)


@compiled_inline
def upcall(s, i):
    UP = s.UP
    kind = UP[i, K.U_KIND]
    if kind == K.UP_SENT:
        message_sent(s, UP[i, K.U_MSG], UP[i, K.U_FRAG])
    elif kind == K.UP_DONE:
        message_done(s, UP[i, K.U_MSG], UP[i, K.U_NODE])
    elif kind == K.UP_GAP:
        gap(s, UP[i, K.U_MSG], UP[i, K.U_NODE], UP[i, K.U_FRAG])


@compiled
def work(s):
    """Run the work stack until it is empty."""
    RS, PT, IDX = s.RS, s.PT, s.IDX
    while RS[RS_NWORK] > 0:
        n = RS[RS_NWORK] - 1
        W = s.WORK
        kind, a, b, c = W[n, WORK_KIND], W[n, WORK_A], W[n, WORK_B], W[n, WORK_C]
        RS[RS_NWORK] = n
        if kind == W_RELEASE:
            if a < b:
                if a + 1 < b:
                    push(s, W_RELEASE, a + 1, b, 0)
                p = np.int64(IDX[a])
                PT[p, PT_NEED] -= 1
                if PT[p, PT_NEED] == 0:
                    ready(s, p)
        elif kind == W_UPCALLS:
            if a + 1 < b:
                push(s, W_UPCALLS, a + 1, b, 0)
            upcall(s, a)
        elif kind == W_PART_DLV:
            part_delivered(s, a, b)
        elif kind == W_OP_DLV:
            op_delivered(s, a, b)
        elif kind == W_DELIVERED:
            delivered_tail(s, a, b)
        elif kind == W_TRY:
            try_compute(s, a)
        elif kind == W_CONSUMED:
            consumed(s, a, b)
        elif kind == W_A2A_STEP:
            a2a_step(s, a, b, c)
        elif kind == W_READY:
            ready(s, a)
        elif kind == W_SETTLED:
            settled(s, a)


# ---- the network's frame loop (Network._run) ------------------------------------------------

@compiled
def flush_upcalls(s):
    SC = s.SC
    n = SC[K.SC_UP]
    SC[K.SC_UP] = 0
    if n:
        push(s, W_UPCALLS, 0, n, 0)
        work(s)


@allocating
def grow_buffer(s, status, t):
    """A buffer the kernel needs before it goes on, grown as Network._run grows it."""
    if status == K.ST_NEED_FRAMES:
        grow_frames(s)
    elif status == K.ST_NEED_UPCALLS:
        s.UP = grown(s.UP, 2 * s.UP.shape[0])
    elif status == K.ST_NEED_HEAP:
        more_heap(s)
    else:
        # one row per link per bin, up to the bin of the clock (as Network._ensure_bins;
        # with a bins limit the table is whole from the start and never asks)
        s.LB = grown(s.LB, (t // s.SC[K.SC_BIN_PS] + 1) * s.SC[K.SC_NLINKS])


@allocating
def grow_frames(s):
    """Double the frame pool; its new rows go on the free stack (emu.net.network._grow_pool)."""
    n = s.FP.shape[0]
    pool = doubled_pool(s.FP, s.FREE, s.SC[K.SC_FREE])
    s.FP = pool[0]
    s.FREE = pool[1]
    s.SC[K.SC_FREE] += n


@compiled_inline
def net_run_to(s, stop_t, stop_key):
    """Network._run(stop_t, stop_key): the kernel up to the earliest of that point, the next
    replay event and the first pending timeline change."""
    RS = s.RS
    now = RS[RS_NOW]
    while True:
        nxt = peek(s)
        limit, key = stop_t, stop_key
        if nxt >= 0 and (nxt < limit or (nxt == limit and K.KEY_ALL < key)):
            limit, key = nxt, K.KEY_ALL
        if RS[RS_CHG_T] < limit or (RS[RS_CHG_T] == limit and RS[RS_CHG_KEY] < key):
            limit, key = RS[RS_CHG_T], RS[RS_CHG_KEY]
        status, t = K.advance(s, limit, key, RS[RS_MARGIN])
        if (status == K.ST_NEED_FRAMES or status == K.ST_NEED_UPCALLS or status == K.ST_NEED_HEAP
                or status == K.ST_NEED_BINS):
            grow_buffer(s, status, t)
            continue
        if status == K.ST_NEED_LOG:
            return status
        if status == K.ST_UPCALLS:
            if t == now and RS[RS_IN_CHG] == 0 and RS[RS_CHG_T] != now:
                # The application runs after the grants of its instant; what it sends
                # now is considered in a further round of grants at now.
                flush_upcalls(s)
                continue
            if t > now and RS[RS_UPCALL_EV] == 0:
                RS[RS_UPCALL_EV] = 1
                at(s, t, E_UPCALLS, 0, 0)
            return 0
        rearm(s)
        return 0


@compiled
def drive(s, parts):
    """Run events until none are left (DRIVE_DONE), progress is due (DRIVE_PROGRESS) or the log is full (ST_NEED_LOG).

    The first call starts the replay: the parts with no dependencies, in order, at time 0,
    then the network's first wake-up. The one function Python calls: every compiled
    function it calls is compiled (and its machine code generated) once more into each
    caller that is compiled on its own, so the loop has one such root, and the frame
    loop is inlined into it.
    """
    RS = s.RS
    if RS[RS_STARTED] == 0:
        RS[RS_STARTED] = 1
        for p in parts:
            ready(s, p)
            work(s)
        rearm(s)
    while True:
        changing = False
        if RS[RS_IN_CHG]:
            # Network._changes_due: each change due now runs at its point of the instant
            if RS[RS_CHG_T] <= RS[RS_NOW]:
                changing = True
            else:
                RS[RS_IN_CHG] = 0
                RS[RS_IN_RUN] = 1
        if changing or RS[RS_IN_RUN]:
            # one call site of the (inlined) frame loop: up to the change's point, or on
            stop_t, stop_key = K.INF, K.KEY_ALL
            if changing:
                stop_t, stop_key = RS[RS_NOW], RS[RS_CHG_KEY]
            status = net_run_to(s, stop_t, stop_key)
            if changing:
                return status if status else DRIVE_CHANGE  # Python applies it and calls again
            if status:
                return status  # Python flushes the log; the frame loop resumes where it stopped
            RS[RS_IN_RUN] = 0
        if RS[RS_PROGRESS] and RS[RS_DONE_OPS] >= RS[RS_PROG_NEXT]:
            RS[RS_PROG_NEXT] = RS[RS_DONE_OPS] + RS[RS_PROGRESS]
            return DRIVE_PROGRESS
        if RS[RS_HIST_AT] and RS[RS_NHIST] >= RS[RS_HIST_AT]:
            return DRIVE_HISTORY  # Python takes the rows; the next is written at row 0
        if RS[RS_NSIM] == 0:
            return DRIVE_DONE
        H = s.SIM
        time, kind, a, b = H[0, SIM_TIME], H[0, SIM_KIND], H[0, SIM_A], H[0, SIM_B]
        dead = cancelled(s, 0)
        pop(s)
        if dead:
            continue
        RS[RS_NOW] = time
        if kind == E_FINISH:
            finish_compute(s, a, b)
            work(s)
        elif kind == E_WAKE:
            RS[RS_WAKE_SEQ] = -1
            RS[RS_IN_RUN] = 1
        elif kind == E_UPCALLS:
            RS[RS_UPCALL_EV] = 0
            if RS[RS_CHG_T] != time:
                flush_upcalls(s)  # all frame events of this instant are done
            RS[RS_IN_RUN] = 1
        elif kind == E_LOCAL:
            local_copy(s, a, b)
            work(s)
        elif kind == E_TIMER:
            timer_due(s, a)  # a retransmission timer (reliable delivery)
            work(s)  # a send given up frees its buffer
        elif kind == E_CHANGE:
            RS[RS_IN_CHG] = 1
        elif kind == E_PARTLEFT:
            part_left(s, a)


# ---- what Python calls while it applies a timeline change (emu.engine.runner) ---------------

@allocating
def schedule(s, time, kind):
    """An event the network schedules from Python (a wake-up, a hand-over of upcalls, a
    change): its sequence number, in the loop's order."""
    return at(s, time, kind, 0, 0)
