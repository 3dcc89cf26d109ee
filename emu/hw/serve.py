"""`emu hw serve`: the NIC of board K as a live device on one interface.

The device reads MCF frames from its raw socket in batches, validates them
with the batch codec and hands each to board K's ``emu.nic.protocol.BoardProtocol``,
the protocol code the emulator runs: every decision below (forwarding row, ack,
probe answer, resend, RTO, reduction, directory) is the protocol's; this module
does the socket I/O, decoding, bounded reassembly, counting and logging, and maps
real time to the protocol's integer picoseconds (docs/hardware.md, "What serve
answers"):

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
   the fragments its bitmap names (RETX, unicast; the bitmap starts at the fragment
   whose seq the nack carries); a probe (an ``ack`` with ACK_REQ) about another
   board's message is answered with an ``ack`` if the message is complete, else a
   one-frame ``nack`` (``nack_window``); K's own messages with ACK_REQ are probed
   after the adaptive RTO (``emu.nic.rto``, the kr260 profile's parameters), backing
   off, up to max_retries.

A board never dies of a frame: a frame that cannot be handled (a source outside the
topology, an answer that cannot be addressed, anything unexpected) is counted by reason in
``rejected``, logged with ``-v``, and the device serves on. What it holds for other boards
is bounded (``ServeLimits``): incomplete messages and waiting reductions by count, bytes
and age (the oldest evicted, counted), remembered completed messages. A probe about one
message is answered at most once per ``rto_min`` (once more if the message completes in
between; the protocol's ``answer_gap_ps``, on the time its batch was read), only when it
comes from the Ethernet source the message's fragments came from, with at most one
frame, and never with more bytes than that board has sent here (``credit``): a sender
cannot make a board amplify, nor aim its answers at another board.
"""

from __future__ import annotations

import heapq
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..codec import FRAME_HEADER_LEN, REPLY_OPS, Flags, Op, Reassembler
from ..codec.batch import REASONS, encode_frames, scan_frames
from ..codec.errors import FrameError
from ..codec.layer import FRAME_OFFSETS
from ..codec.mac import MAC_PREFIX, mac_board
from ..codec.fragment import Limits, max_payload
from ..nic import Directory
from ..nic import protocol as P
from ..nic.directory import State
from . import board as M
from .rawsock import RawSocket

# What one waiting reduction costs besides its partial result (its table entry, key and
# bookkeeping; measured with tracemalloc: tests/test_hw_memory.py)
REDUCTION_COST = 1024


@dataclass(frozen=True)
class ServeLimits:
    """What one board keeps for others (``emu hw serve --max-partial ...``)."""

    partial_messages: int = 256          # incomplete messages held at once
    partial_bytes: int = 64 << 20        # their bytes (a KR260 NIC's reassembly memory is far less)
    partial_age_s: float = 5.0           # an incomplete message older than this is dropped
    done_messages: int = 65536           # completed messages remembered (duplicates, probe answers)
    reductions: int = 4096               # reductions waiting for contributions
    reduction_bytes: int = 64 << 20      # their bytes (the partial result, plus REDUCTION_COST each)
    reduction_age_s: float = 5.0         # a reduction waiting longer than this is dropped
    errors: int = 100                    # error lines kept for the summary

    def reassembly(self) -> Limits:
        return Limits(messages=self.partial_messages, bytes=self.partial_bytes, age_s=self.partial_age_s,
                      done=self.done_messages)


def nack_window(bitmap: bytes, cap: int) -> tuple[int, bytes]:
    """A nack's missing-fragment bitmap cut to at most ``cap`` bytes (one frame's payload):
    (the fragment its first bit names, the bytes). A bitmap that fits is sent whole (first
    bit: fragment 0, as the emulator's receivers send it); a longer one from the byte
    holding the first missing fragment, so the sender pages through a huge message, one
    nack per probe, instead of one probe returning an 8 KiB bitmap."""
    if len(bitmap) <= cap:
        return 0, bitmap
    raw = np.frombuffer(bitmap, np.uint8)
    first = np.flatnonzero(raw)
    b0 = int(first[0]) if len(first) else 0
    return 8 * b0, bytes(raw[b0 : b0 + cap])


