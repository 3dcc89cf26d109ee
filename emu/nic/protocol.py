"""One board's NIC protocol: the code the emulator and `emu hw serve` both run.

What a board does with a frame or a completed message, as a per-board state machine
driven by events and answering with actions. It knows nothing of sockets, simulated
time or the event engine: time is an integer of picoseconds given with each event, and
timers are actions ("arm the timer of message s for time t") the driver keeps.

Events (methods of ``BoardProtocol``) and the actions they return:

============================  ===============================================================
event                         actions
============================  ===============================================================
``frame_arrived``             ``FORWARD`` copies (ttl - 1) on the row's egress, ``DELIVER`` here
``track``                     (the compute engine handed the NIC an ACK_REQ message; nothing)
``left``                      its last fragment left the wire: ``ARM``
``ack_arrived``               ``ARM`` (cancel: due -1) once every receiver has acked
``nack_arrived``              ``RESEND`` of exactly the fragments the bitmap names, ``ARM``
``resend_left``               the resent fragments left the wire: ``ARM``
``timer_due``                 ``ARM`` later (the estimator learnt a longer timeout), or
                              ``PROBE`` per silent receiver and ``ARM``, or ``FAILED``
``probe_arrived``             ``ACK`` or ``NACK`` (bitmap), at most one per message per gap
``gap_seen``                  ``NACK`` of the missing run just before a fragment that arrived
``message_complete``          ``ACK`` if it asked for one
``delivered``                 directory update (``DIRECTORY``)
``contribute``                ``REDUCED`` once own + children's contributions are in
============================  ===============================================================

Plus the rules both drivers call as functions: ``tree_rows`` / ``unicast_rows`` build a
node's forwarding row from ``emu.topology`` trees and routes (the same rows the network
kernel's FW table holds) and ``forward`` reads one; ``replica_transition`` is the
directory's state change; ``nack_payload`` / ``nack_frags`` the nack bitmap;
``reduction_complete`` when a board's reduction is complete and ``reduction_next`` /
``reduction_result`` where it goes. ``replica_transition``, ``reduction_complete`` and
``reduction_next`` are compiled: the compiled replay (emu.engine.directory, emu.engine.nic)
calls these same dispatchers.

State lives in plain int64 tables: the sender's messages (``OUT``, one row per message
awaiting acks: columns ``OUT_*``), their receivers (``OD``: ``OD_NODE``, ``OD_ACKED``) and the RTO table
of ``emu.nic.rto`` (one row per peer). The module-level functions that change them
(``arm``, ``ack``, ``timeout``, ``nack_accepted``) take tables and scalars only and are
compiled with numba, so a compiled loop calls the very functions the drivers call
(``.py_func`` is each in Python). The receiver's answer memory and the reduction
accumulators are Python (a dict and bytes); docs/nic.md says what that leaves for the
compiled loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)
from ..codec import Collective, Op
from ..net.tables import Table
from .directory import State, replica_transition  # noqa: F401  (the directory's rule, re-exported)
from ..topology.forwarding import tree_rows, unicast_rows  # noqa: F401  (the forwarding rule, re-exported)
from .rto import RT_RTO, RT_WORST, WORST_FACTOR, rto_backoff, rto_sample, rto_table

# ---- parameters -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProtocolConfig:
    """What a board's protocol is installed with (the emulator's NicConfig and serve's options)."""

    rto_min_ps: int = 100_000_000        # 100 us (docs/nic.md, "Adaptive timeout")
    rto_initial_ps: int = 1_000_000_000  # 1 ms
    rto_max_ps: int = 64_000_000_000     # 64 ms
    max_retries: int = 20
    # A probe about one message is answered at most once per this many ps (plus once more
    # when the message completes in between); 0: every probe is answered.
    answer_gap_ps: int = 0
    answer_memory: int = 65536           # answers remembered for that limit


