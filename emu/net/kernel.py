"""The per-frame loop of the packet-level network, compiled with numba.

Why it is shaped this way (htsim's lessons):
- A link is a FIFO whose departure times follow from arrival order alone
  (d_k = max(a_k, d_{k-1}) + s_k), so a frame's transmission start, end and
  arrival at the far node are fixed the moment it is queued. The only event a
  link ever needs is "the head of my FIFO arrives at the far end": at most one
  pending arrival per link direction, plus at most one wake-up for its local
  source (the NIC packetizer). The heap holds O(links) entries.
- State lives in a handful of 2-D integer tables (one row per link, frame,
  message, stream), so crossing from Python costs a few array unboxings.
- Routes are precomputed forwarding tables: a row per (route, node) listing
  egress links and whether the node delivers the frame locally. Unicast and
  multicast are the same mechanism.

Event order at equal times: arrivals before source wake-ups, then ascending link
id. The reference model in the tests implements the same rule independently.

Nothing here knows about messages' meaning: the Python side (emu.net.network)
creates messages and streams and interprets the upcalls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .ethernet import PS_PER_S, WIRE_OVERHEAD, MIN_FRAME

# ---- scalar slots (SC) -------------------------------------------------------
SC_NOW = 0        # time of the last processed event
SC_HEAP = 1       # heap size
SC_FREE = 2       # frame pool: number of free entries on the stack
SC_UP = 3         # upcalls written
SC_LOG = 4        # transmission records written
SC_LOSSLESS = 5   # 1: transit frames are never dropped for lack of queue space
SC_LOGGING = 6    # 1: write a record per transmission
SC_SFREE = 7      # stream pool: free entries on the stack
SC_NLINKS = 8
SC_NNODES = 9
SC_DUPS = 10      # duplicate frames discarded at destinations
SC_BURST = 11     # max frames a source pushes per event
SC_SIZE = 12

# ---- link table (LK, int64) -------------------------------------------------
L_SRC = 0
L_DST = 1
L_RATE = 2        # bits per second
L_LAT = 3         # propagation (+ the receiving NIC's latency when it has no datapath link), ps
L_MTU = 4         # max Ethernet payload bytes
L_CAPF = 5        # queue capacity in frames (0: none)
L_CAPB = 6        # queue capacity in bytes (0: none)
L_UP = 7
L_HEAD = 8        # oldest frame not yet arrived (-1: empty)
L_TAIL = 9
L_TXQ = 10        # oldest frame not yet started (-1: none waiting)
L_QF = 11         # frames waiting
L_QB = 12         # bytes waiting
L_LAST_END = 13   # end of the last scheduled transmission
L_ARR_PEND = 14   # time of the pending arrival event (-1: none)
L_SRC_PEND = 15   # time of the pending source wake-up (-1: none)
L_SHEAD = 16      # source streams FIFO
L_STAIL = 17
L_OFF_F = 18      # frames offered to the egress queue
L_OFF_B = 19
L_TX_F = 20       # frames transmitted
L_TX_B = 21       # wire bytes transmitted (with preamble, FCS, gap)
L_DLV_F = 22      # frames accepted by the far node
L_DLV_B = 23
L_BUSY = 24       # ps spent transmitting
L_MAXQ = 25       # peak bytes waiting
L_LOSS = 26       # loss model: 0 none, 1 Bernoulli, 2 Gilbert-Elliott
L_GE_BAD = 27     # Gilbert-Elliott state
L_TXN = 28        # transmissions so far (index for explicit drop lists)
L_DL_POS = 29     # next position in this link's explicit drop list
L_DL_END = 30
L_BLOCKED = 31    # 1: the packetizer waits for the queue to drain
L_SER_LEN = 32    # memo of the last serialization: frame bytes ...
L_SER_PS = 33     # ... and its time at the current rate
L_NICQ = 34       # the receiving node's NIC datapath, as a link of its own (-1: none)
L_NCOLS = 35

# ---- link parameters (LF, float64) ------------------------------------------
LF_P = 0          # Bernoulli loss p, or Gilbert-Elliott good->bad
LF_R = 1          # Gilbert-Elliott bad->good
LF_LG = 2         # loss probability in the good state
LF_LB = 3         # loss probability in the bad state
LF_CORRUPT = 4    # corruption probability (caught by the receiver's FCS)
LF_NCOLS = 5

# ---- drop causes (LD[link, cause, 0=frames 1=bytes]) ---------------------
DROP_QUEUE = 0
DROP_LOSS = 1
DROP_CORRUPT = 2
DROP_DOWN = 3
DROP_MTU = 4
DROP_NOROUTE = 5
N_CAUSES = 6
CAUSE_NAMES = ("queue_full", "loss", "corrupt", "link_down", "mtu", "no_route")

# ---- frame pool (FP, int64) ---------------------------------------------------
F_MSG = 0
F_FRAG = 1
F_LEN = 2         # frame bytes: Ethernet header + MCF header + payload
F_ROUTE = 3
F_NEXT = 4        # next in the link FIFO
F_ENQ = 5
F_START = 6
F_END = 7
F_ARR = 8
F_FATE = 9        # 0 ok, else the drop cause decided at transmission
F_QB = 10         # bytes waiting ahead of it when queued
F_RETX = 11       # 1: sent again by a resend stream (the header's RETX flag)
F_NCOLS = 12

# ---- messages (MS, int64) ---------------------------------------------------
M_SRC = 0
M_NFRAGS = 1
M_FLEN = 2        # frame bytes of a full fragment
M_LLEN = 3        # frame bytes of the last fragment
M_FLAGS = 4
M_DPTR = 5        # first row of its destinations in MD
M_DEND = 6
M_NCOLS = 7
MF_FRAME_UPCALL = 1   # tell Python about every delivered frame (reductions)
MF_TRACK = 2          # keep a bitmap per destination: discard duplicates

# ---- message destinations (MD, int64) --------------------------------------
D_NODE = 0
D_GOT = 1         # distinct fragments received
D_BITS = 2        # offset of the received-bitmap in BITS (-1: untracked)
D_NCOLS = 3

# ---- streams (SP, int64): a source cursor feeding one egress link -----------
S_MSG = 0
S_ROUTE = 1
S_POS = 2         # next fragment (or next index into SL when S_LIST >= 0)
S_END = 3
S_LIST = 4        # -1: fragments S_POS..S_END-1; else offsets into SL
S_READY = 5       # earliest time of its first frame
S_NEXT = 6        # next stream on the same link
S_NCOLS = 7

# ---- upcalls (UP, int64) ----------------------------------------------------
U_TIME = 0
U_KIND = 1
U_MSG = 2
U_NODE = 3        # node, or link for STREAM_DONE
U_FRAG = 4
U_NCOLS = 5
UP_DONE = 0       # message complete at a destination
UP_FRAME = 1      # one frame delivered at a destination (MF_FRAME_UPCALL)
UP_SENT = 2       # a stream pushed its last frame

# ---- transmission log (LG, int64) ------------------------------------------
G_LINK = 0
G_MSG = 1
G_FRAG = 2
G_ENQ = 3
G_START = 4
G_END = 5
G_ARR = 6         # when the receiving NIC has it (the time of the arrival event)
G_LEN = 7
G_QB = 8          # bytes waiting ahead of it when it was queued
G_FATE = 9
G_RETX = 10
G_NCOLS = 11

# ---- return statuses of advance() ---------------------------------------------
ST_IDLE = 0       # no events left
ST_LIMIT = 1      # next event is after the time limit
ST_UPCALLS = 2    # upcalls to hand to Python (all events at that time done)
ST_NEED_FRAMES = 3
ST_NEED_UPCALLS = 4
ST_NEED_LOG = 5
ST_NEED_HEAP = 6

INF = np.int64(2**62)
_KIND_SHIFT = 1 << 40  # heap key = kind * _KIND_SHIFT + link


# ---- small helpers ----------------------------------------------------------

@njit(cache=True, inline="always")
def _ser_ps(frame_len, rate):
    wire = max(frame_len, MIN_FRAME) + WIRE_OVERHEAD
    return (wire * 8 * PS_PER_S + rate - 1) // rate


@njit(cache=True, inline="always")
def _rand(LR, link, which):
    # splitmix64: a tiny per-link, per-purpose stream, so one link's draws never
    # shift another's and the same seed gives the same drops.
    x = LR[link, which] + np.uint64(0x9E3779B97F4A7C15)
    LR[link, which] = x
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def heap_push(HP, SC, time, key):
    n = SC[SC_HEAP]
    HP[n, 0] = time
    HP[n, 1] = key
    SC[SC_HEAP] = n + 1
    while n > 0:
        p = (n - 1) >> 1
        if HP[p, 0] < HP[n, 0] or (HP[p, 0] == HP[n, 0] and HP[p, 1] <= HP[n, 1]):
            break
        t0 = HP[p, 0]
        k0 = HP[p, 1]
        HP[p, 0] = HP[n, 0]
        HP[p, 1] = HP[n, 1]
        HP[n, 0] = t0
        HP[n, 1] = k0
        n = p


@njit(cache=True)
def _heap_pop(HP, SC):
    n = SC[SC_HEAP] - 1
    SC[SC_HEAP] = n
    HP[0, 0] = HP[n, 0]
    HP[0, 1] = HP[n, 1]
    i = 0
    while True:
        l = 2 * i + 1
        if l >= n:
            break
        c = l
        r = l + 1
        if r < n and (HP[r, 0] < HP[l, 0] or (HP[r, 0] == HP[l, 0] and HP[r, 1] < HP[l, 1])):
            c = r
        if HP[i, 0] < HP[c, 0] or (HP[i, 0] == HP[c, 0] and HP[i, 1] <= HP[c, 1]):
            break
        t0 = HP[c, 0]
        k0 = HP[c, 1]
        HP[c, 0] = HP[i, 0]
        HP[c, 1] = HP[i, 1]
        HP[i, 0] = t0
        HP[i, 1] = k0
        i = c


@njit(cache=True)
def schedule_arrival(LK, HP, SC, link, time):
    if LK[link, L_ARR_PEND] == time:
        return
    LK[link, L_ARR_PEND] = time
    heap_push(HP, SC, time, link)


@njit(cache=True)
def schedule_source(LK, HP, SC, link, time):
    pend = LK[link, L_SRC_PEND]
    if pend != -1 and pend <= time:
        return  # an earlier wake-up is pending; it re-arms itself
    LK[link, L_SRC_PEND] = time
    heap_push(HP, SC, time, _KIND_SHIFT + link)


@njit(cache=True)
def _drain_started(LK, FP, link, t):
    """Frames whose transmission has started by ``t`` leave the waiting queue."""
    e = LK[link, L_TXQ]
    while e != -1 and FP[e, F_START] <= t:
        LK[link, L_QF] -= 1
        LK[link, L_QB] -= FP[e, F_LEN]
        e = FP[e, F_NEXT]
    LK[link, L_TXQ] = e


@njit(cache=True)
def _drop(LK, LD, link, cause, frame_len):
    LD[link, cause, 0] += 1
    LD[link, cause, 1] += frame_len


@njit(cache=True)
def _fate(LK, LF, LR, DL, link):
    """Loss and corruption drawn at transmission, in transmission order."""
    n = LK[link, L_TXN]
    LK[link, L_TXN] = n + 1
    pos = LK[link, L_DL_POS]
    if pos < LK[link, L_DL_END] and DL[pos] == n:
        LK[link, L_DL_POS] = pos + 1
        return DROP_LOSS
    kind = LK[link, L_LOSS]
    lost = False
    if kind == 1:
        lost = _rand(LR, link, 0) < LF[link, LF_P]
    elif kind == 2:
        # Gilbert-Elliott: move between states, then lose with the state's probability.
        if LK[link, L_GE_BAD] == 0:
            if _rand(LR, link, 0) < LF[link, LF_P]:
                LK[link, L_GE_BAD] = 1
        else:
            if _rand(LR, link, 0) < LF[link, LF_R]:
                LK[link, L_GE_BAD] = 0
        p = LF[link, LF_LB] if LK[link, L_GE_BAD] == 1 else LF[link, LF_LG]
        lost = _rand(LR, link, 0) < p
    if lost:
        return DROP_LOSS
    if LF[link, LF_CORRUPT] > 0.0 and _rand(LR, link, 1) < LF[link, LF_CORRUPT]:
        return DROP_CORRUPT
    return 0


@njit(cache=True)
def enqueue(SC, LK, LF, LR, LD, DL, FP, HP, link, e, t, transit):
    """Put frame ``e`` on ``link``'s egress queue at ``t``; it is dropped or scheduled."""
    flen = FP[e, F_LEN]
    LK[link, L_OFF_F] += 1
    LK[link, L_OFF_B] += flen
    if LK[link, L_UP] == 0:
        _drop(LK, LD, link, DROP_DOWN, flen)
        return False
    if flen - 14 > LK[link, L_MTU]:
        _drop(LK, LD, link, DROP_MTU, flen)
        return False
    _drain_started(LK, FP, link, t)
    if transit and SC[SC_LOSSLESS] == 0:
        capf = LK[link, L_CAPF]
        capb = LK[link, L_CAPB]
        if (capf > 0 and LK[link, L_QF] + 1 > capf) or (capb > 0 and LK[link, L_QB] + flen > capb):
            _drop(LK, LD, link, DROP_QUEUE, flen)
            return False
    start = max(t, LK[link, L_LAST_END])
    if LK[link, L_SER_LEN] == flen:
        ser = LK[link, L_SER_PS]  # frames of a message share a size: skip the division
    else:
        ser = _ser_ps(flen, LK[link, L_RATE])
        LK[link, L_SER_LEN] = flen
        LK[link, L_SER_PS] = ser
    end = start + ser
    LK[link, L_LAST_END] = end
    FP[e, F_ENQ] = t
    FP[e, F_START] = start
    FP[e, F_END] = end
    FP[e, F_ARR] = end + LK[link, L_LAT]
    FP[e, F_NEXT] = -1
    fate = _fate(LK, LF, LR, DL, link)
    FP[e, F_FATE] = fate
    FP[e, F_QB] = LK[link, L_QB]
    if start > t:
        LK[link, L_QF] += 1
        LK[link, L_QB] += flen
        if LK[link, L_TXQ] == -1:
            LK[link, L_TXQ] = e
        if LK[link, L_QB] > LK[link, L_MAXQ]:
            LK[link, L_MAXQ] = LK[link, L_QB]
    tail = LK[link, L_TAIL]
    if tail == -1:
        LK[link, L_HEAD] = e
        schedule_arrival(LK, HP, SC, link, FP[e, F_ARR])
    else:
        FP[tail, F_NEXT] = e
    LK[link, L_TAIL] = e
    return True


