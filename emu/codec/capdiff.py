"""Two captures compared frame by frame: what a board sent against what the emulator's NIC sends.

Frames are matched by what names a frame on the wire: (op, src_node, dst_set, msg_id,
frag_idx), and the n-th copy of that name in one capture with the n-th in the other (a multicast copy on
two links, a resend). Then each matched pair is compared field by field (every MCF header
field; a headers-only capture's payload is not there to compare), and the report lists

- missing frames (expected, not in the board's capture), extra frames (the other way),
- differing fields (name, expected value, value seen),
- reordered frames: how many of the matched frames must move to put the board's order
  back into the expected one (the frames outside a longest run in expected order),
- time offsets: each matched frame's time in the board's capture minus its time in the
  expected one, both measured from their captures' first matched frame.

Frames are named by Wireshark's numbers (from 1) in each file. Malformed frames are
counted, never matched.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from .batch import HEADER_DTYPE, scan_frames
from .enums import REPLY_OPS, Op
from .pcap import read_capture

# dst_set is part of the name because a reply's msg_id is the id of the message it answers,
# which its destination sent (enums.REPLY_OPS): two boards' acks of their own message 3 from one
# board differ only there. Data frames keep dst_set on every copy, so it costs them nothing.
KEY = ("op", "src_node", "dst_set", "msg_id", "frag_idx")
COMPARED = tuple(n for n in HEADER_DTYPE.names if n not in KEY)


@dataclass
class Frames:
    """The valid MCF frames of one capture, in file order."""

    path: str
    headers: np.ndarray   # HEADER_DTYPE
    ts_ns: np.ndarray     # int64
    number: np.ndarray    # int64, Wireshark's frame number
    malformed: int = 0


def load(path) -> Frames:
    heads, ts, number, bad = [], [], [], 0
    for b in read_capture(path):
        h, codes, _ethertype, _ = scan_frames(b.buf, b.offsets, wirelen=b.wirelen)
        ok = codes == 0
        bad += int((~ok).sum())
        heads.append(h[ok])
        ts.append(b.ts_ns[ok])
        number.append(b.first_record + 1 + np.flatnonzero(ok))
    if not heads:
        return Frames(str(path), np.zeros(0, HEADER_DTYPE), np.zeros(0, np.int64), np.zeros(0, np.int64), bad)
    return Frames(str(path), np.concatenate(heads), np.concatenate(ts).astype(np.int64),
                  np.concatenate(number).astype(np.int64), bad)


def _names(f: Frames) -> list[tuple]:
    """Each frame's name: its key and which copy of that key it is."""
    seen: dict[tuple, int] = {}
    out = []
    cols = [f.headers[k].tolist() for k in KEY]
    for key in zip(*cols):
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append((*key, n))
    return out


def _out_of_order(order: list[int]) -> list[int]:
    """Positions in ``order`` outside one longest increasing run (patience sorting): the
    fewest frames that must move to restore the expected order."""
    tails: list[int] = []     # smallest tail value of an increasing run of each length
    tail_at: list[int] = []   # its position
    prev = [-1] * len(order)
    for i, v in enumerate(order):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = v, i
        prev[i] = tail_at[k - 1] if k else -1
    keep, i = set(), tail_at[-1] if tail_at else -1
    while i >= 0:
        keep.add(i)
        i = prev[i]
    return [i for i in range(len(order)) if i not in keep]


@dataclass
class Diff:
    expected: Frames
    got: Frames
    missing: list[int] = field(default_factory=list)      # indices into expected
    extra: list[int] = field(default_factory=list)        # indices into got
    differing: list[tuple[int, int, str, int, int]] = field(default_factory=list)  # (exp, got, field, want, seen)
    reordered: list[int] = field(default_factory=list)    # indices into got
    offsets_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.differing or self.reordered)