# ---- actions ------------------------------------------------------------------------------------
# Plain tuples, kind first:
FORWARD = "forward"      # (FORWARD, egress links, ttl): copy the frame out with this ttl
TTL_EXPIRED = "ttl_expired"  # (TTL_EXPIRED,): the row forwards but the frame's ttl is spent
DELIVER = "deliver"      # (DELIVER,): the frame is for this board (reassembly, control)
ARM = "arm"              # (ARM, slot, due_ps): (re)start the message's timer; due -1: stop it
PROBE = "probe"          # (PROBE, slot, node): ask a silent receiver (an ack with ACK_REQ)
RESEND = "resend"        # (RESEND, slot, node, frags): these fragments again, unicast, RETX
FAILED = "failed"        # (FAILED, slot, waiting, retries): no ack after max_retries timeouts
ACK = "ack"              # (ACK, to, msg_id, seq): the message is here whole
NACK = "nack"            # (NACK, to, msg_id, seq, payload): the bitmap of what is missing
LIMITED = "limited"      # (LIMITED, to, msg_id): a probe not answered again within the gap
DIRECTORY = "directory"  # (DIRECTORY, kv, state or None, error or None)
REDUCED = "reduced"      # (REDUCED, key, acc, ack_req, msg_len): send up / deliver (reduction_result)
REDUCE_ERROR = "reduce_error"  # (REDUCE_ERROR, text)
WAITING = "waiting"      # (WAITING, key, got, expected): a contribution folded, more to come
EVICTED = "evicted"      # (EVICTED, key): the oldest waiting reduction dropped (the bound)

# ---- the sender's tables ----------------------------------------------------------------------

OUTSTANDING = Table("the sender's messages awaiting acks (OUT)", "OUT", (
    ("msg_id", "the message's id (header field)"),
    ("seq", "its sequence number (header field)"),
    ("nfrags", "its fragments"),
    ("retries", "timeouts so far (past max_retries: given up)"),
    ("left_at", "when its last fragment left the wire (-1: not yet)"),
    ("due", "when its timer is due (-1: not armed)"),
    ("resending", "1: a resend of it is on its way out"),
    ("dptr", "its receivers: rows dptr..dend-1 of OD"),
    ("dend", "one past its last receiver"),
    ("live", "1: the row is in use"),
    ("rto", "its own timeout, ps: its receivers' RTO when it left the wire, doubled at each of its timeouts"),
    ("resent", "1: fragments of it were resent (Karn: its ack gives no RTT sample)"),
))
# OUTSTANDING's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(OUT_MSG_ID, OUT_SEQ, OUT_NFRAGS, OUT_RETRIES, OUT_LEFT_AT, OUT_DUE, OUT_RESENDING, OUT_DPTR,
 OUT_DEND, OUT_LIVE, OUT_RTO, OUT_RESENT) = range(12)
OUT_NCOLS = 12
RECEIVERS = Table("the receivers of those messages (OD)", "OD", (
    ("node", "the receiver"),
    ("acked", "1: it has acked"),
))
# RECEIVERS's columns, rendered from it by `python -m emu.net.render_tables` (do not edit)
(OD_NODE, OD_ACKED) = range(2)
OD_NCOLS = 2


def waiting(OUT, OD, s):
    """Receivers of message ``s`` that have not acked, in the order they were given."""
    d0, d1 = OUT[s, OUT_DPTR], OUT[s, OUT_DEND]
    out = []
    for d in range(d0, d1):
        if OD[d, OD_ACKED] == 0:
            out.append(OD[d, OD_NODE])
    return out


@njit(cache=True)
def arm(OUT, OD, RT, s, now, max_retries):
    """(Re)start message ``s``'s timer with its own timeout (OUT_RTO, set by ``left_wire``).
    Returns the due time, -1 when nothing is to be timed (all acked, retries used up, or
    the message has not left the wire yet: ``left_wire`` starts it)."""
    due = -1
    if OUT[s, OUT_RETRIES] <= max_retries and OUT[s, OUT_LEFT_AT] >= 0:
        for d in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
            if OD[d, OD_ACKED] == 0:
                due = now + OUT[s, OUT_RTO]
                break
    OUT[s, OUT_DUE] = due
    return due


@njit(cache=True)
def ack(OUT, OD, RT, s, node, now, answer, min_ps, max_ps):
    """An ack of message ``s`` from ``node`` arrived at ``now``; ``answer`` 1: it answers a
    probe (the receiver's answer, not its completion ack). Returns how many receivers are
    still silent, or -1 if it changes nothing (not a receiver, or acked before). The RTT
    sample is a true round trip: only a completion ack gives one (a probe's answer times
    the probe), and Karn's rule leaves out a message with resent fragments."""
    for d in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
        if OD[d, OD_NODE] == node:
            if OD[d, OD_ACKED]:
                return -1
            OD[d, OD_ACKED] = 1
            if answer == 0 and OUT[s, OUT_RESENT] == 0 and OUT[s, OUT_LEFT_AT] >= 0:
                rto_sample(RT, node, now - OUT[s, OUT_LEFT_AT], min_ps, max_ps)
            left = 0
            for e in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
                if OD[e, OD_ACKED] == 0:
                    left += 1
            if left == 0:
                OUT[s, OUT_DUE] = -1
            return left
    return -1


