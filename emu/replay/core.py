"""The compiled replay loop: op DAG, compute engines, NICs and the frame kernel in one numba loop.

It is the Python path (emu.replay.run.Replay over emu.nic.Cluster, emu.net.Network and
emu.sim.Simulator) for a lossless run without a timeline, step for step, so its
results are identical (docs/engine.md, "The compiled replay loop"):

- events (compute ends, the network's wake-ups and upcall hand-overs, a send's local
  copy) run in (time, scheduling order), as the Simulator runs them;
- the network runs as ``Network._run`` does: the kernel advances up to the next event
  of the replay (all frame events at that time included); upcalls of the current
  instant are handled at once and the kernel goes on at that instant, upcalls of a
  later instant become an event there;
- the replay's callbacks (releases, deliveries, folds, steps) run depth first from a
  work stack, in the order the Python calls nest.

Python builds the tables (emu.replay.core_tables), calls ``drive`` and is called
back only to grow a kernel buffer, flush the transmission log or draw the progress bar.
"""

from __future__ import annotations

from numba import njit

from ..net import kernel as K
from ..workload.enums import Kind, Residency
from .core_compute import ready_push, slot_of, try_compute
from .core_dir import add_owner, add_transient, free_transient, owner_bytes
from .core_events import at, cancelled, peek, pop, push, rearm
from .core_layout import (CB_CTRL, CB_SEND, D_DONE, D_PROGRESS, DF_READS, E_FINISH, E_LOCAL, E_UPCALLS, E_WAKE,
                          GT_SIM, GT_WORK, KT_BITS, KT_DL, KT_FP, KT_FREE, KT_FW, KT_HP, KT_LD, KT_LF, KT_LG,
                          KT_LK, KT_LR, KT_MD, KT_MS, KT_ND, KT_NS, KT_SC, KT_SFREE, KT_SL, KT_SP, KT_UP,
                          N_BUSY, N_STALL, O_BLK, O_BLKEND, O_BYTES, O_CHUNK, O_COMM, O_DEP, O_DEPEND, O_DMASK,
                          O_DONE, O_DONEEND, O_DST, O_DSTEND, O_END, O_GRP, O_KIND, O_KV, O_LAYER, O_MSGOP,
                          O_NDLV, O_NODE, O_PART, O_PEND, O_RES, O_SRC, O_SRCEND, O_START, P_NEED, P_NODE,
                          P_OP, P_ROUTE, R_DONE_OPS, R_IN_RUN, R_KV_BYTES, R_LAYERS, R_MARGIN, R_NODES, R_NOW,
                          R_NSIM, R_NWORK, R_PROG_NEXT, R_PROGRESS, R_UPCALL_EV, R_WAKE_SEQ, RT_DF, RT_GP,
                          RT_GT, RT_IDX, RT_KB, RT_NT, RT_OP, RT_PT, RT_RQ, RT_RS, RT_SLOT, S_AT, S_ATEND,
                          S_GOT, S_READERS, S_TIME, W_A2A_STEP, W_CONSUMED, W_DELIVERED, W_OP_DLV,
                          W_PART_DLV, W_READY, W_RELEASE, W_TRY, W_UPCALLS)
from .core_nic import a2a_step, delivered, fold, message_done, message_sent, send

REDUCE, ALL_TO_ALL, DRAIN, INVALIDATE = int(Kind.reduce), int(Kind.all_to_all), int(Kind.drain), int(Kind.invalidate)
QKV, DECODE_QKV = int(Kind.qkv), int(Kind.decode_qkv)
TRANSIENT, OWNER = int(Residency.transient), int(Residency.owner)
KV_OPS_MASK = (1 << 1) | (1 << 3) | (1 << 4)  # kv_replica, kv_fetch_resp, kv_transfer carry KV payload


# ---- the replay's callbacks (Replay in emu.replay.run) ---------------------------------------

@njit(cache=True)
def ready(kt, rt, p):
    """Part ``p`` has all it needs: a compute op joins its node's queue, a communication part starts."""
    PT, OP = rt[RT_PT], rt[RT_OP]
    op = PT[p, P_OP]
    if OP[op, O_COMM]:
        start_comm(kt, rt, op, p)
    else:
        node = OP[op, O_NODE]
        ready_push(rt[RT_NT], rt[RT_RQ], node, op)
        try_compute(rt, node)


