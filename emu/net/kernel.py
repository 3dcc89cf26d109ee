"""The per-frame loop of the packet-level network, compiled with numba.

The model is the port of docs/engine.md: every link direction is an egress port
of its source node with a LOCAL queue (the node's packetizer streams, whose
frames are generated only when granted), a TRANSIT queue (frames the node
forwards), one transmitter and an arbiter between the two queues.

Why it is shaped this way (htsim's lessons):
- Few events. A port has at most one pending transmitter event (the time its
  transmitter is free and has something to grant, or a stream becomes ready),
  and a link at most one pending arrival (its oldest frame on the wire or
  propagating reaches the far node). The heap holds O(links) live entries.
- State lives in a handful of 2-D integer tables (one row per link, frame,
  message, stream, node), so crossing from Python costs a few array unboxings.
  Their columns are declared once as data (``LINKS``, ``FRAMES``, ``LOG``, ...,
  emu.net.tables); the column constants below are derived from the declarations.
- Trains: a port grants a stream's consecutive full frames as one event while
  nothing else can be granted in between, and cuts the train back to per-frame
  state where that stops being true: a transit frame joins the port, or the caller
  touches the port or reads the counters (``cut_port``, ``settle``; docs/engine.md,
  "Trains"). Returning from ``advance`` cuts nothing. A node that only delivers a
  train's frames (directly or through its idle datapath) takes them as one event at
  the last one's arrival, and takes those arrived by then wherever something reads
  them first (``take_deferred``, ``settle_deferred``, another frame of the message).
- Routes are precomputed forwarding tables: a row per (route, node) listing
  egress links and whether the node delivers the frame locally. Unicast and
  multicast are the same mechanism.

Order at one instant t (heap key = kind * 2**40 + link): all arrivals at t in
ascending link id, then every free transmitter grants in ascending link id;
Python (the application, timeline changes) runs between those phases, see
``advance``.

Nothing here knows about messages' meaning: the Python side (emu.net.network)
creates messages and streams and interprets the upcalls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)
from .. import bits, heap
from ..codec.mac import ETH_LEN
from .framing import serialization_ps, wire_bytes
from .tables import Table

# ---- scalar slots (SC) -------------------------------------------------------
SC_NOW = 0        # time of the last processed event
SC_HEAP = 1       # events pending (the event queue's entries, row 0 included)
SC_FREE = 2       # frame pool: number of free entries on the stack
SC_UP = 3         # upcalls written
SC_LOG = 4        # transmission records written
SC_LOSSLESS = 5   # 1: transit frames are never dropped for lack of queue space
SC_LOGGING = 6    # 1: write a record per transmission
SC_SFREE = 7      # stream pool: free entries on the stack
SC_NLINKS = 8
SC_NNODES = 9
SC_ARB = 10       # port arbiter: ARB_RR, ARB_TRANSIT, ARB_LOCAL
SC_EVENTS = 11    # events processed (arrivals and transmitter looks)
SC_STALE = 12     # heap entries popped and skipped (superseded or flushed)
SC_BIN_PS = 13    # width of the per-link statistics bins in LB, ps (0: no bins)
SC_TRAINS = 14    # 1: a port grants a stream's consecutive frames as one train (docs/engine.md)
SC_NTRAINS = 15   # trains granted (of two frames or more)
SC_TRAIN_FRAMES = 16  # frames granted in trains (net of cuts)
SC_TRAIN_HELD = 17    # frames that train entries stand for beyond their one pool row
SC_TRAIN_CUTS = 18    # trains split before their end (a transit frame, or the caller touches the port)
SC_AT_T = 19          # the point the loop has reached when advance returned: its time ...
SC_AT_KEY = 20        # ... and heap key (events before (SC_AT_T, SC_AT_KEY) are done)
SC_BIN_LO = 21       # memo of the last bin looked up in LB: its start, ps ...
SC_BIN_IDX = 22      # ... and its index (a frame's times are almost always in the current bin: no division)
SC_DEFERRED = 23     # train entries whose frames are delivered as one at the far end (pending now)
SC_NDEFER = 24       # trains delivered as one at their destination (docs/engine.md, "Trains")
SC_QCUR = 25         # event queue: the calendar's first bucket (absolute number: time >> Q_SHIFT)
SC_BIN_CAP = 26      # most bins LB may hold (0: no limit): past it the bins widen (coarsen_bins)
SC_CREDIT = 27       # 1: hop-by-hop credit flow control (docs/engine.md, "Port buffers and flow control")
SC_CTOKENS = 28      # credit returns on their way (rows of the frame pool that are not frames)
SC_QCAL = 29         # event queue: entries in the calendar
SC_QHEAP = 30        # event queue: entries in the binary heap behind it
SC_PULL = 31         # 1: a datapath takes its node's arrived frames off their links (docs/engine.md, "Datapath pull")
SC_LATE = 32         # events processed at a time before the clock (0: the clock never runs backwards)
SC_SIZE = 33
PULL_SLOTS = 8       # links into one node a datapath can pull from (LK's in_arr*, in_link* columns)

ARB_RR = 0        # round robin per frame between the local and the transit queue
ARB_TRANSIT = 1   # transit first
ARB_LOCAL = 2     # local first
ARBITERS = {"rr": ARB_RR, "transit-first": ARB_TRANSIT, "local-first": ARB_LOCAL}

# ---- link table (LK, int64): one row per link direction (its egress port) ------
LINKS = Table("link directions (LK)", "L", (
    ("src", 'transmitting node'),
    ("dst", 'receiving node'),
    ("rate", 'bits per second'),
    ("lat", "propagation (+ the receiving node's latency when it has no datapath link), ps"),
    ("mtu", 'max Ethernet payload bytes'),
    ("capf", 'transit queue capacity in frames (0: none)'),
    ("capb", 'transit queue capacity in bytes (0: none)'),
    ("up", '1: carrier up'),
    ("whead", 'oldest frame granted and not yet arrived (-1: none)'),
    ("wtail", 'newest frame on the wire'),
    ("thead", 'transit queue (-1: empty)'),
    ("ttail", 'newest transit frame'),
    ("qf", 'transit frames waiting'),
    ("qb", 'transit bytes waiting'),
    ("tx_end", 'the transmitter is busy until then'),
    ("arr_pend", "time of the pending arrival event (-1: none); a link a datapath pulls from: its wire head's arrival"),
    ("tx_pend", 'time of the pending transmitter event (-1: none)'),
    ("shead", 'local queue: packetizer streams, FIFO'),
    ("stail", 'last stream of the local queue'),
    ("last", 'queue granted last: 0 transit, 1 local'),
    ("sent", 'message whose stream ends with the frame on the wire (-1: none)'),
    ("off_f", 'frames offered to the port (transit offered + local granted)'),
    ("off_b", 'bytes offered'),
    ("tx_f", 'frames transmitted'),
    ("tx_b", 'wire bytes transmitted (with preamble, FCS, gap)'),
    ("dlv_f", 'frames that reached the far node intact'),
    ("dlv_b", 'bytes delivered'),
    ("busy", 'ps spent transmitting'),
    ("maxq", 'peak transit bytes waiting'),
    ("local_f", 'grants to the local queue'),
    ("transit_f", 'grants to the transit queue'),
    ("loss", 'loss model: 0 none, 1 Bernoulli, 2 Gilbert-Elliott'),
    ("ge_bad", 'Gilbert-Elliott state'),
    ("txn", 'transmissions so far (index for explicit drop lists)'),
    ("dl_pos", "next position in this link's explicit drop list"),
    ("dl_end","end of this link's explicit drop list"),
    ("ser_len", 'memo of the last serialization: frame bytes ...'),
    ("ser_ps", '... and its time at the current rate'),
    ("nicq", "the receiving node's datapath, as a link of its own (-1: none)"),
    ("train", 'the train this port is transmitting: its frame entry (the wire tail) + 1; 0: none'),
    ("defer_in", "a datapath: DEFER_DATAPATH trains arriving into it"),
    ("held", "pause: bytes of frames that arrived over this link and wait in the far node's transit queues"),
    ("held_max", "pause: peak of held"),
    ("xoff", "pause: the far node sends PAUSE when held reaches this (0: no pause on this link)"),
    ("xon", "pause: ... and the resume when held falls below this"),
    ("pause_dly", "pause, credit: ps from the far node's decision (PAUSE, or a credit return) to this port having it (its frame's wire time + propagation)"),
    ("xoff_sent", "pause: 1 while the far node's last decision was PAUSE"),
    ("paused", "pause: 1 while this port starts no frame; credit: 1 while its head frame waits for credit"),
    ("paused_at", "pause: when it was paused (credit: starved)"),
    ("paused_ps", "pause: time paused before paused_at (credit: starved)"),
    ("credit", "credit: bytes of the far node's transit buffer this port may still fill"),
    ("chead", "credit: the oldest credit return on its way to this port (a frame pool row; -1: none)"),
    ("ctail", "credit: the newest credit return on its way"),
    ("in_slot", "a link into a node with a datapath it pulls from: its slot there (-1: none)"),
    ("in_n", "a datapath: the links into its node (slots)"),
    ("in_arr0", "a datapath: slot 0's wire head arrival (-1: none)"),
    ("in_arr1", "a datapath: slot 1's wire head arrival (-1: none)"),
    ("in_arr2", "a datapath: slot 2's wire head arrival (-1: none)"),
    ("in_arr3", "a datapath: slot 3's wire head arrival (-1: none)"),
    ("in_arr4", "a datapath: slot 4's wire head arrival (-1: none)"),
    ("in_arr5", "a datapath: slot 5's wire head arrival (-1: none)"),
    ("in_arr6", "a datapath: slot 6's wire head arrival (-1: none)"),
    ("in_arr7", "a datapath: slot 7's wire head arrival (-1: none)"),
    ("in_link0", "a datapath: slot 0's link"),
    ("in_link1", "a datapath: slot 1's link"),
    ("in_link2", "a datapath: slot 2's link"),
    ("in_link3", "a datapath: slot 3's link"),
    ("in_link4", "a datapath: slot 4's link"),
    ("in_link5", "a datapath: slot 5's link"),
    ("in_link6", "a datapath: slot 6's link"),
    ("in_link7", "a datapath: slot 7's link"),
    ("pull_from", "a pulling datapath with nothing on its wire: the link its pending event takes a frame from"),
))
# LINKS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(L_SRC, L_DST, L_RATE, L_LAT, L_MTU, L_CAPF, L_CAPB, L_UP, L_WHEAD, L_WTAIL, L_THEAD, L_TTAIL,
 L_QF, L_QB, L_TX_END, L_ARR_PEND, L_TX_PEND, L_SHEAD, L_STAIL, L_LAST, L_SENT, L_OFF_F,
 L_OFF_B, L_TX_F, L_TX_B, L_DLV_F, L_DLV_B, L_BUSY, L_MAXQ, L_LOCAL_F, L_TRANSIT_F, L_LOSS,
 L_GE_BAD, L_TXN, L_DL_POS, L_DL_END, L_SER_LEN, L_SER_PS, L_NICQ, L_TRAIN, L_DEFER_IN, L_HELD,
 L_HELD_MAX, L_XOFF, L_XON, L_PAUSE_DLY, L_XOFF_SENT, L_PAUSED, L_PAUSED_AT, L_PAUSED_PS,
 L_CREDIT, L_CHEAD, L_CTAIL, L_IN_SLOT, L_IN_N, L_IN_ARR0, L_IN_ARR1, L_IN_ARR2, L_IN_ARR3,
 L_IN_ARR4, L_IN_ARR5, L_IN_ARR6, L_IN_ARR7, L_IN_LINK0, L_IN_LINK1, L_IN_LINK2, L_IN_LINK3,
 L_IN_LINK4, L_IN_LINK5, L_IN_LINK6, L_IN_LINK7, L_PULL_FROM) = range(72)
L_NCOLS = 72

# ---- link parameters (LF, float64) ------------------------------------------
LINK_PARAMS = Table("link parameters (LF)", "LF", (
    ("p", 'Bernoulli loss p, or Gilbert-Elliott good->bad'),
    ("r", 'Gilbert-Elliott bad->good'),
    ("lg", 'loss probability in the good state'),
    ("lb", 'loss probability in the bad state'),
    ("corrupt", "corruption probability (caught by the receiver's FCS)"),
), dtype=np.float64)
# LINK_PARAMS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(LF_P, LF_R, LF_LG, LF_LB, LF_CORRUPT) = range(5)
LF_NCOLS = 5

# ---- drop causes: LD[link, cause, 0=frames 1=bytes], ND[node, cause, ...] --------
DROP_QUEUE = 0
DROP_LOSS = 1
DROP_CORRUPT = 2
DROP_DOWN = 3
DROP_MTU = 4
DROP_NOROUTE = 5
DROP_DUP = 6
N_CAUSES = 7
CAUSE_NAMES = ("queue_full", "loss", "corrupt", "link_down", "mtu", "no_route", "duplicate")

# ---- node counters (NS, int64) ----------------------------------------------
NODES = Table("node counters (NS)", "N", (
    ("off_f", "frame copies offered by this node's packetizer (one per frame per first-hop port)"),
    ("off_b", 'bytes offered'),
    ("repl_f", 'copies created here: delivered + forwarded - 1 per arriving copy'),
    ("dlv_f", 'frames delivered to the application here (duplicates excluded)'),
    ("dlv_b", 'bytes delivered'),
))
# NODES's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(N_OFF_F, N_OFF_B, N_REPL_F, N_DLV_F, N_DLV_B) = range(5)
N_NCOLS = 5

# ---- frame pool (FP, int64) ---------------------------------------------------
FRAMES = Table("frame pool (FP)", "F", (
    ("msg", 'message row'),
    ("frag", 'fragment index'),
    ("len", 'frame bytes: Ethernet header + MCF header + payload'),
    ("route", 'route (forwarding table block)'),
    ("next", 'next in the transit queue or on the wire'),
    ("enq", 'when it was offered to this port (local frames: when granted)'),
    ("start", 'transmission start on the current link'),
    ("end", 'transmission end'),
    ("arr", 'arrival at the far node'),
    ("fate", '0 ok, else the drop cause drawn at transmission start'),
    ("qb", 'transit bytes waiting ahead of it when offered'),
    ("retx", "1: sent again by a resend stream (the header's RETX flag)"),
    ("hops", 'physical links it crossed before this one'),
    ("local", "1: generated by this port's packetizer"),
    ("ntrain", 'frames this entry stands for: 1, or a train of consecutive fragments'),
    ("ser", "a train's per-frame serialization (frame k is on the wire F_START + k * F_GAP .. + F_SER)"),
    ("gap", "a train's spacing: frame k starts at F_START + k * F_GAP (= F_SER where it was granted)"),
    ("defer", "a train whose frames the far node takes as one (DEFER_*; 0: frame by frame)"),
    ("in", "the physical link it last arrived over (pause accounting at its node)"),
    ("cred", "credit: what its start on the current link spent (bytes x the far node's transit copies)"),
))
DEFER_HERE = 1      # the link's far node takes the train's frames as one, when its last frame is there
DEFER_DATAPATH = 2  # the frames pass the far node's idle datapath one by one, then as DEFER_HERE there
DEFER_NOT = -1      # taken back to frame by frame: not deferred again (whatever took it back recurs)
# FRAMES's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(F_MSG, F_FRAG, F_LEN, F_ROUTE, F_NEXT, F_ENQ, F_START, F_END, F_ARR, F_FATE, F_QB, F_RETX,
 F_HOPS, F_LOCAL, F_NTRAIN, F_SER, F_GAP, F_DEFER, F_IN, F_CRED) = range(20)
F_NCOLS = 20

# ---- messages (MS, int64) ---------------------------------------------------
MESSAGES = Table("messages (MS)", "M", (
    ("src", 'source node'),
    ("nfrags", 'fragments'),
    ("flen", 'frame bytes of a full fragment'),
    ("llen", 'frame bytes of the last fragment'),
    ("flags", 'MF_* flags'),
    ("dptr", 'first row of its destinations in MD'),
    ("dend", 'end of its destinations in MD'),
    ("live", 'its streams not yet sent'),
))
# MESSAGES's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(M_SRC, M_NFRAGS, M_FLEN, M_LLEN, M_FLAGS, M_DPTR, M_DEND, M_LIVE) = range(8)
M_NCOLS = 8
MF_FRAME_UPCALL = 1   # tell Python about every delivered frame (reductions)
MF_TRACK = 2          # keep a bitmap per destination: discard duplicates
MF_GAP_UPCALL = 4     # tell Python when a fragment arrives right after a missing one (a gap)
MF_SORTED = 8         # set by open_message: the destination rows are in ascending node order
# A priority stream goes ahead of a port's data streams only while the priority streams
# already ahead of them hold fewer than this many frames (docs/nic.md, "Reliable delivery").
PRIO_CAP_FRAMES = 64

# ---- message destinations (MD, int64) --------------------------------------
DESTS = Table("message destinations (MD)", "D", (
    ("node", 'destination node'),
    ("got", 'distinct fragments received'),
    ("bits", 'offset of the received-bitmap in BITS (-1: untracked)'),
    ("defer", "trains of the message this destination takes as one, pending"),
))
# DESTS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(D_NODE, D_GOT, D_BITS, D_DEFER) = range(4)
D_NCOLS = 4

# ---- streams (SP, int64): a packetizer cursor feeding one port's local queue -----
STREAMS = Table("streams (SP)", "S", (
    ("msg", 'message row'),
    ("route", 'route'),
    ("pos", 'next fragment (or next index into SL when S_LIST >= 0)'),
    ("end", 'one past its last position'),
    ("list", '-1: fragments S_POS..S_END-1; else offsets into SL'),
    ("ready", 'earliest time of its first frame'),
    ("next", 'next stream on the same port'),
    ("prio", '1: the priority class (control frames, resends), queued ahead of data streams'),
))
# STREAMS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(S_MSG, S_ROUTE, S_POS, S_END, S_LIST, S_READY, S_NEXT, S_PRIO) = range(8)
S_NCOLS = 8

# ---- upcalls (UP, int64) ----------------------------------------------------
UPCALLS = Table("upcalls (UP)", "U", (
    ("time", 'simulated time'),
    ("kind", 'UP_* kind'),
    ("msg", 'message row'),
    ("node", 'node, or link for UP_SENT'),
    ("frag", "fragment; for UP_SENT the message's streams still unsent"),
))
# UPCALLS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(U_TIME, U_KIND, U_MSG, U_NODE, U_FRAG) = range(5)
U_NCOLS = 5
UP_DONE = 0       # message complete at a destination
UP_FRAME = 1      # one frame delivered at a destination (MF_FRAME_UPCALL)
UP_SENT = 2       # a stream's last frame finished transmitting (or was dropped at the source)
UP_GAP = 3        # a tracked fragment arrived right after a missing one (MF_GAP_UPCALL)

# ---- transmission log (LG, int64) ------------------------------------------
LOG = Table("transmission log (LG)", "G", (
    ("link", 'link direction'),
    ("msg", 'message row'),
    ("frag", 'fragment index'),
    ("enq", 'when it was offered to the port (local: granted)'),
    ("start", 'transmission start'),
    ("end", 'transmission end'),
    ("arr", 'when the receiving node has it (the time of the arrival event)'),
    ("len", 'frame bytes'),
    ("qb", 'transit bytes waiting ahead of it when it was offered'),
    ("fate", '0 ok, else the DROP_* cause'),
    ("retx", '1: a resend'),
    ("hops", 'physical links it crossed before this one'),
    ("local", "1: from the transmitting node's own packetizer"),
))
# LOG's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(G_LINK, G_MSG, G_FRAG, G_ENQ, G_START, G_END, G_ARR, G_LEN, G_QB, G_FATE, G_RETX, G_HOPS,
 G_LOCAL) = range(13)
G_NCOLS = 13

# ---- per-link statistics (LB, int64): row bin * links + link, what LinkStats reports ----
# Bin-major rows, so the table grows by appending rows as the clock advances.
BINS = Table("per-link statistics (LB)", "B", (
    ("busy", 'ps the transmitter was busy within the bin'),
    ("bytes", 'wire bytes of the frames that started in the bin'),
    ("frames", 'frames that started in the bin'),
    ("queue", 'largest transit backlog (bytes) a frame found when queued in the bin'),
    ("lost", 'frames lost on the wire (loss, corruption, cut by a failure), by end bin'),
))
# BINS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(B_BUSY, B_BYTES, B_FRAMES, B_QUEUE, B_LOST) = range(5)
B_NCOLS = 5
B_NFIELDS = BINS.width

# ---- return statuses of advance() ---------------------------------------------
ST_IDLE = 0       # no events left
ST_LIMIT = 1      # next event is at or after the stop point
ST_UPCALLS = 2    # upcalls to hand to Python (all events at that time done)
ST_NEED_FRAMES = 3
ST_NEED_UPCALLS = 4
ST_NEED_LOG = 5
ST_NEED_HEAP = 6
ST_NEED_BINS = 7  # the statistics table needs more bins (the clock passed its last bin)

INF = np.int64(2**62)
_KIND_SHIFT = 1 << 40  # heap key = kind * _KIND_SHIFT + link: arrivals (0) before grants (1)
# A PAUSE or resume reaching port ``link``: key _PAUSE_KEY + 2 * link + (0 PAUSE, 1 resume), after
# the arrivals and before the grants of its instant (a PAUSE sent before a resume goes first).
_PAUSE_KEY = 1 << 39
# Credit returned to port ``link`` reaching it: key _CREDIT_KEY + link, in the same phase as a PAUSE.
_CREDIT_KEY = _PAUSE_KEY + (1 << 38)
KEY_GRANTS = _KIND_SHIFT   # stop key: before the grants at the limit time
KEY_ALL = INF              # stop key: after everything at the limit time


# ---- compilation -------------------------------------------------------------
# The kernel never allocates: every table is a borrowed NumPy array owned by the
# caller. Without numba's reference counting (_nrt=False) passing a table to a
# function costs nothing; with it, every nested call incremented and decremented
# the count of each array argument atomically, which was most of a frame-hop's cost.
# Internal steps are inlined into advance (one function, no call boundaries), each at
# one call site where it matters for compile time; the entry points Python and
# compiled drivers call, and rare steps (cutting a train), are compiled on their own.
_entry = njit(cache=True, _nrt=False)
_inline = njit(cache=True, inline="always", _nrt=False)


# ---- small helpers ----------------------------------------------------------

@_inline
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


# ---- the event queue (HP, int64 rows of (time, key)) --------------------------------------
# Row 0 holds the earliest pending entry: the next event, what the loop and Python read. The
# others wait in a calendar of near entries, Q_BUCKETS buckets of 2**Q_SHIFT ps (65.5 ns) from
# the bucket of the entry last moved to row 0 (SC_QCUR), each bucket a small binary heap of its
# own (emu.heap), or, where the calendar cannot take one (past its window, in a full bucket,
# before its first bucket), in a binary heap after it (rows HEAP_LO..). One binary heap of every
# entry costs a level for each doubling of the entries pending (about one a busy link: 29 on 16
# boards, 256 on 64 in MARS 16K); here the bucket is found from the time itself, and a bucket's
# heap holds only what falls in the same 65.5 ns (docs/engine.md, "The event queue"). The order
# is the same total order, (time, key), keys unique, so which structure holds an entry changes
# nothing but the cost.
Q_SHIFT = 16
Q_BUCKETS = 1024           # a power of two: bucket b is row block b % Q_BUCKETS
Q_CAP = 32                 # entries a bucket holds; more go to the heap behind the calendar
Q_BITS = 1                 # which buckets hold entries: bit b % 64 of word b // 64, two words a row
Q_COUNT = Q_BITS + Q_BUCKETS // 128  # the buckets' sizes: bucket b's at row Q_COUNT + b // 2, column b % 2
Q_SLOTS = Q_COUNT + Q_BUCKETS // 2  # bucket b's heap: rows Q_SLOTS + b * Q_CAP ...
HEAP_LO = Q_SLOTS + Q_BUCKETS * Q_CAP  # the heap behind the calendar: its first row


@_inline
def _q_put(HP, SC, t, key):
    """Entry (t, key), not the earliest, into the calendar or, where it cannot take it, the heap."""
    b = t >> Q_SHIFT
    d = b - SC[SC_QCUR]
    if d >= 0 and d < Q_BUCKETS:
        i = b & (Q_BUCKETS - 1)
        c = HP[Q_COUNT + (i >> 1), i & 1]
        if c < Q_CAP:
            HP[Q_COUNT + (i >> 1), i & 1] = c + 1
            if c == 0:
                HP[Q_BITS + (i >> 7), (i >> 6) & 1] |= np.int64(1) << (i & 63)
            SC[SC_QCAL] += 1
            heap.sift_up(HP, Q_SLOTS + i * Q_CAP, c, (t, key))
            return
    n = SC[SC_QHEAP]
    SC[SC_QHEAP] = n + 1
    heap.sift_up(HP, HEAP_LO, n, (t, key))


@_inline
def _q_next(HP, SC):
    """Row 0 takes the earliest entry of the calendar and the heap (at least one holds one)."""
    lo = -1  # the calendar's earliest: the top of its first bucket with entries
    c = 0
    if SC[SC_QCAL] > 0:
        # Every entry of the calendar is in one of the Q_BUCKETS buckets from SC_QCUR on: the
        # first with entries, from the bitmap a word (64 buckets) at a time.
        i = SC[SC_QCUR] & (Q_BUCKETS - 1)
        c = HP[Q_COUNT + (i >> 1), i & 1]
        if c == 0:
            w = i >> 6
            x = HP[Q_BITS + (w >> 1), w & 1] & (np.int64(-1) << (i & 63))
            while x == 0:
                w = (w + 1) & (Q_BUCKETS // 64 - 1)
                x = HP[Q_BITS + (w >> 1), w & 1]
            i = 64 * w + bits.lowest(x)
            c = HP[Q_COUNT + (i >> 1), i & 1]
        lo = Q_SLOTS + i * Q_CAP
    n = SC[SC_QHEAP]
    if n > 0 and (lo < 0 or HP[HEAP_LO, 0] < HP[lo, 0] or (HP[HEAP_LO, 0] == HP[lo, 0] and HP[HEAP_LO, 1] < HP[lo, 1])):
        lo = HEAP_LO
        c = n
        SC[SC_QHEAP] = n - 1
    else:
        i = (HP[lo, 0] >> Q_SHIFT) & (Q_BUCKETS - 1)
        HP[Q_COUNT + (i >> 1), i & 1] = c - 1
        if c == 1:
            HP[Q_BITS + (i >> 7), (i >> 6) & 1] &= ~(np.int64(1) << (i & 63))
        SC[SC_QCAL] -= 1
    HP[0, 0] = HP[lo, 0]
    HP[0, 1] = HP[lo, 1]
    heap.sift_down(HP, lo, c - 1, 0, (HP[lo + c - 1, 0], HP[lo + c - 1, 1]))
    # Every entry left is at or after row 0's: the calendar's window moves on to its bucket. Never
    # back while the calendar holds entries (row 0's can be before the window: the heap holds
    # what came before it), or a bucket would hold two laps.
    b = HP[0, 0] >> Q_SHIFT
    if b > SC[SC_QCUR] or SC[SC_QCAL] == 0:
        SC[SC_QCUR] = b


@_inline
def heap_push(HP, SC, time, key):
    """A pending event at (time, key): row 0 if it is the earliest (the one there goes back
    into the queue), else the calendar or the heap."""
    t = np.int64(time)
    k = np.int64(key)
    n = SC[SC_HEAP]
    SC[SC_HEAP] = n + 1
    if n == 0:
        HP[0, 0] = t
        HP[0, 1] = k
        SC[SC_QCUR] = t >> Q_SHIFT  # nothing else pending: the window starts here
        return
    t0 = HP[0, 0]
    k0 = HP[0, 1]
    if t < t0 or (t == t0 and k < k0):
        HP[0, 0] = t
        HP[0, 1] = k
        _q_put(HP, SC, t0, k0)
    else:
        _q_put(HP, SC, t, k)


@_entry
def _push_rare(HP, SC, time, key):
    """heap_push for the rare events (PAUSE, resume): one compiled call instead of another
    inlined copy of the heap's sift loops at each of their sites (compile time)."""
    heap_push(HP, SC, time, key)


