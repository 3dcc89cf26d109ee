"""The compiled replay's tables (emu.engine.loop, docs/engine.md), declared as data.

Every table is a 2-D int64 array (OP, PT, SLOT and IDX: int32; OP's wide values in OW, a
slot's in SW), one row per op, part, delivery slot, node, transfer or message; its ``Table``
below lists the columns in order with what each holds, and the column constants (one prefix per table: ``OPS_KIND``,
``NT_BUSY``, ``RS_NOW``, ...) are rendered from it into this source by
``python -m emu.net.render_tables`` (tests/test_tables.py checks they match). A *slot* is
one (communication op, destination board) pair: the op's sorted destination list laid out
flat, so slot ``dst_ptr[op] + j`` is the op's j-th destination. Tables whose width depends
on the run (board sets of RS[RS_MASKW] words, emu.engine.boards) say so in their ``tail``.
The kinds, flags and codes the tables hold (events, work items, callbacks, control
frames, statuses, directory errors) are named at the end.
"""

import numpy as np

from ..net.tables import Table

# ---- ops (OP): int32 where every value fits (kinds, nodes, positions in IDX, groups) ------
# An op's lists (parts, dependencies, destinations, ...) lie one after another in op order,
# so each ends where the next op's begins: op o's list ``x`` is ``OP[o, x]`` up to
# ``OP[o + 1, x]``. OP has one row more than the ops, the sentinel, holding every list's end
# (a column of ends beside each column of starts was 8 of 24 columns: 212 MiB at 128 boards,
# and a row of 16 int32 columns is one cache line).
OPS = Table("ops (OP)", "OPS", (
    ("kind", "emu.workload's op kind"),
    ("node", "the node it runs at (compute) or its first source"),
    ("msgop", "the wire op of what it sends (emu.codec.MsgOp)"),
    ("res", "residency of what the op delivers"),
    ("part", "its parts, up to the next row's"),
    ("dep", "its dependencies in IDX (the trace's dep list), up to the next row's"),
    ("dst", "its sorted destinations in IDX, up to the next row's; also its first slot"),
    ("src", "its sources in IDX, up to the next row's"),
    ("blk", "KV blocks a handoff names, in IDX, up to the next row's"),
    ("done", "parts released when it is done (finished / delivered everywhere), in IDX, up to the next row's"),
    ("sig", "its signal groups in IDX, each [node, n, n parts], up to the next row's: signalled when it finishes (compute), or from each destination it is delivered at (communication)"),
    ("grp", "reduction / all-to-all group in the group table GP, up to the next row's (empty: neither)"),
    ("chunk", "the trace's chunk"),
    ("layer", "the trace's layer"),
    ("ndlv", "destinations it has been delivered at"),
    ("comm", "1: communication or control (runs in the NICs)"),
), dtype=np.int32)
# OPS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(OPS_KIND, OPS_NODE, OPS_MSGOP, OPS_RES, OPS_PART, OPS_DEP, OPS_DST, OPS_SRC, OPS_BLK, OPS_DONE,
 OPS_SIG, OPS_GRP, OPS_CHUNK, OPS_LAYER, OPS_NDLV, OPS_COMM) = range(16)
OPS_NCOLS = 16

# ---- ops' wide values (OW, int64): times in ps, byte counts, block ids -----------------
# (no board set per op: a send reads its op's destinations from IDX, which holds them sorted)
WIDE = Table("ops' wide values (OW)", "OW", (
    ("kv", "KV block id"),
    ("bytes", "payload bytes"),
    ("dur", "compute time (roofline + overhead), 0 for communication"),
    ("start", "when it started (-1: not yet)"),
    ("end", "when it ended (-1: not yet)"),
))
# WIDE's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(OW_KV, OW_BYTES, OW_DUR, OW_START, OW_END) = range(5)
OW_NCOLS = 5

# ---- parts (PT): an op at one place (compute: its node; communication: one source) ----
PARTS = Table("parts (PT)", "PT", (
    ("op", "the op"),
    ("node", "where it runs"),
    ("need", "unmet dependencies"),
    ("route", "route of its send to the op's other destinations (-1: none)"),
))
# PARTS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(PT_OP, PT_NODE, PT_NEED, PT_ROUTE) = range(4)
PT_NCOLS = 4

# ---- slots (SLOT): one (communication op, destination) ---------------------------------
SLOTS = Table("delivery slots (SLOT)", "SLOT", (
    ("node", "the destination"),
    ("at", "parts released when the op is delivered here, in IDX"),
    ("atend", "end of those parts"),
    ("readers", "readers of the copy here still to finish (transient copies)"),
    ("got", "sources' payloads arrived here"),
), dtype=np.int32)
# SLOTS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(SLOT_NODE, SLOT_AT, SLOT_ATEND, SLOT_READERS, SLOT_GOT) = range(5)
SLOT_NCOLS = 5

