"""Named columns of the compiled replay's tables (emu.engine.loop, docs/engine.md).

Every table is a 2-D int64 array (OP: int32, its wide values in OW), one row per op,
part, delivery slot, node, transfer or message; the constants below name its columns. A *slot* is one
(communication op, destination board) pair: the op's sorted destination list laid
out flat, so slot ``dst_ptr[op] + j`` is the op's j-th destination.
"""

# ---- ops (OP): int32 where every value fits (kinds, nodes, positions in IDX, groups) ------
O_KIND = 0
O_NODE = 1
O_MSGOP = 2
O_RES = 3         # residency of what the op delivers
O_PART = 4        # first part
O_PEND = 5        # one past its last part
O_DEP = 6         # its dependencies in IDX (the trace's dep list)
O_DEPEND = 7
O_DST = 8         # its sorted destinations in IDX; also its first slot
O_DSTEND = 9
O_SRC = 10        # its sources in IDX
O_SRCEND = 11
O_BLK = 12        # KV blocks a handoff names, in IDX
O_BLKEND = 13
O_DONE = 14       # parts released when it is done (finished / delivered everywhere), in IDX
O_DONEEND = 15
O_GRP = 16        # reduction / all-to-all group in the group table GP
O_GRPEND = 17
O_CHUNK = 18
O_LAYER = 19
O_NDLV = 20       # destinations it has been delivered at
O_COMM = 21       # 1: communication or control (runs in the NICs)
O_NCOLS = 22

# ---- ops' wide values (OW, int64): times in ps, byte counts, block ids, masks -----------
OW_KV = 0
OW_BYTES = 1
OW_DUR = 2        # compute time (roofline + overhead), 0 for communication
OW_START = 3
OW_END = 4
OW_DMASK = 5      # its destination boards: a board set of RS[R_MASKW] words (the table's last columns)
OW_NCOLS = 6      # ... the table has OW_DMASK + W columns

# ---- parts (PT): an op at one place (compute: its node; communication: one source) ----
P_OP = 0
P_NODE = 1
P_NEED = 2        # unmet dependencies
P_ROUTE = 3       # route of its send to the op's other destinations (-1: none)
P_NCOLS = 4

# ---- slots (SLOT): one (communication op, destination) ---------------------------------
S_NODE = 0
S_AT = 1          # parts released when the op is delivered here, in IDX
S_ATEND = 2
S_READERS = 3     # readers of the copy here still to finish (transient copies)
S_GOT = 4         # sources' payloads arrived here
S_TIME = 5        # when the op was delivered here (-1: not yet)
S_TRANS = 6       # transient bytes held here for this op
S_NCOLS = 7

# ---- dependency flags (DF, per entry of the dep list) --------------------------------
DF_READS = 1      # the dependent op reads the delivery's data (keeps a transient copy)
DF_REPLICA = 2    # the dependency is a KV replica multicast (attention reads a replica)

# ---- groups (GP): members of reductions and all-to-all exchanges ---------------------
G_MEMBER = 0
G_PARENT = 1      # reductions: the member it reports to (-1: the root)
G_WAIT = 2        # reductions: contributions still to come (its own + its children's)
G_FOLD_OWN = 3    # reductions: when its own contribution folded at it, in R_NFOLD's count (-1: not yet)
G_FOLD_UP = 4     # reductions: when its result folded at its parent, in R_NFOLD's count (-1: not yet)
G_NCOLS = 5

# ---- nodes (NT) --------------------------------------------------------------------
N_BUSY = 0        # compute engine running an op
N_STALL = 1       # sends waiting for the packetizer (the compute engine stalls)
N_FIFO_B = 2      # packetizer payload bytes in use
N_FIFO_E = 3      # packetizer metadata entries in use
N_QHEAD = 4       # transfers waiting for room (linked through T_NEXT)
N_QTAIL = 5
N_OWNER = 6       # KV memory: owner, replica and transient bytes
N_REPLICA = 7
N_TRANSIENT = 8
N_RQ = 9          # its ready queue: a binary min-heap of op ids in RQ[N_RQ : N_RQ + capacity]
N_RQLEN = 10
N_MSGID = 11      # the NIC's message id and sequence counters (header fields)
N_SEQ = 12
N_NCOLS = 13