@_inline
def _heap_pop(HP, SC):
    """The event at row 0 is done (or stale): the next earliest takes its place."""
    n = SC[SC_HEAP] - 1
    SC[SC_HEAP] = n
    if n > 0:
        _q_next(HP, SC)


@_inline
def _stale(SC, LK, t, key):
    """A heap entry left behind: a port's look superseded by an earlier one (a cut train's old
    end), or an arrival on a link that was flushed. A pulling datapath's event with nothing on
    its own wire is its next frame's, still on the link it arrived by (_pull_next)."""
    if key >= _KIND_SHIFT:
        return LK[key - _KIND_SHIFT, L_TX_PEND] != t
    if key >= _PAUSE_KEY:
        return False  # a PAUSE or resume on its way is always delivered
    if LK[key, L_ARR_PEND] != t:
        return True
    return LK[key, L_WHEAD] == -1 and not _pulls(SC, LK, key)


@_entry
def drop_stale(s):
    """Pop the entries left behind at the heap's top, so that the time the caller wakes up
    for is a real event's (a train cut by a failure leaves its old end there)."""
    SC, LK, HP = s.SC, s.LK, s.HP
    while SC[SC_HEAP] > 0 and _stale(SC, LK, HP[0, 0], HP[0, 1]):
        _heap_pop(HP, SC)
        SC[SC_STALE] += 1


