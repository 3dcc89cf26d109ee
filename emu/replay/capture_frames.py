"""A capture's frames from the transmission log, in two compiled passes without a per-frame object.

``select`` picks the log records a capture keeps (arrived, on a kept link, within the time
window) and names their messages once each; ``stamp`` writes each kept record's frame:
its message's template (the Ethernet and MCF headers ``encode_frames`` makes of the
message's Meta) with the fields a frame has of its own written in at their wire offsets
(``emu.codec.layer.FRAME_OFFSETS``, big-endian): fragment index, count and offset, payload
length, sequence number, RETX, the ttl left after the hops taken and the transmitting board
as source MAC (in a classic pcap also the receiving board as destination MAC). In timing
mode no payload is carried: the bytes a snap length keeps past the headers are zeros.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import compiled_cache  # noqa: F401  (before any cached function: their cache stamp)
from ..codec.enums import Flags
from ..codec.layer import FIELD_SIZES, FRAME_HEADER_LEN, FRAME_OFFSETS
from ..codec.mac import BOARD_AT, BOARD_LEN, DST_MAC, MAC_PREFIX, SRC_MAC
from ..net.kernel import G_ARR, G_FATE, G_FRAG, G_HOPS, G_LEN, G_LINK, G_MSG, G_RETX

HEAD = FRAME_HEADER_LEN
ROW = -(-HEAD // 4) * 4  # a message's header row, padded to whole 4-byte words
# where a frame's own fields sit in it (frozen into the compiled code; the layer is in its stamp)
FLAGS, TTL = FRAME_OFFSETS["flags"], FRAME_OFFSETS["ttl"]
FRAG_IDX, FRAG_CNT, SEQ = FRAME_OFFSETS["frag_idx"], FRAME_OFFSETS["frag_cnt"], FRAME_OFFSETS["seq"]
OFFSET, MSG_LEN, PAY_LEN = FRAME_OFFSETS["offset"], FRAME_OFFSETS["msg_len"], FRAME_OFFSETS["pay_len"]
# and their sizes in bytes
FRAG_IDX_N, FRAG_CNT_N, SEQ_N = FIELD_SIZES["frag_idx"], FIELD_SIZES["frag_cnt"], FIELD_SIZES["seq"]
OFFSET_N, MSG_LEN_N, PAY_LEN_N = FIELD_SIZES["offset"], FIELD_SIZES["msg_len"], FIELD_SIZES["pay_len"]
FRAG_MAX, OFFSET_MAX, PAY_MAX = (1 << 8 * FRAG_CNT_N) - 1, (1 << 8 * OFFSET_N) - 1, (1 << 8 * PAY_LEN_N) - 1
assert PAY_LEN % 4 == 0 and PAY_LEN + 2 == HEAD  # pay_len closes the headers, each frame writes it
RETX = int(Flags.RETX)
MAC0, MAC1, MAC2, MAC3 = MAC_PREFIX  # a board's MAC: the prefix and the board's number


@njit(cache=True)
def select(rows, keep_link, t_from, t_to):
    """(kept record rows, their messages' rows in ascending order, each kept record's index
    into them) of the log records ``rows`` that arrived on a kept link at t_from..t_to ps
    (t_to < 0: no end)."""
    n = rows.shape[0]
    idx = np.empty(n, np.int64)
    k = 0
    lo, hi = np.int64(1) << 62, np.int64(-1)
    for i in range(n):
        t = rows[i, G_ARR]
        if rows[i, G_FATE] == 0 and keep_link[rows[i, G_LINK]] and t >= t_from and (t_to < 0 or t <= t_to):
            idx[k] = i
            k += 1
            m = rows[i, G_MSG]
            lo, hi = min(lo, m), max(hi, m)
    idx = idx[:k]
    inv = np.empty(k, np.int64)
    if k == 0:
        return idx, np.empty(0, np.int64), inv
    span = hi - lo + 1
    if span <= 8 * k + 4096:  # the messages of one flush are a narrow band of rows: mark them
        slot = np.full(span, -1, np.int64)
        for j in range(k):
            slot[rows[idx[j], G_MSG] - lo] = 0
        u = 0
        for s in range(span):
            if slot[s] == 0:
                slot[s] = u
                u += 1
        mids = np.empty(u, np.int64)
        for s in range(span):
            if slot[s] >= 0:
                mids[slot[s]] = lo + s
        for j in range(k):
            inv[j] = slot[rows[idx[j], G_MSG] - lo]
        return idx, mids, inv
    seen = np.empty(k, np.int64)
    for j in range(k):
        seen[j] = rows[idx[j], G_MSG]
    mids = np.unique(seen)
    inv[:] = np.searchsorted(mids, seen)
    return idx, mids, inv


@njit(cache=True, inline="always")
def _put(buf, at, value, size):
    for b in range(size):
        buf[at + b] = (value >> (8 * (size - 1 - b))) & 0xFF


@njit(cache=True, inline="always")
def _get(buf, at, size):
    v = np.int64(0)
    for b in range(size):
        v = (v << 8) | buf[at + b]
    return v


@njit(cache=True)
def stamp(rows, idx, inv, heads, nfrags, per, out, at, cap, link_src, link_dst, hop_macs):
    """Write the first ``cap[j]`` bytes of the frame of log record ``rows[idx[j]]`` at
    ``out[at[j]:]``: ``heads[inv[j]]`` is its message's headers (``HEAD`` bytes, the row
    padded to ``ROW``) and ``nfrags[inv[j]]`` its fragment count, ``per`` the payload a full
    fragment carries. Returns the first frame whose fragment fields break the frame format
    (-1: none)."""
    out32 = out[: out.shape[0] // 4 * 4].view(np.uint32)
    heads32 = heads.view(np.uint32)
    bad = -1
    for j in range(idx.shape[0]):
        i, m, a = idx[j], inv[j], at[j]
        # the headers up to pay_len, by words where the frame starts on one (a pcapng's always do)
        if a & 3 == 0:
            for w in range(PAY_LEN // 4):
                out32[(a >> 2) + w] = heads32[m, w]
        else:
            for b in range(PAY_LEN):
                out[a + b] = heads[m, b]
        for b in range(a + HEAD, a + cap[j]):
            out[b] = 0
        frag, cnt, pay = rows[i, G_FRAG], nfrags[m] & FRAG_MAX, rows[i, G_LEN] - HEAD
        off = frag * per
        _put(out, a + FRAG_IDX, frag, FRAG_IDX_N)
        _put(out, a + FRAG_CNT, cnt, FRAG_CNT_N)
        _put(out, a + OFFSET, off, OFFSET_N)
        _put(out, a + PAY_LEN, pay, PAY_LEN_N)
        _put(out, a + SEQ, _get(out, a + SEQ, SEQ_N) + frag, SEQ_N)
        if rows[i, G_RETX] == 1:
            out[a + FLAGS] |= RETX
        out[a + TTL] = max(out[a + TTL] - rows[i, G_HOPS], 0)
        link = rows[i, G_LINK]
        _put(out, a + SRC_MAC + BOARD_AT, link_src[link], BOARD_LEN)
        if hop_macs:  # a classic pcap names the hop: the receiving board as destination MAC
            d = a + DST_MAC
            out[d], out[d + 1], out[d + 2], out[d + 3] = MAC0, MAC1, MAC2, MAC3
            _put(out, d + BOARD_AT, link_dst[link], BOARD_LEN)
        if bad < 0 and (cnt == 0 or (frag & FRAG_MAX) >= cnt
                        or (off & OFFSET_MAX) + (pay & PAY_MAX) > _get(out, a + MSG_LEN, MSG_LEN_N)):
            bad = j
    return bad
