"""Capture a replay's frames to pcap/pcapng with simulated timestamps.

Each frame is captured where the receiving node takes it (the time it hands the
frame to its parser), once per hop, on the link it crossed; lost frames never
reach a receiver and are not in the capture. Headers are the frames' real MCF
headers: the message's Meta encoded by the codec, the fields of each frame of its own
(fragment fields, sequence number, ttl, hop) written in by ``capture_frames``, straight
into the file's records; in timing mode the payload is not carried (SYNTH flag) and the default
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

from ..codec import FRAME_HEADER_LEN, HEADER_DTYPE, CaptureWriter, Flags, Op, check_headers, encode_frames, max_payload, new_headers
from ..codec.mac import ETH_LEN
from ..errors import ConfigError
from ..net.kernel import LOG
from ..units import parse_time
from . import capture_frames as frames


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
        f = self.filter
        idx, mids, inv = frames.select(rows, self.keep_link, f.t_from, -1 if f.t_to is None else f.t_to)
        if not len(idx):
            return
        if self.messages is not None:  # the compiled loop's messages: header rows for all at once
            heads, nfrags = self.messages.headers(mids)
        else:
            heads = np.concatenate([self._template(int(m)) for m in mids])
            nfrags = np.array([self.net.messages[int(m)].nfrags for m in mids], np.int64)
        if f.ops:
            keep = np.isin(heads["op"], list(f.ops))[inv]
            idx, inv = idx[keep], inv[keep]
            if not len(idx):
                return
        # each message's Ethernet and MCF headers as the codec encodes them (checking its fields)
        buf, _ = encode_frames(heads, None, snaplen=FRAME_HEADER_LEN)
        templates = np.zeros((len(nfrags), frames.ROW), np.uint8)
        templates[:, :FRAME_HEADER_LEN] = buf.reshape(-1, FRAME_HEADER_LEN)
        hop_macs = self.writer.format == "pcap"

        def fill(out, at, cap, a, b):
            bad = frames.stamp(rows, idx[a:b], inv[a:b], templates, nfrags, self.per, out, at, cap,
                               self._src, self._dst, hop_macs)
            if bad >= 0:  # raises the codec's FrameError naming the field
                check_headers(out[at[bad] + ETH_LEN: at[bad] + FRAME_HEADER_LEN].view(HEADER_DTYPE))

        col = LOG.col
        wire = rows[idx, col("len")]
        self.writer.write_frames(wire, (rows[idx, col("arr")] + 500) // 1000, wire, rows[idx, col("link")], fill)
        self.frames += len(idx)

    def close(self) -> None:
        if getattr(self, "net", None) is not None:
            self.net.flush_log()
            self.writer.__exit__(None, None, None)