def diff(expected: Frames, got: Frames) -> Diff:
    d = Diff(expected, got)
    where = {name: i for i, name in enumerate(_names(expected))}
    pairs = []  # (expected index, got index), in the board's order
    for j, name in enumerate(_names(got)):
        i = where.pop(name, None)
        if i is None:
            d.extra.append(j)
        else:
            pairs.append((i, j))
    d.missing = sorted(where.values())
    if not pairs:
        return d
    e_idx = np.array([i for i, _ in pairs])
    g_idx = np.array([j for _, j in pairs])
    eh, gh = expected.headers[e_idx], got.headers[g_idx]
    for name in COMPARED:
        for k in np.flatnonzero(eh[name] != gh[name]).tolist():
            d.differing.append((int(e_idx[k]), int(g_idx[k]), name, int(eh[name][k]), int(gh[name][k])))
    d.differing.sort()
    d.reordered = [int(g_idx[k]) for k in _out_of_order(e_idx.tolist())]
    first = int(np.argmin(e_idx))  # the expected capture's first matched frame anchors both clocks
    e_t = expected.ts_ns[e_idx] - expected.ts_ns[e_idx[first]]
    g_t = got.ts_ns[g_idx] - got.ts_ns[g_idx[first]]
    d.offsets_ns = (g_t - e_t)[np.argsort(e_idx)]
    return d


def _label(f: Frames, i: int) -> str:
    h = f.headers[i]
    op = Op(int(h["op"])).name if int(h["op"]) in Op._value2member_map_ else f"op {int(h['op'])}"
    to = f" to {int(h['dst_set']):#x}" if int(h["op"]) in REPLY_OPS else ""
    return (f"frame {int(f.number[i])} ({op} n{int(h['src_node'])}#{int(h['msg_id'])}{to} "
            f"fragment {int(h['frag_idx']) + 1}/{int(h['frag_cnt'])})")


def as_dict(d: Diff, limit: int = 20) -> dict:
    e, g = d.expected, d.got
    off = d.offsets_ns
    return {
        "expected": e.path, "got": g.path, "ok": d.ok,
        "expected_frames": len(e.headers), "got_frames": len(g.headers),
        "malformed": {"expected": e.malformed, "got": g.malformed},
        "matched": len(off),
        "missing": [int(e.number[i]) for i in d.missing[:limit]], "missing_count": len(d.missing),
        "extra": [int(g.number[j]) for j in d.extra[:limit]], "extra_count": len(d.extra),
        "differing": [{"expected_frame": int(e.number[i]), "got_frame": int(g.number[j]), "field": name,
                       "expected": want, "got": seen} for i, j, name, want, seen in d.differing[:limit]],
        "differing_count": len(d.differing),
        "reordered": [int(g.number[j]) for j in d.reordered[:limit]], "reordered_count": len(d.reordered),
        "time_offset_ns": ({"median": int(np.median(off)), "min": int(off.min()), "max": int(off.max())}
                           if len(off) else None),
    }


def render(d: Diff, limit: int = 20) -> str:
    e, g = d.expected, d.got
    lines = [f"expected {e.path}: {len(e.headers):,} frames" + (f" ({e.malformed:,} malformed, ignored)" if e.malformed else ""),
             f"got      {g.path}: {len(g.headers):,} frames" + (f" ({g.malformed:,} malformed, ignored)" if g.malformed else ""),
             f"matched  {len(d.offsets_ns):,} frames by (op, src_node, msg_id, frag_idx)"]
    if len(d.offsets_ns):
        off = d.offsets_ns / 1e3
        lines.append(f"time     board minus expected, from the first matched frame: median {np.median(off):,.1f} us, "
                     f"min {off.min():,.1f} us, max {off.max():,.1f} us")
    for what, items, show in (("missing", d.missing, lambda i: _label(e, i)),
                              ("extra", d.extra, lambda j: _label(g, j)),
                              ("reordered", d.reordered, lambda j: _label(g, j))):
        if items:
            lines.append(f"{what} {len(items):,}:")
            lines += [f"  {show(k)}" for k in items[:limit]]
            if len(items) > limit:
                lines.append(f"  ... and {len(items) - limit:,} more")
    if d.differing:
        lines.append(f"differing fields {len(d.differing):,}:")
        for i, j, name, want, seen in d.differing[:limit]:
            lines.append(f"  {_label(e, i)} vs got frame {int(g.number[j])}: {name} expected {want}, got {seen}")
        if len(d.differing) > limit:
            lines.append(f"  ... and {len(d.differing) - limit:,} more")
    lines.append("SAME: every expected frame, in order, field for field" if d.ok else
                 f"DIFFERENT: {len(d.missing):,} missing, {len(d.extra):,} extra, {len(d.differing):,} differing "
                 f"fields, {len(d.reordered):,} reordered")
    return "\n".join(lines)