@njit(cache=True)
def _alloc_frame(SC, FREE):
    n = SC[SC_FREE] - 1
    SC[SC_FREE] = n
    return FREE[n]


@njit(cache=True)
def _free_frame(SC, FREE, e):
    FREE[SC[SC_FREE]] = e
    SC[SC_FREE] += 1


@njit(cache=True)
def _upcall(SC, UP, t, kind, msg, node, frag):
    u = SC[SC_UP]
    UP[u, U_TIME] = t
    UP[u, U_KIND] = kind
    UP[u, U_MSG] = msg
    UP[u, U_NODE] = node
    UP[u, U_FRAG] = frag
    SC[SC_UP] = u + 1


@njit(cache=True)
def _deliver_local(SC, MS, MD, BITS, UP, msg, node, frag, t):
    d = MS[msg, M_DPTR]
    dend = MS[msg, M_DEND]
    while d < dend and MD[d, D_NODE] != node:
        d += 1
    if d == dend:
        return  # not a destination of this message (a tree passing through)
    off = MD[d, D_BITS]
    if off >= 0:
        byte = off + (frag >> 3)
        bit = np.uint8(1 << (frag & 7))
        if BITS[byte] & bit:
            SC[SC_DUPS] += 1
            return
        BITS[byte] |= bit
    MD[d, D_GOT] += 1
    if MS[msg, M_FLAGS] & MF_FRAME_UPCALL:
        _upcall(SC, UP, t, UP_FRAME, msg, node, frag)
    if MD[d, D_GOT] == MS[msg, M_NFRAGS]:
        _upcall(SC, UP, t, UP_DONE, msg, node, -1)


