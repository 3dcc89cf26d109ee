"""Splitting messages into fragment headers under an MTU, and putting them back together.

A message of ``msg_len`` bytes travels as ``frag_cnt = max(1, ceil(msg_len / (mtu - 48)))``
frames; fragment i carries bytes ``[offset, offset + pay_len)`` with
``offset = i * (mtu - 48)``. Every fragment repeats the message's meta fields,
``msg_len`` and ``frag_cnt``, so any one of them describes the whole message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .enums import Flags
from .errors import EncodeError, FrameError
from .segments import as_uint8

MAX_PAY_LEN = 0xFFFF
MAX_FRAGS = 0xFFFF
MAX_MSG_LEN = 0xFFFFFFFF


def _batch():
    """The batch codec, loaded on first use: it imports scapy, while ``emu.codec`` imports
    this module eagerly (so that ``emu.codec.fragment`` stays the function, not this module)."""
    from . import batch

    return batch


def max_payload(mtu: int) -> int:
    """Payload bytes per frame under ``mtu`` (the maximum Ethernet payload, e.g. 1500)."""
    hdr = _batch().HEADER_LEN
    if not hdr < mtu <= hdr + MAX_PAY_LEN:
        raise EncodeError(f"mtu: {mtu}, must be in {hdr + 1}..{hdr + MAX_PAY_LEN}")
    return mtu - hdr


def fragment(template, msg_len=None, *, data=None, mtu: int = 1500):
    """Fragment one or many messages into header rows: ``(headers, payload)``.

    ``template``: the message's meta fields, as a dict (one message) or
    HEADER_DTYPE rows (one per message). Lengths come from ``msg_len`` (int or
    one per message), else ``len(data)`` for a single message, else the
    template rows' ``msg_len``.

    Real bytes: ``data`` holds the messages back to back; ``payload`` is those
    bytes as uint8, already in frame order. Timing mode (``data`` None): rows
    carry the SYNTH flag and ``payload`` is None. ``seq`` of fragment i is the
    template's ``seq`` + i.
    """
    b = _batch()
    rows = b.new_headers(1, **template) if isinstance(template, dict) else b.as_headers(template)
    m = len(rows)
    if data is not None:
        data = as_uint8(data)
    if msg_len is not None:
        lens = np.broadcast_to(np.asarray(msg_len, dtype=np.int64), (m,))
    elif data is not None and m == 1:
        lens = np.array([len(data)], dtype=np.int64)
    else:
        lens = rows["msg_len"].astype(np.int64)
    if np.any(lens < 0) or np.any(lens > MAX_MSG_LEN):
        i = int(np.flatnonzero((lens < 0) | (lens > MAX_MSG_LEN))[0])
        raise EncodeError(f"message {i}: msg_len: {int(lens[i])} outside 0..{MAX_MSG_LEN}")
    if data is not None and len(data) != int(lens.sum()):
        raise EncodeError(f"data: {len(data)} bytes given, the messages total {int(lens.sum())}")
    per = max_payload(mtu)
    cnt = np.maximum(1, -(-lens // per))
    if np.any(cnt > MAX_FRAGS):
        i = int(np.flatnonzero(cnt > MAX_FRAGS)[0])
        raise EncodeError(f"message {i}: msg_len: {int(lens[i])} bytes need {int(cnt[i])} fragments "
                          f"at mtu {mtu}, at most {MAX_FRAGS}")
    out = np.repeat(rows, cnt)
    first = np.repeat(np.cumsum(cnt) - cnt, cnt)
    idx = np.arange(len(out), dtype=np.int64) - first
    total = np.repeat(lens, cnt)
    off = idx * per
    out["frag_idx"] = idx
    out["frag_cnt"] = np.repeat(cnt, cnt)
    out["offset"] = off
    out["msg_len"] = total
    out["pay_len"] = np.minimum(per, total - off)
    out["seq"] = (out["seq"].astype(np.int64) + idx) & 0xFFFFFFFF
    if data is None:
        out["flags"] |= np.uint8(Flags.SYNTH)
    else:
        out["flags"] &= ~np.uint8(Flags.SYNTH)
    return out, data


# ---------------------------------------------------------------- reassembly


@dataclass(frozen=True)
class Message:
    """A completed message: its first fragment's header and its bytes (None in timing mode)."""

    src_node: int
    msg_id: int
    msg_len: int
    frag_cnt: int
    header: np.void  # HEADER_DTYPE row of fragment 0 (meta fields of the message)
    data: bytes | None
    duplicates: int  # duplicate fragments seen while it was incomplete
    out_of_order: int  # fragments that arrived after one with a higher frag_idx


@dataclass(frozen=True)
class Pending:
    """A message still missing fragments."""

    src_node: int
    msg_id: int
    frag_cnt: int
    msg_len: int
    missing: list[int]


