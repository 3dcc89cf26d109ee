"""`emu hw serve`: the NIC of board K as a live device on one interface.

The device reads MCF frames from its raw socket in batches, validates them
with the batch codec and decides from each header alone (see ``emu.hw.model``
and docs/hardware.md, "What serve answers"):

1. malformed frames are counted by reason and dropped;
2. frames from itself (``src_node == K``) are dropped, except its own
   contribution to a reduction, which its compute engine hands in over the wire
   (``partial_state``, collective reduce / all_reduce, ``dst_set`` bit K);
3. forwarding: if K has children in the multicast tree from ``src_node`` to the
   destinations and the frame came from K's upstream board (source MAC), one copy
   goes back out with ``ttl - 1`` and K's source MAC (frames with ``ttl <= 1``
   are not forwarded);
4. delivery: frames for K are reassembled (``emu.codec.Reassembler``); each
   complete message with ACK_REQ is acknowledged; ``kv_replica`` / ``drain`` /
   ``invalidate`` update the replica directory (``emu.nic.Directory``);
   ``partial_state`` of a reduce / all_reduce folds into the reduction
   (``emu.nic.reduce``) and, once K's own and its children's contributions are
   in, the result goes to K's parent (or, at the root of an all_reduce, to the
   whole group as ``reduce_result``);
5. reliability (header-only control frames naming the message by msg_id and
   seq): an ``ack`` stops K's probes of that message, a ``nack`` makes K resend
   the fragments its bitmap names (RETX, unicast); a probe (an ``ack`` with
   ACK_REQ) about another board's message is answered with an ``ack`` if the
   message is complete, else a ``nack``; K's own messages with ACK_REQ are probed
   after the RTO, doubling, up to max_retries.

A board never dies of a frame: a frame that cannot be handled (a source outside the
topology, an answer that cannot be addressed, anything unexpected) is counted by reason in
``rejected``, logged with ``-v``, and the device serves on. What it holds for other boards
is bounded (``ServeLimits``): incomplete messages by count, bytes and age (the oldest
evicted, counted), remembered completed messages, waiting reductions; and a probe about one
message is answered at most once per RTO (once more if the message completes in between),
so a sender cannot make it amplify.
"""

from __future__ import annotations

import heapq
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..codec import FRAME_HEADER_LEN, Flags, Op, Reassembler
from ..codec.batch import REASONS, encode_frames, scan_frames
from ..codec.errors import FrameError
from ..codec.fragment import Limits
from ..nic import Directory
from ..nic.directory import State
from . import model as M
from .rawsock import RawSocket

MAC_PREFIX = b"\x02MCF"


def mac_board(mac) -> int | None:
    """Board id of an MCF board MAC (02:4d:43:46:HH:LL), else None."""
    mac = bytes(mac)
    return int.from_bytes(mac[4:6], "big") if mac[:4] == MAC_PREFIX else None


@dataclass(frozen=True)
class ServeLimits:
    """What one board keeps for others (``emu hw serve --max-partial ...``)."""

    partial_messages: int = 256          # incomplete messages held at once
    partial_bytes: int = 64 << 20        # their bytes (a KR260 NIC's reassembly memory is far less)
    partial_age_s: float = 5.0           # an incomplete message older than this is dropped
    done_messages: int = 65536           # completed messages remembered (duplicates, probe answers)
    reductions: int = 4096               # reductions waiting for contributions
    errors: int = 100                    # error lines kept for the summary

    def reassembly(self) -> Limits:
        return Limits(messages=self.partial_messages, bytes=self.partial_bytes, age_s=self.partial_age_s,
                      done=self.done_messages)


@dataclass
class _Reduction:
    expected: set
    got: dict = field(default_factory=dict)   # contributor -> msg_len
    acc: bytes | None = None
    synth: bool = False
    ack_req: bool = False
    msg_len: int = -1


@dataclass
class _Outgoing:
    """One of the device's own messages that asked for acknowledgements."""

    headers: np.ndarray
    payload: np.ndarray | None
    waiting: set
    retries: int = 0
    due: float = 0.0