@njit(cache=True)
def start_comm(kt, rt, op, p):
    RS, OP, PT, NT = rt[RT_RS], rt[RT_OP], rt[RT_PT], rt[RT_NT]
    src = PT[p, P_NODE]
    if OP[op, O_START] < 0:
        OP[op, O_START] = RS[R_NOW]
    kind = OP[op, O_KIND]
    if kind == REDUCE:
        push(RS, rt[RT_GT], W_CONSUMED, op, src, 0)  # after the contribution and what it completes
        fold(kt, rt, op, src)
        return
    if kind == DRAIN or kind == INVALIDATE:
        send(kt, rt, src, OP[op, O_DMASK], 0, OP[op, O_MSGOP], OP[op, O_KV], CB_CTRL, op, src, 0, PT[p, P_ROUTE])
        return
    if kind == ALL_TO_ALL:
        g = OP[op, O_GRP]
        while rt[RT_GP][g, 0] != src:
            g += 1
        a2a_step(kt, rt, op, g - OP[op, O_GRP], 1)
        consumed(rt, op, src)
        return
    NT[src, N_STALL] += 1  # the compute engine waits until the packetizer takes the payload
    send(kt, rt, src, OP[op, O_DMASK], OP[op, O_BYTES], OP[op, O_MSGOP], max(OP[op, O_KV], 0), CB_SEND, op, src,
         0, PT[p, P_ROUTE])
    consumed(rt, op, src)


@njit(cache=True)
def consumed(rt, op, node):
    """A reader of transient copies at ``node`` is done with them (Replay._consumed)."""
    RS, OP, SLOT, IDX, DF = rt[RT_RS], rt[RT_OP], rt[RT_SLOT], rt[RT_IDX], rt[RT_DF]
    for e in range(OP[op, O_DEP], OP[op, O_DEPEND]):
        if DF[e] & DF_READS:
            x = IDX[e]
            s = slot_of(OP, IDX, x, node)
            if s >= 0:
                SLOT[s, S_READERS] -= 1
                if SLOT[s, S_READERS] == 0 and OP[x, O_RES] == TRANSIENT:
                    free_transient(RS, rt[RT_NT], SLOT, rt[RT_GT], node, s, RS[R_NOW])


@njit(cache=True)
def finish_compute(kt, rt, op, node):
    RS, OP, NT = rt[RT_RS], rt[RT_OP], rt[RT_NT]
    now = RS[R_NOW]
    OP[op, O_END] = now
    NT[node, N_BUSY] = 0
    kind = OP[op, O_KIND]
    if (kind == QKV or kind == DECODE_QKV) and OP[op, O_KV] >= 0 and OP[op, O_BYTES] > 0:
        add_owner(RS, NT, rt[RT_KB], rt[RT_GT], node, OP[op, O_KV], OP[op, O_BYTES], now)
    consumed(rt, op, node)
    push(RS, rt[RT_GT], W_TRY, node, 0, 0)
    op_done(rt, op)


@njit(cache=True)
def op_done(rt, op):
    RS, OP = rt[RT_RS], rt[RT_OP]
    RS[R_DONE_OPS] += 1
    push(RS, rt[RT_GT], W_RELEASE, OP[op, O_DONE], OP[op, O_DONEEND], 0)


@njit(cache=True)
def part_delivered(rt, op, node):
    """One source's payload reached ``node``; the op is delivered there when every source's has."""
    OP, SLOT, IDX = rt[RT_OP], rt[RT_SLOT], rt[RT_IDX]
    s = slot_of(OP, IDX, op, node)
    SLOT[s, S_GOT] += 1
    nsrc = OP[op, O_PEND] - OP[op, O_PART]
    if OP[op, O_KIND] == ALL_TO_ALL:
        for e in range(OP[op, O_SRC], OP[op, O_SRCEND]):
            if IDX[e] == node:
                nsrc -= 1
                break
    if SLOT[s, S_GOT] == nsrc:
        op_delivered(rt, op, node)