def nack_whole(payload: bytes, base: int) -> bytes:
    """The bitmap of a whole message from a nack whose first bit names fragment ``base``
    (``nack_window``'s inverse; an empty bitmap still names every fragment)."""
    if base == 0 or not payload:
        return bytes(payload)
    bits = np.unpackbits(np.frombuffer(payload, np.uint8), bitorder="little")
    return np.packbits(np.concatenate([np.zeros(base, np.uint8), bits]), bitorder="little").tobytes()


class _Missing(list):
    """The missing fragments of an incomplete message, listed from reassembly when first
    iterated: a probe the protocol does not answer costs no listing."""

    def __init__(self, listing):
        super().__init__()
        self._listing = listing

    def __iter__(self):
        if self._listing is not None:
            self.extend(self._listing())
            self._listing = None
        return super().__iter__()


@dataclass
class _Outgoing:
    """One of the device's own messages that asked for acknowledgements: its frames (for
    resends) and its slot in the protocol's sender table."""

    headers: np.ndarray
    payload: np.ndarray | None
    slot: int
    due: int = -1   # ps, the timer of the protocol's latest ARM (-1: none)


class Device:
    """The NIC of ``board`` on ``sock``; ``run`` serves until stopped."""

    def __init__(self, board: M.Board, sock: RawSocket | None, *, protocol: P.ProtocolConfig | None = None,
                 wrong_reduce_op: int | None = None, verbose: bool = False, out=sys.stdout,
                 limits: ServeLimits = ServeLimits(), clock=None):
        self.board, self.sock = board, sock
        self.K = board.node
        self.mtu = board.mtu
        self.wrong_reduce_op = wrong_reduce_op
        self.verbose, self.out = verbose, out
        self.limits = limits
        self.reasm = Reassembler(limits.reassembly())
        # the compute engine's own contributions, handed in over the wire
        self.host = Reassembler(limits.reassembly())
        self.directory = Directory(board.boards)
        cfg = protocol or M.protocol_config(answer_memory=limits.done_messages)
        self.proto = P.BoardProtocol(self.K, board.boards, cfg, self.directory)
        self.outgoing: dict[int, _Outgoing] = {}
        self.timers: list = []  # (due ps, msg_id)
        self.done_msgs: dict[tuple, tuple] = {}  # (src, msg_id) -> (seq, frag_cnt, sender) of completed messages
        # (src, msg_id) -> Ethernet source of its first fragment, for incomplete messages: the
        # sender a probe about it must come from (oldest first, at most partial_messages)
        self.senders: dict[tuple, bytes] = {}
        # bytes each board has sent here less the bytes of probe answers sent to it: an answer
        # never costs more than this, so a probe flood cannot make the board amplify
        self.credit = np.zeros(board.boards, np.int64)
        self.waiting_since: dict[tuple, tuple] = {}  # reduction key -> (monotonic s, bytes held), oldest first
        self.reduction_bytes = 0
        self.msg_id = 0
        self.seq = 0
        self.count = Counter()
        self.malformed = Counter()
        self.rejected = Counter()   # well-formed frames the device could not act on, by reason
        self.delivered = Counter()
        self.errors: list[str] = []
        self.t0 = time.monotonic()
        # the protocol's time: integer ps since the device started (``clock`` replaces it in tests)
        self._now_ps = clock or self._monotonic_ps

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
                wait = min(wait, max(0.0, self.t0 + self.timers[0][0] / 1e12 - now))
            if end is not None:
                wait = min(wait, max(0.0, end - now))
            buf, offsets, _ = self.sock.recv(timeout=wait)
            if len(offsets) > 1:
                self.handle(buf, offsets)
            self._run_timers()
            self.reasm.expire()
            self.host.expire()
            self.expire_reductions()

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
        # the batch's frames have all arrived by now: the time the protocol sees them at (a
        # probe flood read in one batch is one instant, however long answering takes)
        now = self._now_ps()
        for i in np.flatnonzero(codes == 0).tolist():
            s = int(starts[i])
            pay = buf[s + FRAME_HEADER_LEN : s + FRAME_HEADER_LEN + int(h["pay_len"][i])]
            try:
                self.frame(h[i], raw[i], pay, buf[s : s + FRAME_HEADER_LEN + int(h["pay_len"][i])], now)
            except Exception as exc:  # noqa: BLE001 - one frame never stops the board
                self.reject(f"error_{type(exc).__name__}", f"frame from node {int(h['src_node'][i])} "
                            f"msg {int(h['msg_id'][i])}: {type(exc).__name__}: {exc}")

    def reject(self, reason: str, text: str) -> None:
        """Count a frame the device cannot act on, log it (-v) and go on."""
        self.rejected[reason] += 1
        self.log(f"rejected ({reason}): {text}")

    def frame(self, hdr, raw, payload, frame, now: int | None = None) -> None:
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
        # one interface is all of K's ports: a copy heard from anyone but K's upstream
        # board in the tree is another board's copy, not one for K to forward
        copy = from_board is None or from_board == role.upstream
        deliver = False
        for a in self.proto.frame_arrived(role.row, int(hdr["ttl"]), copy=copy):
            if a[0] == P.FORWARD:
                self._forward(a[2], frame)
            elif a[0] == P.TTL_EXPIRED:
                self.count["ttl_expired"] += 1
            else:
                deliver = True
        if not deliver:
            if not role.forwards:
                self.count["not_for_us"] += 1
            return
        self.credit[src] += len(frame)
        mac = bytes(raw[6:12])
        if op in REPLY_OPS and int(hdr["frag_cnt"]) == 1:
            self._control(hdr, payload, mac, self._now_ps() if now is None else now)
            return
        key = (src, int(hdr["msg_id"]))
        if key not in self.senders and key not in self.done_msgs:
            self.senders[key] = mac
        synth = bool(int(hdr["flags"]) & Flags.SYNTH)
        try:
            msg = self.reasm.add(hdr, None if synth else payload)
        except FrameError as exc:
            self.malformed["reassembly"] += 1
            self.log(f"reassembly: {exc}")
            msg = None
        sender = self.senders.pop(key, None) if msg is not None else None
        # reassembly drops the oldest first: so do the senders of what it no longer holds
        while len(self.senders) > self.reasm.incomplete:
            del self.senders[next(iter(self.senders))]
        if msg is not None:
            self._message(msg, sender)

    # ---- forwarding ------------------------------------------------------------------------

    def _forward(self, ttl: int, frame) -> None:
        """One copy back out (one interface reaches every child), ``ttl`` and K's source MAC."""
        out = np.array(frame, dtype=np.uint8)  # a copy: Ethernet + header + payload
        out[6:12] = np.frombuffer(MAC_PREFIX + self.K.to_bytes(2, "big"), np.uint8)
        out[FRAME_OFFSETS["ttl"]] = ttl
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
            slot = self.proto.track(mid, int(h[0]["seq"]), len(h), sorted(waiting))
            o = self.outgoing[mid] = _Outgoing(h, pay, slot)
            # the socket has taken the last fragment: it has left, the timer starts
            self._act(mid, o, self.proto.left(slot, self._now_ps()))
        return mid

    def _answer(self, actions) -> int:
        """Send the protocol's acks and nacks (answers about another board's message); returns
        the bytes sent."""
        sent = 0
        for a in actions:
            if a[0] == P.ACK:
                h, pay = M.message(M.control_meta(self.K, a[1], Op.ack, msg_id=a[2], seq=a[3]), b"", self.mtu)
                self.count["acks_sent"] += 1
            elif a[0] == P.NACK:
                h, pay = M.message(M.control_meta(self.K, a[1], Op.nack, msg_id=a[2], seq=a[3]), a[4], self.mtu)
                self.count["nacks_sent"] += 1
            elif a[0] == P.LIMITED:
                self.count["probes_limited"] += 1
                continue
            else:
                continue
            buf, offsets = encode_frames(h, pay)
            self._send(buf, offsets)
            sent += len(buf)
        return sent

    # ---- delivery ----------------------------------------------------------------------

    def _message(self, msg, sender: bytes | None = None) -> None:
        hdr = msg.header
        op = int(hdr["op"])
        src = msg.src_node
        self.done_msgs[(src, msg.msg_id)] = (int(hdr["seq"]), msg.frag_cnt, sender)
        while len(self.done_msgs) > self.limits.done_messages:
            del self.done_msgs[next(iter(self.done_msgs))]
        self.delivered[_op_name(op)] += 1
        self.log(f"delivered {_op_name(op)} n{src}#{msg.msg_id} ({msg.msg_len} bytes, kv {int(hdr['kv_id'])})")
        self._answer(self.proto.message_complete(src, msg.msg_id, int(hdr["seq"]),
                                                 bool(int(hdr["flags"]) & Flags.ACK_REQ)))
        for _, kv, state, err in self.proto.delivered(op, int(hdr["kv_id"]), msg.msg_len, self._now_ps()):
            if err:
                self.error(f"directory: {err}")
            self.log(f"directory: kv {kv} {state.name}")
        if op == Op.partial_state and int(hdr["collective"]) in M.REDUCING:
            self._contribution(src, hdr, msg.data, msg.msg_len)

    def _monotonic_ps(self) -> int:
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
        eff = op if self.wrong_reduce_op is None else self.wrong_reduce_op
        heads = self.board.heads
        if key not in self.proto.reductions and not self._reduction_room(key, msg_len if data is not None else 0):
            return
        acts = self.proto.contribute(key, src, data, msg_len, expected={self.K, *self.board.children()},
                                     combine=lambda acc, x: M.combine(eff, dtype, heads, acc, x),
                                     ack_req=bool(int(hdr["flags"]) & Flags.ACK_REQ), limit=self.limits.reductions)
        self._reduction_held(key)
        for a in acts:
            if a[0] == P.EVICTED:
                self._reduction_dropped(a[1], "reductions_evicted", f"{self.limits.reductions} waiting")
            elif a[0] == P.REDUCE_ERROR:
                self.error(f"kv {key[2]}: {a[1]} (reduction tree to {self.board.root})")
            elif a[0] == P.WAITING:
                self.log(f"reduction kv {key[2]}: {a[2]}/{a[3]} contributions")
            elif a[0] == P.REDUCED:
                self._reduced(key, a[2], a[3], a[4], eff)

    def _reduction_room(self, key, nbytes: int) -> bool:
        """Make room for a new reduction holding ``nbytes``: the oldest waiting ones go while
        the bytes bound would be exceeded. False if it alone exceeds the bound (dropped)."""
        lim = self.limits.reduction_bytes
        need = nbytes + REDUCTION_COST
        if need > lim:
            self.count["reductions_too_large"] += 1
            self.log(f"reduction kv {key[2]}: {nbytes:,} bytes exceed the bound of {lim:,}: not held")
            return False
        while self.waiting_since and self.reduction_bytes + need > lim:
            self._reduction_dropped(next(iter(self.waiting_since)), "reductions_evicted", f"{lim:,} bytes held")
        return True

    def _reduction_held(self, key) -> None:
        """Account for reduction ``key`` as the protocol's table now holds it (or no longer does)."""
        red = self.proto.reductions.get(key)
        born, before = self.waiting_since.pop(key, (time.monotonic(), 0))
        self.reduction_bytes -= before
        if red is not None:
            held = REDUCTION_COST + (len(red.acc) if red.acc is not None else 0)
            self.waiting_since[key] = (born, held)
            self.reduction_bytes += held

    def _reduction_dropped(self, key, why: str, text: str) -> None:
        self.proto.reductions.pop(key, None)
        self._reduction_held(key)
        self.count[why] += 1
        self.log(f"reduction kv {key[2]} dropped ({why}): {text}")

    def expire_reductions(self, now: float | None = None) -> int:
        """Drop reductions waiting longer than ``limits.reduction_age_s``; returns how many."""
        now = time.monotonic() if now is None else now
        n = 0
        while self.waiting_since:
            key, (born, _) = next(iter(self.waiting_since.items()))  # oldest first
            if now - born <= self.limits.reduction_age_s:
                break
            self._reduction_dropped(key, "reductions_expired", f"waited over {self.limits.reduction_age_s:g} s")
            n += 1
        return n

    def _reduced(self, key, acc: bytes | None, ack_req: bool, msg_len: int, op: int) -> None:
        meta = M.result_meta(self.board, key, op=op, ack_req=ack_req)
        self.count["reductions"] += 1
        if not meta:
            self.delivered["reduce_result"] += 1
            self.log(f"reduction kv {key[2]} complete at the root")
            return
        if acc is None:
            meta["msg_len"] = msg_len
        if meta["op"] == Op.partial_state:
            waiting = {self.board.parent}
        else:
            waiting = set(range(self.board.boards)) - {self.K}
        mid = self.originate(meta, acc, waiting=waiting)
        self.log(f"reduction kv {key[2]} complete: {Op(meta['op']).name} n{self.K}#{mid} to "
                 f"{sorted(waiting)}")

    @property
    def reductions(self) -> dict:
        """Reductions waiting for contributions (the protocol's table)."""
        return self.proto.reductions

    # ---- reliability -------------------------------------------------------------------------

    def _control(self, hdr, payload, mac: bytes, now: int) -> None:
        """An ack, nack or probe addressed to this board (header-only; a nack carries its bitmap)."""
        src, op = int(hdr["src_node"]), int(hdr["op"])
        mid, seq = int(hdr["msg_id"]), int(hdr["seq"])
        if op == Op.ack and int(hdr["flags"]) & Flags.ACK_REQ:
            self._probe(src, mid, seq, mac, now)
            return
        o = self.outgoing.get(mid)
        if op == Op.ack:
            self.count["acks_received"] += 1
            if o is not None:
                # the wire format does not say whether an ack answers a probe: an ack of a
                # probed message is taken as an answer (Karn's rule, no RTT sample)
                answer = bool(self.proto.OUT[o.slot, P.OUT_RETRIES])
                self._act(mid, o, self.proto.ack_arrived(o.slot, src, now, answer=answer))
            return
        self.count["nacks_received"] += 1
        if o is not None:
            bitmap = b"" if int(hdr["flags"]) & Flags.SYNTH else bytes(payload)
            base = (seq - int(o.headers[0]["seq"])) & 0xFFFFFFFF  # the fragment its first bit names
            if base >= len(o.headers):
                self.reject("nack_outside_message", f"nack from node {src} of n{self.K}#{mid} starts at fragment "
                            f"{base}, the message has {len(o.headers)}")
                return
            self._act(mid, o, self.proto.nack_arrived(o.slot, src, nack_whole(bitmap, base), now))

    def _probe(self, src: int, mid: int, seq: int, mac: bytes, now: int) -> None:
        """A probe: ``src`` asks whether its message ``mid`` arrived whole."""
        done = self.done_msgs.get((src, mid))
        sender = done[2] if done is not None else self.senders.get((src, mid))
        if sender is not None and mac != sender:
            # another station asking about src's message: answering would aim nacks at src
            self.count["probes_not_sender"] += 1
            self.log(f"probe of n{src}#{mid} from {mac.hex(':')}, its fragments came from {sender.hex(':')}: "
                     "not answered")
            return
        if done is not None:
            acts = self.proto.probe_arrived(src, mid, done[0], now, complete=True)
        else:
            # what is missing is listed only if the protocol answers (at most once per gap)
            acts = self.proto.probe_arrived(src, mid, seq, now, complete=False,
                                            frag_cnt=self.reasm.frag_cnt_of(src, mid),
                                            missing=_Missing(lambda: self.reasm.pending_of(src, mid).missing))
        if acts[0][0] == P.LIMITED:
            self.count["probes_limited"] += 1
            self.log(f"probe of n{src}#{mid}: answered less than rto_min ago, not again")
            return
        if acts[0][0] == P.NACK and acts[0][4]:
            # one frame at most, and no more bitmap bytes than src has paid for (the probe
            # itself pays for a header-only answer)
            cap = min(max_payload(self.mtu), int(self.credit[src]) - FRAME_HEADER_LEN)
            if cap < 1:
                self.count["probes_over_budget"] += 1
                self.log(f"probe of n{src}#{mid}: node {src} has not sent enough here to pay for a nack")
                return
            _, to, _, first, bitmap = acts[0]
            base, bitmap = nack_window(bitmap, cap)
            acts = [(P.NACK, to, mid, (first + base) & 0xFFFFFFFF, bitmap)]
        self.count["probes_answered"] += 1
        self.credit[src] -= self._answer(acts)

    def _act(self, mid: int, o: _Outgoing, actions) -> None:
        """Carry out the protocol's actions about the device's own message ``mid``."""
        resent = False
        for a in actions:
            kind = a[0]
            if kind == P.ARM:
                o.due = a[2]
                if o.due >= 0:
                    heapq.heappush(self.timers, (o.due, mid))
                elif not self.proto.waiting(o.slot):
                    self.proto.release(o.slot)
                    del self.outgoing[mid]
            elif kind == P.RESEND:
                self._resend(o, a[2], a[3])
                resent = True
            elif kind == P.PROBE:
                seq = int(o.headers[0]["seq"])
                h, pay = M.message(M.control_meta(self.K, a[2], Op.ack, msg_id=mid, seq=seq, probe=True), b"",
                                   self.mtu)
                buf, offsets = encode_frames(h, pay)
                self._send(buf, offsets)
                self.count["probes_sent"] += 1
            elif kind == P.FAILED:
                self.error(f"message n{self.K}#{mid}: no acknowledgement from {sorted(a[2])} after {a[3]} probes")
                self.proto.release(o.slot)
                del self.outgoing[mid]
        if resent and mid in self.outgoing:
            # the socket has taken the resent fragments: they have left, the timer restarts
            self._act(mid, o, self.proto.resend_left(o.slot, self._now_ps()))

    def _resend(self, o: _Outgoing, to: int, frags) -> None:
        idx = [int(i) for i in frags]
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

    def _run_timers(self) -> None:
        now = self._now_ps()
        while self.timers and self.timers[0][0] <= now:
            due, mid = heapq.heappop(self.timers)
            o = self.outgoing.get(mid)
            if o is None or o.due != due:
                continue  # stopped or restarted since
            self._act(mid, o, self.proto.timer_due(o.slot, now))

    # ---- summary -----------------------------------------------------------------------------

    def summary_dict(self) -> dict:
        """What ``summary`` prints, as data (``emu hw serve --json``)."""
        return {"node": self.K, "topology": self.board.topology, "counts": dict(self.count),
                "delivered": dict(sorted(self.delivered.items())), "reductions_waiting": len(self.reductions),
                "malformed": dict(self.malformed),
                "replicas": dict(sorted(Counter(State(s).name for (n, _), (s, _) in self.directory.replicas.items()
                                                if n == self.K).items())),
                "incomplete_messages": self.reasm.incomplete, "partial_bytes_held": self.reasm.held_bytes,
                "reduction_bytes_held": self.reduction_bytes, "errors": list(self.errors)}

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
        if r.expired or r.evicted or r.too_large or any(c[k] for k in _REDUCTION_BOUNDS):
            lines.append(f"bounded    {r.expired:,} messages expired, {r.evicted:,} evicted ({r.evicted_bytes:,} bytes), "
                         f"{r.too_large:,} too large; reductions {c['reductions_expired']:,} expired, "
                         f"{c['reductions_evicted']:,} evicted, {c['reductions_too_large']:,} too large")
        if any(c[k] for k in _PROBES_UNANSWERED):
            lines.append(f"probes     {c['probes_answered']:,} answered, {c['probes_limited']:,} probes not answered "
                         f"again within the RTO, {c['probes_not_sender']:,} probes not from the message's sender, "
                         f"{c['probes_over_budget']:,} probes not paid for (answers never exceed what the board sent)")
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