@njit(cache=True)
def _arrival(SC, LK, LF, LR, LD, DL, FP, FREE, HP, LG, FW, MS, MD, BITS, UP, link, t):
    # The waiting-queue pointer must never outlive the entry it points to.
    _drain_started(LK, FP, link, t)
    e = LK[link, L_HEAD]
    nxt = FP[e, F_NEXT]
    LK[link, L_HEAD] = nxt
    if nxt == -1:
        LK[link, L_TAIL] = -1
    else:
        schedule_arrival(LK, HP, SC, link, FP[nxt, F_ARR])
    fate = FP[e, F_FATE]
    flen = FP[e, F_LEN]
    # Transmission is accounted when it is over, so re-timing and link failures never
    # leave counters for frames that did not cross the wire.
    LK[link, L_TX_F] += 1
    LK[link, L_TX_B] += max(flen, MIN_FRAME) + WIRE_OVERHEAD
    LK[link, L_BUSY] += FP[e, F_END] - FP[e, F_START]
    if SC[SC_LOGGING] == 1 and link < SC[SC_NLINKS]:
        g = SC[SC_LOG]
        LG[g, G_LINK] = link
        LG[g, G_MSG] = FP[e, F_MSG]
        LG[g, G_FRAG] = FP[e, F_FRAG]
        LG[g, G_ENQ] = FP[e, F_ENQ]
        LG[g, G_START] = FP[e, F_START]
        LG[g, G_END] = FP[e, F_END]
        LG[g, G_ARR] = t
        LG[g, G_LEN] = flen
        LG[g, G_QB] = FP[e, F_QB]
        LG[g, G_FATE] = fate
        LG[g, G_RETX] = FP[e, F_RETX]
        SC[SC_LOG] = g + 1
    if fate != 0:
        _drop(LK, LD, link, fate, flen)
        _free_frame(SC, FREE, e)
        return
    nic = LK[link, L_NICQ]
    if nic >= 0:
        # A node with a finite-rate NIC datapath parses frames one at a time: the frame
        # queues there, and is forwarded when it leaves the datapath.
        LK[link, L_DLV_F] += 1
        LK[link, L_DLV_B] += flen
        if not enqueue(SC, LK, LF, LR, LD, DL, FP, HP, nic, e, t, True):
            _free_frame(SC, FREE, e)
        return
    node = LK[link, L_DST]
    row = FP[e, F_ROUTE] * SC[SC_NNODES] + node
    if FW[row, 0] != 1 and FW[row, 1] < 0:
        # Neither delivered nor forwarded: this node has no route for it.
        _drop(LK, LD, link, DROP_NOROUTE, flen)
        _free_frame(SC, FREE, e)
        return
    LK[link, L_DLV_F] += 1
    LK[link, L_DLV_B] += flen
    msg = FP[e, F_MSG]
    frag = FP[e, F_FRAG]
    if FW[row, 0] == 1:
        _deliver_local(SC, MS, MD, BITS, UP, msg, node, frag, t)
    # Forward a copy on each egress link of this (route, node); reuse the entry for the first.
    k = 1
    ncols = FW.shape[1]
    first = True
    while k < ncols and FW[row, k] >= 0:
        out = FW[row, k]
        if first:
            c = e
            first = False
        else:
            c = _alloc_frame(SC, FREE)
            FP[c, F_MSG] = msg
            FP[c, F_FRAG] = frag
            FP[c, F_LEN] = flen
            FP[c, F_ROUTE] = FP[e, F_ROUTE]
            FP[c, F_RETX] = FP[e, F_RETX]
        if not enqueue(SC, LK, LF, LR, LD, DL, FP, HP, out, c, t, True):
            _free_frame(SC, FREE, c)
        k += 1
    if first:
        _free_frame(SC, FREE, e)