@_inline
def schedule_arrival(LK, HP, SC, link, time):
    if LK[link, L_ARR_PEND] == time:
        return
    LK[link, L_ARR_PEND] = time
    heap_push(HP, SC, time, link)


@_inline
def schedule_tx(LK, HP, SC, link, time):
    """Make sure the port's transmitter looks at its queues at ``time`` (or earlier)."""
    pend = LK[link, L_TX_PEND]
    if pend != -1 and pend <= time:
        return  # an earlier look is pending; it re-arms itself
    LK[link, L_TX_PEND] = time
    heap_push(HP, SC, time, _KIND_SHIFT + link)


@_inline
def _drop_link(LD, link, cause, frame_len):
    LD[link, cause, 0] += 1
    LD[link, cause, 1] += frame_len


@_inline
def _drop_node(ND, node, cause, frames, nbytes):
    ND[node, cause, 0] += frames
    ND[node, cause, 1] += nbytes


@_inline
def _fate(LK, LF, LR, DL, link):
    """Loss and corruption drawn at transmission start, in transmission order."""
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


@_inline
def _alloc_frame(SC, FREE):
    n = SC[SC_FREE] - 1
    SC[SC_FREE] = n
    return FREE[n]


@_inline
def _free_frame(SC, FREE, e):
    FREE[SC[SC_FREE]] = e
    SC[SC_FREE] += 1


@_inline
def _upcall(SC, UP, t, kind, msg, node, frag):
    u = SC[SC_UP]
    UP[u, U_TIME] = t
    UP[u, U_KIND] = kind
    UP[u, U_MSG] = msg
    UP[u, U_NODE] = node
    UP[u, U_FRAG] = frag
    SC[SC_UP] = u + 1


@_entry
def _stream_sent(SC, MS, UP, msg, link, t):
    """A stream of ``msg`` is over: its last frame left ``link`` (or was dropped at the source)."""
    MS[msg, M_LIVE] -= 1
    _upcall(SC, UP, t, UP_SENT, msg, link, MS[msg, M_LIVE])


@_entry
def stream_sent(s, msg, link, t):
    """``_stream_sent`` from Python (a stream dropped at the source)."""
    _stream_sent(s.SC, s.MS, s.UP, msg, link, t)


@_inline
def offer_transit(SC, LK, LD, FP, FREE, HP, NS, SP, link, e, t):
    """Frame ``e`` joins the transit queue of port ``link`` at ``t``, or is dropped there."""
    flen = FP[e, F_LEN]
    LK[link, L_OFF_F] += 1
    LK[link, L_OFF_B] += flen
    if link >= SC[SC_NLINKS]:
        # A node's datapath: one FIFO server, never down, lossless, at a fixed rate, with
        # no local queue. Its departures follow from arrival order alone
        # (d_k = max(a_k, d_{k-1}) + s_k), so the frame is timed now without an event.
        FP[e, F_ENQ] = t
        LK[link, L_TRANSIT_F] += 1
        _put_on_wire(LK, FP, HP, SC, link, e, bits.larger(t, LK[link, L_TX_END]))
        return
    if LK[link, L_TRAIN] > 0:
        # A transit frame joins a port sending a train: the arbiter decides again at the
        # first grant from now on, so the frames of the train not yet started go back.
        _cut_train(SC, LK, FP, FREE, NS, SP, HP, link, t, 0)
    if LK[link, L_UP] == 0:
        _drop_link(LD, link, DROP_DOWN, flen)
        _free_frame(SC, FREE, e)
        if SC[SC_CREDIT] == 1:
            _credit_back(SC, LK, FP, FREE, HP, FP[e, F_IN], flen, t)  # the copy's credit goes back
        return
    if flen - ETH_LEN > LK[link, L_MTU]:
        _drop_link(LD, link, DROP_MTU, flen)
        _free_frame(SC, FREE, e)
        if SC[SC_CREDIT] == 1:
            _credit_back(SC, LK, FP, FREE, HP, FP[e, F_IN], flen, t)
        return
    if SC[SC_LOSSLESS] == 0:
        capf = LK[link, L_CAPF]
        capb = LK[link, L_CAPB]
        if (capf > 0 and LK[link, L_QF] + 1 > capf) or (capb > 0 and LK[link, L_QB] + flen > capb):
            _drop_link(LD, link, DROP_QUEUE, flen)
            _free_frame(SC, FREE, e)
            return
    FP[e, F_ENQ] = t
    FP[e, F_QB] = LK[link, L_QB]
    FP[e, F_LOCAL] = 0
    FP[e, F_NEXT] = -1
    tail = LK[link, L_TTAIL]
    if tail == -1:
        LK[link, L_THEAD] = e
    else:
        FP[tail, F_NEXT] = e
    LK[link, L_TTAIL] = e
    LK[link, L_QF] += 1
    LK[link, L_QB] += flen
    if LK[link, L_QB] > LK[link, L_MAXQ]:
        LK[link, L_MAXQ] = LK[link, L_QB]
    _hold(SC, LK, FP, FREE, HP, FP[e, F_IN], flen, 0, t)
    schedule_tx(LK, HP, SC, link, bits.larger(t, LK[link, L_TX_END]))


@_inline
def _hold(SC, LK, FP, FREE, HP, i, nbytes, back, t):
    """Pause accounting at the far node of link ``i`` (the link a transit frame arrived over):
    ``nbytes`` more (a frame joins a transit queue) or fewer (< 0: it leaves for the wire, or is
    dropped there) held for ``i``. Crossing XOFF upwards sends a PAUSE to ``i``'s port, falling
    below XON after one sends the resume; each reaches the port L_PAUSE_DLY later (docs/engine.md,
    "Port buffers and flow control"). Under credit the same count is kept, and a copy that leaves
    (``back`` > 0 bytes: granted on its egress port, or dropped there) returns its credit to ``i``."""
    if i < 0:
        return
    if LK[i, L_XOFF] == 0:
        if SC[SC_CREDIT] == 1:
            h = LK[i, L_HELD] + nbytes
            LK[i, L_HELD] = h
            if h > LK[i, L_HELD_MAX]:
                LK[i, L_HELD_MAX] = h
            if back != 0:
                _credit_back(SC, LK, FP, FREE, HP, i, back, t)
        return
    h = LK[i, L_HELD] + nbytes
    LK[i, L_HELD] = h
    if h > LK[i, L_HELD_MAX]:
        LK[i, L_HELD_MAX] = h
    if LK[i, L_XOFF_SENT] == 0:
        if h >= LK[i, L_XOFF]:
            LK[i, L_XOFF_SENT] = 1
            _push_rare(HP, SC, t + LK[i, L_PAUSE_DLY], _PAUSE_KEY + 2 * i)
    elif h < LK[i, L_XON]:
        LK[i, L_XOFF_SENT] = 0
        _push_rare(HP, SC, t + LK[i, L_PAUSE_DLY], _PAUSE_KEY + 2 * i + 1)


@_entry
def _pause_event(SC, LK, FP, FREE, NS, SP, HP, x, t, key):
    """A PAUSE (x even) or resume (x odd) reaches port x // 2 at (t, key). Paused, the port starts
    no frame from now (the one on the wire finishes; a train's frames not granted yet go back
    to their stream); resumed, its transmitter looks at its queues again."""
    link = x >> 1
    if x & 1 == 0:
        if LK[link, L_PAUSED] == 0:
            LK[link, L_PAUSED] = 1
            LK[link, L_PAUSED_AT] = t
            if LK[link, L_TRAIN] > 0:
                _cut_train(SC, LK, FP, FREE, NS, SP, HP, link, t, key)
    elif LK[link, L_PAUSED] == 1:
        LK[link, L_PAUSED] = 0
        LK[link, L_PAUSED_PS] += t - LK[link, L_PAUSED_AT]
        if LK[link, L_UP] == 1 and (LK[link, L_SHEAD] != -1 or LK[link, L_THEAD] != -1):
            schedule_tx(LK, HP, SC, link, bits.larger(t, LK[link, L_TX_END]))


@_entry
def _credit_back(SC, LK, FP, FREE, HP, i, nbytes, t):
    """Credit: ``nbytes`` of port ``i``'s credit return (< 0: taken back), decided at its far node
    at ``t``, reach the port L_PAUSE_DLY later (the credit frame's wire time + propagation). Returns
    due at the same instant travel as one (a row of the frame pool, on the port's list)."""
    at = t + LK[i, L_PAUSE_DLY]
    tail = LK[i, L_CTAIL]
    if tail != -1 and FP[tail, F_ARR] == at:
        FP[tail, F_LEN] += nbytes
        return
    c = _alloc_frame(SC, FREE)
    FP[c, F_ARR] = at
    FP[c, F_LEN] = nbytes
    FP[c, F_NEXT] = -1
    if tail == -1:
        LK[i, L_CHEAD] = c
    else:
        FP[tail, F_NEXT] = c
    LK[i, L_CTAIL] = c
    SC[SC_CTOKENS] += 1
    heap_push(HP, SC, at, _CREDIT_KEY + i)


@_inline
def _starved(LK, link, t, on):
    """Credit: port ``link``'s head frame starts (on = 1) or stops waiting for credit at ``t``;
    the time it waited counts as paused (L_PAUSED_PS)."""
    if on == 1:
        if LK[link, L_PAUSED] == 0:
            LK[link, L_PAUSED] = 1
            LK[link, L_PAUSED_AT] = t
    elif LK[link, L_PAUSED] == 1:
        LK[link, L_PAUSED] = 0
        LK[link, L_PAUSED_PS] += t - LK[link, L_PAUSED_AT]


@_entry
def _credit_event(SC, LK, FP, FREE, HP, link, t):
    """Credit returned to port ``link`` reaches it at ``t``: a port waiting for credit looks again."""
    c = LK[link, L_CHEAD]
    while c != -1 and FP[c, F_ARR] <= t:
        LK[link, L_CREDIT] += FP[c, F_LEN]
        nxt = FP[c, F_NEXT]
        _free_frame(SC, FREE, c)
        SC[SC_CTOKENS] -= 1
        c = nxt
    LK[link, L_CHEAD] = c
    if c == -1:
        LK[link, L_CTAIL] = -1
    if LK[link, L_PAUSED] == 1 and LK[link, L_UP] == 1:
        schedule_tx(LK, HP, SC, link, bits.larger(t, LK[link, L_TX_END]))  # the waiting port looks again


@_inline
def _credit_cost(SC, LK, FP, FW, MS, SP, SL, link, local, s):
    """Credit: what the frame the arbiter picked spends to start on ``link``: its length times the
    transit copies the far node makes of it (its egress ports on the frame's route there; 0 where
    it only delivers). A local frame too large for the port is dropped at the source: 0."""
    if local:
        msg = SP[s, S_MSG]
        pos = SP[s, S_POS]
        frag = pos if SP[s, S_LIST] < 0 else SL[SP[s, S_LIST] + pos]
        flen = MS[msg, M_LLEN] if frag == MS[msg, M_NFRAGS] - 1 else MS[msg, M_FLEN]
        if flen - ETH_LEN > LK[link, L_MTU]:
            return 0
        route = SP[s, S_ROUTE]
    else:
        e = LK[link, L_THEAD]
        flen = FP[e, F_LEN]
        route = FP[e, F_ROUTE]
    row = route * SC[SC_NNODES] + LK[link, L_DST]
    ncols = FW.shape[1]
    n = 0
    while n + 1 < ncols and FW[row, n + 1] >= 0:
        n += 1
    return flen * n


# ---- datapath pull (docs/engine.md, "Datapath pull") -------------------------
# A node's datapath takes the frames that arrive over the links into the node itself, in
# arrival order, when it is free for the next: those links schedule no arrival events. Each
# link's wire head arrival is kept in a slot of the datapath's row (in_arr*), so the
# datapath finds its next frame in one or two cache lines.

@_inline
def _pulled(SC, LK, link):
    """Does the datapath of ``link``'s far node take the link's frames (no arrival events)?"""
    return SC[SC_PULL] == 1 and link < SC[SC_NLINKS] and LK[link, L_IN_SLOT] >= 0


@_inline
def _pulls(SC, LK, nic):
    """Does datapath ``nic`` take its frames off the links into its node?"""
    return SC[SC_PULL] == 1 and nic >= SC[SC_NLINKS] and LK[nic, L_IN_N] > 0


@_inline
def _arrival_due(SC, LK, HP, link, time):
    """The frame now at the head of ``link``'s wire arrives at ``time``: an arrival event, or
    on a link its datapath pulls from, the time in the datapath's slot for the link."""
    if _pulled(SC, LK, link):
        LK[LK[link, L_NICQ], L_IN_ARR0 + LK[link, L_IN_SLOT]] = time
    else:
        schedule_arrival(LK, HP, SC, link, time)


@_inline
def _wire_empty(SC, LK, link):
    """Nothing left on ``link``'s wire: no arrival is due."""
    LK[link, L_ARR_PEND] = -1
    if _pulled(SC, LK, link):
        LK[LK[link, L_NICQ], L_IN_ARR0 + LK[link, L_IN_SLOT]] = -1


_NO_ARRIVAL = np.uint64(2**64 - 1)  # an empty slot's -1, read as unsigned