# ---- slots' wide values (SW, int64): a time and a byte count per slot ----------------------
SLOT_WIDE = Table("slots' wide values (SW)", "SW", (
    ("time", "when the op was delivered here (-1: not yet)"),
    ("trans", "transient bytes held here for this op"),
))
# SLOT_WIDE's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(SW_TIME, SW_TRANS) = range(2)
SW_NCOLS = 2

# ---- groups (GP): members of reductions and all-to-all exchanges ---------------------
GROUPS = Table("group members (GP)", "GP", (
    ("member", "the member's board"),
    ("parent", "reductions: the member it reports to (-1: the root)"),
    ("wait", "reductions: contributions still to come (its own + its children's)"),
    ("fold_own", "reductions: when its own contribution folded at it, in RS_NFOLD's count (-1: not yet)"),
    ("fold_up", "reductions: when its result folded at its parent, in RS_NFOLD's count (-1: not yet)"),
))
# GROUPS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(GP_MEMBER, GP_PARENT, GP_WAIT, GP_FOLD_OWN, GP_FOLD_UP) = range(5)
GP_NCOLS = 5

# ---- nodes (NT) --------------------------------------------------------------------
NODE_STATE = Table("nodes (NT)", "NT", (
    ("busy", "compute engine running an op"),
    ("stall", "sends waiting for the packetizer (the compute engine stalls)"),
    ("fifo_b", "packetizer payload bytes in use"),
    ("fifo_e", "packetizer metadata entries in use"),
    ("qhead", "transfers waiting for room (linked through TR_NEXT)"),
    ("qtail", "the last of them"),
    ("owner", "KV memory: owner bytes"),
    ("replica", "KV memory: replica bytes"),
    ("transient", "KV memory: transient bytes"),
    ("rq", "its ready queue: a binary min-heap of op ids in RQ[NT_RQ : NT_RQ + capacity]"),
    ("rqlen", "ops in its ready queue"),
    ("msgid", "the NIC's message id counter (a header field)"),
    ("seq", "the NIC's sequence counter (a header field)"),
))
# NODE_STATE's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(NT_BUSY, NT_STALL, NT_FIFO_B, NT_FIFO_E, NT_QHEAD, NT_QTAIL, NT_OWNER, NT_REPLICA,
 NT_TRANSIENT, NT_RQ, NT_RQLEN, NT_MSGID, NT_SEQ) = range(13)
NT_NCOLS = 13

# ---- transfers (TR): one send handed to a NIC -----------------------------------------
TRANSFERS = Table("transfers (TR)", "TR", (
    ("src", "source board"),
    ("nbytes", "payload bytes"),
    ("msgop", "the wire op of its messages"),
    ("kv", "KV block id"),
    ("cb", "who hears of its deliveries: CB_* below"),
    ("op", "the trace op it serves"),
    ("arg", "CB_SEND: its source; CB_A2A: member index"),
    ("arg2", "CB_A2A: step"),
    ("m0", "its messages (kernel rows) m0..m1-1"),
    ("m1", "one past its last message"),
    ("sent", "messages fully sent"),
    ("next", "next transfer waiting for the same packetizer"),
    ("accepted", "when the packetizer took it (-1: still waiting)"),
    ("route", "route of its messages to the boards other than its source"),
    ("fail_retries", "1 + the retries it had when reliable delivery gave up (0: not failed; -1: no route)"),
    ("settled", "reliable delivery: its messages acked by every receiver, given up, or with no route"),
    ("seq", "its number in the order transfers are opened (the row, unless rows are recycled)"),
    ("left", "UP_DONE upcalls still to come, one per (message, board other than its source)"),
    ("dmask", "its board sets, from here to the end of the row"),
), sets=(
    ("dests", "its destinations (the source too when it is one)"),
    ("delivered", "the boards it was delivered at"),
    ("failed", "the boards it failed at"),
), tail="set k is RS[RS_MASKW] = W words at TR_DMASK + k W: the table has TR_DMASK + TR_SETS W columns")
# TRANSFERS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(TR_SRC, TR_NBYTES, TR_MSGOP, TR_KV, TR_CB, TR_OP, TR_ARG, TR_ARG2, TR_M0, TR_M1, TR_SENT,
 TR_NEXT, TR_ACCEPTED, TR_ROUTE, TR_FAIL_RETRIES, TR_SETTLED, TR_SEQ, TR_LEFT,
 TR_DMASK) = range(19)
