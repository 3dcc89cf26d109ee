"""Batch codec: numpy structured header arrays <-> flat frame buffers.

``HEADER_DTYPE`` is derived from the scapy layer, big-endian and packed, so a
header array *is* the wire bytes of its headers. A batch of frames is one flat
uint8 buffer plus ``offsets`` (n + 1 entries: frame i is
``buf[offsets[i]:offsets[i + 1]]``), each frame being Ethernet (14 bytes), MCF
header (48) and payload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .enums import ENUM_FIELDS, ETHERTYPE, VERSION, Flags
from .errors import EncodeError, FrameError
from .layer import FRAME_HEADER_LEN, HEADER_LEN, MCF, field_layout
from .mac import ETH_LEN, GROUP_MAC_PREFIX, MAC_PREFIX
from .segments import as_uint8, copy_segments, gather_rows, scatter_rows

HEADER_DTYPE = np.dtype([(name, f">u{size}") for name, _, size in field_layout()])
assert HEADER_DTYPE.itemsize == HEADER_LEN == 48

_KNOWN_FLAGS = int(sum(Flags))
# the scapy layer's defaults (None = computed there, 0 here)
_DEFAULTS = {f.name: int(f.default) for f in MCF.fields_desc if f.default is not None}

# Per-frame error codes, in the order checks apply: a frame reports the first that fails.
REASONS = (
    "ok",
    "truncated",
    "ethertype",
    "version",
    "flags",
    *ENUM_FIELDS,
    "caplen",
    "pay_len",
    "frag_cnt",
    "frag_idx",
    "offset",
    "dst_set",
)
_CODE = {name: i for i, name in enumerate(REASONS)}
# byte value -> "is a member", and the (lo, hi) bounds of enums without gaps (all of them today):
# two compares per row beat a table lookup, which beats a set test
_ENUM_OK = {f: np.isin(np.arange(256), [int(m) for m in e]) for f, e in ENUM_FIELDS.items()}
_ENUM_SPAN = {f: (int(ok.argmax()), int(255 - ok[::-1].argmax())) for f, ok in _ENUM_OK.items()
              if ok.sum() == 256 - ok.argmax() - ok[::-1].argmax()}


def _not_member(h: np.ndarray, field: str) -> np.ndarray:
    v = h[field]
    if field in _ENUM_SPAN:
        lo, hi = _ENUM_SPAN[field]
        return (v < lo) | (v > hi)
    return ~_ENUM_OK[field][v]


def new_headers(n: int, **fields) -> np.ndarray:
    """``n`` header rows with the scapy layer's defaults and ``fields`` broadcast in."""
    h = np.zeros(n, dtype=HEADER_DTYPE)
    for name, value in {**_DEFAULTS, **fields}.items():
        if name not in HEADER_DTYPE.names:
            raise TypeError(f"no header field {name!r}")
        h[name] = value
    return h


def as_headers(rows) -> np.ndarray:
    """``rows`` as a HEADER_DTYPE array, converting field by field (by name, not position)."""
    rows = np.asarray(rows)
    if rows.dtype == HEADER_DTYPE:
        return np.ascontiguousarray(rows.reshape(-1))
    missing = [n for n in HEADER_DTYPE.names if rows.dtype.names is None or n not in rows.dtype.names]
    if missing:
        raise TypeError(f"header rows lack fields {missing}")
    out = np.empty(rows.size, dtype=HEADER_DTYPE)
    for name in HEADER_DTYPE.names:
        out[name] = rows[name].reshape(-1)
    return out


def frame_wirelen(headers: np.ndarray) -> np.ndarray:
    """Bytes each frame occupies on the wire (Ethernet + MCF headers + pay_len)."""
    return headers["pay_len"].astype(np.int64) + FRAME_HEADER_LEN


def _header_checks(h: np.ndarray, length_checks=()) -> list:
    """(reason, bad-mask) pairs in REASONS order; ``length_checks`` slot in after the enums."""
    pay = h["pay_len"].astype(np.int64)
    return [
        ("version", h["version"] != VERSION),
        ("flags", (h["flags"] & ~np.uint8(_KNOWN_FLAGS)) != 0),
        *[(f, _not_member(h, f)) for f in ENUM_FIELDS],
        *length_checks,
        ("frag_cnt", h["frag_cnt"] == 0),
        ("frag_idx", h["frag_idx"] >= h["frag_cnt"]),
        ("offset", h["offset"].astype(np.int64) + pay > h["msg_len"].astype(np.int64)),
        ("dst_set", (h["route_id"] == 0) & (h["dst_set"] == 0)),
    ]