@njit(cache=True)
def timeout(OUT, OD, RT, s, now, max_retries, max_ps):
    """Message ``s``'s timer expired at ``now``. Returns 0 if nobody is silent, -1 if the
    retries are used up (the message fails; its timer is never armed again), 1 if the silent
    receivers are to be probed (their RTO doubled, the retry counted), 2 if the estimator has
    learnt since the message left that its round trip takes longer: the timer is re-armed at
    ``OUT_DUE`` (``message_rto`` from its departure), nothing is sent."""
    OUT[s, OUT_DUE] = -1
    silent = 0
    for d in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
        if OD[d, OD_ACKED] == 0:
            silent += 1
    if silent == 0:
        return 0
    if OUT[s, OUT_RETRIES] == 0 and OUT[s, OUT_RESENT] == 0 and OUT[s, OUT_LEFT_AT] >= 0:
        rto = message_rto(OUT, OD, RT, s, max_ps)
        if OUT[s, OUT_LEFT_AT] + rto > now:
            OUT[s, OUT_RTO] = rto
            OUT[s, OUT_DUE] = OUT[s, OUT_LEFT_AT] + rto
            return 2
    if OUT[s, OUT_RETRIES] >= max_retries:
        OUT[s, OUT_RETRIES] += 1  # past max_retries: arm never starts the timer again
        return -1
    OUT[s, OUT_RETRIES] += 1
    OUT[s, OUT_RTO] = min(max_ps, 2 * OUT[s, OUT_RTO])  # its own back-off
    for d in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
        if OD[d, OD_ACKED] == 0:
            rto_backoff(RT, OD[d, OD_NODE], max_ps)
    return 1


@njit(cache=True)
def message_rto(OUT, OD, RT, s, max_ps):
    """The timeout of message ``s`` as the estimator stands now: the largest RTO of its
    silent receivers, and at least WORST_FACTOR times the board's worst recent round trip (``RT_WORST``
    over all its peers: the fabric's queues are shared, so one pair's worst is what another
    may meet next), at most ``max_ps``."""
    rto = 0
    for d in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
        if OD[d, OD_ACKED] == 0:
            rto = max(rto, RT[OD[d, OD_NODE], RT_RTO])
    worst = 0
    for p in range(RT.shape[0]):
        worst = max(worst, RT[p, RT_WORST])
    return min(max_ps, max(rto, WORST_FACTOR * worst))


@njit(cache=True)
def nack_accepted(OUT, OD, s, node):
    """Whether a nack of message ``s`` from ``node`` is acted on: not once it has acked
    (an ack overtook the nack: the receiver has everything)."""
    for d in range(OUT[s, OUT_DPTR], OUT[s, OUT_DEND]):
        if OD[d, OD_NODE] == node:
            return OD[d, OD_ACKED] == 0
    return False


@njit(cache=True)
def left_wire(OUT, OD, RT, s, now, max_retries, max_ps):
    """Message ``s``'s last fragment left the wire at ``now``: its timer starts, and the RTT
    clock (``ack``'s sample) from the same instant. Its timeout is ``message_rto`` taken now
    and its own from then on: later samples of other messages never shorten it (they may
    lengthen it before its first timeout: ``timeout``). Returns the due time (``arm``)."""
    OUT[s, OUT_LEFT_AT] = now
    OUT[s, OUT_RTO] = message_rto(OUT, OD, RT, s, max_ps)
    return arm(OUT, OD, RT, s, now, max_retries)


@njit(cache=True)
def resend_left(OUT, OD, RT, s, now, max_retries):
    """The fragments a nack named have left the wire: the timer starts again from ``now``."""
    OUT[s, OUT_RESENDING] = 0
    return arm(OUT, OD, RT, s, now, max_retries)