@dataclass
class _Partial:
    frag_cnt: int
    msg_len: int
    parts: dict = field(default_factory=dict)  # frag_idx -> (offset, pay_len, bytes | None)
    header: np.void | None = None
    highest: int = -1
    duplicates: int = 0
    out_of_order: int = 0
    born: float = 0.0     # clock at the first fragment
    held: int = 0         # bytes this message holds (see FRAGMENT_COST)


# What a held message and each of its fragments cost besides the payload bytes (the
# message's entry, header and index; a fragment's index entry, tuple, integers and bytes
# object), so that the byte bound is one on memory and timing-mode fragments (no payload)
# count too. Measured with tracemalloc (tests/test_hw_memory.py) on CPython 3.11: about
# 830-950 bytes a message, plus the slack of dict tables that held evicted messages, and
# 150-320 a fragment.
MESSAGE_COST = 1536
FRAGMENT_COST = 384


@dataclass(frozen=True)
class Limits:
    """Bounds on what a Reassembler holds; None: unbounded (the emulator's own NICs, whose
    senders are the model itself). A receiver facing a wire (``emu hw serve``) sets them."""

    messages: int | None = None   # incomplete messages held at once; the oldest is evicted
    bytes: int | None = None      # bytes they hold (payload + FRAGMENT_COST per fragment + MESSAGE_COST)
    age_s: float | None = None    # an incomplete message older than this expires
    done: int | None = None       # completed message keys remembered to count late duplicates