@_inline
def _first_in(LK, nic, skip):
    """The link into ``nic``'s node whose wire head arrives first (ties: the lowest link id,
    the arrival order of one instant; slots are in ascending link id), leaving out slot
    ``skip`` (-1: none), or -1 when no frame is on its way there."""
    # As unsigned, an empty slot's -1 is the largest value, above every time: one comparison a
    # slot (per frame-hop: every datapath looks here for its next frame).
    best = -1
    best_a = _NO_ARRIVAL
    for k in range(LK[nic, L_IN_N]):
        a = np.uint64(LK[nic, L_IN_ARR0 + k])
        if a < best_a and k != skip:
            best = k
            best_a = a
    return -1 if best < 0 else LK[nic, L_IN_LINK0 + best]


@_inline
def _deferred_upto(LK, FP, nic, i, e):
    """Pull: how many frames of DEFER_DATAPATH train ``e``, the first to arrive into datapath
    ``nic`` (on link ``i``), enter it before the next link's head (all of them if none), and
    that link (-1: none). No other frame can come between: every frame granted from now on
    arrives later than now, and the train's first frame arrived before now."""
    j = _first_in(LK, nic, LK[i, L_IN_SLOT])
    if j < 0:
        return FP[e, F_NTRAIN], j
    return _arrived(FP, e, i, FP[LK[j, L_WHEAD], F_ARR], j), j


@_inline
def _wake_datapath(SC, LK, FP, HP, nic):
    """Pull: with nothing on its own wire, datapath ``nic``'s pending event is when its next
    frame leaves it (the first to arrive of the frames on the links into its node, entering
    behind the frames before it: d = max(a, d_prev) + s), or that frame's arrival if it is
    lost there (dropped as it arrives). A train passing the idle datapath frame by frame
    (DEFER_DATAPATH) is the first to arrive; its event is its last frame's arrival (all of it
    enters as one), or the arrival of another link's head amid its frames (those before it
    enter, then it: _pull_deferred). With frames on its wire, its event is its head's."""
    if LK[nic, L_WHEAD] != -1:
        return
    i = _first_in(LK, nic, -1)
    if i < 0:
        LK[nic, L_ARR_PEND] = -1
        return
    LK[nic, L_PULL_FROM] = i
    e = LK[i, L_WHEAD]
    x = FP[e, F_ARR]
    if FP[e, F_DEFER] == DEFER_DATAPATH:
        cnt, j = _deferred_upto(LK, FP, nic, i, e)
        if cnt == FP[e, F_NTRAIN]:
            x += (cnt - 1) * FP[e, F_GAP]
        else:
            x = FP[LK[j, L_WHEAD], F_ARR]
    elif FP[e, F_FATE] == 0:
        flen = FP[e, F_LEN]
        ser = LK[nic, L_SER_PS] if LK[nic, L_SER_LEN] == flen else serialization_ps(flen, LK[nic, L_RATE])
        x = bits.larger(x, LK[nic, L_TX_END]) + ser + LK[nic, L_LAT]
    else:
        # A frame lost on its link never enters: dropped as it arrives (counted at that
        # time), or now if it arrived while the datapath was busy.
        x = bits.larger(x, SC[SC_NOW])
    schedule_arrival(LK, HP, SC, nic, x)


@_inline
def _put_on_wire(LK, FP, HP, SC, link, e, t):
    """Frame ``e`` starts transmitting on ``link`` at ``t``; returns its end."""
    flen = FP[e, F_LEN]
    if LK[link, L_SER_LEN] == flen:
        ser = LK[link, L_SER_PS]  # frames of a message share a size: skip the division
    else:
        ser = serialization_ps(flen, LK[link, L_RATE])
        LK[link, L_SER_LEN] = flen
        LK[link, L_SER_PS] = ser
    end = t + ser
    FP[e, F_START] = t
    FP[e, F_END] = end
    FP[e, F_ARR] = end + LK[link, L_LAT]
    FP[e, F_FATE] = 0
    FP[e, F_NEXT] = -1
    LK[link, L_TX_END] = end
    tail = LK[link, L_WTAIL]
    if tail == -1:
        LK[link, L_WHEAD] = e
        _arrival_due(SC, LK, HP, link, FP[e, F_ARR])  # pulled: its datapath looks once the fate is drawn (_start)
    else:
        FP[tail, F_NEXT] = e
    LK[link, L_WTAIL] = e
    return end


@_inline
def _start(LK, LF, LR, DL, FP, HP, SC, link, e, t):
    """A granted frame starts on ``link`` at ``t``; its fate is drawn now, from the loss model in force."""
    end = _put_on_wire(LK, FP, HP, SC, link, e, t)
    FP[e, F_FATE] = _fate(LK, LF, LR, DL, link)
    if LK[link, L_WHEAD] == e and _pulled(SC, LK, link):
        _wake_datapath(SC, LK, FP, HP, LK[link, L_NICQ])
    return end


@_inline
def _pop_stream(SC, LK, SFREE, SP, link, s):
    nxt = SP[s, S_NEXT]
    LK[link, L_SHEAD] = nxt
    if nxt == -1:
        LK[link, L_STAIL] = -1
    SFREE[SC[SC_SFREE]] = s
    SC[SC_SFREE] += 1


@_inline
def _train_ok(SC, LK, LF, link):
    """Trains only where every frame's fate is known without a draw: a physical, loss-free link."""
    return (link < SC[SC_NLINKS] and LK[link, L_LOSS] == 0 and LK[link, L_DL_POS] == LK[link, L_DL_END]
            and LF[link, LF_CORRUPT] == 0.0)


@_entry
def _cut_train(SC, LK, FP, FREE, NS, SP, HP, link, t, key):
    """Split the train on ``link``: keep the frames whose grant, at (start, grant key), comes before
    (t, key) in the event order; the rest go back to the stream, as if never granted."""
    e = LK[link, L_TRAIN] - 1
    LK[link, L_TRAIN] = 0
    n = FP[e, F_NTRAIN]
    ser = FP[e, F_SER]
    start = FP[e, F_START]
    gkey = _KIND_SHIFT + link
    # Frame k is granted at start + k * ser: those granted before (t, key), in closed form.
    if start > t or (start == t and gkey >= key):
        keep = 0
    else:
        keep = (t - start) // ser + 1  # granted at or before t
        if start + (keep - 1) * ser == t and gkey >= key:
            keep -= 1
        keep = bits.smaller(keep, n)
    back = n - keep
    if back == 0:
        return
    SC[SC_TRAIN_CUTS] += 1
    flen = FP[e, F_LEN]
    s = LK[link, L_SHEAD]  # a train never ends its stream: the stream is still at the head
    SP[s, S_POS] -= back
    src = LK[link, L_SRC]
    NS[src, N_OFF_F] -= back
    NS[src, N_OFF_B] -= back * flen
    LK[link, L_OFF_F] -= back
    LK[link, L_OFF_B] -= back * flen
    LK[link, L_LOCAL_F] -= back
    LK[link, L_TXN] -= back
    SC[SC_TRAIN_FRAMES] -= back
    SC[SC_TRAIN_HELD] -= back
    LK[link, L_TX_END] = start + keep * ser
    if keep == 0:
        # Not one frame of it has started (the earlier ones have all arrived): off the wire.
        SC[SC_TRAIN_HELD] += 1
        prev = -1
        p = LK[link, L_WHEAD]
        while p != e:
            prev = p
            p = FP[p, F_NEXT]
        LK[link, L_WTAIL] = prev
        if prev == -1:
            LK[link, L_WHEAD] = -1
            _wire_empty(SC, LK, link)
        else:
            FP[prev, F_NEXT] = -1
        _free_frame(SC, FREE, e)
        if prev == -1 and _pulled(SC, LK, link):
            _wake_datapath(SC, LK, FP, HP, LK[link, L_NICQ])  # it was the link's next to arrive
    else:
        FP[e, F_NTRAIN] = keep
        if FP[e, F_DEFER] > 0:
            # Delivered as one: the far node takes the kept frames when the last of them arrives.
            if _pulled(SC, LK, link):
                _wake_datapath(SC, LK, FP, HP, LK[link, L_NICQ])  # the kept frames' last arrival
            else:
                schedule_arrival(LK, HP, SC, link, FP[e, F_ARR] + (keep - 1) * ser)
    schedule_tx(LK, HP, SC, link, LK[link, L_TX_END])


@_inline
def _cut_at(SC, LK, FP, FREE, NS, SP, HP, link, t, key):
    """Cut the train on ``link`` at the later of (t, key) and the point the loop reached.

    A train's grants are not heap events, so the loop may have stopped before grants
    the per-frame loop would already have made: a caller at (t, key) (a change at that
    point of its instant, or after everything at now) sees them made."""
    if LK[link, L_TRAIN] == 0:
        return
    at = SC[SC_AT_T]
    akey = SC[SC_AT_KEY]
    if at > t or (at == t and akey > key):
        t = at
        key = akey
    _cut_train(SC, LK, FP, FREE, NS, SP, HP, link, t, key)


@_entry
def cut_port(s, link, t, key):
    """Before the caller changes port ``link`` at (t, key) (rate, loss, a stream at the head
    of its local queue): its train, if any, back to per-frame state there. Pushes at most
    one heap entry."""
    _cut_at(s.SC, s.LK, s.FP, s.FREE, s.NS, s.SP, s.HP, link, t, key)


@_entry
def settle(s, t, key):
    """Every train cut at (t, key) (or the point reached): the counters, stream positions
    and wires are exactly the per-frame loop's. Pushes at most one heap entry per link."""
    SC, LK, FP, FREE, NS, SP, HP = s.SC, s.LK, s.FP, s.FREE, s.NS, s.SP, s.HP
    for link in range(SC[SC_NLINKS]):
        _cut_at(SC, LK, FP, FREE, NS, SP, HP, link, t, key)


@_entry
def settle_deferred(s, t, key):
    """Every train delivered as one back to per-frame state at (t, key) (or the point reached):
    what the far nodes received and the links' counters are the per-frame loop's. Uses at
    most one frame row and pushes at most two heap entries per link."""
    for link in range(s.LK.shape[0]):  # physical links first: their trains enter datapaths
        take_deferred(s, link, t, key)


@_inline
def _arbiter(SC, LK, link, has_t, has_l):
    """Arbiter: which queue the free transmitter serves (True: the local one). With one queue
    eligible it is that one; with both, round robin (ARB_RR) alternates per frame from the
    queue granted last, and ARB_TRANSIT / ARB_LOCAL always take their own first. The
    choice is remembered for the next round robin."""
    if has_t and has_l:
        arb = SC[SC_ARB]
        if arb == ARB_RR:
            local = LK[link, L_LAST] == 0
        else:
            local = arb == ARB_LOCAL
    else:
        local = has_l
    LK[link, L_LAST] = 1 if local else 0
    return local


@_inline
def _grant_local(SC, LK, LF, ND, NS, FP, FREE, MS, SP, SL, SFREE, UP, link, s, has_t, t):
    """Grant local: the packetizer of the head stream ``s`` makes its next fragment's frame now
    (frames are generated only when granted), counted as offered by the node and the port.
    A stream whose last fragment this is leaves the local queue and is 'sent' when that
    frame ends (L_SENT). A frame larger than the port's MTU is dropped at the source with no
    wire time: returns -1 and the arbiter grants again. Otherwise returns the frame entry,
    which may stand for a train of the stream's next fragments (``_train``)."""
    msg = SP[s, S_MSG]
    pos = SP[s, S_POS]
    frag = pos if SP[s, S_LIST] < 0 else SL[SP[s, S_LIST] + pos]
    flen = MS[msg, M_LLEN] if frag == MS[msg, M_NFRAGS] - 1 else MS[msg, M_FLEN]
    src = MS[msg, M_SRC]
    NS[src, N_OFF_F] += 1
    NS[src, N_OFF_B] += flen
    pos += 1
    SP[s, S_POS] = pos
    finished = pos == SP[s, S_END]
    retx = 1 if SP[s, S_LIST] >= 0 else 0
    route = SP[s, S_ROUTE]
    if finished:
        _pop_stream(SC, LK, SFREE, SP, link, s)
    if flen - ETH_LEN > LK[link, L_MTU]:
        # Too large for this port: dropped at the source, no wire time; grant again.
        _drop_node(ND, src, DROP_MTU, 1, flen)
        if finished:
            _stream_sent(SC, MS, UP, msg, link, t)
        return -1
    e = _alloc_frame(SC, FREE)
    FP[e, F_MSG] = msg
    FP[e, F_FRAG] = frag
    FP[e, F_LEN] = flen
    FP[e, F_ROUTE] = route
    FP[e, F_RETX] = retx
    FP[e, F_HOPS] = 0
    FP[e, F_LOCAL] = 1
    FP[e, F_ENQ] = t
    FP[e, F_QB] = LK[link, L_QB]
    FP[e, F_NTRAIN] = 1
    FP[e, F_DEFER] = 0
    LK[link, L_OFF_F] += 1
    LK[link, L_OFF_B] += flen
    LK[link, L_LOCAL_F] += 1
    if finished:
        LK[link, L_SENT] = msg
    elif not has_t and SC[SC_TRAINS] == 1 and retx == 0 and _train_ok(SC, LK, LF, link):
        _train(SC, LK, NS, FP, SP, link, s, e, frag, flen, src)
    return e


@_inline
def _train(SC, LK, NS, FP, SP, link, s, e, frag, flen, src):
    """Train: with no transit frame waiting, the frames of stream ``s`` after frame ``e`` up to
    its second-to-last follow back to back unless something joins this port, so they are
    granted now, as one entry of n frames (at least two), counted as offered and granted
    as the per-frame loop would count them one by one; whatever joins the port later cuts
    the train back (``_cut_train``). The last frame stays a grant of its own (it closes
    the stream)."""
    n = SP[s, S_END] - 1 - frag
    if n >= 2:
        SP[s, S_POS] = frag + n
        NS[src, N_OFF_F] += n - 1
        NS[src, N_OFF_B] += (n - 1) * flen
        LK[link, L_OFF_F] += n - 1
        LK[link, L_OFF_B] += (n - 1) * flen
        LK[link, L_LOCAL_F] += n - 1
        FP[e, F_NTRAIN] = n
        SC[SC_NTRAINS] += 1
        SC[SC_TRAIN_FRAMES] += n
        SC[SC_TRAIN_HELD] += n - 1