@njit(cache=True)
def resend_started(OUT, OD, RT, s, now, routed, max_retries):
    """An accepted nack's fragments are being resent. The timer stops while they leave
    (``resend_left`` restarts it); with no route (``routed`` False) nothing leaves, so it
    restarts now unless an earlier resend is still leaving. Returns the due time (-1: stopped)."""
    OUT[s, OUT_DUE] = -1
    OUT[s, OUT_RESENT] = 1
    if routed:
        OUT[s, OUT_RESENDING] = 1
        return -1
    if OUT[s, OUT_RESENDING] == 0:
        return arm(OUT, OD, RT, s, now, max_retries)
    return -1


# ---- nack bitmaps -----------------------------------------------------------------------------


@njit(cache=True)
def nack_bitmap(recv, r0, nfrags, out, o0):
    """A nack's payload from a receiver's received bitmap ``recv[r0:]`` (bit i set: fragment i
    is here) into ``out[o0:]``: bit i set where fragment i is missing, the padding bits clear,
    ceil(nfrags / 8) bytes (returned). Compiled: the compiled replay's receivers answer with it."""
    nb = (nfrags + 7) // 8
    for j in range(nb):
        byte = ~recv[r0 + j] & 0xFF
        if j == nb - 1 and nfrags % 8:
            byte &= (1 << (nfrags % 8)) - 1
        out[o0 + j] = byte
    return nb


@njit(cache=True)
def nack_gap(recv, r0, frag, nfrags, out, o0):
    """The nack of a gap: fragment ``frag`` arrived right after a missing one. Into ``out[o0:]``,
    a bitmap as ``nack_bitmap``'s (ceil(nfrags / 8) bytes, returned) naming only the run of
    missing fragments that ends at ``frag - 1``. Compiled: the compiled replay's receivers use it."""
    nb = (nfrags + 7) // 8
    for j in range(nb):
        out[o0 + j] = 0
    i = frag - 1
    while i >= 0 and (recv[r0 + (i >> 3)] >> (i & 7)) & 1 == 0:
        out[o0 + (i >> 3)] |= 1 << (i & 7)
        i -= 1
    return nb


@njit(cache=True)
def nack_named(payload, p0, nbytes, nfrags, out, o0):
    """The fragments a nack of ``nbytes`` bytes at ``payload[p0:]`` names, ascending, into
    ``out[o0:]``: its set bits below ``nfrags``. Returns how many. (``nack_frags`` is this
    with an empty payload naming every fragment.)"""
    n = 0
    for i in range(min(nfrags, 8 * nbytes)):
        if (payload[p0 + (i >> 3)] >> (i & 7)) & 1:
            out[o0 + n] = i
            n += 1
    return n