@njit(cache=True)
def op_delivered(rt, op, node):
    """Replay._delivered up to releasing what waits for the delivery here (W_DELIVERED goes on)."""
    RS, OP, SLOT, IDX, NT, KB, GT = (rt[RT_RS], rt[RT_OP], rt[RT_SLOT], rt[RT_IDX], rt[RT_NT], rt[RT_KB],
                                     rt[RT_GT])
    now = RS[R_NOW]
    kind = OP[op, O_KIND]
    nbytes = OP[op, O_BYTES]
    nsrcs = OP[op, O_SRCEND] - OP[op, O_SRC]
    if kind == ALL_TO_ALL:  # one block from every other source
        here = 0
        for e in range(OP[op, O_SRC], OP[op, O_SRCEND]):
            if IDX[e] == node:
                here = 1
                break
        nbytes *= (OP[op, O_PEND] - OP[op, O_PART]) - here
    if (KV_OPS_MASK >> OP[op, O_MSGOP]) & 1:
        RS[R_KV_BYTES] += nbytes
    s = slot_of(OP, IDX, op, node)
    res = OP[op, O_RES]
    if res == TRANSIENT:
        add_transient(RS, NT, SLOT, GT, node, s, nbytes, now)
        if SLOT[s, S_READERS] == 0:
            free_transient(RS, NT, SLOT, GT, node, s, now)
    elif res == OWNER and kind == ALL_TO_ALL:
        # a head shard: node owns block (chunk, node, layer), its own part included
        kv = (OP[op, O_CHUNK] * RS[R_NODES] + node) * RS[R_LAYERS] + OP[op, O_LAYER]
        add_owner(RS, NT, KB, GT, node, kv, OP[op, O_BYTES] * nsrcs, now)
    elif res == OWNER and OP[op, O_KV] >= 0:
        nb = OP[op, O_BLKEND] - OP[op, O_BLK]
        if nb:  # a bulk handoff: each block moves with the size its owner holds
            for e in range(OP[op, O_BLK], OP[op, O_BLKEND]):
                kv = IDX[e]
                add_owner(RS, NT, KB, GT, node, kv, owner_bytes(RS, KB, kv, nbytes // nb), now)
        else:
            add_owner(RS, NT, KB, GT, node, OP[op, O_KV], nbytes, now)
    push(RS, GT, W_DELIVERED, op, node, 0)
    push(RS, GT, W_RELEASE, SLOT[s, S_AT], SLOT[s, S_ATEND], 0)


@njit(cache=True)
def delivered_tail(rt, op, node):
    RS, OP, SLOT = rt[RT_RS], rt[RT_OP], rt[RT_SLOT]
    s = slot_of(OP, rt[RT_IDX], op, node)
    SLOT[s, S_TIME] = RS[R_NOW]
    OP[op, O_NDLV] += 1
    if OP[op, O_NDLV] == OP[op, O_DSTEND] - OP[op, O_DST]:
        OP[op, O_END] = RS[R_NOW]
        op_done(rt, op)


@njit(cache=True)
def upcall(kt, rt, i):
    UP = kt[KT_UP]
    kind = UP[i, K.U_KIND]
    if kind == K.UP_SENT:
        message_sent(kt, rt, UP[i, K.U_MSG], UP[i, K.U_FRAG])
    elif kind == K.UP_DONE:
        message_done(kt, rt, UP[i, K.U_MSG], UP[i, K.U_NODE])


@njit(cache=True)
def work(kt, rt):
    """Run the work stack until it is empty."""
    RS, GT, PT, IDX = rt[RT_RS], rt[RT_GT], rt[RT_PT], rt[RT_IDX]
    while RS[R_NWORK] > 0:
        n = RS[R_NWORK] - 1
        W = GT[GT_WORK]
        kind, a, b, c = W[n, 0], W[n, 1], W[n, 2], W[n, 3]
        RS[R_NWORK] = n
        if kind == W_RELEASE:
            if a < b:
                if a + 1 < b:
                    push(RS, GT, W_RELEASE, a + 1, b, 0)
                p = IDX[a]
                PT[p, P_NEED] -= 1
                if PT[p, P_NEED] == 0:
                    ready(kt, rt, p)
        elif kind == W_UPCALLS:
            if a + 1 < b:
                push(RS, GT, W_UPCALLS, a + 1, b, 0)
            upcall(kt, rt, a)
        elif kind == W_PART_DLV:
            part_delivered(rt, a, b)
        elif kind == W_OP_DLV:
            op_delivered(rt, a, b)
        elif kind == W_DELIVERED:
            delivered_tail(rt, a, b)
        elif kind == W_TRY:
            try_compute(rt, a)
        elif kind == W_CONSUMED:
            consumed(rt, a, b)
        elif kind == W_A2A_STEP:
            a2a_step(kt, rt, a, b, c)
        elif kind == W_READY:
            ready(kt, rt, a)


@njit(cache=True)
def start(kt, rt, parts):
    """The parts with no dependencies, in order, at time 0; then the network's first wake-up."""
    for p in parts:
        ready(kt, rt, p)
        work(kt, rt)
    rearm(rt[RT_RS], rt[RT_GT], kt[KT_SC], kt[KT_HP])


# ---- the network's frame loop (Network._run) ------------------------------------------------

@njit(cache=True)
def flush_upcalls(kt, rt):
    SC = kt[KT_SC]
    n = SC[K.SC_UP]
    SC[K.SC_UP] = 0
    if n:
        push(rt[RT_RS], rt[RT_GT], W_UPCALLS, 0, n, 0)
        work(kt, rt)


@njit(cache=True)
def net_run(kt, rt):
    """Advance the kernel to the next replay event; 0 when done, else a buffer the kernel needs."""
    RS = rt[RT_RS]
    now = RS[R_NOW]
    while True:
        nxt = peek(RS, rt[RT_GT])
        limit = nxt if nxt >= 0 else K.INF
        status, t = K.advance(kt[KT_SC], kt[KT_LK], kt[KT_LF], kt[KT_LR], kt[KT_LD], kt[KT_ND], kt[KT_NS],
                              kt[KT_DL], kt[KT_FP], kt[KT_FREE], kt[KT_HP], kt[KT_LG], kt[KT_FW], kt[KT_MS],
                              kt[KT_MD], kt[KT_BITS], kt[KT_UP], kt[KT_SP], kt[KT_SL], kt[KT_SFREE],
                              limit, K.KEY_ALL, RS[R_MARGIN])
        if status >= K.ST_NEED_FRAMES:
            return status
        if status == K.ST_UPCALLS:
            if t == now:
                # The application runs after the grants of its instant; what it sends
                # now is considered in a further round of grants at now.
                flush_upcalls(kt, rt)
                continue
            if t > now and RS[R_UPCALL_EV] == 0:
                RS[R_UPCALL_EV] = 1
                at(RS, rt[RT_GT], t, E_UPCALLS, 0, 0)
            return 0
        rearm(RS, rt[RT_GT], kt[KT_SC], kt[KT_HP])
        return 0


@njit(cache=True)
def drive(kt, rt):
    """Run events until none are left (D_DONE), progress is due (D_PROGRESS) or the kernel needs a buffer."""
    RS, GT = rt[RT_RS], rt[RT_GT]
    while True:
        if RS[R_IN_RUN]:
            status = net_run(kt, rt)
            if status:
                return status  # Python grows the buffer; the frame loop resumes where it stopped
            RS[R_IN_RUN] = 0
        if RS[R_PROGRESS] and RS[R_DONE_OPS] >= RS[R_PROG_NEXT]:
            RS[R_PROG_NEXT] = RS[R_DONE_OPS] + RS[R_PROGRESS]
            return D_PROGRESS
        if RS[R_NSIM] == 0:
            return D_DONE
        H = GT[GT_SIM]
        time, kind, a, b = H[0, 0], H[0, 2], H[0, 3], H[0, 4]
        dead = cancelled(RS, H, 0)
        pop(RS, GT)
        if dead:
            continue
        RS[R_NOW] = time
        if kind == E_FINISH:
            finish_compute(kt, rt, a, b)
            work(kt, rt)
        elif kind == E_WAKE:
            RS[R_WAKE_SEQ] = -1
            RS[R_IN_RUN] = 1
        elif kind == E_UPCALLS:
            RS[R_UPCALL_EV] = 0
            flush_upcalls(kt, rt)  # all frame events of this instant are done
            RS[R_IN_RUN] = 1
        elif kind == E_LOCAL:
            delivered(kt, rt, a, b)
            work(kt, rt)