@njit(cache=True)
def _source(SC, LK, LF, LR, LD, DL, FP, FREE, HP, MS, SP, SL, SFREE, UP, link, t):
    """The packetizer feeding ``link`` pushes frames while its queue has room."""
    LK[link, L_SRC_PEND] = -1
    _drain_started(LK, FP, link, t)
    capf = LK[link, L_CAPF]
    capb = LK[link, L_CAPB]
    pushed = 0
    burst = SC[SC_BURST]
    while True:
        s = LK[link, L_SHEAD]
        if s == -1:
            return
        if SP[s, S_READY] > t:
            schedule_source(LK, HP, SC, link, SP[s, S_READY])
            return
        if pushed >= burst:
            schedule_source(LK, HP, SC, link, t)  # continue at the same time
            return
        msg = SP[s, S_MSG]
        pos = SP[s, S_POS]
        frag = pos if SP[s, S_LIST] < 0 else SL[SP[s, S_LIST] + pos]
        flen = MS[msg, M_LLEN] if frag == MS[msg, M_NFRAGS] - 1 else MS[msg, M_FLEN]
        waiting = LK[link, L_QF]
        if LK[link, L_UP] == 1 and waiting > 0 and (
            LK[link, L_BLOCKED] == 1
            or (capf > 0 and waiting + 1 > capf)
            or (capb > 0 and LK[link, L_QB] + flen > capb)
        ):
            # Backpressure with hysteresis: once full, refill when the queue has
            # drained, i.e. when its newest frame starts transmitting. That frame
            # covers the refill, so the link never idles, and a packetizer costs
            # one event per queue-full of frames instead of one per frame.
            LK[link, L_BLOCKED] = 1
            schedule_source(LK, HP, SC, link, FP[LK[link, L_TAIL], F_START])
            return
        LK[link, L_BLOCKED] = 0
        e = _alloc_frame(SC, FREE)
        FP[e, F_MSG] = msg
        FP[e, F_FRAG] = frag
        FP[e, F_LEN] = flen
        FP[e, F_ROUTE] = SP[s, S_ROUTE]
        FP[e, F_RETX] = 1 if SP[s, S_LIST] >= 0 else 0
        if not enqueue(SC, LK, LF, LR, LD, DL, FP, HP, link, e, t, False):
            _free_frame(SC, FREE, e)
        pushed += 1
        pos += 1
        SP[s, S_POS] = pos
        if pos == SP[s, S_END]:
            nxt = SP[s, S_NEXT]
            LK[link, L_SHEAD] = nxt
            if nxt == -1:
                LK[link, L_STAIL] = -1
            SFREE[SC[SC_SFREE]] = s
            SC[SC_SFREE] += 1
            _upcall(SC, UP, t, UP_SENT, msg, link, -1)