def nack_payload(frag_cnt: int, missing) -> bytes:
    """A nack's payload: bit i (LSB first) set when fragment i is missing, ceil(frag_cnt / 8)
    bytes. A receiver that holds nothing of the message (it does not know frag_cnt) sends
    an empty bitmap, which names every fragment."""
    if frag_cnt <= 0:
        return b""
    bits = np.zeros((frag_cnt + 7) // 8 * 8, np.uint8)
    bits[np.asarray(list(missing), np.int64)] = 1
    return np.packbits(bits, bitorder="little").tobytes()


def nack_frags(payload, nfrags: int) -> np.ndarray:
    """The fragments a nack names, of a message of ``nfrags``: its bits below nfrags (an
    empty payload: all of them)."""
    if len(payload) == 0:
        return np.arange(nfrags, dtype=np.int64)
    raw = np.frombuffer(bytes(payload), np.uint8)
    out = np.empty(min(nfrags, 8 * raw.size), np.int64)
    return out[: nack_named(raw, 0, raw.size, nfrags, out, 0)]


# ---- forwarding -----------------------------------------------------------------------------


def forward(row, ttl: int):
    """What a node does with a frame its forwarding row ``row`` covers: (deliver here,
    egress links to copy it to, ttl of the copies). A frame with ttl <= 1 is not forwarded
    (no egress); the copies carry ttl - 1."""
    member = bool(row[0])
    if ttl <= 1:
        return member, [], 0
    return member, [int(x) for x in row[1:] if x >= 0], ttl - 1


# ---- reductions ----------------------------------------------------------------------------


# Where a complete reduction goes (reduction_next's second value)
RED_HERE = 0      # delivered here: the root of a reduce
RED_PARENT = 1    # partial_state to the parent in the reduction tree
RED_GROUP = 2     # reduce_result to the rest of the group (the root of an all_reduce)
_OP_PARTIAL = int(Op.partial_state)
_OP_RESULT = int(Op.reduce_result)
_ALL_REDUCE = int(Collective.all_reduce)


@njit(cache=True)
def reduction_complete(got, expected):
    """A board's reduction is complete once all ``expected`` contributions are in: its own
    and each of its children's in the reduction tree. Compiled: ``BoardProtocol.contribute``
    and the compiled replay (emu.engine.nic.fold) call this function."""
    return got >= expected


@njit(cache=True)
def reduction_next(is_root, collective):
    """Where a complete reduction goes from a board: (op, RED_HERE | RED_PARENT | RED_GROUP),
    op -1 for RED_HERE. Below the root ``partial_state`` to the parent; at the root of an
    all_reduce ``reduce_result`` to the rest of the group; at the root of a reduce it is
    delivered. Compiled: ``reduction_result`` and the compiled replay call this function."""
    if not is_root:
        return _OP_PARTIAL, RED_PARENT
    if collective == _ALL_REDUCE:
        return _OP_RESULT, RED_GROUP
    return -1, RED_HERE


def reduction_result(node: int, root: int, parent: int | None, collective: int, group) -> tuple:
    """Where a complete reduction goes from ``node``: (op, destinations), or (None, ()) when
    it is delivered here (``reduction_next``'s rule, with the destinations named)."""
    op, where = reduction_next(node == root, int(collective))
    if where == RED_PARENT:
        return Op(op), (parent,)
    if where == RED_GROUP:
        return Op(op), tuple(b for b in group if b != node)
    return None, ()


@dataclass
class _Reduction:
    expected: frozenset
    msg_len: int
    got: dict = field(default_factory=dict)   # contributor -> msg_len
    acc: bytes | None = None
    nodata: bool = False                      # a contribution without bytes (timing mode / SYNTH)
    ack_req: bool = False


# ---- one board -------------------------------------------------------------------------------


class BoardProtocol:
    """The protocol of board ``node`` of ``boards``: its sender tables, RTO per peer, probe
    answers, reductions and (given) replica directory."""

    def __init__(self, node: int, boards: int, config: ProtocolConfig = ProtocolConfig(), directory=None):
        self.node, self.boards, self.cfg = node, boards, config
        c = config
        self.RT = rto_table(boards, c.rto_min_ps, c.rto_initial_ps, c.rto_max_ps)
        self.OUT = np.zeros((16, OUT_NCOLS), np.int64)
        self.OD = np.zeros((16, OD_NCOLS), np.int64)
        self._free: list[int] = list(range(15, -1, -1))
        self._nod = 0
        self._od_free: dict[int, list[int]] = {}  # receiver-row blocks of released messages, by size
        self.directory = directory
        self.answered: dict[tuple, int] = {}      # (src, msg_id, complete) -> when last answered
        self.reductions: dict = {}

    # ---- frames -----------------------------------------------------------------------------

    def frame_arrived(self, row, ttl: int, *, copy: bool = True) -> list:
        """A frame whose forwarding row here is ``row`` (``tree_rows``/``unicast_rows``) arrived
        with ``ttl``. ``copy`` False: this copy is not one for this board to forward (a
        driver on a shared segment hears other boards' copies too)."""
        member, egress, ttl_out = forward(row, ttl)
        out = []
        if copy and any(x >= 0 for x in row[1:]):
            out.append((FORWARD, egress, ttl_out) if egress else (TTL_EXPIRED,))
        if member:
            out.append((DELIVER,))
        return out

    # ---- sender -------------------------------------------------------------------------

    def track(self, msg_id: int, seq: int, nfrags: int, dsts) -> int:
        """An ACK_REQ message of this board to ``dsts``: its slot in the sender's table."""
        if not self._free:
            n = len(self.OUT)
            self.OUT = np.concatenate([self.OUT, np.zeros((n, OUT_NCOLS), np.int64)])
            self._free = list(range(2 * n - 1, n - 1, -1))
        s = self._free.pop()
        nd = len(dsts)
        block = self._od_free.get(nd)
        if block:
            d0 = block.pop()
        else:
            d0 = self._nod
            if d0 + nd > len(self.OD):
                self.OD = np.concatenate([self.OD, np.zeros((max(len(self.OD), nd), OD_NCOLS), np.int64)])
            self._nod += nd
        self.OD[d0 : d0 + nd, OD_NODE] = dsts
        self.OD[d0 : d0 + nd, OD_ACKED] = 0
        self.OUT[s] = (msg_id, seq, nfrags, 0, -1, -1, 0, d0, d0 + nd, 1, 0, 0)
        return s

    def release(self, s: int) -> None:
        """Forget message ``s`` (every receiver acked, or it failed)."""
        o = self.OUT[s]
        if not o[OUT_LIVE]:
            return
        o[OUT_LIVE] = 0
        d0, d1 = int(o[OUT_DPTR]), int(o[OUT_DEND])
        self._od_free.setdefault(d1 - d0, []).append(d0)
        self._free.append(s)

    def waiting(self, s: int) -> list[int]:
        return [int(x) for x in waiting(self.OUT, self.OD, s)]

    def acked(self, s: int) -> set[int]:
        d0, d1 = self.OUT[s, OUT_DPTR], self.OUT[s, OUT_DEND]
        return {int(n) for n, a in self.OD[d0:d1] if a}

    def _arm(self, s: int, now: int) -> tuple:
        return (ARM, s, int(arm(self.OUT, self.OD, self.RT, s, now, self.cfg.max_retries)))

    def left(self, s: int, now: int) -> list:
        """The message's last fragment has left the wire: its timer starts (the RTT clock too)."""
        c = self.cfg
        return [(ARM, s, int(left_wire(self.OUT, self.OD, self.RT, s, now, c.max_retries, c.rto_max_ps)))]

    def resend_left(self, s: int, now: int) -> list:
        """Resent fragments have left the wire: the timer starts again from now."""
        return [(ARM, s, int(resend_left(self.OUT, self.OD, self.RT, s, now, self.cfg.max_retries)))]

    def ack_arrived(self, s: int, node: int, now: int, *, answer: bool = False) -> list:
        """An ack from ``node``; ``answer``: it answers a probe (no RTT sample)."""
        c = self.cfg
        left = ack(self.OUT, self.OD, self.RT, s, node, now, int(answer), c.rto_min_ps, c.rto_max_ps)
        return [(ARM, s, -1)] if left == 0 else []

    def nack_arrived(self, s: int, node: int, payload, now: int, *, routed: bool = True) -> list:
        """A nack from ``node``: resend exactly what it names. The timer stops while the
        resend is being transmitted and restarts when it has left (``resend_left``); with
        no route (``routed`` False) nothing leaves, so it restarts now."""
        if not nack_accepted(self.OUT, self.OD, s, node):
            return []
        frags = nack_frags(payload, int(self.OUT[s, OUT_NFRAGS]))
        if not frags.size:
            return []
        due = resend_started(self.OUT, self.OD, self.RT, s, now, bool(routed), self.cfg.max_retries)
        return [(RESEND, s, node, frags), (ARM, s, int(due))]

    def timer_due(self, s: int, now: int) -> list:
        """The timer of message ``s`` expired at ``now`` (the driver only calls it for the
        due time of the latest ARM)."""
        c = self.cfg
        silent = self.waiting(s)
        r = timeout(self.OUT, self.OD, self.RT, s, now, c.max_retries, c.rto_max_ps)
        if r == 0:
            return []
        if r == 2:
            return [(ARM, s, int(self.OUT[s, OUT_DUE]))]
        if r < 0:
            return [(FAILED, s, silent, int(self.OUT[s, OUT_RETRIES]) - 1)]
        return [(PROBE, s, d) for d in silent] + [self._arm(s, now)]

    # ---- receiver -----------------------------------------------------------------------

    def message_complete(self, src: int, msg_id: int, seq: int, ack_req: bool) -> list:
        """A message of ``src`` is here whole (duplicates were discarded before it)."""
        return [(ACK, src, msg_id, seq)] if ack_req else []

    def gap_seen(self, src: int, msg_id: int, seq: int, frag: int, frag_cnt: int, received) -> list:
        """Fragment ``frag`` of ``src``'s message arrived right after a missing one (a gap; the
        network's "gap"): a nack of that gap's fragments at once. ``received``: the received
        bitmap as bytes. Each gap is nacked once: the fragment after it arrives once."""
        raw = np.frombuffer(bytes(received), np.uint8)
        out = np.empty((frag_cnt + 7) // 8, np.uint8)
        nack_gap(raw, 0, frag, frag_cnt, out, 0)
        return [(NACK, src, msg_id, seq, out.tobytes())]

    def probe_arrived(self, src: int, msg_id: int, seq: int, now: int, *, complete: bool, frag_cnt: int = 0,
                      missing=()) -> list:
        """A probe of ``src``'s message: answer from this board's state as it is now, an ack
        if complete, else a nack of the missing fragments (frag_cnt 0: nothing of it here).
        At most one answer per message per ``answer_gap_ps`` (once more when it completes
        in between), so a sender cannot make a board amplify."""
        gap = self.cfg.answer_gap_ps
        if gap > 0 and not self._may_answer((src, msg_id, complete), now, gap):
            return [(LIMITED, src, msg_id)]
        if complete:
            return [(ACK, src, msg_id, seq)]
        return [(NACK, src, msg_id, seq, nack_payload(frag_cnt, missing))]

    def _may_answer(self, key, now: int, gap: int) -> bool:
        last = self.answered.pop(key, None)
        if last is not None and now - last < gap:
            self.answered[key] = last
            return False
        self.answered[key] = now
        # oldest first: forget answers that can no longer limit anything, and bound the rest
        while self.answered:
            k0 = next(iter(self.answered))
            if now - self.answered[k0] < gap and len(self.answered) <= self.cfg.answer_memory:
                break
            del self.answered[k0]
        return True

    # ---- directory ------------------------------------------------------------------------

    def delivered(self, op: int, kv_id: int, nbytes: int, now: int) -> list:
        """A message with ``op`` about block ``kv_id`` was delivered here: the replica directory
        follows it (``kv_replica``: VALID, ``drain``: DRAINING, ``invalidate``: INVALID)."""
        d = self.directory
        before = len(d.errors)
        if op == Op.kv_replica:
            d.add_replica(self.node, kv_id, nbytes, now)
        elif op == Op.drain:
            d.drain(self.node, kv_id, now)
        elif op == Op.invalidate:
            d.invalidate(self.node, kv_id, now)
        else:
            return []
        err = d.errors[-1] if len(d.errors) > before else None
        return [(DIRECTORY, kv_id, d.state(self.node, kv_id), err)]

    # ---- reductions -------------------------------------------------------------------------

    def contribute(self, key, src: int, data: bytes | None, msg_len: int, *, expected, combine,
                   ack_req: bool = False, limit: int = 0) -> list:
        """A contribution of ``src`` (this board's own or a child's) to reduction ``key``.
        ``expected``: the contributors this board waits for (itself and its children in the
        reduction tree). ``combine(acc, data)`` folds (emu.nic.reduce). Contributions fold
        in arrival order; once all are in, ``REDUCED`` with the result (None without data).
        ``limit`` > 0 bounds the reductions waiting (the oldest is dropped)."""
        red = self.reductions.get(key)
        out = []
        if red is None:
            if limit and len(self.reductions) >= limit:
                oldest = next(iter(self.reductions))
                del self.reductions[oldest]
                out.append((EVICTED, oldest))
            red = self.reductions[key] = _Reduction(frozenset(expected), msg_len)
        if src not in red.expected:
            why = (f"contribution from node {src}: not one node {self.node} waits for "
                   "(its own and its children's in the reduction tree)")
            return out + [(REDUCE_ERROR, why)]
        if src in red.got:
            return out + [(REDUCE_ERROR, f"second contribution from node {src} ignored")]
        if msg_len != red.msg_len:
            why = f"contribution from node {src}: {msg_len} bytes, earlier ones {red.msg_len}"
            return out + [(REDUCE_ERROR, why)]
        red.got[src] = msg_len
        red.ack_req |= bool(ack_req)
        if data is None:
            red.nodata = True
        elif not red.nodata:
            red.acc = data if red.acc is None else combine(red.acc, data)
        if not reduction_complete(len(red.got), len(red.expected)):
            return out + [(WAITING, key, len(red.got), len(red.expected))]
        del self.reductions[key]
        return out + [(REDUCED, key, None if red.nodata else red.acc, red.ack_req, red.msg_len)]


__all__ = [
    "ACK",
    "ARM",
    "DIRECTORY",
    "EVICTED",
    "FAILED",
    "FORWARD",
    "DELIVER",
    "TTL_EXPIRED",
    "LIMITED",
    "NACK",
    "PROBE",
    "REDUCED",
    "REDUCE_ERROR",
    "RESEND",
    "WAITING",
    "BoardProtocol",
    "ProtocolConfig",
    "forward",
    "nack_frags",
    "nack_payload",
    "reduction_complete",
    "reduction_next",
    "reduction_result",
    "replica_transition",
    "tree_rows",
    "unicast_rows",
]