@_inline
def _grant_transit(SC, LK, FP, FREE, HP, link, t):
    """Grant transit: the oldest frame of the transit queue (FIFO) leaves it for the wire (and
    the node's buffer: pause accounting)."""
    e = LK[link, L_THEAD]
    nxt = FP[e, F_NEXT]
    LK[link, L_THEAD] = nxt
    if nxt == -1:
        LK[link, L_TTAIL] = -1
    LK[link, L_QF] -= 1
    LK[link, L_QB] -= FP[e, F_LEN]
    LK[link, L_TRANSIT_F] += 1
    _hold(SC, LK, FP, FREE, HP, FP[e, F_IN], -FP[e, F_LEN], FP[e, F_LEN], t)
    return e


@_inline
def _transmitter(SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP, FW, MS, SP, SL, SFREE, UP, link, t):
    """The port's transmitter is free at ``t``: the arbiter grants one frame, if any is eligible
    (the transmit start of the port: the frame, or a train, goes on the wire now and the
    transmitter looks again when it ends). Under credit the frame the arbiter picks starts only
    if the port has the credit it spends (``_credit_cost``); else the whole port waits (head of
    line) and its arbiter picks again when credit arrives or the port's queues change."""
    LK[link, L_TX_PEND] = -1
    if LK[link, L_TX_END] > t:
        schedule_tx(LK, HP, SC, link, LK[link, L_TX_END])
        return
    LK[link, L_TRAIN] = 0  # a train this port was sending is over: all its frames have started
    m = LK[link, L_SENT]
    if m >= 0:
        # The frame that just ended closed a stream: the packetizer has sent it.
        LK[link, L_SENT] = -1
        _stream_sent(SC, MS, UP, m, link, t)
    if LK[link, L_UP] == 0:
        return  # no carrier: the local queue waits for the link to come up
    if LK[link, L_PAUSED] == 1 and SC[SC_CREDIT] == 0:
        return  # paused: both queues wait for the resume (_pause_event)
    while True:
        if SC[SC_UP] + 2 > UP.shape[0] or SC[SC_FREE] < 2:
            schedule_tx(LK, HP, SC, link, t)  # let Python grow a buffer; same instant
            return
        has_t = LK[link, L_THEAD] != -1
        s = LK[link, L_SHEAD]
        has_l = s != -1 and SP[s, S_READY] <= t
        if not has_t and not has_l:
            if s != -1:
                schedule_tx(LK, HP, SC, link, SP[s, S_READY])
            if LK[link, L_PAUSED] == 1:
                _starved(LK, link, t, 0)  # credit: nothing waits any more
            return
        last = LK[link, L_LAST]
        local = _arbiter(SC, LK, link, has_t, has_l)
        cost = 0
        if SC[SC_CREDIT] == 1:
            cost = _credit_cost(SC, LK, FP, FW, MS, SP, SL, link, local, s)
            if cost > 0 and cost > LK[link, L_CREDIT]:
                # Not enough credit for the head frame: the port waits (the round robin's turn stays).
                LK[link, L_LAST] = last
                _starved(LK, link, t, 1)
                if s != -1 and not has_l:
                    schedule_tx(LK, HP, SC, link, SP[s, S_READY])  # the arbiter picks again then
                return
            _starved(LK, link, t, 0)
            LK[link, L_CREDIT] -= cost
        if local:
            e = _grant_local(SC, LK, LF, ND, NS, FP, FREE, MS, SP, SL, SFREE, UP, link, s, has_t, t)
            if e < 0:
                continue
        else:
            e = _grant_transit(SC, LK, FP, FREE, HP, link, t)
        FP[e, F_CRED] = cost
        end = _start(LK, LF, LR, DL, FP, HP, SC, link, e, t)
        if FP[e, F_NTRAIN] > 1:
            # Loss-free link: every frame's fate is 0; only the transmission index moves.
            LK[link, L_TXN] += FP[e, F_NTRAIN] - 1
            FP[e, F_SER] = end - t
            FP[e, F_GAP] = end - t
            end = t + FP[e, F_NTRAIN] * (end - t)
            LK[link, L_TX_END] = end
            LK[link, L_TRAIN] = e + 1
        if LK[link, L_THEAD] != -1 or LK[link, L_SHEAD] != -1 or LK[link, L_SENT] >= 0:
            schedule_tx(LK, HP, SC, link, end)
        return


@_inline
def _deliver_local(SC, MS, MD, BITS, UP, ND, NS, msg, node, d, frag, flen, t):
    """A copy for the application at ``node`` (a member: MD row ``d``); a tracked duplicate is dropped."""
    off = MD[d, D_BITS]
    if off >= 0:
        byte = off + (frag >> 3)
        bit = np.uint8(1 << (frag & 7))
        if BITS[byte] & bit:
            _drop_node(ND, node, DROP_DUP, 1, flen)
            return
        BITS[byte] |= bit
        if MS[msg, M_FLAGS] & MF_GAP_UPCALL and frag > 0:
            prev = frag - 1
            if BITS[off + (prev >> 3)] & np.uint8(1 << (prev & 7)) == 0:
                _upcall(SC, UP, t, UP_GAP, msg, node, frag)
    NS[node, N_DLV_F] += 1
    NS[node, N_DLV_B] += flen
    MD[d, D_GOT] += 1
    if MS[msg, M_FLAGS] & MF_FRAME_UPCALL:
        _upcall(SC, UP, t, UP_FRAME, msg, node, frag)
    if MD[d, D_GOT] == MS[msg, M_NFRAGS]:
        _upcall(SC, UP, t, UP_DONE, msg, node, -1)


@_inline
def _log_tx(SC, LG, FP, e, link, t, fate):
    """One transmission record: frame ``e`` on ``link``, over (arrived or dropped) at ``t``."""
    g = SC[SC_LOG]
    LG[g, G_LINK] = link
    LG[g, G_MSG] = FP[e, F_MSG]
    LG[g, G_FRAG] = FP[e, F_FRAG]
    LG[g, G_ENQ] = FP[e, F_ENQ]
    LG[g, G_START] = FP[e, F_START]
    LG[g, G_END] = FP[e, F_END]
    LG[g, G_ARR] = t
    LG[g, G_LEN] = FP[e, F_LEN]
    LG[g, G_QB] = FP[e, F_QB]
    LG[g, G_FATE] = fate
    LG[g, G_RETX] = FP[e, F_RETX]
    LG[g, G_HOPS] = FP[e, F_HOPS]
    LG[g, G_LOCAL] = FP[e, F_LOCAL]
    SC[SC_LOG] = g + 1


@_entry
def coarsen_bins(SC, LB, t):
    """Double the bin width, merging neighbouring bins in place, until time ``t`` falls within
    SC[SC_BIN_CAP] bins.

    A run can last far longer than the width was chosen for (retransmission back-off, slow
    links), and the table must not grow with it without bound. Merging is exact: bin b of
    width 2w is bins 2b and 2b+1 of width w (busy time, bytes, frames and losses add; the
    peak queue is the larger), which is what binning at 2w from the start gives."""
    nl = SC[SC_NLINKS]
    cap = SC[SC_BIN_CAP]
    w = SC[SC_BIN_PS]
    nb = LB.shape[0] // nl
    while cap > 0 and t // w + 1 > cap:
        half = (nb + 1) // 2
        for b in range(half):
            for l in range(nl):
                r = b * nl + l
                r0 = 2 * b * nl + l
                r1 = r0 + nl
                for col in range(B_NFIELDS):
                    x = LB[r0, col]
                    y = LB[r1, col] if 2 * b + 1 < nb else 0
                    LB[r, col] = bits.larger(x, y) if col == B_QUEUE else x + y
        for r in range(half * nl, nb * nl):
            for col in range(B_NFIELDS):
                LB[r, col] = 0
        nb = half
        w *= 2
    SC[SC_BIN_PS] = w
    SC[SC_BIN_LO] = 0  # the memo: bin 0 starts at 0 whatever the width
    SC[SC_BIN_IDX] = 0


@_inline
def _bin_of(SC, w, x):
    """Bin index of time ``x`` (x // w), memoized: consecutive frames fall in the same bin."""
    lo = SC[SC_BIN_LO]
    if x >= lo and x - lo < w:
        return SC[SC_BIN_IDX]
    b = x // w
    SC[SC_BIN_IDX] = b
    SC[SC_BIN_LO] = b * w
    return b


@_inline
def _bin_tx(SC, LB, link, start, end, enq, qb, flen, fate):
    """Fold one transmission into link ``link``'s bins (the arithmetic of LinkStats.__call__).

    ``end`` is when the transmitter stopped (a failure's time for a frame it cut)."""
    w = SC[SC_BIN_PS]
    nl = SC[SC_NLINKS]
    b1 = _bin_of(SC, w, end - 1)
    if SC[SC_BIN_CAP] > 0 and b1 >= SC[SC_BIN_CAP]:
        # Past the limit: wider bins, decided by the transmissions alone (not by when
        # events happen), so trains and the per-frame loop widen them alike.
        coarsen_bins(SC, LB, end - 1)
        w = SC[SC_BIN_PS]
        b1 = _bin_of(SC, w, end - 1)
    b0 = _bin_of(SC, w, start)
    r0 = b0 * nl + link
    LB[r0, B_BYTES] += wire_bytes(flen)
    LB[r0, B_FRAMES] += 1
    # Busy time: the part in the first bin, whole bins between, the part in the last.
    LB[r0, B_BUSY] += (end if b0 == b1 else (b0 + 1) * w) - start
    if b1 > b0:
        for b in range(b0 + 1, b1):
            LB[b * nl + link, B_BUSY] += w
        LB[b1 * nl + link, B_BUSY] += end - b1 * w
    if fate != 0:
        LB[b1 * nl + link, B_LOST] += 1
    rq = _bin_of(SC, w, enq) * nl + link
    if qb > LB[rq, B_QUEUE]:
        LB[rq, B_QUEUE] = qb


@_inline
def _arrive_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, FW, MS, MD, BITS, UP, LB, link, e, t):
    """Deferred delivery: trains whose frames the far node takes as one (docs/engine.md,
    "Trains"). A train into an idle datapath enters it whole when its last frame is there;
    a train taken as one at its node is taken when its frames have arrived (frame by frame
    from here if a log sink came meanwhile); a train reaching a node that only delivers
    it is deferred there until its last frame arrives, after the trains already deferred
    there that must go first. Returns True when the event is done with that, False when
    the wire's head arrives frame by frame."""
    kind = FP[e, F_DEFER]
    if kind == DEFER_DATAPATH:
        # The train's last frame is at the node: all of it enters the idle datapath.
        _into_datapath(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, e, FP[e, F_NTRAIN], t, link)
        return True
    if kind == DEFER_HERE and SC[SC_LOGGING] == 1:
        # A log sink came after it was deferred (the entry waited in a datapath): the
        # frames that arrived by now are taken, the rest arrive frame by frame, logged.
        _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, t, link, True)
        return True
    if kind == DEFER_HERE:
        # The node takes the train's frames there by now (all of them, but on a datapath's
        # wire, where the event may be its first frame's: then it waits for its last).
        if _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, t, link + 1, False) == 0:
            schedule_arrival(LK, HP, SC, link, FP[e, F_ARR] + (FP[e, F_NTRAIN] - 1) * FP[e, F_GAP])
        return True
    if FP[e, F_NTRAIN] > 1 and kind == 0:
        if SC[SC_DEFERRED] > 0:
            # Trains already deferred there go first: those arrived into the same datapath
            # enter it, and those of the same message are taken (their frames and this
            # train's could complete it together).
            nic = LK[link, L_NICQ]
            if nic >= 0 and LK[nic, L_DEFER_IN] > 0:
                _datapath_feeders(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, nic, -1, t, link)
            d = dest_row(MS, MD, FP[e, F_MSG], LK[link, L_DST])
            if d >= 0 and MD[d, D_DEFER] > 0:
                _undefer_into(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, LK[link, L_DST], FP[e, F_MSG],
                              t, link)
        kind = _deferrable(SC, LK, FP, FW, MS, MD, link, e)
        if kind != 0:
            # Its frames only reach the application here: take them as one when the last arrives.
            _deferred(SC, LK, FP, MS, MD, link, e, kind, 1)
            SC[SC_NDEFER] += 1
            schedule_arrival(LK, HP, SC, link, FP[e, F_ARR] + (FP[e, F_NTRAIN] - 1) * FP[e, F_GAP])
            return True
    return False


@_inline
def _off_wire(SC, LK, FP, FREE, HP, link, e):
    """The wire's head frame ``e`` has reached the far node: it leaves the wire, and the
    link's next frame (if any) is its next arrival. The first frame of a train becomes a
    frame of its own, which the node takes like any other (store and forward), and the
    train waits on the wire for its next. Returns the arrived frame's entry."""
    if FP[e, F_NTRAIN] > 1:
        c = _alloc_frame(SC, FREE)
        for col in range(F_NCOLS):
            FP[c, col] = FP[e, col]
        FP[c, F_NTRAIN] = 1
        FP[c, F_NEXT] = -1
        ser = FP[e, F_GAP]
        FP[e, F_NTRAIN] -= 1
        FP[e, F_FRAG] += 1
        FP[e, F_START] += ser
        FP[e, F_ENQ] = FP[e, F_START]
        FP[e, F_END] += ser
        FP[e, F_ARR] += ser
        SC[SC_TRAIN_HELD] -= 1
        _arrival_due(SC, LK, HP, link, FP[e, F_ARR])
        return c
    nxt = FP[e, F_NEXT]
    LK[link, L_WHEAD] = nxt
    if nxt == -1:
        LK[link, L_WTAIL] = -1
        _wire_empty(SC, LK, link)
    else:
        _arrival_due(SC, LK, HP, link, FP[nxt, F_ARR])
    if LK[link, L_TRAIN] == e + 1:
        LK[link, L_TRAIN] = 0  # the train's last frame arrived: no frame of it is left to cut
    return e