@njit(cache=True)
def add_stream(SC, LK, HP, SP, SFREE, link, msg, route, pos, end, lst, ready):
    """Append a stream to ``link``'s packetizer FIFO; returns its row."""
    n = SC[SC_SFREE] - 1
    SC[SC_SFREE] = n
    s = SFREE[n]
    SP[s, S_MSG] = msg
    SP[s, S_ROUTE] = route
    SP[s, S_POS] = pos
    SP[s, S_END] = end
    SP[s, S_LIST] = lst
    SP[s, S_READY] = ready
    SP[s, S_NEXT] = -1
    tail = LK[link, L_STAIL]
    if tail == -1:
        LK[link, L_SHEAD] = s
    else:
        SP[tail, S_NEXT] = s
    LK[link, L_STAIL] = s
    if LK[link, L_SHEAD] == s:
        schedule_source(LK, HP, SC, link, ready)
    return s


@njit(cache=True)
def advance(SC, LK, LF, LR, LD, DL, FP, FREE, HP, LG, FW, MS, MD, BITS, UP, SP, SL, SFREE, limit, margin):
    """Process events up to time ``limit``; return (status, time).

    Stops early, before touching an event, when a buffer might overflow
    (``margin`` rows of frames, upcalls and log records), so Python can grow or
    flush it and call again; and after the last event of a time that produced
    upcalls, so Python handles them at the right simulated time.
    """
    # Upcalls left from a call that stopped to grow a buffer keep their time.
    up_time = UP[0, U_TIME] if SC[SC_UP] > 0 else -1
    while True:
        if SC[SC_HEAP] == 0:
            if SC[SC_UP] > 0:
                return ST_UPCALLS, up_time
            return ST_IDLE, SC[SC_NOW]
        t = HP[0, 0]
        if SC[SC_UP] > 0 and t > up_time:
            return ST_UPCALLS, up_time
        if t > limit:
            return ST_LIMIT, t
        if SC[SC_FREE] < margin:
            return ST_NEED_FRAMES, t
        if SC[SC_UP] + margin > UP.shape[0]:
            return ST_NEED_UPCALLS, t
        if SC[SC_LOGGING] == 1 and SC[SC_LOG] + margin > LG.shape[0]:
            return ST_NEED_LOG, t
        if SC[SC_HEAP] + margin > HP.shape[0]:
            return ST_NEED_HEAP, t
        key = HP[0, 1]
        _heap_pop(HP, SC)
        SC[SC_NOW] = t
        if key >= _KIND_SHIFT:
            link = key - _KIND_SHIFT
            if LK[link, L_SRC_PEND] != t:
                continue  # superseded by an earlier wake-up
            _source(SC, LK, LF, LR, LD, DL, FP, FREE, HP, MS, SP, SL, SFREE, UP, link, t)
        else:
            link = key
            if LK[link, L_ARR_PEND] != t or LK[link, L_HEAD] == -1:
                continue  # stale: the FIFO was flushed or rescheduled
            LK[link, L_ARR_PEND] = -1
            _arrival(SC, LK, LF, LR, LD, DL, FP, FREE, HP, LG, FW, MS, MD, BITS, UP, link, t)
        if SC[SC_UP] > 0 and up_time < 0:
            up_time = t