(TR_SET_DESTS, TR_SET_DELIVERED, TR_SET_FAILED) = range(3)
TR_SETS = 3
# set k is RS[RS_MASKW] = W words at TR_DMASK + k W: the table has TR_DMASK + TR_SETS W columns
TR_NCOLS = 19

# ---- messages (MX, beside the kernel's MS rows) -----------------------------------------
MESSAGE_STATE = Table("messages (MX, beside the kernel's MS rows)", "MX", (
    ("tr", "its transfer"),
    ("sent", "every stream of it has left the packetizer"),
    ("timer", "reliable delivery: 1 + sequence number of its live retransmission timer (0: none)"),
    ("ctrl", "what it is: a data message (CTRL_DATA) or a control frame of the NICs (CTRL_*)"),
    ("about", "a control frame: the data message it is about"),
    ("peer", "a control frame: the receiver of that message it concerns (acker, probed, nacker)"),
    ("nack", "a nack: offset of its payload (the missing-fragment bitmap) in NKB"),
))
# MESSAGE_STATE's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(MX_TR, MX_SENT, MX_TIMER, MX_CTRL, MX_ABOUT, MX_PEER, MX_NACK) = range(7)
MX_NCOLS = 7

# ---- KV blocks (KB: owner per block; KR: replica per (node, block)) ---------------------
KV_BLOCKS = Table("KV blocks (KB)", "KB", (
    ("owner", "owning node (-1: none)"),
    ("bytes", "the block's bytes"),
    ("snap_owner", "functional mode only: the owner when the first reduction contribution started"),
    ("snap_bytes", "functional mode only: the bytes then"),
), tail="only functional mode (emu.replay.functional_feed) has the snap columns: others KB_SNAP_OWNER")
# KV_BLOCKS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(KB_OWNER, KB_BYTES, KB_SNAP_OWNER, KB_SNAP_BYTES) = range(4)
# only functional mode (emu.replay.functional_feed) has the snap columns: others KB_SNAP_OWNER
KB_NCOLS = 4

KV_REPLICAS = Table("KV replicas (KR, one row per (node, block))", "KR", (
    ("state", "INVALID 0, VALID 1, DRAINING 2 (emu.nic.directory.State)"),
    ("bytes", "the replica's bytes"),
))
# KV_REPLICAS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(KR_STATE, KR_BYTES) = range(2)
KR_NCOLS = 2

