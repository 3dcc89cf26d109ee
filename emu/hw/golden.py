"""`emu hw send TRACE --to K`: the golden diff of board K against the emulator's NIC.

The trace is replayed once on the emulator (reliable NICs, so acks are on the wire)
with a headers-only capture of every link touching board K. A classic pcap names the
hop by its Ethernet addresses (source MAC: the transmitting board, destination MAC: the
receiving one), which splits the capture in two:

- **inbound**: the frames on K's inbound links, sent to the device as the boards that
  transmitted them (their source MACs; the device takes a forwarded copy only from its
  upstream board), at the replay's own timing by default;
- **expected**: the frames on K's outbound links that K's NIC sent in answer: forwarded
  copies of other boards' frames and K's acks / nacks. The frames K's compute engine
  originates (its own messages, their probes, and the reduction results that need its
  own contribution) are not an answer to anything sent here and are left out. One
  interface is all of K's ports, so a frame the emulator forwarded on several links is
  expected once. The capture marks every frame SYNTH (timing mode); a header-only frame
  (ack, probe) carries no payload, so SYNTH is cleared there on both sides, as a live
  board sends it.

The replay runs with retransmission timeouts of 1 s (``QUIET_TIMERS``): in a lossless
run no sender probes, so no probe races the device's answer. The board's order is
compared with the emulator's and frames it sends in another order are reported, but
two answers microseconds apart in the emulator may leave a real board either way round:
only missing, extra and differing frames fail the diff.

What the device sends back (source MAC = K's) is collected until every expected frame
has come or ``timeout`` passes, then for ``settle`` more, and diffed with
``emu.codec.capdiff`` (frames named by Wireshark's numbers in expected.pcap and
got.pcap). The run also writes ``board.pcap``: the frames sent (stamped when the socket
took them) and received (kernel timestamps) on one clock, what ``emu calibrate`` reads.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..codec import REPLY_OPS, Flags, Op
from ..codec import capdiff
from ..codec.batch import scan_frames
from ..codec.layer import FRAME_OFFSETS
from ..codec.mac import MAC_PREFIX
from ..codec.pcap import CaptureWriter
from ..errors import ConfigError
from .rawsock import RawSocket

# The replay's retransmission timers, long enough that no sender probes in a lossless run: a
# probe racing the device's answer would make the diff depend on how fast the device is
QUIET_TIMERS = {"hw.rto_min_ps": "1s", "hw.rto_initial_ps": "1s"}


def board_mac(K: int) -> np.ndarray:
    return np.frombuffer(MAC_PREFIX + int(K).to_bytes(2, "big"), np.uint8)


@dataclass
class Frames:
    """Whole frames in memory: bytes, offsets, simulated or wall-clock ns."""

    buf: np.ndarray
    offsets: np.ndarray
    ts_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def take(self, idx) -> "Frames":
        idx = np.asarray(idx, np.int64)
        lens = np.diff(self.offsets)[idx]
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        parts = [self.buf[self.offsets[i] : self.offsets[i + 1]] for i in idx.tolist()]
        buf = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return Frames(buf, offsets, self.ts_ns[idx])

    def write(self, path, snaplen: int = 65535) -> None:
        with CaptureWriter(path, snaplen=snaplen) as w:
            if len(self):
                w.write(self.buf, self.offsets, self.ts_ns)

    @staticmethod
    def join(parts: list["Frames"]) -> "Frames":
        parts = [p for p in parts if len(p)]
        if not parts:
            return Frames(np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.int64))
        lens = np.concatenate([np.diff(p.offsets) for p in parts])
        offsets = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return Frames(np.concatenate([p.buf for p in parts]), offsets, np.concatenate([p.ts_ns for p in parts]))


@dataclass
class Plan:
    """What to send board K and what it must send back."""

    node: int
    topology: str
    inbound: Frames
    expected: Frames
    skipped_own: int  # frames on K's outbound links that its compute engine originated


def _read_whole(path) -> Frames:
    """A headers-only capture's frames, zero-padded to their wire length."""
    from .send import batches

    parts = [Frames(np.array(buf, np.uint8), np.array(off, np.int64), np.array(ts, np.int64))
             for buf, off, ts, _ in batches(path)]
    return Frames.join(parts)


def plan(trace, K: int, *, topology: str = "auto", progress: bool = False) -> Plan:
    """Replay ``trace`` and split board K's links into what it receives and what it must answer."""
    from .send import replay_capture

    with replay_capture(trace, topology=topology, filters=[f"node={K}"], progress=progress, reliable=True,
                        set=dict(QUIET_TIMERS)) as (path, res):
        whole = _read_whole(path)
    boards = int(res.summary.get("nodes", 0))
    topo = str(res.summary.get("topology") or topology)
    if not 0 <= K < boards:
        raise ConfigError(f"--to {K}: the trace has boards 0..{boards - 1}")
    if not len(whole):
        raise ConfigError(f"--to {K}: board {K} receives no frames in this trace")
    starts = whole.offsets[:-1]
    eth = whole.buf[starts[:, None] + np.arange(12)]
    mac = board_mac(K)
    inbound = np.flatnonzero((eth[:, 0:6] == mac).all(axis=1))
    outbound = np.flatnonzero((eth[:, 6:12] == mac).all(axis=1))
    if not len(inbound):
        raise ConfigError(f"--to {K}: board {K} receives no frames in this trace")
    h, _, _, _ = scan_frames(whole.buf, whole.offsets)
    _clear_synth(whole, h["pay_len"] == 0)
    out = whole.take(outbound)
    h = h[outbound]
    probe = (h["op"] == Op.ack) & ((h["flags"] & Flags.ACK_REQ) != 0)
    answer = (h["src_node"] != K) | (np.isin(h["op"], REPLY_OPS) & ~probe)
    # one copy per frame name: one interface is all of K's ports
    first, seen = np.zeros(len(h), bool), set()
    for i, name in enumerate(zip(*(h[k].tolist() for k in capdiff.KEY))):
        if answer[i] and name not in seen:
            seen.add(name)
            first[i] = True
    return Plan(K, topo, whole.take(inbound), out.take(np.flatnonzero(first)), int((~answer).sum()))