@njit(cache=True)
def link_down(SC, LK, LD, FP, FREE, link, t):
    """Take a link down at ``t``: every frame queued or on the wire is dropped."""
    e = LK[link, L_HEAD]
    while e != -1:
        nxt = FP[e, F_NEXT]
        flen = FP[e, F_LEN]
        if FP[e, F_END] <= t:
            # Fully sent, lost with the link while propagating.
            LK[link, L_TX_F] += 1
            LK[link, L_TX_B] += max(flen, MIN_FRAME) + WIRE_OVERHEAD
            LK[link, L_BUSY] += FP[e, F_END] - FP[e, F_START]
        elif FP[e, F_START] < t:
            LK[link, L_BUSY] += t - FP[e, F_START]  # cut off mid-frame
        _drop(LK, LD, link, DROP_DOWN, flen)
        _free_frame(SC, FREE, e)
        e = nxt
    LK[link, L_HEAD] = -1
    LK[link, L_TAIL] = -1
    LK[link, L_TXQ] = -1
    LK[link, L_QF] = 0
    LK[link, L_QB] = 0
    LK[link, L_ARR_PEND] = -1
    LK[link, L_UP] = 0
    # The partly sent frame is cut off: the line is free from now on.
    LK[link, L_LAST_END] = t


@njit(cache=True)
def link_up(LK, link, t):
    LK[link, L_UP] = 1
    LK[link, L_LAST_END] = max(LK[link, L_LAST_END], t)


@njit(cache=True)
def set_rate(SC, LK, FP, HP, link, rate, t):
    """Change a link's rate at ``t``; frames not yet started are re-timed at the new rate."""
    LK[link, L_RATE] = rate
    LK[link, L_SER_LEN] = -1
    _drain_started(LK, FP, link, t)
    e = LK[link, L_TXQ]
    if e == -1:
        return
    # Walk the FIFO to find the end of the last started frame.
    prev_end = t
    p = LK[link, L_HEAD]
    while p != -1 and p != e:
        prev_end = max(prev_end, FP[p, F_END])
        p = FP[p, F_NEXT]
    while e != -1:
        start = max(FP[e, F_ENQ], prev_end)
        end = start + _ser_ps(FP[e, F_LEN], rate)
        FP[e, F_START] = start
        FP[e, F_END] = end
        FP[e, F_ARR] = end + LK[link, L_LAT]
        prev_end = end
        e = FP[e, F_NEXT]
    LK[link, L_LAST_END] = prev_end
    head = LK[link, L_HEAD]
    schedule_arrival(LK, HP, SC, link, FP[head, F_ARR])