# ---- run state (RS, int64, one row) ---------------------------------------------------
RUN = Table("run state (RS, one row)", "RS", (
    ("now", "simulated time, ps"),
    ("seq", "next event sequence number (events at one time run in this order)"),
    ("wake_seq", "sequence number of the pending network wake-up (-1: none)"),
    ("wake_at", "its time"),
    ("upcall_ev", "1: a hand-over of upcalls is scheduled"),
    ("in_run", "1: inside the network's frame loop (resumes there after a buffer growth)"),
    ("kv_bytes", "KV bytes held"),
    ("done_ops", "ops done"),
    ("ntr", "transfers created"),
    ("nmsg", "messages created (kernel MS rows)"),
    ("nmd", "MD rows used"),
    ("nbits", "BITS bytes used"),
    ("live_rep", "live replicas (directory)"),
    ("nowners", "blocks with an owner"),
    ("nsim", "event heap size"),
    ("nwork", "work stack size"),
    ("nhist", "HIST rows used"),
    ("nerr", "ERR rows used"),
    ("nodes", "boards"),
    ("v", "nodes of the topology (boards and switches)"),
    ("margin", "room advance() keeps in its buffers"),
    ("per", "payload bytes per frame"),
    ("hdr", "frame header bytes"),
    ("chunk", "payload bytes per message (MAX_FRAGS fragments)"),
    ("fifo_b", "packetizer capacity: bytes ..."),
    ("fifo_e", "... and entries"),
    ("layers", "the model's layers"),
    ("kvmin", "KV block ids are dense from here"),
    ("nkv", "KV blocks"),
    ("progress", "report progress to Python every this many ops (0: never)"),
    ("prog_next", "ops done at the next report"),
    ("hist_at", "hand the directory's history to Python when it holds this many rows (0: never; emu.engine.history)"),
    ("ctrl_drain", "control frames put on the wire: drains ..."),
    ("ctrl_inv", "... and invalidates"),
    ("events", "events processed"),
    ("reliable", "1: reliable delivery (emu.engine.reliable; NicConfig.reliable)"),
    ("max_retries", "reliable delivery's retries"),
    ("rto_min", "its least RTO, ps"),
    ("rto_max", "its largest RTO, ps"),
    ("retx", "fragments resent (the summary's retransmitted_frames)"),
    ("ctrl_ack", "control frames put on the wire: acks, ..."),
    ("ctrl_nack", "... nacks ..."),
    ("ctrl_probe", "... and probes"),
    ("ctrl_sig", "control frames put on the wire: signals (dependencies released across boards)"),
    ("nsl", "SL entries used (resend fragment lists)"),
    ("nnkb", "NKB bytes used (nack payloads)"),
    ("chg_t", "a timeline's first pending change: time (INF: none) ..."),
    ("chg_key", "... and its point of that instant (emu.net.network.Network.schedule_change)"),
    ("in_chg", "1: applying the changes due now (Network._changes_due)"),
    ("started", "1: drive() has started the replay"),
    ("nfold", "reduction contributions folded so far (orders the GP_FOLD_* columns)"),
    ("snapped", "1: the directory's owners are in KB's KB_SNAP_* columns (functional mode)"),
    ("maskw", "words of a board set (emu.engine.boards)"),
    ("nsends", "transfers opened so far (TR_SEQ)"),
    ("recycle", "1: a finished transfer's rows are taken again (emu.engine.rows)"),
    ("fl_tr", "free transfer rows: the first (-1: none), linked by TR_NEXT"),
    ("fl_msg", "RS[fl_msg + n]: the first free range of n message rows (-1: none), linked by MX_TR"),
    ("fl_md", "RS[fl_md + n]: the first free range of n MD rows (-1: none), linked by D_NODE"),
), tail="RS goes on past its columns with the free lists' heads: fl_msg's, then fl_md's")
# RUN's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(RS_NOW, RS_SEQ, RS_WAKE_SEQ, RS_WAKE_AT, RS_UPCALL_EV, RS_IN_RUN, RS_KV_BYTES, RS_DONE_OPS,
 RS_NTR, RS_NMSG, RS_NMD, RS_NBITS, RS_LIVE_REP, RS_NOWNERS, RS_NSIM, RS_NWORK, RS_NHIST,
 RS_NERR, RS_NODES, RS_V, RS_MARGIN, RS_PER, RS_HDR, RS_CHUNK, RS_FIFO_B, RS_FIFO_E, RS_LAYERS,
 RS_KVMIN, RS_NKV, RS_PROGRESS, RS_PROG_NEXT, RS_HIST_AT, RS_CTRL_DRAIN, RS_CTRL_INV, RS_EVENTS,
 RS_RELIABLE, RS_MAX_RETRIES, RS_RTO_MIN, RS_RTO_MAX, RS_RETX, RS_CTRL_ACK, RS_CTRL_NACK,
 RS_CTRL_PROBE, RS_CTRL_SIG, RS_NSL, RS_NNKB, RS_CHG_T, RS_CHG_KEY, RS_IN_CHG, RS_STARTED,
 RS_NFOLD, RS_SNAPPED, RS_MASKW, RS_NSENDS, RS_RECYCLE, RS_FL_TR, RS_FL_MSG,
 RS_FL_MD) = range(58)
# RS goes on past its columns with the free lists' heads: fl_msg's, then fl_md's
RS_NCOLS = 58

# ---- the event heap (SIM), the work stack (WORK), the directory's history and errors ----
EVENT_HEAP = Table("event heap (SIM), ordered by (time, seq)", "SIM", (
    ("time", "when it is due, ps"),
    ("seq", "scheduling sequence number"),
    ("kind", "E_* below"),
    ("a", "its first argument"),
    ("b", "its second argument"),
))
# EVENT_HEAP's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(SIM_TIME, SIM_SEQ, SIM_KIND, SIM_A, SIM_B) = range(5)
SIM_NCOLS = 5

CALLBACKS = Table("work stack (WORK): the replay's callbacks, run depth first", "WORK", (
    ("kind", "W_* below"),
    ("a", "its first argument"),
    ("b", "its second argument"),
    ("c", "its third argument"),
))
# CALLBACKS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(WORK_KIND, WORK_A, WORK_B, WORK_C) = range(4)
WORK_NCOLS = 4

HISTORY = Table("directory history (HIST): one row per change of a node's KV memory, its wide values", "HIST", (
    ("t_ps", "when"),
    ("owner_bytes", "the node's owner bytes then"),
    ("replica_bytes", "its replica bytes"),
    ("transient_bytes", "its transient bytes"),
))
# HISTORY's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(HIST_T_PS, HIST_OWNER_BYTES, HIST_REPLICA_BYTES, HIST_TRANSIENT_BYTES) = range(4)
HIST_NCOLS = 4

