"""The Python reference of the NICs: all boards over one network, message by message (forwarding,
multicast, reductions, all-to-all, reliability), as the test suite's Python replay path
(tests/pyreplay.py) drives them; the compiled loop (emu.engine.nic, emu.engine.reliable) must
give exactly what this gives.

Each board's NIC is the paper's metadata-driven datapath: the compute engine
hands it a payload with its Meta, and from the Meta alone the NIC chooses what
to do. Here that is:

- packetizer: the payload and metadata FIFOs; a send that does not fit waits
  (the compute engine stalls) and is accepted when earlier sends have left;
- forwarding and multicast: unicast routes and multicast trees installed as
  forwarding tables in the network, so replication happens hop by hop;
- reduction: contributions combine as whole messages arrive at each board of a
  reduction tree; a board sends its combined result up when its own and all its
  children's contributions are in (fp32 arithmetic, see emu.nic.reduce);
- all-to-all: a shift schedule (step s: member i sends to member i+s), one step
  in flight per member, so no receiver is hit by everyone at once;
- reliable delivery: fragments carry ACK_REQ; a receiver acknowledges a
  complete message; a sender that hears nothing within the retransmission
  timeout (adaptive, emu.nic.rto) probes, and the receiver answers with an ACK
  or a NACK carrying its missing-fragment bitmap, and the sender resends exactly
  those fragments by unicast. Duplicates are discarded at the receiver and never
  reach the application.

Every decision of reliable delivery, reductions and the replica directory is made by
each board's ``emu.nic.protocol.BoardProtocol``, the code `emu hw serve` runs too; this
module turns its actions into network messages and simulator timers, and keeps the
message-level accounting the replay needs (packetizer FIFOs, transfers, counters).

Functional mode carries real payload bytes, copied when the send is handed
over (reductions compute real numbers); timing mode only lengths. Both run the
same paths and give identical timing.
The NIC never knows which scheme produced its frames.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from emu.codec import Collective, Dtype, Flags, Op, ReduceOp, Stage, max_payload
from emu.codec.fragment import MAX_FRAGS
from emu.errors import ConfigError
from emu.net import Network
from emu.net.framing import frame_sizes
from emu.topology import multicast_tree
from emu.nic import protocol as P
from emu.nic import reduce as R
from emu.nic.control import control_meta
from emu.nic.config import CONTROL_LEN, CONTROL_OPS, NicConfig, Nics
from emu.nic.directory import Directory
from emu.nic.rto import RtoEstimator

@dataclass
class Transfer:
    """One send as the compute engine sees it: delivered per destination, then complete."""

    id: int
    src: int
    dsts: tuple[int, ...]
    meta: dict
    nbytes: int
    data: bytes | None
    on_delivered: Callable | None = None   # (transfer, node, time)
    on_complete: Callable | None = None    # (transfer, time)
    on_accept: Callable | None = None      # (transfer, time)
    accepted_at: int | None = None
    delivered: dict = field(default_factory=dict)   # node -> time
    parts: list = field(default_factory=list)       # engine messages
    failed: str | None = None
    left: bool = False      # out of the packetizer (its room freed once)
    nic: bool = False       # made by the NIC itself (a signal): no packetizer room, the ports' priority class
    gave_up: bool = False   # reliable delivery gave up on it (failed only if it never arrives)

    @property
    def complete(self) -> bool:
        return len(self.delivered) == len(self.dsts)


@dataclass
class _Part:
    """One message of a transfer; its reliability state is the source board's protocol slot."""

    transfer: Transfer
    msg: object = None
    proto: P.BoardProtocol | None = None
    slot: int = -1            # row in proto's sender table while it waits for acks
    timer: object = None
    sent: bool = False
    settled: bool = False     # acked by every receiver, given up, or untracked (its buffer may go)
    sent_at: int | None = None     # when its last frame left the wire
    settled_at: int | None = None  # when it settled
    streams: int = 0
    final: tuple = (frozenset(), None, 0)   # (acked, left_at, retries) once the slot is released

    def release(self) -> None:
        """Every receiver acked: keep what the slot said, and free it."""
        self.final = (frozenset(self.acked), self.left_at, self.retries)
        self.proto.release(self.slot)
        self.slot = -1

    @property
    def acked(self) -> set:
        return self.proto.acked(self.slot) if self.slot >= 0 else set(self.final[0])

    @property
    def left_at(self) -> int | None:
        """When the last fragment left the wire (the timer's start)."""
        if self.slot < 0:
            return self.final[1]
        t = int(self.proto.OUT[self.slot, P.OUT_LEFT_AT])
        return None if t < 0 else t

    @property
    def retries(self) -> int:
        """Timeouts so far; > 0 means no RTT sample (Karn)."""
        return int(self.proto.OUT[self.slot, P.OUT_RETRIES]) if self.slot >= 0 else self.final[2]


