"""`emu calibrate`: a board's NIC timings from a capture on both sides of it, as a hardware profile.

The capture holds the frames sent to board K and the frames K sent back, stamped on
one clock: the ``board.pcap`` of `emu hw send TRACE --to K --out DIR` (frames sent
stamped when the socket took them, received ones by the kernel), or a tap on both
sides of the board. K's frames are those with K's source MAC (02:4d:43:46:HH:LL);
K is the board the other frames are addressed to, or ``node``.

Estimates, each a median of per-frame samples with a 95 % bootstrap interval
(``BOOTSTRAP`` resamples, fixed seed: the same capture gives the same figures):

- **forwarding latency**: a forwarded copy (another board's frame leaving K) minus the
  same frame arriving (op, src_node, msg_id, frag_idx);
- **ack turnaround**: an ack from K minus the arrival of the last fragment of the
  message it acknowledges;
- **reduction latency**: K's first frame of a reduction result (``partial_state`` or
  ``reduce_result``) minus the last contribution of that reduction (kv_id, layer) in;
- **datapath rate**: the wire bits of a forwarded frame over its gap behind the
  previous forwarded one, where the frame was already waiting when the previous one left
  and that gap is ``BUSY`` times the frames' gap coming in (the board, not the sender,
  set the pace). Unless most forwarded frames were so paced, the board kept up with its
  sender and the rate is not measured (the profile keeps the base's).

Latencies include the time a frame waited behind others: calibrate from a run paced so
that the board keeps up (`emu hw send --rate`), and find the rate from an unpaced one.

The profile is the base profile (kr260 by default) with ``nic_latency_ps`` (and
``nic_rate`` when measured) replaced; the other estimates have no profile field and are
written as comments, with every interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codec import REPLY_OPS, Flags, Op, capdiff
from .codec.batch import scan_frames
from .codec.mac import MAC_PREFIX
from .codec.pcap import read_capture
from .errors import ConfigError
from .net.ethernet import MIN_FRAME, WIRE_OVERHEAD

BOOTSTRAP = 2000
SEED = 27
LEVEL = 0.95
BUSY = 1.25  # a gap out this much longer than the gap in: the board set the pace


@dataclass
class Estimate:
    name: str
    unit: str          # "ps" or "bps"
    samples: int
    median: float | None = None
    low: float | None = None
    high: float | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "unit": self.unit, "samples": self.samples, "median": self.median,
                "ci95": None if self.median is None else [self.low, self.high], "note": self.note}


def median_ci(x: np.ndarray, name: str, unit: str) -> Estimate:
    """Median of ``x`` and its 95 % percentile-bootstrap interval."""
    x = np.asarray(x, np.float64)
    if not len(x):
        return Estimate(name, unit, 0, note="no samples in the capture")
    rng = np.random.default_rng(SEED)
    boots = np.median(x[rng.integers(0, len(x), (BOOTSTRAP, len(x)))], axis=1)
    a = (1 - LEVEL) / 2
    return Estimate(name, unit, len(x), float(np.median(x)), float(np.quantile(boots, a)),
                    float(np.quantile(boots, 1 - a)))


@dataclass
class Capture:
    """Every valid MCF frame of a capture: headers, time, Ethernet source / destination board."""

    h: np.ndarray
    t_ps: np.ndarray
    eth_src: np.ndarray   # board id of the source MAC, -1 if not a board MAC
    eth_dst: np.ndarray
    wire: np.ndarray      # bytes on the line (frame, FCS, preamble, gap)


def load(path) -> Capture:
    hs, ts, srcs, dsts, wires = [], [], [], [], []
    prefix = np.frombuffer(MAC_PREFIX, np.uint8)
    for b in read_capture(path):
        h, codes, _, raw = scan_frames(b.buf, b.offsets, wirelen=b.wirelen)
        ok = codes == 0
        hs.append(h[ok])
        ts.append(b.ts_ns[ok].astype(np.int64) * 1000)
        for col, into in ((0, dsts), (6, srcs)):
            mac = raw[ok, col : col + 6]
            board = mac[:, 4].astype(np.int64) << 8 | mac[:, 5]
            into.append(np.where((mac[:, :4] == prefix).all(axis=1), board, -1))
        wires.append(np.maximum(np.asarray(b.wirelen)[ok], MIN_FRAME) + WIRE_OVERHEAD)
    if not hs:
        return Capture(*(np.zeros(0, t) for t in (object, np.int64, np.int64, np.int64, np.int64)))
    return Capture(np.concatenate(hs), np.concatenate(ts), np.concatenate(srcs), np.concatenate(dsts),
                   np.concatenate(wires).astype(np.int64))


def board_of(c: Capture) -> int:
    """The board the capture is about: the one most frames not sent by it are addressed to."""
    inbound = c.eth_dst[(c.eth_dst >= 0) & (c.eth_dst != c.eth_src)]
    if not len(inbound):
        raise ConfigError("no frames addressed to a board in the capture; name the board with --node K")
    return int(np.bincount(inbound).argmax())


@dataclass
class Calibration:
    node: int
    frames_in: int
    frames_out: int
    forwarding: Estimate
    rate: Estimate
    ack: Estimate
    reduction: Estimate

    def estimates(self) -> list[Estimate]:
        return [self.forwarding, self.rate, self.ack, self.reduction]

    def as_dict(self) -> dict:
        return {"node": self.node, "frames_in": self.frames_in, "frames_out": self.frames_out,
                "confidence": LEVEL, "bootstrap": BOOTSTRAP,
                **{e.name: e.as_dict() for e in self.estimates()}}


def calibrate(c: Capture, node: int | None = None) -> Calibration:
    senders = np.unique(c.eth_src)
    if len(senders) == 1:
        raise ConfigError(f"every frame comes from one station ({senders[0]}): calibration needs both sides of "
                          "the board, the frames sent to it and its answers (the board.pcap of emu hw send --to)")
    K = board_of(c) if node is None else node
    mine = c.eth_src == K
    if not mine.any():
        raise ConfigError(f"no frames from board {K} (source MAC {MAC_PREFIX.hex()}{K:04x}) in the capture")
    if mine.all():
        raise ConfigError(f"only board {K}'s own frames in the capture: calibration needs both sides of it")
    h, t = c.h, c.t_ps
    op, src = h["op"].astype(np.int64), h["src_node"].astype(np.int64)
    probe = (op == Op.ack) & ((h["flags"] & Flags.ACK_REQ) != 0)
    # arrivals by name (the first arrival of a name), and of each message's last fragment
    first_in: dict = {}
    last_in: dict = {}
    contrib_in: dict = {}
    for i in np.flatnonzero(~mine).tolist():
        name = tuple(int(h[k][i]) for k in capdiff.KEY)
        first_in.setdefault(name, i)
        if op[i] not in REPLY_OPS:  # a reply names another message by its msg_id
            last_in[(int(src[i]), int(h["msg_id"][i]))] = int(t[i])
        if op[i] == Op.partial_state:
            contrib_in[(int(h["kv_id"][i]), int(h["layer"][i]))] = int(t[i])
    fwd_lat, fwd_idx, ack_lat, red_lat, seen = [], [], [], [], set()
    for j in np.flatnonzero(mine).tolist():
        if src[j] != K:  # a forwarded copy
            name = tuple(int(h[k][j]) for k in capdiff.KEY)
            i = first_in.get(name)
            if i is not None and name not in seen:
                seen.add(name)
                fwd_lat.append(int(t[j] - t[i]))
                fwd_idx.append((i, j))
        elif op[j] == Op.ack and not probe[j]:
            about = int(h["dst_set"][j]).bit_length() - 1
            arrived = last_in.get((about, int(h["msg_id"][j])))
            if arrived is not None:
                ack_lat.append(int(t[j]) - arrived)
        elif op[j] in (Op.partial_state, Op.reduce_result) and h["frag_idx"][j] == 0:
            arrived = contrib_in.get((int(h["kv_id"][j]), int(h["layer"][j])))
            if arrived is not None:
                red_lat.append(int(t[j]) - arrived)
    rates, pairs = [], 0
    for (i0, j0), (i1, j1) in zip(fwd_idx, fwd_idx[1:]):
        gap_out, gap_in = int(t[j1] - t[j0]), int(t[i1] - t[i0])
        pairs += 1
        # the next frame was waiting when this one left, and left later than it came in behind it
        if gap_out > 0 and t[i1] <= t[j0] and gap_out > BUSY * max(gap_in, 0):
            rates.append(c.wire[j1] * 8 * 1e12 / gap_out)
    if len(rates) * 2 <= pairs:  # mostly kept up: the gaps out are the sender's, not the board's
        rates = []
    rate = median_ci(np.array(rates), "datapath_rate", "bps")
    if not rates:
        rate.note = ("not measured: the board kept up with the frames it was sent (send them faster, "
                     "emu hw send --rate, to find its limit)" if fwd_idx else "no forwarded frames")
    return Calibration(K, int((~mine).sum()), int(mine.sum()), median_ci(np.array(fwd_lat), "forwarding_latency", "ps"),
                       rate, median_ci(np.array(ack_lat), "ack_turnaround", "ps"),
                       median_ci(np.array(red_lat), "reduction_latency", "ps"))


def _show(e: Estimate) -> str:
    from .units import format_value

    if e.median is None:
        return f"{e.name.replace('_', ' ')}: {e.note}"
    kind = "time" if e.unit == "ps" else "rate"
    return (f"{e.name.replace('_', ' ')}: {format_value(kind, round(e.median))} "
            f"(95 % CI {format_value(kind, round(e.low))} .. {format_value(kind, round(e.high))}, "
            f"{e.samples:,} samples)" + (f"; {e.note}" if e.note else ""))


def render(cal: Calibration, path) -> str:
    lines = [f"calibration of board {cal.node} from {path}: {cal.frames_in:,} frames in, {cal.frames_out:,} out"]
    lines += [f"  {_show(e)}" for e in cal.estimates()]
    return "\n".join(lines)


def profile_text(cal: Calibration, base: str, source: str) -> str:
    """The hardware profile: the base's fields, the NIC's measured; checked as a shipped one is."""
    from .workload.profiles import SCHEMA, _read, check

    raw, _ = _read("hw", base)
    values = dict(raw)
    values["name"] = f"{raw.get('name', 'board')}-calibrated"
    values["description"] = f"{raw.get('description', '')} (NIC calibrated from {source})".strip()
    if cal.forwarding.median is not None:
        values["nic_latency_ps"] = f"{round(cal.forwarding.median)}ps"
    if cal.rate.median is not None:
        values["nic_rate"] = f"{round(cal.rate.median)}bps"
    check("hw", values, "the calibrated profile")
    lines = [f"# Calibrated by emu calibrate from {source} (board {cal.node}); base profile {base}.",
             f"# Medians with 95 % bootstrap intervals ({BOOTSTRAP} resamples):"]
    lines += [f"#   {_show(e)}" for e in cal.estimates()]
    lines.append("# ack turnaround and reduction latency have no profile field: recorded here only.")
    for name in SCHEMA["hw"]:
        if name in values:
            v = values[name]
            lines.append(f"{name} = {_toml(v)}")
    return "\n".join(lines) + "\n"


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