@_inline
def _transmitted(SC, LK, LD, LG, LB, FP, FREE, HP, link, e, t):
    """Transmit complete: frame ``e``'s transmission on ``link`` is accounted when it is over,
    so a link failure never leaves counters for frames that did not cross the wire: the
    port's sent frames, wire bytes and busy time, a log record and the statistics bins
    (physical links). A frame whose fate (drawn at its start) is a loss or a corruption is
    dropped here, counted under that cause. Returns True if it reached the node intact."""
    fate = FP[e, F_FATE]
    flen = FP[e, F_LEN]
    LK[link, L_TX_F] += 1
    LK[link, L_TX_B] += wire_bytes(flen)
    LK[link, L_BUSY] += FP[e, F_END] - FP[e, F_START]
    physical = link < SC[SC_NLINKS]
    if SC[SC_LOGGING] == 1 and physical:
        _log_tx(SC, LG, FP, e, link, t, fate)
    if SC[SC_BIN_PS] > 0 and physical:
        _bin_tx(SC, LB, link, FP[e, F_START], FP[e, F_END], FP[e, F_ENQ], FP[e, F_QB], flen, fate)
    if fate != 0:
        _drop_link(LD, link, fate, flen)
        _free_frame(SC, FREE, e)
        if SC[SC_CREDIT] == 1 and physical and FP[e, F_CRED] != 0:
            _credit_back(SC, LK, FP, FREE, HP, link, FP[e, F_CRED], t)  # as if the far node dropped it
        return False
    LK[link, L_DLV_F] += 1
    LK[link, L_DLV_B] += flen
    if physical:
        FP[e, F_HOPS] += 1
        FP[e, F_IN] = link
    return True


@_inline
def _forward(SC, LK, LD, ND, NS, FP, FREE, HP, FW, MS, MD, BITS, UP, SP, LB, link, e, t):
    """Forward: the far node of ``link`` decides what becomes of arrived frame ``e``. A node
    with a finite-rate datapath parses frames one at a time: the frame queues there first
    (after the frames of trains that arrived before it) and is decided when it leaves the
    datapath. Otherwise the route's forwarding row says: delivered here if the node is
    a member of the row and one of the message's destinations (``_deliver_local``), and
    copied to each of the row's egress ports (``_replicate``); neither is a no_route drop."""
    nic = LK[link, L_NICQ]
    if nic >= 0:
        if LK[nic, L_DEFER_IN] > 0:
            # Frames of trains that arrived before it enter ahead of it.
            _datapath_feeders(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, nic, -1, t, link)
        _replicate(SC, LK, LD, FP, FREE, HP, NS, SP, FW, -1, 1, nic, e, t)
        return
    flen = FP[e, F_LEN]
    node = LK[link, L_DST]
    msg = FP[e, F_MSG]
    row = FP[e, F_ROUTE] * SC[SC_NNODES] + node
    d = dest_row(MS, MD, msg, node) if FW[row, 0] == 1 else -1
    member = d >= 0
    ncols = FW.shape[1]
    n = 0
    while n + 1 < ncols and FW[row, n + 1] >= 0:
        n += 1
    if SC[SC_CREDIT] == 1 and FP[e, F_CRED] != n * flen:
        # Credit: the copies made here are not what the port paid for (a route changed on the
        # way, or none: no_route): the difference goes back to it (or is taken back).
        _credit_back(SC, LK, FP, FREE, HP, FP[e, F_IN], FP[e, F_CRED] - n * flen, t)
    if not member and n == 0:
        _drop_node(ND, node, DROP_NOROUTE, 1, flen)  # neither delivered nor forwarded
        _free_frame(SC, FREE, e)
        return
    NS[node, N_REPL_F] += (1 if member else 0) + n - 1
    frag = FP[e, F_FRAG]
    if member:
        if SC[SC_DEFERRED] > 0 and MD[d, D_DEFER] > 0:
            # Frames of a train of this message that this node takes as one, arrived before
            # this one: taken now, in order, and the rest of that train per frame.
            _undefer_into(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, node, msg, t, link)
        _deliver_local(SC, MS, MD, BITS, UP, ND, NS, msg, node, d, frag, flen, t)
    if n == 0:
        _free_frame(SC, FREE, e)
        return
    _replicate(SC, LK, LD, FP, FREE, HP, NS, SP, FW, row, n, -1, e, t)


@_inline
def _arrival(SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP, LG, FW, MS, MD, BITS, UP, SP, LB, link, t):
    """The oldest frame on ``link``'s wire reaches the far node at ``t`` (the port's transmit
    complete and the node's receive): deferred trains first, else the frame leaves the
    wire, its transmission is accounted (and a lost one dropped), and the node forwards it."""
    e = LK[link, L_WHEAD]
    if _arrive_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, FW, MS, MD, BITS, UP, LB, link, e, t):
        return
    e = _off_wire(SC, LK, FP, FREE, HP, link, e)
    if _transmitted(SC, LK, LD, LG, LB, FP, FREE, HP, link, e, t):
        _forward(SC, LK, LD, ND, NS, FP, FREE, HP, FW, MS, MD, BITS, UP, SP, LB, link, e, t)


@_inline
def _enter(SC, LK, LD, LG, LB, NS, SP, FP, FREE, HP, nic, i):
    """Pull: the head frame of link ``i`` arrives at its node, whose datapath ``nic`` takes it
    now (later than its arrival time ``a``, as a frame of its own if it was a train's first):
    accounted on the link as its arrival is (a lost one dropped), and offered to the datapath
    at ``a``, behind every frame that arrived before it. Its datapath wire's event, if it is
    the wire's head, is scheduled (at its exit)."""
    a = FP[LK[i, L_WHEAD], F_ARR]
    e = _off_wire(SC, LK, FP, FREE, HP, i, LK[i, L_WHEAD])
    if _transmitted(SC, LK, LD, LG, LB, FP, FREE, HP, i, e, a):
        offer_transit(SC, LK, LD, FP, FREE, HP, NS, SP, nic, e, a)


@_inline
def _pull_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, SP, LG, LB, nic, i, e, t):
    """Pull: the event at ``t`` of DEFER_DATAPATH train ``e`` on link ``i`` (_wake_datapath). All
    of it has arrived: it enters the datapath as one. Or another link's head arrives now amid
    its frames: those that arrived before it enter, the rest arrive frame by frame (not
    deferred), and that head enters behind them."""
    cnt, j = _deferred_upto(LK, FP, nic, i, e)
    if cnt == FP[e, F_NTRAIN]:
        _into_datapath(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, i, e, cnt, t, nic)
        return
    _datapath_catch_up(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, i, e, t, j)
    _enter(SC, LK, LD, LG, LB, NS, SP, FP, FREE, HP, nic, j)


@_inline
def _pull_next(SC, LK, LD, ND, NS, FP, FREE, HP, FW, MS, MD, BITS, UP, SP, LG, LB, nic, t):
    """Pull: datapath ``nic``'s event at ``t`` with nothing on its own wire is for the frame that
    arrived first on the links into its node (_wake_datapath): it enters the datapath now, and
    its exit, due now, is this event. A train there that the node only delivers, arrived
    into the idle datapath, passes it frame by frame as each arrives (DEFER_DATAPATH,
    "Trains"): it waits on its link and enters as one (_pull_deferred). Returns False when
    the event is done without a frame leaving the datapath now (a train deferred or entered
    as one, or a frame lost on its link: dropped as it arrived); the datapath's next event
    is then scheduled."""
    i = LK[nic, L_PULL_FROM]
    e = LK[i, L_WHEAD]
    if FP[e, F_DEFER] == DEFER_DATAPATH:
        _pull_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, SP, LG, LB, nic, i, e, t)
        _wake_datapath(SC, LK, FP, HP, nic)
        return False
    if FP[e, F_NTRAIN] > 1 and FP[e, F_FATE] == 0 and LK[nic, L_DEFER_IN] == 0 and LK[nic, L_TX_END] <= FP[e, F_ARR]:
        # Only a train that no known frame of another link comes amid: one that does would
        # be split there (and one that has arrived amid it by now, an event in the past).
        cnt, j = _deferred_upto(LK, FP, nic, i, e)
        if cnt == FP[e, F_NTRAIN] and _deferrable(SC, LK, FP, FW, MS, MD, i, e) == DEFER_DATAPATH:
            _deferred(SC, LK, FP, MS, MD, i, e, DEFER_DATAPATH, 1)
            SC[SC_NDEFER] += 1
            if FP[e, F_ARR] + (cnt - 1) * FP[e, F_GAP] <= t:
                _into_datapath(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, i, e, cnt, t, nic)
            _wake_datapath(SC, LK, FP, HP, nic)
            return False
    LK[nic, L_ARR_PEND] = t  # the exit _enter schedules for it is this very event
    _enter(SC, LK, LD, LG, LB, NS, SP, FP, FREE, HP, nic, i)
    LK[nic, L_ARR_PEND] = -1
    if LK[nic, L_WHEAD] == -1:
        _wake_datapath(SC, LK, FP, HP, nic)
        return False
    return True


@_inline
def _pull_arrived(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, SP, LG, LB, nic, t, key):
    """Pull: every frame on the links into ``nic``'s node that arrives before (t, key) in the
    event order enters the datapath, in arrival order, as the per-frame loop has them by
    then (before a reader counts them or a failure flushes a link). Returns 1 when it stopped
    for want of frame rows (a train's frame takes one), else 0."""
    while True:
        if SC[SC_FREE] < 2:
            _wake_datapath(SC, LK, FP, HP, nic)
            return 1
        i = _first_in(LK, nic, -1)
        if i < 0:
            break
        e = LK[i, L_WHEAD]
        a = FP[e, F_ARR]
        if a > t or (a == t and i >= key):
            break
        if FP[e, F_DEFER] == DEFER_DATAPATH:
            # Its frames before the point, and before the next link's head, enter; the rest
            # arrive frame by frame.
            bt = t
            bk = key
            j = _first_in(LK, nic, LK[i, L_IN_SLOT])
            if j >= 0:
                aj = FP[LK[j, L_WHEAD], F_ARR]
                if aj < bt or (aj == bt and j < bk):
                    bt = aj
                    bk = j
            _datapath_catch_up(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, i, e, bt, bk)
            continue
        _enter(SC, LK, LD, LG, LB, NS, SP, FP, FREE, HP, nic, i)
    _wake_datapath(SC, LK, FP, HP, nic)
    return 0


@_entry
def settle_pulls(s, t, key):
    """Every frame that arrived before (t, key) (or the point reached) enters its datapath, so
    what the links and datapaths count is the per-frame loop's. Returns 1 when it stopped for
    want of frame rows (the caller grows the pool and calls again), else 0. Pushes at most
    one heap entry per datapath."""
    SC, LK, LD, LG, LB, NS, SP, FP, FREE, HP = s.SC, s.LK, s.LD, s.LG, s.LB, s.NS, s.SP, s.FP, s.FREE, s.HP
    ND, MS, MD, BITS, UP = s.ND, s.MS, s.MD, s.BITS, s.UP
    if SC[SC_PULL] == 0:
        return 0
    at = SC[SC_AT_T]
    akey = SC[SC_AT_KEY]
    if at > t or (at == t and akey > key):
        t = at
        key = akey
    for nic in range(SC[SC_NLINKS], LK.shape[0]):
        if _pull_arrived(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, SP, LG, LB, nic, t, key):
            return 1
    return 0


@_entry
def unpull(s):
    """Pull off from here (a log sink reads every transmission in event order): each link into a
    datapath schedules its wire head's arrival again, and a datapath with nothing on its own
    wire has no event. The caller has settled the pulls first (settle_pulls)."""
    SC, LK, FP, HP = s.SC, s.LK, s.FP, s.HP
    if SC[SC_PULL] == 0:
        return
    SC[SC_PULL] = 0
    for link in range(LK.shape[0]):
        e = LK[link, L_WHEAD]
        if link >= SC[SC_NLINKS]:
            if e == -1:
                LK[link, L_ARR_PEND] = -1
        elif LK[link, L_IN_SLOT] >= 0 and e >= 0:
            LK[LK[link, L_NICQ], L_IN_ARR0 + LK[link, L_IN_SLOT]] = -1
            schedule_arrival(LK, HP, SC, link, FP[e, F_ARR])


@_inline
def dest_row(MS, MD, msg, node):
    """The MD row of ``node`` among ``msg``'s destinations (-1: not one). Looked up per frame
    delivered, so by bisection where the rows are in node order (``MF_SORTED``: every message of
    the replay): a multicast to n boards costs log n per frame, not n. Otherwise in turn."""
    lo = MS[msg, M_DPTR]
    end = MS[msg, M_DEND]
    if MS[msg, M_FLAGS] & MF_SORTED:
        hi = end
        while lo < hi:
            mid = (lo + hi) >> 1
            if MD[mid, D_NODE] < node:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < end and MD[lo, D_NODE] == node else -1
    while lo < end:
        if MD[lo, D_NODE] == node:
            return lo
        lo += 1
    return -1


@_inline
def _deferred(SC, LK, FP, MS, MD, link, e, kind, by):
    """Train ``e`` on ``link`` starts (by = 1) or stops (by = -1) being taken as one (``kind``):
    the counts that tell where to look for it (all, its message at its node, its datapath)."""
    SC[SC_DEFERRED] += by
    d = dest_row(MS, MD, FP[e, F_MSG], LK[link, L_DST])
    MD[d, D_DEFER] += by
    if kind == DEFER_DATAPATH:
        LK[LK[link, L_NICQ], L_DEFER_IN] += by
    FP[e, F_DEFER] = kind if by > 0 else DEFER_NOT


@_inline
def _deferrable(SC, LK, FP, FW, MS, MD, link, e):
    """May the far node of ``link`` take train ``e``'s frames as one, at its last frame's arrival?

    Yes where nothing outside that node can tell when each frame arrived: the node only
    delivers the frames (a member, no egress port, no datapath), no per-frame upcall, no
    frame of the train can complete the message (so it raises no upcall), and no log is
    written (records stay in arrival order). Anything else that reads the node's state
    for the message or the link's frames first takes the frames arrived by then
    (_take_deferred): another copy of the message arriving there, a link failure, a reader."""
    if SC[SC_LOGGING] == 1:
        return 0
    msg = FP[e, F_MSG]
    if MS[msg, M_FLAGS] & MF_FRAME_UPCALL:
        return 0
    node = LK[link, L_DST]
    row = FP[e, F_ROUTE] * SC[SC_NNODES] + node
    if FW[row, 0] != 1 or (FW.shape[1] > 1 and FW[row, 1] >= 0):
        return 0
    d = dest_row(MS, MD, msg, node)
    if d < 0:
        return 0  # not a member: each frame is a no_route drop, per frame
    if MD[d, D_GOT] + FP[e, F_NTRAIN] >= MS[msg, M_NFRAGS]:
        return 0
    nic = LK[link, L_NICQ]
    if nic < 0:
        return DEFER_HERE
    # Through the node's datapath: idle when the first frame arrives and no slower than the
    # train's spacing, so each frame starts there when it arrives (d_k = a_k) unless another
    # frame enters it meanwhile (_datapath_feeders then puts the arrived ones in first).
    if LK[nic, L_TX_END] > FP[e, F_ARR] or serialization_ps(FP[e, F_LEN], LK[nic, L_RATE]) > FP[e, F_GAP]:
        return 0
    return DEFER_DATAPATH