class Cluster(Nics):
    """All boards' NICs on ``net``; ``routes`` are the healthy topology's routes."""

    def __init__(self, net: Network, routes, config: NicConfig = NicConfig(), directory: Directory | None = None):
        super().__init__(net, routes, config)
        self.sim = net.sim
        self.directory = directory or Directory(self.boards)
        self._trees: dict[tuple, int] = {}
        self._transfers: list[Transfer] = []
        self._fifo = [deque() for _ in range(self.boards)]       # sends waiting for room
        self._fifo_bytes = [0] * self.boards
        self._fifo_entries = [0] * self.boards
        self._msg_ids = [0] * self.boards
        self._seq = [0] * self.boards
        self.retransmitted_frames = 0
        self.control_frames_by_op = dict.fromkeys(CONTROL_OPS, 0)
        self.proto = [P.BoardProtocol(b, self.boards, config.protocol(), self.directory) for b in range(self.boards)]
        self._reductions = 0
        self.errors: list[str] = []  # no route, reduction errors, as they happen

    # ---- routes --------------------------------------------------------------------


    @property
    def multicasts(self) -> list[tuple]:
        """(source, destinations) of every multicast tree built (the summary's dependency check)."""
        return list(self._trees)
    def reroute(self, routes) -> None:
        """New routes after a failure or repair: later multicasts build new trees, and the
        multicasts still in a packetizer get a new tree (Network.rehome moves them to it)."""
        self.routes = routes
        active = self.net.active_routes()
        kept = {}
        for (src, dsts), route in self._trees.items():
            if route in active:
                reach = [d for d in dsts if d != src and routes.next_hop[src, d] >= 0]
                tree = multicast_tree(self.net.topology, routes, src, reach) if reach else {src: []}
                kept[(src, dsts)] = self.net.replace_tree(route, tree, dsts)
        self._trees = kept

    def _route(self, src: int, dsts: tuple[int, ...]) -> int:
        if len(dsts) == 1:
            return dsts[0]
        key = (src, dsts)
        route = self._trees.get(key)
        if route is None:
            # over the members reachable now; reliable delivery reaches the others after a repair
            reach = [d for d in dsts if d != src and self.routes.next_hop[src, d] >= 0]
            tree = multicast_tree(self.net.topology, self.routes, src, reach) if reach else {src: []}
            route = self._trees[key] = self.net.add_tree(tree, dsts)
        return route

    # ---- sending ----------------------------------------------------------------------

    def send(self, src: int, dsts: Iterable[int], nbytes: int | None = None, *, data: bytes | None = None,
             op: Op = Op.kv_transfer, stage: Stage = Stage.prefill, collective: Collective | None = None,
             kv_id: int = 0, layer: int = 0, reduce_op: ReduceOp = ReduceOp.none, dtype: Dtype = Dtype.raw,
             on_delivered=None, on_complete=None, on_accept=None) -> Transfer:
        """Hand a payload (``data``, or only its length ``nbytes``) with its Meta to ``src``'s NIC."""
        dsts = tuple(sorted(set(int(d) for d in dsts)))
        if not dsts:
            raise ValueError("a send needs at least one destination")
        for d in dsts + (src,):
            if not 0 <= d < self.boards:
                raise ConfigError(f"no board {d} (the cluster has {self.boards})")
        if data is not None:
            # The payload FIFO takes a copy: the compute engine may reuse its buffer at once.
            data = data if isinstance(data, bytes) else memoryview(data).tobytes()
            nbytes = len(data)
        if nbytes is None or nbytes < 0:
            raise ValueError("a send needs data or a non-negative length")
        if collective is None:
            collective = Collective.unicast if len(dsts) == 1 else Collective.multicast
        meta = dict(op=int(op), stage=int(stage), collective=int(collective), kv_id=kv_id, layer=layer,
                    reduce_op=int(reduce_op), dtype=int(dtype), src_node=src,
                    dst_set=sum(1 << d for d in dsts if d < 64))
        tr = Transfer(len(self._transfers), src, dsts, meta, int(nbytes), data, on_delivered, on_complete, on_accept)
        self._transfers.append(tr)
        self._fifo[src].append(tr)
        self._admit(src)
        return tr

    def signal(self, src: int, dst: int, *, kv_id: int = 0, layer: int = 0, on_delivered=None) -> Transfer:
        """A signal from ``src`` to ``dst``: an event at src releases what waits for it at dst.
        The NIC makes it itself, header-only, as it makes an ack: it takes no room in the
        packetizer and goes in the ports' priority class; with reliable delivery it is acked
        and resent like any message."""
        meta = dict(op=int(Op.signal), stage=int(Stage.control), collective=int(Collective.unicast), kv_id=kv_id,
                    layer=layer, reduce_op=int(ReduceOp.none), dtype=int(Dtype.raw), src_node=src,
                    dst_set=(1 << dst) if dst < 64 else 0)
        tr = Transfer(len(self._transfers), src, (dst,), meta, CONTROL_LEN, None, on_delivered, nic=True)
        self._transfers.append(tr)
        tr.accepted_at = self.sim.now
        self._launch(tr)
        return tr

    def _admit(self, node: int) -> None:
        """Move sends from the packetization buffer's wait line into it while they fit."""
        q = self._fifo[node]
        cfg = self.config
        while q:
            tr = q[0]
            size = tr.nbytes
            if self._fifo_entries[node] and (self._fifo_entries[node] + 1 > cfg.fifo_entries
                                             or self._fifo_bytes[node] + size > cfg.fifo_bytes):
                return  # full: the compute engine stalls until a send has left
            q.popleft()
            self._fifo_entries[node] += 1
            self._fifo_bytes[node] += size
            tr.accepted_at = self.sim.now
            if tr.on_accept:
                tr.on_accept(tr, self.sim.now)
            self._launch(tr)

    def _launch(self, tr: Transfer) -> None:
        # A message carries at most MAX_FRAGS fragments (a 16-bit field): larger sends are split.
        per = max_payload(self.config.mtu)
        chunk = per * MAX_FRAGS
        local = tr.src in tr.dsts
        remote = tuple(d for d in tr.dsts if d != tr.src)
        if local:
            self.sim.at(self.sim.now, self._delivered, tr, tr.src)
        if not remote:
            self._left(tr)
            return
        route = self._route(tr.src, remote)
        for off in range(0, max(tr.nbytes, 1), chunk):
            size = min(chunk, tr.nbytes - off)
            part = _Part(tr)
            self._send_part(part, size, remote, route)
            tr.parts.append(part)

    def _send_part(self, part: _Part, size: int, dsts, route) -> None:
        tr = part.transfer
        nfrags, full, last = frame_sizes(size, self.config.mtu)
        mid = self._msg_ids[tr.src]
        self._msg_ids[tr.src] = (mid + 1) & 0xFFFFFFFF
        seq = self._seq[tr.src]
        meta = dict(tr.meta, msg_id=mid, seq=seq, msg_len=size,
                    flags=int(Flags.ACK_REQ) if self.config.reliable else 0)
        self._seq[tr.src] = (seq + nfrags) & 0xFFFFFFFF
        part.streams = len(self.net.first_hops(route, tr.src))
        if tr.meta["op"] in (Op.drain, Op.invalidate, Op.signal):
            self.control_frames_by_op[Op(tr.meta["op"]).name] += nfrags * part.streams
        part.msg = self.net.send(tr.src, dsts, nfrags, full, last, route=route, track=self.config.reliable,
                                 gaps=self.config.reliable, prio=tr.nic, on_event=self._on_event, meta=(meta, part))
        part.proto = self.proto[tr.src]
        if self.config.reliable:
            # tracked even with no way out now: its timer retries until a route comes back
            part.slot = part.proto.track(mid, seq, nfrags, part.msg.dsts)
        else:
            part.settled = True
        if part.streams == 0:
            if not self.config.reliable:
                tr.failed = f"no route from node {tr.src} to {list(dsts)}"
                self.errors.append(f"send {tr.id}: {tr.failed}")
            part.sent = True
            self.sim.at(self.sim.now, self._part_left, part)

    def _on_event(self, kind, msg, node, frag, t) -> None:
        meta, part = msg.meta
        if kind == "sent":
            # "sent": a stream's last frame has left the wire; ``frag`` is how many of the
            # message's streams (first hops of a multicast, resends) are still unsent.
            if frag:
                return
            if not part.sent:
                part.sent = True
                part.sent_at = self.sim.now
                self._part_left(part)
            elif part.slot >= 0 and part.proto.OUT[part.slot, P.OUT_RESENDING]:
                # The resends have left: the retransmission timer starts again from now.
                self._act(part, part.proto.resend_left(part.slot, self.sim.now))
        elif kind == "done":
            self._delivered_part(part, node)
        elif kind == "gap":
            self._gap(part, node, frag)

    def _part_left(self, part: _Part) -> None:
        tr = part.transfer
        # once: a send of several messages that all fail at once comes here for each
        self._maybe_left(tr)
        if part.slot >= 0:
            self._act(part, part.proto.left(part.slot, self.sim.now))

    def _settle(self, part: _Part) -> None:
        """``part`` is acked by every receiver or given up: with reliable delivery a send's
        bytes stay in the packetization buffer until each of its messages is (the NIC
        resends from it), and every frame has left."""
        part.settled = True
        part.settled_at = self.sim.now
        self._maybe_left(part.transfer)

    def _maybe_left(self, tr: Transfer) -> None:
        """Its room is freed once every message has left the wire and settled."""
        if not tr.left and all(p.sent and p.settled for p in tr.parts):
            self._left(tr)

    def _left(self, tr: Transfer) -> None:
        """Every frame of the send is out of the packetizer: its FIFO space is free again."""
        tr.left = True
        if tr.nic:
            return  # a signal took no room
        self._fifo_entries[tr.src] -= 1
        self._fifo_bytes[tr.src] -= tr.nbytes
        self._admit(tr.src)

    def _delivered_part(self, part: _Part, node: int) -> None:
        tr = part.transfer
        about = part.msg.meta[0]
        self._answer_acts(part, node, self.proto[node].message_complete(tr.src, about["msg_id"], about["seq"],
                                                                        self.config.reliable))
        if len(tr.parts) == 1 or all(self.net.received(p.msg, node) == p.msg.nfrags for p in tr.parts):
            self._delivered(tr, node)

    def _delivered(self, tr: Transfer, node: int) -> None:
        if node in tr.delivered:
            return
        tr.delivered[node] = self.sim.now
        # The directory follows the Meta of what actually arrived (the receiver's protocol).
        self.proto[node].delivered(tr.meta["op"], tr.meta["kv_id"], tr.nbytes, self.sim.now)
        if tr.on_delivered:
            tr.on_delivered(tr, node, self.sim.now)
        if tr.complete and tr.on_complete:
            tr.on_complete(tr, self.sim.now)

    def replica_control(self, owner: int, holders: Iterable[int], kv_id: int, op: Op, *, layer: int = 0,
                        on_delivered=None, on_complete=None) -> Transfer:
        """Send a drain or invalidate control frame for block ``kv_id`` from its owner to the holders."""
        if op not in (Op.drain, Op.invalidate):
            raise ValueError(f"replica control is drain or invalidate, not {Op(op).name}")
        return self.send(owner, holders, CONTROL_LEN, op=op, stage=Stage.control, kv_id=kv_id, layer=layer,
                         on_delivered=on_delivered, on_complete=on_complete)

    # ---- reliability -----------------------------------------------------------------

    @property
    def control_frames(self) -> int:
        """Control frames the NICs put on the wire (acks, nacks, probes, drains, invalidates, signals)."""
        return sum(self.control_frames_by_op.values())

    def rto(self, src: int, dst: int) -> RtoEstimator:
        """The retransmission-timeout estimator ``src`` keeps for ``dst`` (a view of its protocol's table)."""
        cfg = self.config
        return RtoEstimator(cfg.rto_min_ps, cfg.rto_initial_ps, cfg.rto_max_ps, self.proto[src].RT, dst)

    def _control(self, src: int, dst: int, op: Op, on_done, part: _Part, payload: bytes = b"",
                 probe: bool = False) -> None:
        """A control message (ack, probe, nack) about ``part``'s message; it is not itself acknowledged.
        ``on_done(time, payload)`` runs when it has arrived at ``dst``."""
        nfrags, full, last = frame_sizes(len(payload), self.config.mtu)
        about = part.msg.meta[0]
        meta = dict(control_meta(src, dst, op, msg_id=about["msg_id"], seq=about["seq"], probe=probe),
                    msg_len=len(payload))
        self.control_frames_by_op["probe" if probe else Op(op).name] += nfrags * len(self.net.first_hops(dst, src))

        def done(kind, msg, node, frag, t):
            if kind == "done":
                on_done(t, payload)

        self.net.send(src, [dst], nfrags, full, last, prio=True, on_event=done, meta=(meta, None))

    def _act(self, part: _Part, actions) -> None:
        """Carry out the source board's protocol actions about ``part``'s message."""
        for a in actions:
            kind = a[0]
            if kind == P.ARM:
                if part.timer is not None:
                    part.timer.cancel()
                    part.timer = None
                if a[2] >= 0:
                    part.timer = self.sim.at(a[2], self._timeout, part)
            elif kind == P.PROBE:
                # The receiver answers with an ACK if complete, else a NACK of what it misses.
                self._control(part.msg.src, a[2], Op.ack, lambda t, _, p=part, n=a[2]: self._probed(p, n, t),
                              part, probe=True)
            elif kind == P.RESEND:
                self.retransmitted_frames += int(a[3].size)
                self.net.resend(part.msg, a[2], a[3], prio=True)
            elif kind == P.FAILED:
                # The NIC gives up; the send is failed only if it never arrives (failures).
                part.transfer.failed = f"no acknowledgement from {a[2]} after {a[3]} retries"
                part.transfer.gave_up = True
                self._settle(part)

    def _answer_acts(self, part: _Part, node: int, actions, answer: bool = False) -> None:
        """Carry out receiver ``node``'s protocol answers (ack, nack) about ``part``'s message;
        ``answer``: they answer a probe."""
        src = part.msg.src
        for a in actions:
            if a[0] == P.ACK:
                self._control(node, src, Op.ack, lambda t, _, p=part, n=node, w=answer: self._acked(p, n, t, w),
                              part)
            elif a[0] == P.NACK:
                self._control(node, src, Op.nack, lambda t, pl, p=part, n=node: self._nacked(p, n, pl, t),
                              part, a[4])

    def _acked(self, part: _Part, node: int, t: int, answer: bool = False) -> None:
        if part.slot < 0:
            return  # every receiver had acked already
        self._act(part, part.proto.ack_arrived(part.slot, node, t, answer=answer))
        if not part.proto.waiting(part.slot):
            part.release()
            self._settle(part)

    def _timeout(self, part: _Part) -> None:
        part.timer = None
        self._act(part, part.proto.timer_due(part.slot, self.sim.now))

    def _probed(self, part: _Part, node: int, t: int) -> None:
        """A probe reached receiver ``node``: it answers from its own bitmap, as it is now."""
        missing = self.net.missing(part.msg, node)
        about = part.msg.meta[0]
        self._answer_acts(part, node, self.proto[node].probe_arrived(
            part.msg.src, about["msg_id"], about["seq"], t, complete=missing.size == 0,
            frag_cnt=part.msg.nfrags, missing=missing), answer=True)

    def _gap(self, part: _Part, node: int, frag: int) -> None:
        """Fragment ``frag`` reached receiver ``node`` right after a missing one: it nacks the gap."""
        nfrags = part.msg.nfrags
        lost = P.nack_payload(nfrags, self.net.missing(part.msg, node))
        about = part.msg.meta[0]
        self._answer_acts(part, node, self.proto[node].gap_seen(
            part.msg.src, about["msg_id"], about["seq"], frag, nfrags, bytes(~b & 0xFF for b in lost)))

    def _nacked(self, part: _Part, node: int, nack: bytes, t: int) -> None:
        """A NACK from ``node`` arrived: the source's protocol resends exactly what it names."""
        if part.slot < 0:
            return  # an ACK overtook this NACK: every receiver has everything
        routed = bool(self.net.first_hops(node, part.msg.src))
        self._act(part, part.proto.nack_arrived(part.slot, node, nack, self.sim.now, routed=routed))

    # ---- results -------------------------------------------------------------------------

    @property
    def transfers(self) -> list[Transfer]:
        return self._transfers

    @property
    def failures(self) -> list[str]:
        """The errors, then the sends reliable delivery gave up on that never arrived whole
        (a give-up whose data still arrives, e.g. from behind a long queue, is no failure)."""
        return self.errors + [f"send {tr.id} from node {tr.src}: {tr.failed}" for tr in self._transfers
                              if tr.gave_up and not tr.complete]

    def incomplete(self, *, failed: bool = False) -> list[str]:
        """The sends not delivered everywhere (``failed``: only those reliable delivery gave up
        on or had no route for), with their op, block and the boards they never reached."""
        out = []
        for tr in self._transfers:
            if not tr.complete and (tr.failed or not failed):
                missing = [d for d in tr.dsts if d not in tr.delivered]
                why = tr.failed or ("still waiting for the packetizer" if tr.accepted_at is None else "frames lost")
                out.append(f"send {tr.id} (op {Op(tr.meta['op']).name}, kv {tr.meta['kv_id']}) from node {tr.src} "
                           f"never reached {missing}: {why}")
        return out

    # ---- collectives ----------------------------------------------------------------------

    def reduction(self, group: Iterable[int], root: int, op: ReduceOp, *, nbytes: int, dtype: Dtype = Dtype.fp32,
                  heads: int = 0, head_dim: int = 0, functional: bool = True, stage: Stage = Stage.decode,
                  layer: int = 0, kv_id: int = 0, on_complete=None) -> "Reduction":
        return Reduction(self, tuple(sorted(set(group))), root, ReduceOp(op), nbytes, Dtype(dtype), heads, head_dim,
                         functional, stage, layer, kv_id, on_complete)

    def all_to_all(self, group: Iterable[int], nbytes: int | dict, *, data: dict | None = None,
                   op: Op = Op.kv_transfer, stage: Stage = Stage.prefill, on_delivered=None, on_complete=None,
                   autostart: bool = True, **meta):
        """Personalized exchange inside ``group``. ``nbytes`` a dict: only its (src, dst) pairs
        are sent. ``autostart=False``: each member begins when ``start(member)`` is called
        (its data is ready). ``meta``: kv_id, layer, dtype of the frames."""
        return AllToAll(self, tuple(sorted(set(group))), nbytes, data, op, stage, on_delivered, on_complete,
                        autostart, meta)