class Device:
    """The NIC of ``board`` on ``sock``; ``run`` serves until stopped."""

    def __init__(self, board: M.Board, sock: RawSocket | None, *, rto: float = 0.002, max_retries: int = 20,
                 wrong_reduce_op: int | None = None, verbose: bool = False, out=sys.stdout,
                 limits: ServeLimits = ServeLimits()):
        self.board, self.sock = board, sock
        self.K = board.node
        self.mtu = board.mtu
        self.rto, self.max_retries = rto, max_retries
        self.wrong_reduce_op = wrong_reduce_op
        self.verbose, self.out = verbose, out
        self.limits = limits
        self.reasm = Reassembler(limits.reassembly())
        # the compute engine's own contributions, handed in over the wire
        self.host = Reassembler(limits.reassembly())
        self.directory = Directory(board.boards)
        self.reductions: dict[tuple, _Reduction] = {}
        self.outgoing: dict[int, _Outgoing] = {}
        self.timers: list = []
        self.done_msgs: dict[tuple, tuple] = {}  # (src, msg_id) -> (seq, frag_cnt) of completed messages
        self.msg_id = 0
        self.seq = 0
        self.count = Counter()
        self.malformed = Counter()
        self.rejected = Counter()   # well-formed frames the device could not act on, by reason
        self._answered: dict[tuple, float] = {}  # (src, msg_id) -> when a probe of it was last answered
        self.delivered = Counter()
        self.errors: list[str] = []
        self.t0 = time.monotonic()

    # ---- logging -----------------------------------------------------------------------

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"[{time.monotonic() - self.t0:9.6f}] node {self.K}: {text}", file=self.out, flush=True)

    def error(self, text: str) -> None:
        if len(self.errors) < self.limits.errors:
            self.errors.append(text)
        self.count["errors"] += 1
        self.log(f"error: {text}")

    # ---- main loop -----------------------------------------------------------------------

    def run(self, *, duration: float | None = None, stop=None) -> None:
        end = None if duration is None else time.monotonic() + duration
        while stop is None or not stop():
            now = time.monotonic()
            if end is not None and now >= end:
                return
            wait = 0.2
            if self.timers:
                wait = min(wait, max(0.0, self.timers[0][0] - now))
            if end is not None:
                wait = min(wait, max(0.0, end - now))
            buf, offsets, _ = self.sock.recv(timeout=wait)
            if len(offsets) > 1:
                self.handle(buf, offsets)
            self._run_timers()
            self.reasm.expire()
            self.host.expire()

    def handle(self, buf, offsets) -> None:
        """Process a batch of received frames (``buf``, ``offsets`` as the batch codec takes them)."""
        h, codes, _, raw = scan_frames(buf, offsets)
        n = len(h)
        self.count["frames"] += n
        bad = np.flatnonzero(codes)
        for i in bad.tolist():
            self.malformed[REASONS[codes[i]]] += 1
        if len(bad):
            self.log(f"dropped {len(bad)} malformed frames")
        starts = np.asarray(offsets[:-1])
        for i in np.flatnonzero(codes == 0).tolist():
            s = int(starts[i])
            pay = buf[s + FRAME_HEADER_LEN : s + FRAME_HEADER_LEN + int(h["pay_len"][i])]
            try:
                self.frame(h[i], raw[i], pay, buf[s : s + FRAME_HEADER_LEN + int(h["pay_len"][i])])
            except Exception as exc:  # noqa: BLE001 - one frame never stops the board
                self.reject(f"error_{type(exc).__name__}", f"frame from node {int(h['src_node'][i])} "
                            f"msg {int(h['msg_id'][i])}: {type(exc).__name__}: {exc}")

    def reject(self, reason: str, text: str) -> None:
        """Count a frame the device cannot act on, log it (-v) and go on."""
        self.rejected[reason] += 1
        self.log(f"rejected ({reason}): {text}")

    def frame(self, hdr, raw, payload, frame) -> None:
        K = self.K
        src = int(hdr["src_node"])
        op = int(hdr["op"])
        from_board = mac_board(raw[6:12])
        if src >= self.board.boards:
            self.reject("unknown_source", f"src_node {src}: no such board in {self.board.topology}")
            return
        if src == K:
            self._own(hdr, payload)
            return
        dsts = self.board.destinations(int(hdr["dst_set"]), int(hdr["route_id"]))
        if dsts is None:
            self.count["unknown_route"] += 1
            self.log(f"route_id {int(hdr['route_id'])} not installed: dropped")
            return
        role = self.board.role(src, dsts)
        if role.forwards and (from_board is None or from_board == role.upstream):
            self._forward(hdr, frame)
        if not role.member:
            if not role.forwards:
                self.count["not_for_us"] += 1
            return
        if op in (Op.ack, Op.nack) and int(hdr["frag_cnt"]) == 1:
            self._control(hdr, payload)
            return
        synth = bool(int(hdr["flags"]) & Flags.SYNTH)
        try:
            msg = self.reasm.add(hdr, None if synth else payload)
        except FrameError as exc:
            self.malformed["reassembly"] += 1
            self.log(f"reassembly: {exc}")
            return
        if msg is not None:
            self._message(msg)

    # ---- forwarding ------------------------------------------------------------------------

    def _forward(self, hdr, frame) -> None:
        ttl = int(hdr["ttl"])
        if ttl <= 1:
            self.count["ttl_expired"] += 1
            return
        out = np.array(frame, dtype=np.uint8)  # a copy: Ethernet + header + payload
        out[6:12] = np.frombuffer(MAC_PREFIX + self.K.to_bytes(2, "big"), np.uint8)
        out[14 + 7] = ttl - 1
        self._send(out, np.array([0, len(out)], np.int64))
        self.count["forwarded"] += 1

    # ---- sending -----------------------------------------------------------------------

    def _send(self, buf, offsets) -> None:
        self.sock.send(buf, offsets)
        self.count["sent_frames"] += len(offsets) - 1

    def originate(self, meta: dict, data: bytes | None, *, waiting=()) -> int:
        """Send one message of this board (ack, nack, result); returns its msg_id."""
        if data is None:
            meta = dict(meta, flags=int(meta.get("flags", 0)) | int(Flags.SYNTH))
        h, pay = M.message(meta, data, self.mtu, self.msg_id, self.seq)
        mid = self.msg_id
        self.msg_id = (self.msg_id + 1) & 0xFFFFFFFF
        self.seq = (self.seq + len(h)) & 0xFFFFFFFF
        buf, offsets = encode_frames(h, pay)
        self._send(buf, offsets)
        if int(meta.get("flags", 0)) & Flags.ACK_REQ and waiting:
            o = self.outgoing[mid] = _Outgoing(h, pay, set(waiting))
            self._arm(mid, o)
        return mid

    def _ack(self, to: int, msg_id: int, seq: int, *, frag_cnt: int = 0, missing=None) -> None:
        """Answer ``to`` about its message ``msg_id``: an ack, or a nack naming the missing fragments."""
        if missing is not None:
            meta = M.control_meta(self.K, to, Op.nack, msg_id=msg_id, seq=seq)
            h, pay = M.message(meta, M.nack_bitmap(frag_cnt, missing) if frag_cnt else b"", self.mtu)
            self.count["nacks_sent"] += 1
        else:
            h, pay = M.message(M.control_meta(self.K, to, Op.ack, msg_id=msg_id, seq=seq), b"", self.mtu)
            self.count["acks_sent"] += 1
        buf, offsets = encode_frames(h, pay)
        self._send(buf, offsets)

    # ---- delivery ----------------------------------------------------------------------

    def _message(self, msg) -> None:
        hdr = msg.header
        op = int(hdr["op"])
        src = msg.src_node
        self.done_msgs[(src, msg.msg_id)] = (int(hdr["seq"]), msg.frag_cnt)
        while len(self.done_msgs) > self.limits.done_messages:
            del self.done_msgs[next(iter(self.done_msgs))]
        self.delivered[_op_name(op)] += 1
        self.log(f"delivered {_op_name(op)} n{src}#{msg.msg_id} ({msg.msg_len} bytes, kv {int(hdr['kv_id'])})")
        if int(hdr["flags"]) & Flags.ACK_REQ:
            self._ack(src, msg.msg_id, int(hdr["seq"]))
        kv = int(hdr["kv_id"])
        t = self._now_ps()
        if op == Op.kv_replica:
            self.directory.add_replica(self.K, kv, msg.msg_len, t)
            self._directory_log(kv)
        elif op == Op.drain:
            self._directory(self.directory.drain, kv, t)
        elif op == Op.invalidate:
            self._directory(self.directory.invalidate, kv, t)
        elif op == Op.partial_state and int(hdr["collective"]) in M.REDUCING:
            self._contribution(src, hdr, msg.data, msg.msg_len)

    def _directory(self, fn, kv: int, t: int) -> None:
        before = len(self.directory.errors)
        fn(self.K, kv, t)
        for e in self.directory.errors[before:]:
            self.error(f"directory: {e}")
        self._directory_log(kv)

    def _directory_log(self, kv: int) -> None:
        self.log(f"directory: kv {kv} {self.directory.state(self.K, kv).name}")

    def _now_ps(self) -> int:
        return int((time.monotonic() - self.t0) * 1e12)

    # ---- own frames (the compute engine's contributions) -----------------------------------

    def _own(self, hdr, payload) -> None:
        is_contribution = (int(hdr["op"]) == Op.partial_state and int(hdr["collective"]) in M.REDUCING
                           and int(hdr["route_id"]) == 0 and int(hdr["dst_set"]) >> self.K & 1)
        if not is_contribution:
            self.count["own_frames_dropped"] += 1
            return
        synth = bool(int(hdr["flags"]) & Flags.SYNTH)
        try:
            msg = self.host.add(hdr, None if synth else payload)
        except FrameError as exc:
            self.malformed["reassembly"] += 1
            self.log(f"own contribution: {exc}")
            return
        if msg is not None:
            self.log(f"own contribution n{self.K}#{msg.msg_id} ({msg.msg_len} bytes)")
            self._contribution(self.K, msg.header, msg.data, msg.msg_len)

    # ---- reductions ------------------------------------------------------------------------

    def _contribution(self, src: int, hdr, data: bytes | None, msg_len: int) -> None:
        key = tuple(int(hdr[f]) for f in ("stage", "layer", "kv_id", "collective", "reduce_op", "dtype"))
        op, dtype = key[4], key[5]
        why = M.check_contribution(op, dtype, self.board.heads, msg_len)
        if why:
            self.error(f"contribution from node {src} to kv {key[2]}: {why}")
            return
        red = self.reductions.get(key)
        if red is None:
            if len(self.reductions) >= self.limits.reductions:
                oldest = next(iter(self.reductions))
                del self.reductions[oldest]
                self.count["reductions_evicted"] += 1
                self.log(f"reduction kv {oldest[2]} evicted: {self.limits.reductions} waiting")
            red = self.reductions[key] = _Reduction(expected={self.K, *self.board.children()}, msg_len=msg_len)
        if src not in red.expected:
            self.error(f"contribution from node {src} to kv {key[2]}: not a child of node {self.K} "
                       f"in the reduction tree to {self.board.root}")
            return
        if src in red.got:
            self.error(f"second contribution from node {src} to kv {key[2]} ignored")
            return
        if msg_len != red.msg_len:
            self.error(f"contribution from node {src} to kv {key[2]}: {msg_len} bytes, earlier ones {red.msg_len}")
            return
        red.got[src] = msg_len
        red.ack_req |= bool(int(hdr["flags"]) & Flags.ACK_REQ)
        eff = op if self.wrong_reduce_op is None else self.wrong_reduce_op
        if data is None:
            red.synth = True
        elif not red.synth:
            red.acc = M.combine(eff, dtype, self.board.heads, red.acc, data)
        self.log(f"reduction kv {key[2]}: {len(red.got)}/{len(red.expected)} contributions")
        if len(red.got) == len(red.expected):
            del self.reductions[key]
            self._reduced(key, red, eff)

    def _reduced(self, key, red: _Reduction, op: int) -> None:
        meta = M.result_meta(self.board, key, op=op, ack_req=red.ack_req)
        self.count["reductions"] += 1
        if not meta:
            self.delivered["reduce_result"] += 1
            self.log(f"reduction kv {key[2]} complete at the root")
            return
        data = None if red.synth else red.acc
        if data is None:
            meta["msg_len"] = red.msg_len
        if meta["op"] == Op.partial_state:
            waiting = {self.board.parent}
        else:
            waiting = set(range(self.board.boards)) - {self.K}
        mid = self.originate(meta, data, waiting=waiting)
        self.log(f"reduction kv {key[2]} complete: {Op(meta['op']).name} n{self.K}#{mid} to "
                 f"{sorted(waiting)}")

    # ---- reliability -------------------------------------------------------------------------

    def _control(self, hdr, payload) -> None:
        """An ack, nack or probe addressed to this board (header-only; a nack carries its bitmap)."""
        src, op = int(hdr["src_node"]), int(hdr["op"])
        mid, seq = int(hdr["msg_id"]), int(hdr["seq"])
        if op == Op.ack and int(hdr["flags"]) & Flags.ACK_REQ:
            # a probe: the source asks whether its message arrived whole
            key = (src, mid)
            # one answer per message and answer kind per RTO: a message completing in
            # between (nack, then ack) is still told at once
            if not self._may_answer((src, mid, key in self.done_msgs)):
                self.count["probes_limited"] += 1
                return
            self.count["probes_answered"] += 1
            if key in self.done_msgs:
                self._ack(src, mid, self.done_msgs[key][0])
                return
            p = self.reasm.pending_of(src, mid)
            if p is None:
                self._ack(src, mid, seq, missing=[])  # nothing of it here: an empty bitmap, resend all
            else:
                self._ack(src, mid, seq, frag_cnt=p.frag_cnt, missing=p.missing)
            return
        o = self.outgoing.get(mid)
        if op == Op.ack:
            self.count["acks_received"] += 1
            if o is not None:
                o.waiting.discard(src)
                if not o.waiting:
                    del self.outgoing[mid]
            return
        self.count["nacks_received"] += 1
        if o is not None:
            missing = M.missing_of(payload) if len(payload) and not int(hdr["flags"]) & Flags.SYNTH else []
            self._resend(o, src, missing or range(len(o.headers)))

    def _may_answer(self, key) -> bool:
        """At most one answer per ``key`` per RTO (an honest sender's probes are that far apart)."""
        now = time.monotonic()
        last = self._answered.pop(key, None)
        if last is not None and now - last < self.rto:
            self._answered[key] = last
            return False
        self._answered[key] = now
        # oldest first: forget answers that can no longer limit anything, and bound the rest
        while self._answered:
            k0 = next(iter(self._answered))
            if now - self._answered[k0] < self.rto and len(self._answered) <= self.limits.done_messages:
                break
            del self._answered[k0]
        return True

    def _resend(self, o: _Outgoing, to: int, missing) -> None:
        idx = [i for i in missing if 0 <= i < len(o.headers)]
        if not idx:
            return
        h = o.headers[idx].copy()
        h["flags"] |= np.uint8(Flags.RETX)
        h["dst_set"] = 1 << to
        h["route_id"] = 0
        pay = None
        if o.payload is not None:
            starts = np.concatenate([[0], np.cumsum(o.headers["pay_len"].astype(np.int64))])
            pay = np.concatenate([o.payload[starts[i] : starts[i + 1]] for i in idx])
        buf, offsets = encode_frames(h, pay)
        self._send(buf, offsets)
        self.count["retransmitted"] += len(idx)

    def _arm(self, mid: int, o: _Outgoing) -> None:
        o.due = time.monotonic() + self.rto * (1 << min(o.retries, 6))
        heapq.heappush(self.timers, (o.due, mid))

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            due, mid = heapq.heappop(self.timers)
            o = self.outgoing.get(mid)
            if o is None or o.due != due:
                continue
            if o.retries >= self.max_retries:
                self.error(f"message n{self.K}#{mid}: no acknowledgement from {sorted(o.waiting)} "
                           f"after {o.retries} probes")
                del self.outgoing[mid]
                continue
            o.retries += 1
            seq = int(o.headers[0]["seq"])
            for d in sorted(o.waiting):
                h, pay = M.message(M.control_meta(self.K, d, Op.ack, msg_id=mid, seq=seq, probe=True), b"", self.mtu)
                buf, offsets = encode_frames(h, pay)
                self._send(buf, offsets)
                self.count["probes_sent"] += 1
            self._arm(mid, o)

    # ---- summary -----------------------------------------------------------------------------

    def summary_dict(self) -> dict:
        """What ``summary`` prints, as data (``emu hw serve --json``)."""
        return {"node": self.K, "topology": self.board.topology, "counts": dict(self.count),
                "delivered": dict(sorted(self.delivered.items())), "reductions_waiting": len(self.reductions),
                "malformed": dict(self.malformed),
                "replicas": dict(sorted(Counter(State(s).name for (n, _), (s, _) in self.directory.replicas.items()
                                                if n == self.K).items())),
                "incomplete_messages": len(self.reasm.pending()), "errors": list(self.errors)}

    def summary(self) -> str:
        c = self.count
        lines = [f"node {self.K} of {self.board.topology}: {c['frames']:,} frames in, {c['sent_frames']:,} out "
                 f"({c['forwarded']:,} forwarded, {c['acks_sent']:,} acks, {c['nacks_sent']:,} nacks, "
                 f"{c['probes_sent']:,} probes, {c['retransmitted']:,} retransmitted)"]
        if self.delivered:
            lines.append("delivered  " + ", ".join(f"{k}: {v:,}" for k, v in sorted(self.delivered.items())))
        lines.append(f"reductions {c['reductions']:,} complete, {len(self.reductions):,} waiting")
        if self.malformed:
            lines.append("malformed  " + ", ".join(f"{k}: {v:,}" for k, v in self.malformed.items()))
        if self.rejected:
            lines.append("rejected   " + ", ".join(f"{k}: {v:,}" for k, v in sorted(self.rejected.items())))
        r = self.reasm
        if r.expired or r.evicted or r.too_large or c["reductions_evicted"] or c["probes_limited"]:
            lines.append(f"bounded    {r.expired:,} messages expired, {r.evicted:,} evicted ({r.evicted_bytes:,} bytes), "
                         f"{r.too_large:,} too large, {c['reductions_evicted']:,} reductions evicted, "
                         f"{c['probes_limited']:,} probes not answered again within the RTO")
        other = {k: c[k] for k in ("unknown_route", "ttl_expired", "own_frames_dropped", "not_for_us") if c[k]}
        if other:
            lines.append("dropped    " + ", ".join(f"{k}: {v:,}" for k, v in other.items()))
        states = Counter(State(s).name for (n, _), (s, _) in self.directory.replicas.items() if n == self.K)
        if states:
            lines.append("replicas   " + ", ".join(f"{k}: {v}" for k, v in sorted(states.items())))
        if self.reasm.incomplete:
            lines.append(f"incomplete {self.reasm.incomplete} messages ({self.reasm.held_bytes:,} bytes held)")
        for e in self.errors[:10]:
            lines.append(f"error      {e}")
        return "\n".join(lines)


def _op_name(op: int) -> str:
    return Op(op).name if op in Op._value2member_map_ else f"op{op}"


__all__ = ["Device", "ServeLimits", "mac_board"]