def header_errors(h: np.ndarray) -> np.ndarray:
    """Error code (index into REASONS) of each header row's first failed check, 0 if valid."""
    return _first_failure(len(h), _header_checks(h))


def _first_failure(n: int, checks) -> np.ndarray:
    codes = np.zeros(n, dtype=np.uint8)
    for name, bad in reversed(checks):  # earlier checks overwrite later ones
        if bad.any():  # valid batches skip the masked writes
            codes[bad] = _CODE[name]
    return codes


def describe(code: int, index: int, row=None, caplen: int | None = None, wirelen: int | None = None) -> str:
    """One line naming the frame, the field and what is wrong with it."""
    reason = REASONS[code]
    v = (lambda f: int(row[f])) if row is not None else None
    if reason == "truncated":
        text = f"{caplen} bytes, the Ethernet and MCF headers need {FRAME_HEADER_LEN}"
    elif reason == "ethertype":
        text = f"0x{v('ethertype'):04x}, expected 0x{ETHERTYPE:04x}"
    elif reason == "version":
        text = f"{v('version')}, expected {VERSION}"
    elif reason == "flags":
        text = f"unknown bits 0x{v('flags') & ~_KNOWN_FLAGS & 0xFF:02x}"
    elif reason in ENUM_FIELDS:
        text = f"unknown value {v(reason)}"
    elif reason == "caplen":
        text = f"{caplen} captured bytes exceed the {wirelen} bytes on the wire"
    elif reason == "pay_len":
        if wirelen is None:
            text = f"{v('pay_len')} but {caplen - FRAME_HEADER_LEN} payload bytes present"
        else:
            text = (f"{v('pay_len')} but the frame is {wirelen} bytes on the wire "
                    f"({wirelen - FRAME_HEADER_LEN} of payload)")
    elif reason == "frag_cnt":
        text = "0, must be at least 1"
    elif reason == "frag_idx":
        text = f"{v('frag_idx')} not below frag_cnt {v('frag_cnt')}"
    elif reason == "offset":
        text = f"offset {v('offset')} + pay_len {v('pay_len')} exceeds msg_len {v('msg_len')}"
    elif reason == "dst_set":
        text = "empty while route_id is 0: the frame has no destination"
    else:  # pragma: no cover
        text = "ok"
    return f"frame {index}: {reason}: {text}"


def _raise_first(codes: np.ndarray, rows, caplen=None, wirelen=None, ethertype=None):
    bad = np.flatnonzero(codes)
    if len(bad) == 0:
        return
    i = int(bad[0])
    row = None
    if rows is not None:
        row = {f: rows[f][i] for f in HEADER_DTYPE.names}
        if ethertype is not None:
            row["ethertype"] = ethertype[i]
    cl = None if caplen is None else int(caplen[i])
    wl = None if wirelen is None else int(wirelen[i])
    raise FrameError(describe(int(codes[i]), i, row, cl, wl), field=REASONS[codes[i]], index=i)


def check_headers(headers) -> np.ndarray:
    """Raise FrameError for the first invalid row; return the rows as HEADER_DTYPE."""
    h = as_headers(headers)
    _raise_first(header_errors(h), h)
    return h


# ---------------------------------------------------------------- encode

_MAC_TAIL = np.dtype(">u2")


