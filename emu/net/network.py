"""The packet-level network: links, forwarding tables, messages, and their frames.

`Network` owns the compiled per-frame state (emu.net.kernel) and ties it to the
event core: it keeps one pending simulator event, at the time of the network's
next frame event, and hands deliveries back to Python as callbacks at the exact
simulated time they happen.

A *message* is what a NIC hands to the wire: a source, a set of destinations, a
route (unicast towards one board, or a multicast tree), and a number of
fragments of known frame sizes (from the codec's fragmentation). Its frames are
generated lazily by the packetizer of each first-hop link, so memory follows the
frames in flight, not the size of the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import networkx as nx
import numpy as np

from ..errors import ConfigError
from ..sim import Simulator
from . import kernel as K

# Default egress queue when the topology gives none: what a 1 GbE MAC on the KR260
# can buffer in on-chip memory. It also bounds how far a packetizer runs ahead.
DEFAULT_QUEUE_BYTES = 64 * 1024
BURST = 16  # frames a packetizer pushes per event before yielding


@dataclass(frozen=True)
class Loss:
    """Loss and corruption of one link direction.

    ``p`` alone is Bernoulli loss. With ``r`` it is Gilbert-Elliott: ``p`` is the
    good-to-bad and ``r`` the bad-to-good transition probability per frame, and
    ``loss_good``/``loss_bad`` the loss probabilities in each state. ``drops``
    lists transmission indices (0-based, per link direction) that are lost.
    ``corrupt`` is a separate probability of a frame arriving with a bad FCS.
    """

    p: float = 0.0
    r: float | None = None
    loss_good: float = 0.0
    loss_bad: float = 1.0
    drops: tuple[int, ...] = ()
    corrupt: float = 0.0

    def __post_init__(self):
        for name in ("p", "loss_good", "loss_bad", "corrupt"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"loss {name}={v} is not a probability")
        if self.r is not None and not 0.0 <= self.r <= 1.0:
            raise ConfigError(f"loss r={self.r} is not a probability")


@dataclass
class Message:
    """Python-side facts about a message; the kernel row holds the rest."""

    id: int
    src: int
    dsts: tuple[int, ...]
    route: int
    nfrags: int
    frame_len: int
    last_len: int
    on_event: Callable | None = None
    meta: object = None


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def _grow(a: np.ndarray, rows: int, fill) -> np.ndarray:
    b = np.full((max(rows, 2 * a.shape[0]),) + a.shape[1:], fill, dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


def _grow_pool(table: np.ndarray, free: np.ndarray, SC: np.ndarray, slot: int):
    """Double a pool table; its new rows go on the free stack."""
    n = table.shape[0]
    nfree = int(SC[slot])
    stack = np.empty(2 * n, np.int64)
    stack[:nfree] = free[:nfree]
    stack[nfree : nfree + n] = np.arange(2 * n - 1, n - 1, -1)
    SC[slot] = nfree + n
    return _grow(table, 2 * n, 0), stack


class Network:
    """Links of a topology with FIFO egress queues, loss, failures and forwarding tables.

    ``topology`` is a networkx DiGraph whose edges carry ``rate_bps``,
    ``latency_ps``, ``mtu`` and optionally ``queue_bytes``/``queue_frames``;
    nodes ``0..boards-1`` are boards. ``next_hop[node, board]`` gives the next
    node towards each board (-1 where unreachable). ``nic_latency_ps`` is added
    when a frame reaches a node (parse and dispatch) and may be a per-node mapping.
    ``nic_rate_bps`` (0: unlimited) makes each node's NIC datapath a FIFO server of
    that rate behind its ports: frames from all ingress ports are parsed one at a
    time, each taking (bytes + 24) * 8 / rate, before the latency and forwarding.

    Queues: each link direction's egress queue holds ``queue_bytes`` /
    ``queue_frames`` (64 KiB when the topology gives neither). A packetizer never
    overfills its queue: when full it waits until the queue drains (backpressure
    on the compute side). Transit frames that find the queue full are dropped
    (drop-tail) unless ``lossless``, where the queue grows instead: an ideal
    lossless fabric whose buffers absorb bursts, with the depth reported.
    """

    def __init__(
        self,
        sim: Simulator,
        topology: nx.DiGraph,
        next_hop: np.ndarray,
        *,
        boards: int | None = None,
        nic_latency_ps: int | dict = 0,
        nic_rate_bps: int | dict = 0,
        lossless: bool = True,
        seed: int = 0,
        log: bool = True,
        frames: int = 4096,
    ):
        self.sim = sim
        self.topology = topology
        self.nodes = max(topology.nodes) + 1 if topology.number_of_nodes() else 0
        self.boards = boards if boards is not None else sum(
            1 for _, k in topology.nodes(data="kind", default="board") if k == "board"
        )
        self.seed = seed
        edges = sorted(topology.edges)
        self.links: list[tuple[int, int]] = edges
        self.link_id = {e: i for i, e in enumerate(edges)}
        nl = len(edges)
        nic = nic_latency_ps if isinstance(nic_latency_ps, dict) else {n: nic_latency_ps for n in topology.nodes}
        nic_rate = nic_rate_bps if isinstance(nic_rate_bps, dict) else {n: nic_rate_bps for n in topology.nodes}
        # A NIC datapath with a finite rate is one more FIFO "link" per node, behind its ports.
        datapath = {v: nl + k for k, v in enumerate(sorted(v for v, r in nic_rate.items() if r and r > 0))}
        total = nl + len(datapath)

        LK = np.zeros((total, K.L_NCOLS), np.int64)
        for i, (u, v) in enumerate(edges):
            a = topology.edges[u, v]
            try:
                rate, lat, mtu = int(a["rate_bps"]), int(a["latency_ps"]), int(a["mtu"])
            except KeyError as exc:
                raise ConfigError(f"link {u}-{v}: missing attribute {exc.args[0]}") from None
            if rate <= 0 or lat < 0 or mtu < 64:
                raise ConfigError(f"link {u}-{v}: rate_bps, latency_ps and mtu must be positive")
            qb = a.get("queue_bytes")
            qf = a.get("queue_frames")
            if qb is None and qf is None:
                qb = DEFAULT_QUEUE_BYTES
            LK[i, K.L_SRC], LK[i, K.L_DST] = u, v
            LK[i, K.L_RATE], LK[i, K.L_MTU] = rate, mtu
            LK[i, K.L_LAT] = lat if v in datapath else lat + int(nic.get(v, 0))
            LK[i, K.L_CAPF], LK[i, K.L_CAPB] = int(qf or 0), int(qb or 0)
        for v, i in datapath.items():
            LK[i, K.L_SRC], LK[i, K.L_DST] = v, v
            LK[i, K.L_RATE], LK[i, K.L_LAT], LK[i, K.L_MTU] = int(nic_rate[v]), int(nic.get(v, 0)), 1 << 30
        LK[:, K.L_UP] = 1
        LK[:, K.L_NICQ] = -1
        for i, (u, v) in enumerate(edges):
            LK[i, K.L_NICQ] = datapath.get(v, -1)
        self.datapath = datapath
        for col in (K.L_HEAD, K.L_TAIL, K.L_TXQ, K.L_ARR_PEND, K.L_SRC_PEND, K.L_SHEAD, K.L_STAIL, K.L_SER_LEN):
            LK[:, col] = -1
        self.LK = LK
        self.LF = np.zeros((total, K.LF_NCOLS), np.float64)
        self.LR = np.zeros((total, 2), np.uint64)
        for i in range(total):
            for j in range(2):
                self.LR[i, j] = _splitmix((seed * 1_000_003 + i) * 2 + j)
        self.LD = np.zeros((total, K.N_CAUSES, 2), np.int64)
        self.DL = np.zeros(0, np.int64)
        self.FP = np.zeros((frames, K.F_NCOLS), np.int64)
        self.FREE = np.arange(frames - 1, -1, -1, dtype=np.int64)
        self.HP = np.zeros((4 * total + 64, 2), np.int64)
        self.LG = np.zeros((65536 if log else 1, K.G_NCOLS), np.int64)
        self.MS = np.zeros((1024, K.M_NCOLS), np.int64)
        self.MD = np.zeros((1024, K.D_NCOLS), np.int64)
        self.BITS = np.zeros(1024, np.uint8)
        self.UP = np.zeros((1024, K.U_NCOLS), np.int64)
        self.SP = np.zeros((256, K.S_NCOLS), np.int64)
        self.SFREE = np.arange(255, -1, -1, dtype=np.int64)
        self.SL = np.zeros(256, np.int64)
        self.SC = np.zeros(K.SC_SIZE, np.int64)
        self.SC[K.SC_FREE] = frames
        self.SC[K.SC_SFREE] = 256
        self.SC[K.SC_LOSSLESS] = int(lossless)
        self.SC[K.SC_LOGGING] = int(log)
        self.SC[K.SC_NLINKS] = nl
        self.SC[K.SC_NNODES] = self.nodes
        self.SC[K.SC_BURST] = BURST
        self._nmd = 0
        self._nbits = 0
        self._nsl = 0
        self.messages: list[Message] = []
        self.log_sinks: list[Callable[[np.ndarray], None]] = []
        self._wake_ev = None
        self._wake_at = None
        self._upcall_ev = None
        self.max_out = max((topology.out_degree(n) for n in topology.nodes), default=1)
        self._fw_rows = 0
        self.FW = np.zeros((0, self.max_out + 1), np.int32)
        self.set_unicast(next_hop)
        self.margin = max(BURST, self.max_out) + 4

    # ---- forwarding tables ----------------------------------------------------

    def _out_link(self, u: int, v: int) -> int:
        try:
            return self.link_id[(u, v)]
        except KeyError:
            raise ConfigError(f"no link {u}->{v} in the topology") from None

    def set_unicast(self, next_hop: np.ndarray) -> None:
        """Install unicast routes: route ``d`` (for board d) forwards along ``next_hop[:, d]``."""
        next_hop = np.asarray(next_hop)
        V, N = self.nodes, self.boards
        if next_hop.shape[0] < V or next_hop.shape[1] < N:
            raise ConfigError(f"next_hop table is {next_hop.shape}, need at least ({V}, {N})")
        rows = np.full((N * V, self.max_out + 1), -1, np.int32)
        rows[:, 0] = 0
        for d in range(N):
            rows[d * V + d, 0] = 1
            for v in range(V):
                h = next_hop[v, d]
                if v != d and h >= 0:
                    rows[d * V + v, 1] = self._out_link(v, int(h))
        self._hops = {}
        if self.FW.shape[0] >= N * V:
            self.FW[: N * V] = rows
        else:
            self.FW = rows
        self._fw_rows = max(self._fw_rows, N * V)
        self.next_hop = next_hop

    def add_tree(self, tree: dict[int, Iterable[int]], members: Iterable[int]) -> int:
        """Install a multicast tree (node -> children) delivering at ``members``; return its route id."""
        V = self.nodes
        rows = np.full((V, self.max_out + 1), -1, np.int32)
        rows[:, 0] = 0
        for m in members:
            rows[m, 0] = 1
        for u, children in tree.items():
            for k, c in enumerate(sorted(children)):
                rows[u, 1 + k] = self._out_link(u, c)
        route = self._fw_rows // V
        if self._fw_rows + V > self.FW.shape[0]:
            self.FW = _grow(self.FW, self._fw_rows + V, -1)
        self.FW[self._fw_rows : self._fw_rows + V] = rows
        self._fw_rows += V
        return route

    def first_hops(self, route: int, node: int) -> list[int]:
        key = route * self.nodes + node
        hops = self._hops.get(key)
        if hops is None:
            hops = self._hops[key] = [int(x) for x in self.FW[key, 1:] if x >= 0]
        return hops

    # ---- messages -------------------------------------------------------------

    def send(
        self,
        src: int,
        dsts: Iterable[int],
        nfrags: int,
        frame_len: int,
        last_len: int | None = None,
        *,
        route: int | None = None,
        at: int | None = None,
        frame_upcalls: bool = False,
        track: bool = False,
        on_event: Callable | None = None,
        meta: object = None,
    ) -> Message:
        """Hand a message of ``nfrags`` frames to ``src``'s NIC at time ``at`` (default now).

        ``route`` defaults to unicast towards the single destination. ``on_event``
        is called as ``on_event(kind, message, node, frag, time)`` with kind
        "frame" (if ``frame_upcalls``), "done" per destination and "sent" per
        first-hop link when its last frame is queued.
        """
        dsts = tuple(int(d) for d in dsts)
        if nfrags < 1:
            raise ValueError("a message has at least one fragment")
        if route is None:
            if len(dsts) != 1:
                raise ValueError("a message to several destinations needs a multicast route")
            route = dsts[0]
        last_len = frame_len if last_len is None else last_len
        mid = len(self.messages)
        if mid >= self.MS.shape[0]:
            self.MS = _grow(self.MS, mid + 1, 0)
        nd = len(dsts)
        if self._nmd + nd > self.MD.shape[0]:
            self.MD = _grow(self.MD, self._nmd + nd, 0)
        flags = (K.MF_FRAME_UPCALL if frame_upcalls else 0) | (K.MF_TRACK if track else 0)
        # Whole-row assignments: one numpy call per row instead of one per field.
        self.MS[mid] = (src, nfrags, frame_len, last_len, flags, self._nmd, self._nmd + nd)
        md = self.MD[self._nmd : self._nmd + nd]
        md[:, K.D_NODE] = dsts
        md[:, K.D_GOT] = 0
        if track:
            nbytes = (nfrags + 7) // 8
            if self._nbits + nd * nbytes > self.BITS.shape[0]:
                self.BITS = _grow(self.BITS, self._nbits + nd * nbytes, 0)
            md[:, K.D_BITS] = np.arange(self._nbits, self._nbits + nd * nbytes, nbytes)
            self._nbits += nd * nbytes
        else:
            md[:, K.D_BITS] = -1
        self._nmd += nd
        msg = Message(mid, src, dsts, route, nfrags, frame_len, last_len, on_event, meta)
        self.messages.append(msg)
        t = self.sim.now if at is None else int(at)
        for link in self.first_hops(route, src):
            self._add_stream(link, mid, route, 0, nfrags, -1, t)
        if src in dsts:
            # The source is itself a member: its copy never touches the wire.
            self.sim.at(t, self._local_copy, msg, src)
        self._rearm()
        return msg

    def resend(self, msg: Message, dst: int, frags: Iterable[int], at: int | None = None) -> None:
        """Retransmit some fragments of ``msg`` to one destination over its unicast route."""
        frags = np.asarray(sorted(set(int(f) for f in frags)), np.int64)
        if frags.size == 0:
            return
        if self._nsl + frags.size > self.SL.shape[0]:
            self.SL = _grow(self.SL, self._nsl + frags.size, 0)
        off = self._nsl
        self.SL[off : off + frags.size] = frags
        self._nsl += frags.size
        t = self.sim.now if at is None else int(at)
        for link in self.first_hops(dst, msg.src):
            self._add_stream(link, msg.id, dst, 0, int(frags.size), off, t)
        self._rearm()

    def missing(self, msg: Message, dst: int) -> np.ndarray:
        """Fragments of a tracked message that ``dst`` has not received."""
        d0, d1 = self.MS[msg.id, K.M_DPTR], self.MS[msg.id, K.M_DEND]
        for d in range(d0, d1):
            if self.MD[d, K.D_NODE] == dst:
                off = self.MD[d, K.D_BITS]
                if off < 0:
                    raise ValueError("message is not tracked")
                bits = np.unpackbits(self.BITS[off : off + (msg.nfrags + 7) // 8], bitorder="little")
                return np.flatnonzero(bits[: msg.nfrags] == 0)
        raise ValueError(f"{dst} is not a destination of message {msg.id}")

    def received(self, msg: Message, dst: int) -> int:
        d0, d1 = self.MS[msg.id, K.M_DPTR], self.MS[msg.id, K.M_DEND]
        for d in range(d0, d1):
            if self.MD[d, K.D_NODE] == dst:
                return int(self.MD[d, K.D_GOT])
        raise ValueError(f"{dst} is not a destination of message {msg.id}")

    def _local_copy(self, msg: Message, node: int) -> None:
        for d in range(self.MS[msg.id, K.M_DPTR], self.MS[msg.id, K.M_DEND]):
            if self.MD[d, K.D_NODE] == node:
                self.MD[d, K.D_GOT] = msg.nfrags
        self._dispatch(K.UP_DONE, msg.id, node, -1, self.sim.now)

    def _add_stream(self, link, mid, route, pos, end, lst, t):
        if self.SC[K.SC_SFREE] == 0:
            self.SP, self.SFREE = _grow_pool(self.SP, self.SFREE, self.SC, K.SC_SFREE)
        if self.SC[K.SC_HEAP] + self.margin > self.HP.shape[0]:
            self.HP = _grow(self.HP, 2 * self.HP.shape[0], 0)
        K.add_stream(self.SC, self.LK, self.HP, self.SP, self.SFREE, link, mid, route, pos, end, lst, t)

    # ---- link conditions --------------------------------------------------------

    def link(self, u: int, v: int) -> int:
        return self._out_link(u, v)

    def set_loss(self, link: int, loss: Loss) -> None:
        lk, lf = self.LK[link], self.LF[link]
        if loss.r is not None:
            lk[K.L_LOSS] = 2
            lf[K.LF_P], lf[K.LF_R], lf[K.LF_LG], lf[K.LF_LB] = loss.p, loss.r, loss.loss_good, loss.loss_bad
        elif loss.p > 0:
            lk[K.L_LOSS] = 1
            lf[K.LF_P] = loss.p
        else:
            lk[K.L_LOSS] = 0
        lf[K.LF_CORRUPT] = loss.corrupt
        lk[K.L_GE_BAD] = 0
        # Explicit drops: splice this link's sorted indices into the shared list.
        drops = np.asarray(sorted(set(loss.drops)), np.int64)
        if drops.size:
            if np.any(drops < 0):
                raise ConfigError("explicit drop indices must be >= 0")
            start = self.DL.size
            self.DL = np.concatenate([self.DL, drops])
            lk[K.L_DL_POS], lk[K.L_DL_END] = start + np.searchsorted(drops, lk[K.L_TXN]), start + drops.size
        else:
            lk[K.L_DL_POS] = lk[K.L_DL_END] = 0

    def link_down(self, link: int) -> None:
        self._sync()
        K.link_down(self.SC, self.LK, self.LD, self.FP, self.FREE, link, self.sim.now)
        self._rearm()

    def link_up(self, link: int) -> None:
        K.link_up(self.LK, link, self.sim.now)

    def set_rate(self, link: int, rate_bps: int) -> None:
        if rate_bps <= 0:
            raise ConfigError(f"link rate must be positive, got {rate_bps}")
        self._sync()
        K.set_rate(self.SC, self.LK, self.FP, self.HP, link, int(rate_bps), self.sim.now)
        self._rearm()

    def is_up(self, link: int) -> bool:
        return bool(self.LK[link, K.L_UP])

    # ---- running ----------------------------------------------------------------

    def _sync(self) -> None:
        """Bring the frame loop up to now before a change made from Python."""
        if self._wake_at is not None and self._wake_at <= self.sim.now:
            self._run(self.sim.now)

    # There is at most one pending wake-up (at the kernel's next event) and at most one
    # pending hand-over of upcalls; neither is ever forgotten while it is scheduled.

    def _rearm(self) -> None:
        if not self.SC[K.SC_HEAP]:
            return
        nxt = max(int(self.HP[0, 0]), self.sim.now)
        if self._wake_ev is not None:
            if self._wake_at <= nxt:
                return
            self._wake_ev.cancel()
        self._wake_at = nxt
        self._wake_ev = self.sim.at(nxt, self._wake)

    def _wake(self) -> None:
        self._wake_ev = None
        self._wake_at = None
        self._advance()

    def _advance(self) -> None:
        limit = self.sim.peek()
        self._run(K.INF if limit is None else limit)

    def _run(self, limit: int) -> None:
        while True:
            status, t = K.advance(
                self.SC, self.LK, self.LF, self.LR, self.LD, self.DL, self.FP, self.FREE, self.HP,
                self.LG, self.FW, self.MS, self.MD, self.BITS, self.UP, self.SP, self.SL, self.SFREE,
                limit, self.margin,
            )
            if status == K.ST_NEED_FRAMES:
                self.FP, self.FREE = _grow_pool(self.FP, self.FREE, self.SC, K.SC_FREE)
            elif status == K.ST_NEED_UPCALLS:
                self.UP = _grow(self.UP, 2 * self.UP.shape[0], 0)
            elif status == K.ST_NEED_LOG:
                self.flush_log()
            elif status == K.ST_NEED_HEAP:
                self.HP = _grow(self.HP, 2 * self.HP.shape[0], 0)
            elif status == K.ST_UPCALLS:
                if t == self.sim.now:
                    self._flush_upcalls()
                    # Callbacks may have scheduled Python events: never run past them.
                    nxt = self.sim.peek()
                    if nxt is not None:
                        limit = min(limit, nxt)
                    continue
                if self._upcall_ev is None:
                    self._upcall_ev = self.sim.at(t, self._upcalls_due)
                return
            else:
                self._rearm()
                return

    def _upcalls_due(self) -> None:
        self._upcall_ev = None
        self._flush_upcalls()
        self._advance()

    def _flush_upcalls(self) -> None:
        n = int(self.SC[K.SC_UP])
        rows = self.UP[:n].copy()
        self.SC[K.SC_UP] = 0
        for t, kind, mid, node, frag in rows.tolist():
            self._dispatch(kind, mid, node, frag, t)

    _KINDS = {K.UP_DONE: "done", K.UP_FRAME: "frame", K.UP_SENT: "sent"}

    def _dispatch(self, kind, mid, node, frag, t) -> None:
        msg = self.messages[mid]
        if msg.on_event is not None:
            msg.on_event(self._KINDS[kind], msg, node, frag, t)

    def flush_log(self) -> None:
        n = int(self.SC[K.SC_LOG])
        if n:
            rows = self.LG[:n].copy()
            self.SC[K.SC_LOG] = 0
            for sink in self.log_sinks:
                sink(rows)

    def run(self, until: int | None = None) -> int:
        """Run the simulator (and so this network) to completion or ``until``."""
        self._rearm()
        end = self.sim.run(until)
        self.flush_log()
        return end

    # ---- counters ------------------------------------------------------------------

    @property
    def frames_in_flight(self) -> int:
        return int(self.FP.shape[0] - self.SC[K.SC_FREE])

    @property
    def duplicates(self) -> int:
        return int(self.SC[K.SC_DUPS])

    def counters(self):
        """One row per link direction: offered, transmitted, delivered, dropped by cause, busy."""
        import pandas as pd

        nl = len(self.links)
        LK, LD = self.LK[:nl], self.LD[:nl]
        data = {
            "link": np.arange(nl),
            "src": LK[:, K.L_SRC],
            "dst": LK[:, K.L_DST],
            "rate_bps": LK[:, K.L_RATE],
            "offered_frames": LK[:, K.L_OFF_F],
            "offered_bytes": LK[:, K.L_OFF_B],
            "sent_frames": LK[:, K.L_TX_F],
            "wire_bytes": LK[:, K.L_TX_B],
            "delivered_frames": LK[:, K.L_DLV_F],
            "delivered_bytes": LK[:, K.L_DLV_B],
            "busy_ps": LK[:, K.L_BUSY],
            "peak_queue_bytes": LK[:, K.L_MAXQ],
        }
        for c, name in enumerate(K.CAUSE_NAMES):
            data[f"dropped_{name}"] = LD[:, c, 0]
        data["dropped_frames"] = LD[:, :, 0].sum(axis=1)
        data["dropped_bytes"] = LD[:, :, 1].sum(axis=1)
        return pd.DataFrame(data)