# ---- transfers (TR): one send handed to a NIC -----------------------------------------
T_SRC = 0
T_NBYTES = 1
T_MSGOP = 2
T_KV = 3
T_CB = 4          # who hears of its deliveries: CB_* below
T_OP = 5          # the trace op it serves
T_ARG = 6         # CB_SEND: its source; CB_A2A: member index
T_ARG2 = 7        # CB_A2A: step
T_M0 = 8          # its messages (kernel rows) m0..m1-1
T_M1 = 9
T_SENT = 10       # messages fully sent
T_NEXT = 11       # next transfer waiting for the same packetizer
T_ACCEPTED = 12   # when the packetizer took it (-1: still waiting)
T_ROUTE = 13      # route of its messages to the boards other than its source
T_FAIL_RETRIES = 14  # 1 + the retries it had when reliable delivery gave up (0: not failed; -1: no route)
T_DMASK = 15      # board sets (emu.engine.boards), RS[R_MASKW] words each, from here, set k
                  # at T_DMASK + k W: ...
T_DESTS = 0       # ... its destinations (the source too when it is one),
T_DELIVERED = 1   # ... the boards it was delivered at,
T_FAILED = 2      # ... the boards it failed at
T_SETS = 3
T_NCOLS = 16      # ... the table has T_DMASK + T_SETS W columns

CB_SEND = 0       # a communication op's part: the op counts its sources' payloads
CB_CTRL = 1       # a drain or invalidate: delivered to the op at once
CB_RED = 2        # a reduction's partial result: folds at the receiving member
CB_A2A = 3        # one pair of an all-to-all: the member's next step follows

# ---- messages (MX, beside the kernel's MS rows) -----------------------------------------
X_TR = 0          # its transfer
X_SENT = 1        # every stream of it has left the packetizer
X_TIMER = 2       # reliable delivery: 1 + sequence number of its live retransmission timer (0: none)
X_CTRL = 3        # what it is: a data message (CTRL_DATA) or a control frame of the NICs (CTRL_*)
X_ABOUT = 4       # a control frame: the data message it is about
X_PEER = 5        # a control frame: the receiver of that message it concerns (acker, probed, nacker)
X_NACK = 6        # a nack: offset of its payload (the missing-fragment bitmap) in NKB
X_NCOLS = 7
CTRL_DATA = 0
CTRL_ACK = 1
CTRL_PROBE = 2
CTRL_NACK = 3

# ---- KV blocks (KB: owner per block; KR: replica per (node, block)) ---------------------
K_OWNER = 0       # owning node (-1: none)
K_BYTES = 1
K_NCOLS = 2
# functional mode only (emu.replay.functional_feed): KB has these two more columns, the
# owner and bytes of each block when the first reduction contribution started
K_SNAP_OWNER = 2
K_SNAP_BYTES = 3
K_FN_NCOLS = 4
RP_STATE = 0       # INVALID 0, VALID 1, DRAINING 2 (emu.nic.directory.State)
RP_BYTES = 1
RP_NCOLS = 2