@_entry
def _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, t, key, resume):
    """The node takes the frames of ``link``'s deferred train (its wire head) that arrive
    before (t, key) in the event order, each exactly as a frame of its own arriving then.
    The train leaves the wire when all have arrived (returns 1); otherwise, with ``resume``,
    the rest arrive per frame again (an arrival event for the next)."""
    e = LK[link, L_WHEAD]
    node = LK[link, L_DST]
    msg = FP[e, F_MSG]
    flen = FP[e, F_LEN]
    d = dest_row(MS, MD, msg, node)
    while True:
        a = FP[e, F_ARR]
        if a > t or (a == t and link >= key):
            break
        LK[link, L_TX_F] += 1
        LK[link, L_TX_B] += wire_bytes(flen)
        LK[link, L_BUSY] += FP[e, F_END] - FP[e, F_START]
        if SC[SC_BIN_PS] > 0 and link < SC[SC_NLINKS]:
            _bin_tx(SC, LB, link, FP[e, F_START], FP[e, F_END], FP[e, F_ENQ], FP[e, F_QB], flen, 0)
        LK[link, L_DLV_F] += 1
        LK[link, L_DLV_B] += flen
        _deliver_local(SC, MS, MD, BITS, UP, ND, NS, msg, node, d, FP[e, F_FRAG], flen, a)
        if FP[e, F_NTRAIN] == 1:
            # The last of them: the entry leaves the wire, the next frame's arrival is due.
            _deferred(SC, LK, FP, MS, MD, link, e, DEFER_HERE, -1)
            nxt = FP[e, F_NEXT]
            LK[link, L_WHEAD] = nxt
            if nxt == -1:
                LK[link, L_WTAIL] = -1
                LK[link, L_ARR_PEND] = -1
            else:
                schedule_arrival(LK, HP, SC, link, FP[nxt, F_ARR])
            if LK[link, L_TRAIN] == e + 1:
                LK[link, L_TRAIN] = 0
            _free_frame(SC, FREE, e)
            return 1
        ser = FP[e, F_GAP]
        FP[e, F_NTRAIN] -= 1
        FP[e, F_FRAG] += 1
        FP[e, F_START] += ser
        FP[e, F_ENQ] = FP[e, F_START]
        FP[e, F_END] += ser
        FP[e, F_ARR] += ser
        SC[SC_TRAIN_HELD] -= 1
    if resume:
        _deferred(SC, LK, FP, MS, MD, link, e, DEFER_HERE, -1)
        schedule_arrival(LK, HP, SC, link, FP[e, F_ARR])
    return 0


@_entry
def _into_datapath(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, e, cnt, t, key):
    """The first ``cnt`` frames of ``link``'s DEFER_DATAPATH train (all arrived at the node)
    enter its datapath: counted on the link as their arrivals are, and offered to the
    datapath, where each starts as it arrived (it was idle for them). They go on the
    datapath's wire as one DEFER_HERE train (its spacing the link's, its frames' length
    the datapath's); what of it has left the datapath before (t, key) is taken now."""
    nic = LK[link, L_NICQ]
    flen = FP[e, F_LEN]
    gap = FP[e, F_GAP]
    n = FP[e, F_NTRAIN]
    for k in range(cnt):
        s0 = FP[e, F_START] + k * gap
        e0 = FP[e, F_END] + k * gap
        LK[link, L_TX_F] += 1
        LK[link, L_TX_B] += wire_bytes(flen)
        LK[link, L_BUSY] += e0 - s0
        if SC[SC_BIN_PS] > 0:
            _bin_tx(SC, LB, link, s0, e0, FP[e, F_ENQ] if k == 0 else s0, FP[e, F_QB], flen, 0)
        LK[link, L_DLV_F] += 1
        LK[link, L_DLV_B] += flen
    LK[nic, L_OFF_F] += cnt
    LK[nic, L_OFF_B] += cnt * flen
    LK[nic, L_TRANSIT_F] += cnt
    if LK[nic, L_SER_LEN] == flen:
        sd = LK[nic, L_SER_PS]
    else:
        sd = serialization_ps(flen, LK[nic, L_RATE])
        LK[nic, L_SER_LEN] = flen
        LK[nic, L_SER_PS] = sd
    if cnt == n:
        d = e  # the whole train: it leaves the link's wire (a DEFER_HERE train from now on)
        LK[nic, L_DEFER_IN] -= 1
        nxt = FP[e, F_NEXT]
        LK[link, L_WHEAD] = nxt
        if nxt == -1:
            LK[link, L_WTAIL] = -1
            _wire_empty(SC, LK, link)
        else:
            _arrival_due(SC, LK, HP, link, FP[nxt, F_ARR])  # the link's next frame
        if LK[link, L_TRAIN] == e + 1:
            LK[link, L_TRAIN] = 0
    else:
        d = _alloc_frame(SC, FREE)
        for col in range(F_NCOLS):
            FP[d, col] = FP[e, col]
        FP[d, F_NTRAIN] = cnt
        FP[e, F_NTRAIN] = n - cnt
        FP[e, F_FRAG] += cnt
        FP[e, F_START] += cnt * gap
        FP[e, F_ENQ] = FP[e, F_START]
        FP[e, F_END] += cnt * gap
        FP[e, F_ARR] += cnt * gap
        SC[SC_TRAIN_HELD] -= 1  # two rows now stand for the frames one did
        SC[SC_DEFERRED] += 1
        MD[dest_row(MS, MD, FP[d, F_MSG], LK[link, L_DST]), D_DEFER] += 1
    a0 = FP[d, F_ARR]
    FP[d, F_START] = a0
    FP[d, F_ENQ] = a0
    FP[d, F_END] = a0 + sd
    FP[d, F_SER] = sd
    FP[d, F_ARR] = a0 + sd + LK[nic, L_LAT]
    FP[d, F_FATE] = 0
    FP[d, F_NEXT] = -1
    FP[d, F_HOPS] += 1
    FP[d, F_DEFER] = DEFER_HERE
    LK[nic, L_TX_END] = a0 + (cnt - 1) * gap + sd
    tail = LK[nic, L_WTAIL]
    LK[nic, L_WTAIL] = d
    if tail != -1:
        FP[tail, F_NEXT] = d
        return  # frames ahead of it still in the datapath: its turn comes when they have left
    LK[nic, L_WHEAD] = d
    if _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, nic, t, key, False) == 0:
        schedule_arrival(LK, HP, SC, nic, FP[d, F_ARR] + (FP[d, F_NTRAIN] - 1) * gap)


@_inline
def _arrived(FP, e, link, t, key):
    """How many frames of train ``e`` on ``link`` arrive before (t, key) in the event order."""
    a = FP[e, F_ARR]
    if a > t or (a == t and link >= key):
        return 0
    gap = FP[e, F_GAP]
    k = (t - a) // gap + 1  # frames with arrival <= t
    if a + (k - 1) * gap == t and link >= key:
        k -= 1
    return bits.smaller(k, FP[e, F_NTRAIN])


@_entry
def _datapath_feeders(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, nic, msg, t, key):
    """Another frame enters datapath ``nic`` at (t, key) (or a reader, or, with ``msg`` >= 0,
    another frame of ``msg`` reaches its node): the frames of DEFER_DATAPATH trains arrived
    before it enter first; the rest of each arrive frame by frame."""
    for link in range(SC[SC_NLINKS]):
        e = LK[link, L_WHEAD]
        if LK[link, L_NICQ] != nic or e < 0 or FP[e, F_DEFER] != DEFER_DATAPATH:
            continue
        if msg >= 0 and FP[e, F_MSG] != msg:
            continue
        _datapath_catch_up(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, e, t, key)


@_inline
def _datapath_catch_up(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, e, t, key):
    """The frames of DEFER_DATAPATH train ``e`` on ``link`` that arrived before (t, key) enter
    the datapath; if some have not, they arrive frame by frame (not deferred again)."""
    cnt = _arrived(FP, e, link, t, key)
    whole = cnt == FP[e, F_NTRAIN]
    if cnt > 0:
        _into_datapath(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, e, cnt, t, key)
    if not whole:
        _deferred(SC, LK, FP, MS, MD, link, e, DEFER_DATAPATH, -1)
        _arrival_due(SC, LK, HP, link, FP[e, F_ARR])  # frame by frame from here
        if _pulled(SC, LK, link):
            _wake_datapath(SC, LK, FP, HP, LK[link, L_NICQ])  # its next frame: maybe another link's


@_entry
def _undefer_into(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, node, msg, t, key):
    """Another frame of ``msg`` reaches ``node`` at (t, key): what of its deferred trains
    there arrived before it is taken first, and the rest of them arrive frame by frame."""
    nic = -1
    for link in range(SC[SC_NLINKS]):
        if LK[link, L_DST] != node:
            continue
        if LK[link, L_NICQ] >= 0:
            nic = LK[link, L_NICQ]
        e = LK[link, L_WHEAD]
        if e >= 0 and FP[e, F_DEFER] == DEFER_HERE and FP[e, F_MSG] == msg:
            _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, t, key, True)
    if nic < 0:
        return
    _datapath_feeders(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, nic, msg, t, key)
    # On the datapath's wire: its head is taken up to now; a train behind has not left yet.
    e = LK[nic, L_WHEAD]
    first = True
    while e != -1:
        nxt = FP[e, F_NEXT]
        if FP[e, F_DEFER] == DEFER_HERE and FP[e, F_MSG] == msg:
            if first:
                _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, nic, t, key, True)
            else:
                _deferred(SC, LK, FP, MS, MD, nic, e, DEFER_HERE, -1)
        first = False
        e = nxt


@_entry
def take_deferred(s, link, t, key):
    """Before the caller touches ``link``'s wire or reads what its far node received at
    (t, key): a train delivered as one there back to per-frame state at the later of that
    point and the point reached. Uses at most one frame row; pushes at most two heap entries."""
    SC, LK, LD, ND, NS, FP, FREE, HP = s.SC, s.LK, s.LD, s.ND, s.NS, s.FP, s.FREE, s.HP
    MS, MD, BITS, UP, LB = s.MS, s.MD, s.BITS, s.UP, s.LB
    e = LK[link, L_WHEAD]
    if e < 0 or FP[e, F_DEFER] <= 0:
        return
    at = SC[SC_AT_T]
    akey = SC[SC_AT_KEY]
    if at > t or (at == t and akey > key):
        t = at
        key = akey
    if FP[e, F_DEFER] == DEFER_HERE:
        _take_deferred(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, t, key, True)
        return
    _datapath_catch_up(SC, LK, LD, ND, NS, FP, FREE, HP, MS, MD, BITS, UP, LB, link, e, t, key)


@_inline
def _replicate(SC, LK, LD, FP, FREE, HP, NS, SP, FW, row, n, only, e, t):
    """Replicate: offer frame ``e`` to the transit queue of port ``only``, or of each of the ``n``
    egress ports of forwarding row ``row``: a copy on each (a new frame entry), ascending
    link id, the entry itself last. Unicast is the case n = 1: no copy."""
    for k in range(1, n + 1):
        out = only if only >= 0 else FW[row, k]
        f = e
        if k < n:
            f = _alloc_frame(SC, FREE)
            FP[f, F_MSG] = FP[e, F_MSG]
            FP[f, F_FRAG] = FP[e, F_FRAG]
            FP[f, F_LEN] = FP[e, F_LEN]
            FP[f, F_ROUTE] = FP[e, F_ROUTE]
            FP[f, F_RETX] = FP[e, F_RETX]
            FP[f, F_HOPS] = FP[e, F_HOPS]
            FP[f, F_IN] = FP[e, F_IN]
            FP[f, F_NTRAIN] = 1
            FP[f, F_DEFER] = 0
        offer_transit(SC, LK, LD, FP, FREE, HP, NS, SP, out, f, t)


@_entry
def open_message(s, mid, src, nfrags, flen, llen, flags, dptr, nd, bits_at):
    """Row ``mid`` of MS for a message whose destinations are MD rows dptr..dptr+nd-1
    (D_NODE filled by the caller); returns the BITS bytes its received bitmaps take.

    A destination keeps a received bitmap (the NIC's reassembly state) wherever a
    duplicate can arrive: resends (tracked messages) and re-routed multicasts. It is
    discarded and counted, never delivered. (A re-homed unicast stream moves its
    unsent fragments without repeating any, so untracked unicast needs none.)"""
    MS, MD = s.MS, s.MD
    MS[mid, M_SRC] = src
    MS[mid, M_NFRAGS] = nfrags
    MS[mid, M_FLEN] = flen
    MS[mid, M_LLEN] = llen
    ascending = True
    for j in range(1, nd):
        if MD[dptr + j - 1, D_NODE] >= MD[dptr + j, D_NODE]:
            ascending = False
    MS[mid, M_FLAGS] = (flags | MF_SORTED) if ascending else flags
    MS[mid, M_DPTR] = dptr
    MS[mid, M_DEND] = dptr + nd
    MS[mid, M_LIVE] = 0
    nb = (nfrags + 7) // 8 if (flags & MF_TRACK or nd > 1) else 0
    for j in range(nd):
        MD[dptr + j, D_GOT] = 0
        MD[dptr + j, D_DEFER] = 0
        MD[dptr + j, D_BITS] = bits_at + j * nb if nb else -1
    return nd * nb