# The history's node and counts fit int32 (a node, and blocks a KV table numbers): a table of
# their own, row for row beside HIST (12.9M rows of 56 bytes at 128 boards were 44 this way).
HISTORY_NARROW = Table("directory history's narrow values (HN), row for row beside HIST", "HN", (
    ("node", "the node"),
    ("blocks", "blocks with an owner (all nodes)"),
    ("replicas", "live replicas (all nodes)"),
), dtype=np.int32)
# HISTORY_NARROW's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(HN_NODE, HN_BLOCKS, HN_REPLICAS) = range(3)
HN_NCOLS = 3

# A history as its readers see it, in this order (Directory.history_columns): the columns of both.
HISTORY_COLUMNS = ("t_ps", "node", "owner_bytes", "replica_bytes", "transient_bytes", "blocks", "replicas")

ERRORS = Table("directory errors (ERR)", "ERR", (
    ("t", "when"),
    ("code", "DERR_* below"),
    ("node", "the node"),
    ("kv", "the KV block (dense index)"),
    ("state", "the replica's state then"),
))
# ERRORS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(ERR_T, ERR_CODE, ERR_NODE, ERR_KV, ERR_STATE) = range(5)
ERR_NCOLS = 5

# ---- dependency flags (DF, per entry of the dep list) --------------------------------
DF_READS = 1      # the dependent op reads the delivery's data (keeps a transient copy)
DF_REPLICA = 2    # the dependency is a KV replica multicast (attention reads a replica)

# ---- who hears of a transfer's deliveries (TR_CB) ----------------------------------------
CB_SEND = 0       # a communication op's part: the op counts its sources' payloads
CB_CTRL = 1       # a drain or invalidate: delivered to the op at once
CB_RED = 2        # a reduction's partial result: folds at the receiving member
CB_A2A = 3        # one pair of an all-to-all: the member's next step follows
CB_SIG = 4        # a signal (TR_ARG: its group in IDX): releases the group's parts where it arrives

# ---- what a message is (MX_CTRL) ---------------------------------------------------------
CTRL_DATA = 0
CTRL_ACK = 1
CTRL_PROBE = 2
CTRL_NACK = 3
CTRL_ANSWER = 4   # an ack that answers a probe (counted as an ack; no RTT sample: protocol.ack)

# ---- events (SIM_KIND) ----------------------------------------------------------------
E_FINISH = 0      # a compute op ends (a = op, b = node)
E_WAKE = 1        # the network's next frame event is due
E_UPCALLS = 2     # the kernel's upcalls of a later instant are due
E_LOCAL = 3       # a send's copy for its own source (a = transfer, b = node)
E_TIMER = 4       # a message's retransmission timer (a = message; live while MX[a, MX_TIMER] names it)
E_CHANGE = 5      # a timeline's changes are due (Network._changes_due)
E_PARTLEFT = 6    # a message with no first hop counts as sent (a = message; Cluster._part_left)

# ---- work items (WORK_KIND) -----------------------------------------------------------------
W_RELEASE = 0     # release IDX[a:b] one part at a time
W_READY = 1       # part a has all it needs
W_TRY = 2         # node a's compute engine looks for work
W_DELIVERED = 3   # op a delivered at node b: what follows releasing its waiters there
W_CONSUMED = 4    # part of op a at node b has read its inputs
W_A2A_STEP = 5    # all-to-all op a, member b: its step c
W_UPCALLS = 6     # kernel upcall rows a..b-1
W_PART_DLV = 7    # one source's payload of op a reached node b
W_OP_DLV = 8      # op a is delivered at node b
W_SETTLED = 9     # reliable delivery: a message of transfer a is acked by all or given up

# ---- statuses of drive() ---------------------------------------------------------------
DRIVE_DONE = 0        # no events left
DRIVE_PROGRESS = 1    # RS_PROGRESS more ops are done (Python draws the bar and calls again)
DRIVE_CHANGE = 8      # a timeline change is due now: Python applies it to the kernel tables and calls again
DRIVE_HISTORY = 9     # the history holds RS_HIST_AT rows: Python takes them (emu.engine.history) and calls again
# anything else: the kernel's ST_NEED_* (Python grows or flushes that buffer and calls again)

# ---- directory error codes (ERR_CODE) -----------------------------------------------------
DERR_READ = 0
DERR_DRAIN = 1
DERR_INVALIDATE = 2