_REDUCTION_BOUNDS = ("reductions_expired", "reductions_evicted", "reductions_too_large")
_PROBES_UNANSWERED = ("probes_limited", "probes_not_sender", "probes_over_budget")


def _op_name(op: int) -> str:
    return Op(op).name if op in Op._value2member_map_ else f"op{op}"


__all__ = ["Device", "ServeLimits"]


class _Discard:
    """A socket that drops what it is given: the warm-up's."""

    iface, mtu = "warm-up", 65535

    def send(self, buf, offsets, start=0, stop=None):
        return (len(offsets) - 1 if stop is None else stop) - start


def warm_up(board: M.Board, protocol: P.ProtocolConfig | None = None) -> int:
    """Run every `emu hw check` scenario's frames through a throwaway device of ``board``, so
    that the code a first frame needs (imports, the protocol's compiled rules, the reduction
    arithmetic) is loaded before serve says ready; returns the frames it handled."""
    from . import check as C

    frames = 0
    for name in C.SCENARIOS:
        try:
            scenario = C.build(name, board)
        except Exception:  # a scenario this board cannot take (e.g. no children to reduce from)
            continue
        dev = Device(board, _Discard(), protocol=protocol, out=open(os.devnull, "w"))
        for s in scenario.sends:
            buf, offsets = encode_frames(s.headers, s.payload, eth_src=s.eth_src)
            dev.handle(buf, offsets)
            frames += len(offsets) - 1
        dev.out.close()
    return frames