class Reduction:
    """Reduce (optionally all-reduce) contributions of ``group`` to ``root`` along a board tree.

    Each board's protocol (``BoardProtocol.contribute``) folds what reaches it and says when
    its own and its children's contributions are in; this object sends the result on."""

    def __init__(self, cluster, group, root, op, nbytes, dtype, heads, head_dim, functional, stage, layer, kv_id,
                 on_complete):
        if root not in group:
            group = tuple(sorted(group + (root,)))
        self.c, self.group, self.root, self.op = cluster, group, root, op
        self.nbytes, self.dtype, self.heads, self.head_dim = nbytes, dtype, heads, head_dim
        self.functional, self.stage, self.layer, self.kv_id = functional, stage, layer, kv_id
        self.on_complete = on_complete
        self.parent = cluster.board_tree(root, group)
        self.expected = {n: frozenset([n, *(c for c, p in self.parent.items() if p == n)]) for n in group}
        self.key = ("reduction", cluster._reductions)  # this reduction in every board's protocol
        cluster._reductions += 1
        self.result = None
        self.done_at = None

    def _combine(self, acc: bytes, payload: bytes) -> bytes:
        return R.combine(self.op, acc, payload, dtype=self.dtype, heads=self.heads, head_dim=self.head_dim)

    def _fold(self, node: int, src: int, payload) -> None:
        # a child's contribution came in a message, with ACK_REQ when reliable; one's own did not
        ack_req = src != node and self.c.config.reliable
        for a in self.c.proto[node].contribute(self.key, src, payload if self.functional else None, self.nbytes,
                                                expected=self.expected[node], combine=self._combine, ack_req=ack_req):
            if a[0] == P.REDUCED:
                self._forward(node, a[2])
            elif a[0] == P.REDUCE_ERROR:
                self.c.errors.append(f"reduction to {self.root} at node {node}: {a[1]}")

    def contribute(self, node: int, payload: bytes | None = None) -> None:
        """``node``'s own contribution is ready now (payload bytes in functional mode)."""
        if node not in self.expected:
            raise ConfigError(f"node {node} is not in the reduction group {list(self.group)}")
        if self.functional and (payload is None or len(payload) != self.nbytes):
            raise ValueError(f"contribution of node {node} must be {self.nbytes} bytes")
        self._fold(node, node, payload)

    def _forward(self, node: int, acc) -> None:
        now = self.c.sim.now
        op, dsts = P.reduction_result(node, self.root, self.parent.get(node), Collective.reduce, self.group)
        if op is None:
            self.result, self.done_at = acc, now
            if self.on_complete:
                self.on_complete(self, now)
            return
        self.c.send(node, dsts, self.nbytes, data=acc if self.functional else None,
                    op=op, stage=self.stage, collective=Collective.reduce, reduce_op=self.op,
                    dtype=self.dtype, layer=self.layer, kv_id=self.kv_id,
                    on_delivered=lambda tr, n, t: self._fold(n, tr.src, tr.data))  # what arrived, not our buffer