def _log2_of_single_bit(x: np.ndarray) -> np.ndarray:
    """Bit index of one-bit values (garbage for others, which the caller masks out)."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        return np.bitwise_count(x - np.uint64(1)).astype(np.uint16)
    return (np.frexp(x.astype(np.float64))[1] - 1).clip(0).astype(np.uint16)  # exact for powers of two


def _eth_headers(h: np.ndarray, eth_src, eth: np.ndarray) -> None:
    """Fill ``eth`` (n, 14): MACs from the destination set / route and the sending board."""
    n = len(h)
    dst = h["dst_set"].astype(np.uint64)
    route = h["route_id"]
    single = (route == 0) & (dst != 0) & ((dst & (dst - np.uint64(1))) == 0)
    board = _log2_of_single_bit(dst)
    eth[:, 0] = np.where(single, MAC_PREFIX[0], GROUP_MAC_PREFIX[0])
    eth[:, 1:4] = np.frombuffer(MAC_PREFIX[1:], np.uint8)
    eth[:, 4:6] = np.where(single, board, route).astype(_MAC_TAIL).view(np.uint8).reshape(n, 2)
    eth[:, 6:10] = np.frombuffer(MAC_PREFIX, np.uint8)
    src = h["src_node"] if eth_src is None else np.broadcast_to(np.asarray(eth_src), (n,))
    eth[:, 10:12] = np.asarray(src).astype(_MAC_TAIL).view(np.uint8).reshape(n, 2)
    eth[:, 12:14] = (ETHERTYPE >> 8, ETHERTYPE & 0xFF)


def encode_frames(headers, payload=None, *, snaplen: int | None = None, eth_src=None):
    """Encode header rows and their payloads into ``(buf, offsets)``.

    ``payload``: the frames' payloads back to back (``sum(pay_len)`` bytes, any
    bytes-like or uint8 array), or None for timing-mode frames, which must carry
    the SYNTH flag and get a zero-filled payload area. ``snaplen`` cuts every
    frame to at most that many bytes (62 = headers only); the wire length stays
    ``frame_wirelen(headers)``. ``eth_src``: transmitting board per frame for the
    source MAC (a forwarding hop), default ``src_node``.
    """
    h = check_headers(headers)
    n = len(h)
    pay = h["pay_len"].astype(np.int64)
    if payload is None:
        if n and not np.all(h["flags"] & Flags.SYNTH):
            i = int(np.flatnonzero((h["flags"] & Flags.SYNTH) == 0)[0])
            raise FrameError(f"frame {i}: flags: payload bytes not given but SYNTH not set", field="flags", index=i)
    else:
        payload = as_uint8(payload)
        if len(payload) != int(pay.sum()):
            raise EncodeError(f"payload: {len(payload)} bytes given, the headers' pay_len sum to {int(pay.sum())}")
    wire = pay + FRAME_HEADER_LEN
    if snaplen is not None:
        if snaplen < FRAME_HEADER_LEN:
            raise EncodeError(f"snaplen: {snaplen}, must be at least {FRAME_HEADER_LEN} (the headers)")
        cap = np.minimum(wire, snaplen)
    else:
        cap = wire
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cap, out=offsets[1:])
    kept = cap - FRAME_HEADER_LEN  # payload bytes present in each frame
    buf = np.empty(int(offsets[-1]), dtype=np.uint8)
    if n and (cap == cap[0]).all() and (payload is None or (pay == pay[0]).all()):
        # equal-sized frames (the common case): fill a 2-D view in place
        frames = buf.reshape(n, int(cap[0]))
        _eth_headers(h, eth_src, frames[:, :ETH_LEN])
        frames[:, ETH_LEN:FRAME_HEADER_LEN] = h.view(np.uint8).reshape(n, HEADER_LEN)
        if payload is None:
            frames[:, FRAME_HEADER_LEN:] = 0
        else:
            frames[:, FRAME_HEADER_LEN:] = payload.reshape(n, int(pay[0]))[:, : int(kept[0])]
        return buf, offsets
    starts = offsets[:-1]
    hdr = np.empty((n, FRAME_HEADER_LEN), dtype=np.uint8)
    _eth_headers(h, eth_src, hdr[:, :ETH_LEN])
    hdr[:, ETH_LEN:] = h.view(np.uint8).reshape(n, HEADER_LEN)
    scatter_rows(buf, starts, hdr)
    if payload is None:
        if int(kept.sum()):
            _zero_segments(buf, starts + FRAME_HEADER_LEN, kept)
    else:
        pay_starts = np.zeros(n, dtype=np.int64)
        np.cumsum(pay[:-1], out=pay_starts[1:])
        copy_segments(buf, starts + FRAME_HEADER_LEN, payload, pay_starts, kept)
    return buf, offsets


def _zero_segments(buf, starts, lengths) -> None:
    zeros = np.zeros(int(lengths.max()), dtype=np.uint8)
    copy_segments(buf, starts, zeros, np.zeros(len(lengths), dtype=np.int64), lengths)


# ---------------------------------------------------------------- decode


@dataclass(frozen=True)
class Frames:
    """Decoded frames: header rows plus views of their payload bytes in ``buf``."""

    headers: np.ndarray  # HEADER_DTYPE
    buf: np.ndarray  # the input buffer, uint8
    payload_start: np.ndarray  # int64, where frame i's payload starts in buf
    payload_size: np.ndarray  # int64, payload bytes present (< pay_len when cut by a snaplen)
    eth_dst: np.ndarray  # (n, 6) uint8
    eth_src: np.ndarray  # (n, 6) uint8

    def __len__(self) -> int:
        return len(self.headers)

    def payload(self, i: int) -> np.ndarray:
        s = int(self.payload_start[i])
        return self.buf[s : s + int(self.payload_size[i])]

    def payloads(self):
        for s, k in zip(self.payload_start.tolist(), self.payload_size.tolist()):
            yield self.buf[s : s + k]


def _check_offsets(buf: np.ndarray, offsets) -> np.ndarray:
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or len(offsets) == 0 or not np.issubdtype(offsets.dtype, np.integer):
        raise FrameError("offsets: need a 1-D integer array of n + 1 frame boundaries", field="offsets", index=0)
    offsets = offsets.astype(np.int64)
    bad = np.flatnonzero(np.diff(offsets) < 0)
    if len(bad):
        i = int(bad[0])
        raise FrameError(f"frame {i}: offsets: frame ends at {offsets[i + 1]} before it starts at {offsets[i]}",
                         field="offsets", index=i)
    if offsets[0] < 0 or offsets[-1] > len(buf):
        i = int(np.argmax(offsets[1:] > len(buf))) if len(offsets) > 1 and 0 <= offsets[0] <= len(buf) else 0
        raise FrameError(f"frame {i}: offsets: outside the {len(buf)}-byte buffer", field="offsets", index=i)
    return offsets


def scan_frames(buf, offsets, *, wirelen=None):
    """Decode without raising: ``(headers, codes, ethertype, raw)``.

    ``codes`` holds one REASONS index per frame (0 = valid); ``raw`` the first 62
    bytes of each frame, zero-padded where a frame is shorter (so are its headers). Used by ``decode_frames`` and by tools
    that count malformed frames instead of stopping at the first.
    """
    buf = as_uint8(buf)
    offsets = _check_offsets(buf, offsets)
    n = len(offsets) - 1
    starts = offsets[:-1]
    caplen = np.diff(offsets)
    got = np.minimum(caplen, FRAME_HEADER_LEN)
    raw = gather_rows(buf, starts, got, FRAME_HEADER_LEN)
    h = raw[:, ETH_LEN:].copy().view(HEADER_DTYPE).reshape(n)
    ethertype = raw[:, 12].astype(np.uint16) << 8 | raw[:, 13]
    wire_ok_len = h["pay_len"].astype(np.int64) + FRAME_HEADER_LEN
    if wirelen is None:
        caplen_bad = np.zeros(n, dtype=bool)
        len_bad = caplen != wire_ok_len
    else:
        wirelen = np.broadcast_to(np.asarray(wirelen, dtype=np.int64), (n,))
        caplen_bad = caplen > wirelen
        len_bad = wirelen != wire_ok_len
    codes = _first_failure(n, [
        ("truncated", caplen < FRAME_HEADER_LEN),
        ("ethertype", ethertype != ETHERTYPE),
        *_header_checks(h, [("caplen", caplen_bad), ("pay_len", len_bad)]),
    ])
    return h, codes, ethertype, raw


def decode_frames(buf, offsets, *, wirelen=None) -> Frames:
    """Decode the frames ``buf[offsets[i]:offsets[i+1]]``; raise FrameError at the first bad one.

    Without ``wirelen`` every frame must be complete (62 + pay_len bytes). With
    ``wirelen`` (per frame, e.g. a capture's orig_len) a frame may be cut
    short of its wire length, as by a snaplen; pay_len must match the wire length.
    """
    buf = as_uint8(buf)
    h, codes, ethertype, raw = scan_frames(buf, offsets, wirelen=wirelen)
    offsets = np.asarray(offsets, dtype=np.int64)
    caplen = np.diff(offsets)
    wl = None if wirelen is None else np.broadcast_to(np.asarray(wirelen, dtype=np.int64), caplen.shape)
    _raise_first(codes, h, caplen, wl, ethertype)
    return Frames(
        headers=h,
        buf=buf,
        payload_start=offsets[:-1] + FRAME_HEADER_LEN,
        payload_size=caplen - FRAME_HEADER_LEN,
        eth_dst=raw[:, 0:6],
        eth_src=raw[:, 6:12],
    )