class Reassembler:
    """Collects fragments per (src_node, msg_id) and returns each message once it is whole.

    Detects duplicate fragments (counted, must repeat the first copy), fragments
    out of order (counted), missing fragments (``pending()``) and fragments whose
    ``frag_cnt``/``msg_len`` or byte ranges disagree (FrameError). Keys of
    completed messages are kept so late duplicates are counted, not restarted.
    """

    def __init__(self, limits: Limits | None = None, clock=time.monotonic) -> None:
        self.limits = limits or Limits()
        self.clock = clock
        self._partial: dict[tuple[int, int], _Partial] = {}  # oldest first (insertion order)
        self._done: dict[tuple[int, int], None] = {}        # an ordered set, oldest first
        self.duplicates = 0
        self.out_of_order = 0
        self.completed = 0
        self.held_bytes = 0
        self.expired = 0        # incomplete messages dropped for age
        self.evicted = 0        # incomplete messages dropped to make room (count or bytes)
        self.evicted_bytes = 0  # bytes those two freed
        self.too_large = 0      # messages that alone exceed the byte bound

    # ---- bounds -------------------------------------------------------------------------

    def _drop(self, key) -> None:
        p = self._partial.pop(key)
        self.held_bytes -= p.held
        self.evicted_bytes += p.held

    def expire(self, now: float | None = None) -> int:
        """Drop incomplete messages older than ``limits.age_s``; returns how many."""
        age = self.limits.age_s
        if age is None or not self._partial:
            return 0
        now = self.clock() if now is None else now
        n = 0
        for key in list(self._partial):  # oldest first: stop at the first young one
            if now - self._partial[key].born <= age:
                break
            self._drop(key)
            n += 1
        self.expired += n
        return n

    def _make_room(self, keep, need_bytes: int, new_message: bool) -> bool:
        """Evict the oldest other messages until one more message / ``need_bytes`` fit."""
        lim = self.limits
        while self._partial:
            over_count = new_message and lim.messages is not None and len(self._partial) >= lim.messages
            over_bytes = lim.bytes is not None and self.held_bytes + need_bytes > lim.bytes
            if not (over_count or over_bytes):
                return True
            oldest = next(iter(self._partial))
            if oldest == keep:
                if len(self._partial) == 1:
                    break
                oldest = next(k for k in self._partial if k != keep)
            self._drop(oldest)
            self.evicted += 1
        return lim.bytes is None or self.held_bytes + need_bytes <= lim.bytes

    def _remember_done(self, key) -> None:
        self._done[key] = None
        cap = self.limits.done
        while cap is not None and len(self._done) > cap:
            del self._done[next(iter(self._done))]

    def add(self, header, payload=None) -> Message | None:
        """Add one fragment (a header row or mapping; payload bytes unless SYNTH)."""
        src, msg = int(header["src_node"]), int(header["msg_id"])
        idx, cnt = int(header["frag_idx"]), int(header["frag_cnt"])
        off, n, total = int(header["offset"]), int(header["pay_len"]), int(header["msg_len"])
        name = f"message n{src}#{msg} fragment {idx}"
        if cnt == 0 or idx >= cnt:
            raise FrameError(f"{name}: frag_idx: {idx} not below frag_cnt {cnt}", field="frag_idx", index=idx)
        if off + n > total:
            raise FrameError(f"{name}: offset: {off} + pay_len {n} exceeds msg_len {total}", field="offset", index=idx)
        synth = bool(int(header["flags"]) & Flags.SYNTH) or payload is None
        data = None if synth else bytes(payload)
        if data is not None and len(data) != n:
            raise FrameError(f"{name}: pay_len: {n} but {len(data)} payload bytes given", field="pay_len", index=idx)
        key = (src, msg)
        if key in self._done:
            self.duplicates += 1
            return None
        p = self._partial.get(key)
        lim = self.limits
        if p is None:
            if lim.age_s is not None:
                self.expire()
            if lim.messages is not None and lim.messages < 1 or not self._make_room(key, MESSAGE_COST, True):
                self.too_large += 1
                return None
            p = self._partial[key] = _Partial(cnt, total, born=self.clock(), held=MESSAGE_COST)
            self.held_bytes += MESSAGE_COST
        for fname, got, want in (("frag_cnt", cnt, p.frag_cnt), ("msg_len", total, p.msg_len)):
            if got != want:
                raise FrameError(f"{name}: {fname}: {got} disagrees with {want} in earlier fragments",
                                 field=fname, index=idx)
        if idx in p.parts:
            first_off, first_n, first_data = p.parts[idx]
            if (first_off, first_n) != (off, n) or None not in (data, first_data) and data != first_data:
                raise FrameError(f"{name}: duplicate differs from the first copy", field="frag_idx", index=idx)
            p.duplicates += 1
            self.duplicates += 1
            return None
        if idx < p.highest:
            p.out_of_order += 1
            self.out_of_order += 1
        p.highest = max(p.highest, idx)
        cost = FRAGMENT_COST + (len(data) if data is not None else 0)
        if lim.bytes is not None and not self._make_room(key, cost, new_message=False):
            # this message alone would exceed the bound: it can never complete here
            self.held_bytes -= p.held
            del self._partial[key]
            self._remember_done(key)  # its later fragments are ignored, not started again
            self.too_large += 1
            return None
        p.parts[idx] = (off, n, data)
        p.held += cost
        self.held_bytes += cost
        if idx == 0:
            dtype = _batch().HEADER_DTYPE
            p.header = np.array([tuple(int(header[f]) for f in dtype.names)], dtype=dtype)[0]
        if len(p.parts) < cnt:
            return None
        return self._finish(key, p)

    def _finish(self, key, p: _Partial) -> Message:
        pos = 0
        chunks = []
        for i in range(p.frag_cnt):
            off, n, data = p.parts[i]
            if off != pos:
                self._drop(key)  # whole but inconsistent: it can never complete
                raise FrameError(f"message n{key[0]}#{key[1]}: offset: fragment {i} starts at byte {off}, "
                                 f"expected {pos}", field="offset", index=i)
            pos += n
            chunks.append(data)
        if pos != p.msg_len:
            self._drop(key)
            raise FrameError(f"message n{key[0]}#{key[1]}: msg_len: fragments carry {pos} bytes, "
                             f"msg_len is {p.msg_len}", field="msg_len", index=p.frag_cnt - 1)
        del self._partial[key]
        self.held_bytes -= p.held
        self._remember_done(key)
        self.completed += 1
        data = None if any(c is None for c in chunks) else b"".join(chunks)
        return Message(key[0], key[1], p.msg_len, p.frag_cnt, p.header, data, p.duplicates, p.out_of_order)

    def add_frames(self, frames) -> list[Message]:
        """Add every frame of a decoded batch (``batch.Frames``); return the messages completed."""
        out = []
        h = frames.headers
        for i, pay in enumerate(frames.payloads()):
            cut = int(frames.payload_size[i]) < int(h["pay_len"][i])  # snaplen: bytes not all here
            done = self.add(h[i], None if cut else pay)
            if done is not None:
                out.append(done)
        return out

    @property
    def incomplete(self) -> int:
        """Incomplete messages held."""
        return len(self._partial)

    def frag_cnt_of(self, src_node: int, msg_id: int) -> int:
        """Fragments of the incomplete message ``(src_node, msg_id)``, 0 if none is held."""
        p = self._partial.get((src_node, msg_id))
        return p.frag_cnt if p is not None else 0

    def pending_of(self, src_node: int, msg_id: int) -> Pending | None:
        """The one incomplete message ``(src_node, msg_id)``, or None (a dict lookup: a probe
        must not cost a scan of everything held)."""
        p = self._partial.get((src_node, msg_id))
        if p is None:
            return None
        have = np.fromiter(p.parts.keys(), np.int64, len(p.parts))
        missing = np.setdiff1d(np.arange(p.frag_cnt, dtype=np.int64), have, assume_unique=True)
        return Pending(src_node, msg_id, p.frag_cnt, p.msg_len, missing.tolist())

    def pending(self) -> list[Pending]:
        """Messages still incomplete, with the fragment indices not yet received."""
        return [
            Pending(src, msg, p.frag_cnt, p.msg_len, sorted(set(range(p.frag_cnt)) - p.parts.keys()))
            for (src, msg), p in sorted(self._partial.items())
        ]