# ---- run state (RS, int64) ----------------------------------------------------------
R_NOW = 0
R_SEQ = 1         # next event sequence number (events at one time run in this order)
R_WAKE_SEQ = 2    # sequence number of the pending network wake-up (-1: none)
R_WAKE_AT = 3
R_UPCALL_EV = 4   # 1: a hand-over of upcalls is scheduled
R_IN_RUN = 5      # 1: inside the network's frame loop (resumes there after a buffer growth)
R_KV_BYTES = 6
R_DONE_OPS = 7
R_NTR = 8         # transfers created
R_NMSG = 9        # messages created (kernel MS rows)
R_NMD = 10        # MD rows used
R_NBITS = 11      # BITS bytes used
R_LIVE_REP = 12   # live replicas (directory)
R_NOWNERS = 13    # blocks with an owner
R_NSIM = 14       # event heap size
R_NWORK = 15      # work stack size
R_NHIST = 16
R_NERR = 17
R_NODES = 18      # boards
R_V = 19          # nodes of the topology (boards and switches)
R_MARGIN = 20     # room advance() keeps in its buffers
R_PER = 21        # payload bytes per frame
R_HDR = 22        # frame header bytes
R_CHUNK = 23      # payload bytes per message (MAX_FRAGS fragments)
R_FIFO_B = 24     # packetizer capacity: bytes ...
R_FIFO_E = 25     # ... and entries
R_LAYERS = 26
R_KVMIN = 27      # KV block ids are dense from here
R_NKV = 28
R_PROGRESS = 29   # report progress to Python every this many ops (0: never)
R_PROG_NEXT = 30
R_CTRL_DRAIN = 31  # control frames put on the wire: drains ...
R_CTRL_INV = 32    # ... and invalidates
R_EVENTS = 33     # events processed
R_RELIABLE = 34   # 1: reliable delivery (emu.engine.reliable; NicConfig.reliable)
R_MAX_RETRIES = 35
R_RTO_MIN = 36
R_RTO_MAX = 37
R_RETX = 38       # fragments resent (the summary's retransmitted_frames)
R_CTRL_ACK = 39   # control frames put on the wire: acks, ...
R_CTRL_NACK = 40  # ... nacks ...
R_CTRL_PROBE = 41  # ... and probes
R_NSL = 42        # SL entries used (resend fragment lists)
R_NNKB = 43       # NKB bytes used (nack payloads)
R_CHG_T = 44      # a timeline's first pending change: time (INF: none) ...
R_CHG_KEY = 45    # ... and its point of that instant (emu.net.network.Network.schedule_change)
R_IN_CHG = 46     # 1: applying the changes due now (Network._changes_due)
R_STARTED = 47    # 1: drive() has started the replay
R_NFOLD = 48      # reduction contributions folded so far (orders the GP G_FOLD_* columns)
R_SNAPPED = 49    # 1: the directory's owners are in KB's K_SNAP_* columns (functional mode)
R_MASKW = 50      # words of a board set (emu.engine.boards)
R_NCOLS = 51

# ---- events (kinds in GT_SIM) ----------------------------------------------------------
E_FINISH = 0      # a compute op ends (a = op, b = node)
E_WAKE = 1        # the network's next frame event is due
E_UPCALLS = 2     # the kernel's upcalls of a later instant are due
E_LOCAL = 3       # a send's copy for its own source (a = transfer, b = node)
E_TIMER = 4       # a message's retransmission timer (a = message; live while MX[a, X_TIMER] names it)
E_CHANGE = 5      # a timeline's changes are due (Network._changes_due)
E_PARTLEFT = 6    # a message with no first hop counts as sent (a = message; Cluster._part_left)

# ---- work items (kinds in GT_WORK): the replay's callbacks, run depth first ---------------
W_RELEASE = 0     # release IDX[a:b] one part at a time
W_READY = 1       # part a has all it needs
W_TRY = 2         # node a's compute engine looks for work
W_DELIVERED = 3   # op a delivered at node b: what follows releasing its waiters there
W_CONSUMED = 4    # part of op a at node b has read its inputs
W_A2A_STEP = 5    # all-to-all op a, member b: its step c
W_UPCALLS = 6     # kernel upcall rows a..b-1
W_PART_DLV = 7    # one source's payload of op a reached node b
W_OP_DLV = 8      # op a is delivered at node b

# ---- statuses of drive() ---------------------------------------------------------------
D_DONE = 0        # no events left
D_PROGRESS = 1    # R_PROGRESS more ops are done (Python draws the bar and calls again)
D_CHANGE = 8      # a timeline change is due now: Python applies it to the kernel tables and calls again
# anything else: the kernel's ST_NEED_* (Python grows or flushes that buffer and calls again)

# ---- directory error codes (rows of ERR) -----------------------------------------------------
ERR_READ = 0
ERR_DRAIN = 1
ERR_INVALIDATE = 2

