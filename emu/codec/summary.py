"""Summary of a capture file: frames, bytes, counts per op/src/dst, malformed frames, messages.

Streams the file batch by batch; besides fixed-size counters it keeps 16 bytes
per valid frame (message key and fragment index) to find incomplete messages.
"""

from __future__ import annotations

import numpy as np

from .batch import FRAME_HEADER_LEN, REASONS, describe, scan_frames
from .enums import Op
from .errors import DecodeError
from .pcap import LINKTYPE_ETHERNET, CaptureReader

EXAMPLES = 5  # malformed frames quoted in full


def summarize_capture(path, *, limit: int = 20, batch_bytes: int = 8 << 20) -> dict:
    """A JSON-ready dict describing the capture at ``path``; DecodeError if the file is malformed."""
    frames = wire = captured = 0
    t_first = t_last = None
    per_op = np.zeros(256, dtype=np.int64)
    per_src = np.zeros(1 << 16, dtype=np.int64)
    per_dst = np.zeros(64, dtype=np.int64)
    per_route = np.zeros(1 << 16, dtype=np.int64)
    bad = np.zeros(len(REASONS), dtype=np.int64)
    examples: list[str] = []
    keys, idxs, cnts = [], [], []
    with CaptureReader(path, batch_bytes=batch_bytes) as reader:
        for b in reader:
            if b.linktype != LINKTYPE_ETHERNET:
                raise DecodeError(f"{reader.path}: link type {b.linktype}, expected Ethernet ({LINKTYPE_ETHERNET})")
            n = len(b)
            frames += n
            wire += int(b.wirelen.sum())
            captured += int(b.offsets[-1])
            t_first = int(b.ts_ns[0]) if t_first is None else t_first
            t_last = int(b.ts_ns[-1])
            h, codes, ethertype, _ = scan_frames(b.buf, b.offsets, wirelen=b.wirelen)
            bad += np.bincount(codes, minlength=len(REASONS))
            for i in np.flatnonzero(codes)[: max(0, EXAMPLES - len(examples))].tolist():
                row = {f: h[f][i] for f in h.dtype.names} | {"ethertype": ethertype[i]}
                caplen = int(b.offsets[i + 1] - b.offsets[i])
                k = b.first_record + i + 1  # Wireshark's frame number
                text = describe(int(codes[i]), k, row, caplen, int(b.wirelen[i]))
                examples.append(text.replace(f"frame {k}:", f"frame {k} at byte {int(b.file_offset[i])}:", 1))
            h = h[codes == 0]
            per_op += np.bincount(h["op"], minlength=256)
            per_src += np.bincount(h["src_node"], minlength=1 << 16)
            routed = h["route_id"] != 0
            per_route += np.bincount(h["route_id"][routed], minlength=1 << 16)
            bits = np.unpackbits(h["dst_set"][~routed].astype("<u8").view(np.uint8), bitorder="little")
            per_dst += bits.reshape(-1, 64).sum(axis=0, dtype=np.int64)
            keys.append(h["src_node"].astype(np.uint64) << np.uint64(32) | h["msg_id"].astype(np.uint64))
            idxs.append(h["frag_idx"].astype(np.uint64))
            cnts.append(h["frag_cnt"].astype(np.int64))
        info = {"file": reader.path, "format": reader.format, "linktype": reader.linktype, "snaplen": reader.snaplen}
    messages, incomplete = message_accounting(keys, idxs, cnts, limit)
    valid = frames - int(bad[1:].sum())
    return {
        **info,
        "frames": frames,
        "valid_frames": valid,
        "wire_bytes": wire,
        "captured_bytes": captured,
        "headers_only": frames > 0 and captured == frames * FRAME_HEADER_LEN,
        "first_ts_ns": t_first,
        "last_ts_ns": t_last,
        "per_op": {_op_name(i): int(c) for i, c in enumerate(per_op) if c},
        "per_src": {str(i): int(c) for i, c in enumerate(per_src) if c},
        "per_dst": {str(i): int(c) for i, c in enumerate(per_dst) if c},
        "per_route": {str(i): int(c) for i, c in enumerate(per_route) if c},
        "malformed": {REASONS[i]: int(c) for i, c in enumerate(bad) if i and c},
        "malformed_examples": examples,
        "messages": messages,
        "incomplete": incomplete,
    }


def _op_name(v: int) -> str:
    return Op(v).name if v in Op._value2member_map_ else f"op{v}"


def message_accounting(keys, idxs, cnts, limit):
    """(summary, incomplete messages) from per-batch arrays of message keys
    (src_node << 32 | msg_id), fragment indices and fragment counts."""
    key = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
    idx = np.concatenate(idxs) if idxs else np.zeros(0, np.uint64)
    cnt = np.concatenate(cnts) if cnts else np.zeros(0, np.int64)
    order = np.lexsort((idx, key))
    key, idx, cnt = key[order], idx[order], cnt[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = (key[1:] != key[:-1]) | (idx[1:] != idx[:-1])
    duplicates = int(len(key) - first.sum())
    key, idx, cnt = key[first], idx[first], cnt[first]
    msg_keys, start, got = np.unique(key, return_index=True, return_counts=True)
    want = np.maximum.reduceat(cnt, start) if len(start) else np.zeros(0, np.int64)
    short = np.flatnonzero(got < want)
    incomplete = []
    for m in short[:limit].tolist():
        have = set(idx[start[m] : start[m] + got[m]].tolist())
        missing = [i for i in range(int(want[m])) if i not in have]
        k = int(msg_keys[m])
        incomplete.append({"src_node": k >> 32, "msg_id": k & 0xFFFFFFFF, "frag_cnt": int(want[m]),
                           "received": int(got[m]), "missing": missing[:limit]})
    summary = {"total": len(msg_keys), "complete": int(len(msg_keys) - len(short)),
               "incomplete": int(len(short)), "duplicate_fragments": duplicates}
    return summary, incomplete