@_entry
def add_stream(s, link, msg, route, pos, end, lst, ready, prio):
    """Queue a stream on port ``link``'s local queue; returns its row. ``prio`` 1: the
    priority class (``_prio_place``)."""
    SC, LK, HP, MS, SP, SFREE = s.SC, s.LK, s.HP, s.MS, s.SP, s.SFREE
    n = SC[SC_SFREE] - 1
    SC[SC_SFREE] = n
    st = SFREE[n]
    SP[st, S_MSG] = msg
    SP[st, S_ROUTE] = route
    SP[st, S_POS] = pos
    SP[st, S_END] = end
    SP[st, S_LIST] = lst
    SP[st, S_READY] = ready
    SP[st, S_NEXT] = -1
    SP[st, S_PRIO] = 0
    if not (prio and _prio_place(s, link, st, ready)):
        _data_place(LK, SP, link, st, ready)
    MS[msg, M_LIVE] += 1
    if LK[link, L_UP] == 1:
        schedule_tx(LK, HP, SC, link, bits.larger(ready, LK[link, L_TX_END]))
    return st


@_inline
def _splice(LK, SP, link, st, prev, p):
    """Stream ``st`` into ``link``'s local queue between ``prev`` (-1: at the head) and ``p``
    (-1: at the tail)."""
    SP[st, S_NEXT] = p
    if prev == -1:
        LK[link, L_SHEAD] = st
    else:
        SP[prev, S_NEXT] = st
    if p == -1:
        LK[link, L_STAIL] = st


@_inline
def _data_place(LK, SP, link, st, ready):
    """A data stream into ``link``'s local queue. The local queue is in ready-time order, ties
    in hand-over order: a send is handed to the packetizer at its ready time. A train out on
    this port is not affected: its stream is the head, ready at or before now, so a stream
    handed over now or later goes behind it (a caller adding one that would go ahead cuts the
    train first, cut_port), and the transmitter's look at the train's end is already pending."""
    prev = LK[link, L_STAIL]
    p = -1
    if prev != -1 and SP[prev, S_READY] > ready:  # not simply last: walk from the head
        prev = -1
        p = LK[link, L_SHEAD]
        while SP[p, S_READY] <= ready:
            prev = p
            p = SP[p, S_NEXT]
    _splice(LK, SP, link, st, prev, p)


@_inline
def _prio_place(s, link, st, ready):
    """Stream ``st`` (ready now) into the priority class of ``link``'s local queue: behind the
    priority streams already there (FIFO within the class), ahead of every data stream, if
    those priority streams hold fewer than PRIO_CAP_FRAMES frames; else it is not placed
    (False) and queues as data. The port's train, if any, is cut first (it may be overtaken)."""
    SC, LK, SP = s.SC, s.LK, s.SP
    _cut_at(SC, LK, s.FP, s.FREE, s.NS, SP, s.HP, link, ready, 0)  # positions as per frame
    prev = -1
    p = LK[link, L_SHEAD]
    ahead = 0
    while p != -1 and SP[p, S_PRIO] == 1:
        ahead += SP[p, S_END] - SP[p, S_POS]
        prev = p
        p = SP[p, S_NEXT]
    if ahead >= PRIO_CAP_FRAMES:
        return False
    SP[st, S_PRIO] = 1
    _splice(LK, SP, link, st, prev, p)
    return True


@_entry
def remove_stream(s, link, st, t, key):
    """Take stream ``st`` out of ``link``'s local queue at (t, key) (re-routing); it is not 'sent'."""
    SC, LK, FP, FREE, NS, HP, MS, SP, SFREE = s.SC, s.LK, s.FP, s.FREE, s.NS, s.HP, s.MS, s.SP, s.SFREE
    _cut_at(SC, LK, FP, FREE, NS, SP, HP, link, t, key)
    prev = -1
    p = LK[link, L_SHEAD]
    while p != st:
        prev = p
        p = SP[p, S_NEXT]
    nxt = SP[st, S_NEXT]
    if prev == -1:
        LK[link, L_SHEAD] = nxt
    else:
        SP[prev, S_NEXT] = nxt
    if LK[link, L_STAIL] == st:
        LK[link, L_STAIL] = prev
    MS[SP[st, S_MSG], M_LIVE] -= 1
    SFREE[SC[SC_SFREE]] = st
    SC[SC_SFREE] += 1
    if SC[SC_CREDIT] == 1 and LK[link, L_PAUSED] == 1 and LK[link, L_UP] == 1:
        schedule_tx(LK, s.HP, SC, link, bits.larger(t, LK[link, L_TX_END]))  # its head waited for credit


@_entry
def credit_look(s, t):
    """Credit: after the routes changed at ``t`` (what a frame spends depends on them), every port
    waiting for credit looks again. Pushes at most one heap entry per link."""
    SC, LK, HP = s.SC, s.LK, s.HP
    for link in range(SC[SC_NLINKS]):
        if LK[link, L_PAUSED] == 1 and LK[link, L_UP] == 1:
            schedule_tx(LK, HP, SC, link, bits.larger(t, LK[link, L_TX_END]))


@_inline
def _reached(SC, t, key):
    SC[SC_AT_T] = t
    SC[SC_AT_KEY] = key


@_entry
def advance(s, limit, limit_key, margin):
    """Process events before the stop point (``limit``, ``limit_key``); return (status, time).

    Events are taken in (time, key) order and processing stops before the first
    event with time > limit, or time == limit and key >= limit_key (KEY_GRANTS:
    the arrivals at ``limit`` are done, its grants are not; KEY_ALL: everything
    at ``limit`` is done). It also stops early, before touching an event, when a
    buffer might overflow (``margin`` rows of frames, upcalls and log records),
    so Python can grow or flush it and call again; and after the last event of a
    time that produced upcalls, so Python handles them at the right simulated time.
    The point reached is kept in SC (SC_AT_T, SC_AT_KEY); trains are not cut on
    return: the entry points that touch a port (``cut_port``, ``remove_stream``,
    ``link_down``, ``link_up``) and ``settle`` (before the counters are read) cut
    them there, so the caller sees exactly the per-frame loop's tables. With SC[SC_BIN_PS] > 0 every
    transmission is also folded into the link statistics ``LB`` (with 0, LB is never read).
    """
    SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP = s.SC, s.LK, s.LF, s.LR, s.LD, s.ND, s.NS, s.DL, s.FP, s.FREE, s.HP
    LG, FW, MS, MD, BITS, UP, SP, SL, SFREE, LB = s.LG, s.FW, s.MS, s.MD, s.BITS, s.UP, s.SP, s.SL, s.SFREE, s.LB
    # Upcalls left from a call that stopped to grow a buffer keep their time.
    up_time = UP[0, U_TIME] if SC[SC_UP] > 0 else -1
    # The statistics table covers times before bins_end: (t // w + 1) * links > rows <=> t >= bins_end
    # (one division a call instead of one an event).
    bins_end = INF
    if SC[SC_BIN_PS] > 0 and SC[SC_NLINKS] > 0:
        if SC[SC_BIN_CAP] == 0:  # with a limit the table holds all its bins and widens them (_bin_tx)
            bins_end = (LB.shape[0] // SC[SC_NLINKS]) * SC[SC_BIN_PS]
    while True:
        if SC[SC_HEAP] == 0:
            if SC[SC_UP] > 0:
                _reached(SC, up_time, KEY_ALL)
                return ST_UPCALLS, up_time
            _reached(SC, SC[SC_NOW], KEY_ALL)
            return ST_IDLE, SC[SC_NOW]
        t = HP[0, 0]
        key = HP[0, 1]
        # Trains stay out across returns: what the caller touches (a port, the counters)
        # is cut back to per-frame state then, at the point recorded here (_cut_at).
        if SC[SC_UP] > 0 and t > up_time:
            _reached(SC, up_time, KEY_ALL)
            return ST_UPCALLS, up_time
        if t > limit or (t == limit and key >= limit_key):
            _reached(SC, limit, limit_key)
            return ST_LIMIT, HP[0, 0]
        need = 0  # a buffer to grow first: the next event is not done
        if SC[SC_FREE] < margin + SC[SC_DEFERRED]:  # a deferred train may split into two rows
            need = ST_NEED_FRAMES
        elif SC[SC_UP] + margin > UP.shape[0]:
            need = ST_NEED_UPCALLS
        elif SC[SC_LOGGING] == 1 and SC[SC_LOG] + margin > LG.shape[0]:
            need = ST_NEED_LOG
        elif HEAP_LO + SC[SC_HEAP] + margin > HP.shape[0]:
            need = ST_NEED_HEAP
        elif t >= bins_end:
            need = ST_NEED_BINS
        if need != 0:
            _reached(SC, t, key)
            return need, t
        if _stale(SC, LK, t, key):
            _heap_pop(HP, SC)
            SC[SC_STALE] += 1
            continue
        if t < SC[SC_NOW]:
            SC[SC_LATE] += 1  # a rule scheduled an event in the past: the tests require none
        SC[SC_NOW] = t
        SC[SC_EVENTS] += 1
        _heap_pop(HP, SC)  # done as it runs: what it schedules is compared with the next pending
        if key >= _KIND_SHIFT:
            _transmitter(SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP, FW, MS, SP, SL, SFREE, UP, key - _KIND_SHIFT, t)
        elif key >= _PAUSE_KEY:
            if key >= _CREDIT_KEY:
                _credit_event(SC, LK, FP, FREE, HP, key - _CREDIT_KEY, t)
            else:
                _pause_event(SC, LK, FP, FREE, NS, SP, HP, key - _PAUSE_KEY, t, key)
        else:
            LK[key, L_ARR_PEND] = -1
            pulling = _pulls(SC, LK, key)
            if not pulling or LK[key, L_WHEAD] != -1 or _pull_next(SC, LK, LD, ND, NS, FP, FREE, HP, FW, MS, MD, BITS, UP, SP, LG, LB, key, t):
                _arrival(SC, LK, LF, LR, LD, ND, NS, DL, FP, FREE, HP, LG, FW, MS, MD, BITS, UP, SP, LB, key, t)
                if pulling:
                    _wake_datapath(SC, LK, FP, HP, key)  # its next frame, if its wire is empty now
        if SC[SC_UP] > 0 and up_time < 0:
            up_time = t


@_entry
def link_down(s, link, t, key):
    """Take a link down at (``t``, ``key``): every frame on its wire or in its transit queue is dropped.

    A frame that had started transmitting (on the wire or propagating) was a transmission:
    it is counted as sent (whole, also when cut mid-frame), its busy time ends at ``t`` at
    the latest, and it gets a record with fate ``link_down`` at ``t``, so the counters, the
    log (link statistics) and a drop list's transmission indices agree."""
    SC, LK, LD, LG, FP, FREE, MS, UP, LB = s.SC, s.LK, s.LD, s.LG, s.FP, s.FREE, s.MS, s.UP, s.LB
    e = LK[link, L_WHEAD]
    cut = 0  # credit: what the frames cut off spent, back to this port
    while e != -1:
        nxt = FP[e, F_NEXT]
        flen = FP[e, F_LEN]
        cut += FP[e, F_CRED]
        # A train is its frames, one after another (all of them have started by now).
        for k in range(bits.larger(FP[e, F_NTRAIN], 1)):
            if k > 0:
                FP[e, F_FRAG] += 1
                FP[e, F_START] += FP[e, F_SER]
                FP[e, F_ENQ] = FP[e, F_START]
                FP[e, F_END] += FP[e, F_SER]
                SC[SC_TRAIN_HELD] -= 1
            LK[link, L_TX_F] += 1
            LK[link, L_TX_B] += wire_bytes(flen)
            LK[link, L_BUSY] += bits.smaller(FP[e, F_END], t) - FP[e, F_START]
            if SC[SC_LOGGING] == 1 and link < SC[SC_NLINKS]:
                _log_tx(SC, LG, FP, e, link, t, DROP_DOWN)
            if SC[SC_BIN_PS] > 0 and link < SC[SC_NLINKS]:
                _bin_tx(SC, LB, link, FP[e, F_START], bits.smaller(FP[e, F_END], t), FP[e, F_ENQ], FP[e, F_QB], flen,
                        DROP_DOWN)
            _drop_link(LD, link, DROP_DOWN, flen)
        _free_frame(SC, FREE, e)
        e = nxt
    LK[link, L_TRAIN] = 0
    e = LK[link, L_THEAD]
    while e != -1:
        nxt = FP[e, F_NEXT]
        _drop_link(LD, link, DROP_DOWN, FP[e, F_LEN])
        _free_frame(SC, FREE, e)  # first: a credit return may take its row
        _hold(SC, LK, FP, FREE, s.HP, FP[e, F_IN], -FP[e, F_LEN], FP[e, F_LEN], t)
        e = nxt
    LK[link, L_WHEAD] = -1
    LK[link, L_WTAIL] = -1
    LK[link, L_THEAD] = -1
    LK[link, L_TTAIL] = -1
    LK[link, L_QF] = 0
    LK[link, L_QB] = 0
    _wire_empty(SC, LK, link)
    LK[link, L_UP] = 0
    if _pulled(SC, LK, link):
        # Its frames that had arrived were in the datapath already (the caller settled the
        # pulls); the datapath's next frame is another link's now.
        _wake_datapath(SC, LK, FP, s.HP, LK[link, L_NICQ])
    if SC[SC_CREDIT] == 1:
        if cut != 0 and link < SC[SC_NLINKS]:
            _credit_back(SC, LK, FP, FREE, s.HP, link, cut, t)
        if LK[link, L_PAUSED] == 1:
            _starved(LK, link, t, 0)  # a port down waits for no credit
    # The frame on the wire is cut off: the transmitter is free from now on.
    if LK[link, L_TX_END] > t:
        LK[link, L_TX_END] = t
    m = LK[link, L_SENT]
    if m >= 0:
        LK[link, L_SENT] = -1
        _stream_sent(SC, MS, UP, m, link, t)


@_entry
def link_up(s, link, t, key):
    """The port is usable at (``t``, ``key``): its local queue resumes at once."""
    SC, LK, FP, FREE, NS, SP, HP = s.SC, s.LK, s.FP, s.FREE, s.NS, s.SP, s.HP
    _cut_at(SC, LK, FP, FREE, NS, SP, HP, link, t, key)  # an up port (a no-op repair) keeps no train
    LK[link, L_UP] = 1
    if LK[link, L_TX_END] < t:
        LK[link, L_TX_END] = t
    if LK[link, L_SHEAD] != -1 or LK[link, L_THEAD] != -1:
        schedule_tx(LK, HP, SC, link, t)