class AllToAll:
    """Personalized exchange: every member sends a distinct block to every other member
    (or to the pairs ``nbytes``/``data`` name), pairwise: at step s member i sends to member
    i + s, one step in flight per member."""

    def __init__(self, cluster, group, nbytes, data, op, stage, on_delivered, on_complete, autostart=True, meta=None):
        self.c, self.group, self.data, self.op, self.stage = cluster, group, data, op, stage
        self.nbytes = nbytes
        self.meta = meta or {}
        self.on_delivered, self.on_complete = on_delivered, on_complete
        self.received: dict[tuple[int, int], bytes | None] = {}
        n = len(group)
        self.expected = sum(1 for i in range(n) for s in range(1, n) if self._size(group[i], group[(i + s) % n]) is not None)
        if autostart:
            for i in range(n):
                self._step(i, 1)

    def start(self, member: int) -> None:
        """``member``'s blocks are ready: it begins its sends."""
        self._step(self.group.index(member), 1)

    def _size(self, a: int, b: int) -> int | None:
        if self.data is not None:
            return len(self.data[(a, b)]) if (a, b) in self.data else None
        return self.nbytes.get((a, b)) if isinstance(self.nbytes, dict) else self.nbytes

    def _step(self, i: int, s: int) -> None:
        n = len(self.group)
        while s < n and self._size(self.group[i], self.group[(i + s) % n]) is None:
            s += 1  # a pair outside the exchange: no frame
        if s >= n:
            return
        a, b = self.group[i], self.group[(i + s) % n]
        payload = self.data[(a, b)] if self.data is not None else None

        def delivered(tr, node, t):
            self._got(a, node, tr.data, t)
            self._step(i, s + 1)  # one step in flight per member

        self.c.send(a, [b], self._size(a, b), data=payload, op=self.op, stage=self.stage,
                    collective=Collective.all_to_all, on_delivered=delivered, **self.meta)

    def _got(self, a, b, payload, t) -> None:
        self.received[(a, b)] = payload
        if self.on_delivered:
            self.on_delivered(a, b, payload, t)
        if len(self.received) == self.expected and self.on_complete:
            self.on_complete(self, t)
