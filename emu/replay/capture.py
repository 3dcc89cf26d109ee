"""Capture a replay's frames to pcap/pcapng with simulated timestamps.

Each frame is captured where the receiving node takes it (the time it hands the
frame to its parser), once per hop, on the link it crossed; lost frames never
reach a receiver and are not in the capture. Headers are the frames' real MCF
headers (the message's Meta, fragment fields, sequence numbers) encoded by the
codec; in timing mode the payload is not carried (SYNTH flag) and the default
snap length keeps the headers only. ``ttl`` counts down one per link the frame
actually crossed (after a re-route too).

Where the link is recorded: a pcapng file declares one interface per link
direction, named ``U->V``, and each record is on its link's interface. A classic
pcap has no interfaces: there the Ethernet addresses name the hop, source MAC
the transmitting node and destination MAC the receiving node (the frame's final
destinations stay in the MCF header's dst_set and route_id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..codec import FRAME_HEADER_LEN, CaptureWriter, Flags, Op, encode_frames, max_payload, new_headers
from ..codec.mac import MAC_PREFIX
from ..errors import ConfigError
from ..net.kernel import LOG
from ..units import parse_time


@dataclass(frozen=True)
class Filter:
    links: frozenset = frozenset()   # (u, v) directions
    nodes: frozenset = frozenset()
    into: frozenset = frozenset()    # boards whose inbound links are kept (what they receive)
    ops: frozenset = frozenset()
    t_from: int = 0
    t_to: int | None = None


def parse_filters(items) -> Filter:
    links, nodes, into, ops, t_from, t_to = set(), set(), set(), set(), 0, None
    for item in items:
        key, _, value = item.partition("=")
        key = key.strip()
        if key == "link":
            m = re.fullmatch(r"\s*(\d+)\s*([->])\s*(\d+)\s*", value)
            if not m:
                raise ConfigError(f"--capture-filter {item!r}: expected link=U-V or link=U>V")
            u, v = int(m[1]), int(m[3])
            links.add((u, v))
            if m[2] == "-":
                links.add((v, u))
        elif key in ("node", "into"):
            try:
                (nodes if key == "node" else into).add(int(value))
            except ValueError:
                raise ConfigError(f"--capture-filter {item!r}: expected {key}=N") from None
        elif key == "op":
            try:
                ops.add(int(Op[value.strip()]))
            except KeyError:
                raise ConfigError(f"--capture-filter {item!r}: unknown op; one of {', '.join(o.name for o in Op)}") from None
        elif key == "from":
            t_from = parse_time(value, "--capture-filter from")
        elif key == "to":
            t_to = parse_time(value, "--capture-filter to")
        else:
            raise ConfigError(f"--capture-filter {item!r}: expected link=, node=, into=, op=, from= or to=")
    return Filter(frozenset(links), frozenset(nodes), frozenset(into), frozenset(ops), t_from, t_to)


def capture_format(path) -> str:
    """pcapng or pcap, from the file name's last ``.pcapng``/``.pcap`` part, wherever the file is
    and whatever follows (a capture at an absolute path is written under a staged name first,
    ``.cap.pcapng.<pid>.part``)."""
    kinds = re.findall(r"\.(pcapng|pcap)(?=\.|$)", Path(path).name.lower())
    return kinds[-1] if kinds else "pcap"


class Capture:
    def __init__(self, path, flt: Filter = Filter(), snaplen: int = FRAME_HEADER_LEN, format: str | None = None):
        from ..outputs import reclaim_stale

        self.path = Path(path)
        self.filter = flt
        fmt = format or capture_format(path)
        reclaim_stale(self.path.parent, "--capture")  # what a killed replay left being written there
        if snaplen < FRAME_HEADER_LEN:
            raise ConfigError(f"--snaplen {snaplen}: at least {FRAME_HEADER_LEN} (the headers)")
        self.writer = CaptureWriter(self.path, format=fmt, snaplen=snaplen)
        self.snaplen = snaplen
        self.frames = 0
        self._templates: dict[int, np.ndarray] = {}
        self.messages = None  # the compiled loop's header rows by kernel row (emu.replay.wire_meta); None: the network's Meta

    def attach(self, replay) -> None:
        self.net = replay.net
        self.writer.interfaces = [f"{u}->{v}" for u, v in self.net.links]
        self._src = np.array([u for u, _v in self.net.links], np.int64)  # transmitting node of each link
        self._dst = np.array([v for _u, v in self.net.links], np.int64)
        self.per = max_payload(int(replay.hw["mtu"]))
        L = len(self.net.links)
        keep = np.ones(L, bool)
        f = self.filter
        if f.links or f.nodes or f.into:
            keep[:] = False
            for i, (u, v) in enumerate(self.net.links):
                keep[i] = (u, v) in f.links or u in f.nodes or v in f.nodes or v in f.into
        self.keep_link = keep
        self.writer.__enter__()
        self.net.log_sinks.append(self)

    def _template(self, mid: int) -> np.ndarray:
        row = self._templates.get(mid)
        if row is None:
            meta = self.net.messages[mid].meta
            fields = dict(meta[0]) if isinstance(meta, tuple) else dict(meta or {})
            fields["flags"] = int(fields.get("flags", 0)) | int(Flags.SYNTH)
            row = self._templates[mid] = new_headers(1, **fields)
        return row

    def __call__(self, rows: np.ndarray) -> None:
        # one selection on the plain log rows (a structured view's masks cost several times more)
        col = LOG.col
        t = rows[:, col("arr")]
        f = self.filter
        sel = (rows[:, col("fate")] == 0) & self.keep_link[rows[:, col("link")]] & (t >= f.t_from)
        if f.t_to is not None:
            sel &= t <= f.t_to
        rows = LOG.records(rows[sel])  # fields by name
        if not len(rows):
            return
        mids = rows["msg"]
        uniq, inv = np.unique(mids, return_inverse=True)
        if self.messages is not None:  # the compiled loop's messages: header rows for all at once
            heads, counts = self.messages.headers(uniq)
            h, nfr = heads[inv], counts[inv]
        else:
            h = np.concatenate([self._template(int(m)) for m in uniq])[inv]
            nfr = np.array([self.net.messages[int(m)].nfrags for m in uniq], np.int64)[inv]
        if f.ops:
            keep = np.isin(h["op"], list(f.ops))
            h, rows = h[keep], rows[keep]
            if not len(rows):
                return
        frag = rows["frag"]
        if f.ops:
            nfr = nfr[keep]
        h["frag_idx"] = frag
        h["frag_cnt"] = nfr
        h["offset"] = frag * self.per
        h["pay_len"] = rows["len"] - FRAME_HEADER_LEN
        h["seq"] = (h["seq"].astype(np.int64) + frag) & 0xFFFFFFFF
        h["flags"] |= np.where(rows["retx"] == 1, int(Flags.RETX), 0).astype(h["flags"].dtype)
        # The source MAC is the node that put the frame on this link; ttl drops by one
        # per link the frame crossed before this one.
        link = rows["link"]
        eth_src = self._src[link]
        h["ttl"] = np.maximum(h["ttl"].astype(np.int64) - rows["hops"], 0)
        buf, offsets = encode_frames(h, None, snaplen=self.snaplen, eth_src=eth_src)
        if self.writer.format == "pcap":
            # No interfaces: the destination MAC names the receiving node of the hop.
            at = offsets[:-1]
            dst = self._dst[link]
            for k in range(4):
                buf[at + k] = MAC_PREFIX[k]
            buf[at + 4], buf[at + 5] = (dst >> 8) & 0xFF, dst & 0xFF
        wire = rows["len"]
        self.writer.write(buf, offsets, (rows["arr"] + 500) // 1000, wirelen=wire, iface=link)
        self.frames += len(rows)

    def close(self) -> None:
        if getattr(self, "net", None) is not None:
            self.net.flush_log()
            self.writer.__exit__(None, None, None)