def _clear_synth(f: Frames, which: np.ndarray) -> Frames:
    pos = f.offsets[:-1][which] + FRAME_OFFSETS["flags"]
    f.buf[pos] &= np.uint8(~int(Flags.SYNTH) & 0xFF)
    return f


@dataclass
class Run:
    plan: Plan
    got: Frames
    sent_ns: np.ndarray   # wall-clock ns each inbound frame left
    diff: capdiff.Diff
    elapsed: float


def run(plan: Plan, sock: RawSocket, folder: Path, *, rate_bps: int | None = None, original: bool = True,
        timeout: float = 2.0, settle: float = 0.1) -> Run:
    """Send the plan's inbound frames, collect the device's, write the captures to ``folder``, diff."""
    from . import send as S

    folder.mkdir(parents=True, exist_ok=True)
    inbound_path = folder / "inbound.pcap"
    plan.inbound.write(inbound_path)
    plan.expected.write(folder / "expected.pcap")
    sock.drain()
    t0 = time.monotonic()
    sent_ns = np.zeros(len(plan.inbound), np.int64)
    S.send(sock, inbound_path, rate_bps=rate_bps, original=original and not rate_bps, sent_ns=sent_ns)
    want = _names_of(plan.expected)
    got_parts: list[Frames] = []
    mac = board_mac(plan.node)
    have: dict = {}

    def collect(until: float, stop_when_done: bool) -> None:
        while True:
            now = time.monotonic()
            if now >= until or (stop_when_done and all(have.get(k, 0) >= n for k, n in want.items())):
                return
            buf, offsets, ts = sock.recv(timeout=min(0.05, until - now))
            if len(offsets) == 1:
                continue
            f = Frames(np.array(buf, np.uint8), np.array(offsets, np.int64), np.array(ts, np.int64))
            mine = np.flatnonzero((f.buf[f.offsets[:-1, None] + 6 + np.arange(6)] == mac).all(axis=1))
            if len(mine):
                f = f.take(mine)
                got_parts.append(f)
                for k, n in _names_of(f).items():
                    have[k] = have.get(k, 0) + n

    collect(time.monotonic() + timeout, True)
    collect(time.monotonic() + settle, False)
    got = Frames.join(got_parts)
    got.write(folder / "got.pcap")
    both = Frames.join([Frames(plan.inbound.buf, plan.inbound.offsets, sent_ns), got])
    order = np.argsort(both.ts_ns, kind="stable")
    both.take(order).write(folder / "board.pcap")
    d = capdiff.diff(capdiff.load(folder / "expected.pcap"), capdiff.load(folder / "got.pcap"))
    return Run(plan, got, sent_ns, d, time.monotonic() - t0)


def _names_of(f: Frames) -> dict:
    out: dict = {}
    if not len(f):
        return out
    h, codes, _, _ = scan_frames(f.buf, f.offsets)
    for key in zip(*(h[k][codes == 0].tolist() for k in capdiff.KEY)):
        out[key] = out.get(key, 0) + 1
    return out


def passed(d: capdiff.Diff) -> bool:
    """The golden diff's verdict: every expected frame, none extra, every field the same."""
    return not (d.missing or d.extra or d.differing)


def as_dict(r: Run) -> dict:
    p = r.plan
    return {"node": p.node, "topology": p.topology, "sent": len(p.inbound), "expected": len(p.expected),
            "own_frames_left_out": p.skipped_own, "received": len(r.got), "elapsed_s": r.elapsed,
            "ok": passed(r.diff), "diff": capdiff.as_dict(r.diff)}


def render(r: Run, iface: str) -> str:
    p = r.plan
    head = (f"golden diff of board {p.node} ({p.topology}) on {iface}: sent the {len(p.inbound):,} frames it "
            f"receives in the trace, expected {len(p.expected):,} back (forwarded copies, acks; "
            f"{p.skipped_own:,} frames its compute engine originates left out), received {len(r.got):,}")
    moved = f" ({len(r.diff.reordered):,} in another order: reported, not judged)" if r.diff.reordered else ""
    verdict = ("PASS: every expected frame came back, field for field" + moved if passed(r.diff) else
               "FAIL: the board's frames differ from the emulator's NIC (frames above)")
    return head + "\n" + capdiff.render(r.diff) + "\n" + verdict + hint(r)


def hint(r: Run) -> str:
    """What a failed run most often means, when its numbers say so: a board that answered
    nothing still remembers the trace's messages from an earlier run (a NIC drops a repeat of
    a message it delivered), and one that answered part fell behind the replay's pace."""
    if passed(r.diff) or not r.plan.expected:
        return ""
    if not r.got:
        return ("\nhint: the board sent nothing back; a board that already received this trace drops its "
                "messages as repeats: reset it (restart serve) before each golden run")
    if len(r.diff.missing) > len(r.plan.expected) // 10:
        return (f"\nhint: {len(r.diff.missing):,} of {len(r.plan.expected):,} expected frames missing: if the board "
                "cannot keep the replay's pace, pace the run with --rate (e.g. --rate 100Mbps)")
    return ""


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="mcfemu-golden-"))
