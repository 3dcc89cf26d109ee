"""`emu hw send`: put MCF frames from a capture (or a trace's replay) on the wire, paced.

Frames are sent as the capture holds them, byte for byte (no scapy on the way:
``sendmmsg`` of the capture's own bytes); a frame captured shorter than its
wire length (a headers-only capture) is padded with zeros to it. Pacing:

- as fast as possible (default);
- ``rate``: bits per second of line time, counting each frame as the emulator's
  links do (``emu.net.ethernet.wire_bytes``: frame, FCS, preamble, inter-frame gap);
- ``original``: the capture's own timestamps, relative to its first frame.

``count`` stops after that many frames, going through the source again if it holds fewer.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..codec import ETHERTYPE, FRAME_HEADER_LEN
from ..codec.batch import scan_frames
from ..codec.pcap import LINKTYPE_ETHERNET, read_capture
from ..codec.segments import copy_segments
from ..errors import ConfigError, DecodeError
from ..net.ethernet import WIRE_OVERHEAD, MIN_FRAME
from .errors import MtuTooSmall
from ..codec.mac import ETH_LEN
from .rawsock import RawSocket


@dataclass
class Survey:
    """What a first pass over the source found."""

    frames: int
    largest: int          # longest frame on the wire (bytes, Ethernet header included)
    largest_at: int       # its record number
    malformed: int        # frames the MCF decoder would reject (sent anyway: boards must reject them too)
    first_ns: int | None
    last_ns: int | None


def batches(path, *, batch_bytes: int = 4 << 20):
    """The capture's frames, whole (zero-padded to their wire length): (buf, offsets, ts_ns, first_record)."""
    for b in read_capture(path, batch_bytes=batch_bytes):
        if b.linktype != LINKTYPE_ETHERNET:
            raise DecodeError(f"{path}: link type {b.linktype}, expected Ethernet ({LINKTYPE_ETHERNET})")
        caplen = np.diff(b.offsets)
        wire = b.wirelen
        if (caplen == wire).all():
            yield b.buf, b.offsets, b.ts_ns, b.first_record
            continue
        offsets = np.zeros(len(wire) + 1, np.int64)
        np.cumsum(wire, out=offsets[1:])
        buf = np.zeros(int(offsets[-1]), np.uint8)
        copy_segments(buf, offsets[:-1], b.buf, b.offsets[:-1], np.minimum(caplen, wire))
        yield buf, offsets, b.ts_ns, b.first_record


def survey(path) -> Survey:
    """First pass: count frames, find the longest, check every frame is an MCF (EtherType 0x88B5) frame."""
    frames = largest = largest_at = malformed = 0
    first = last = None
    for buf, offsets, ts, rec in batches(path):
        n = len(offsets) - 1
        if not n:
            continue
        lens = np.diff(offsets)
        short = np.flatnonzero(lens < ETH_LEN)
        if len(short):
            raise DecodeError(f"{path}: frame {rec + int(short[0]) + 1}: {int(lens[short[0]])} bytes, not an Ethernet frame")
        et = buf[offsets[:-1] + 12].astype(np.uint16) << 8 | buf[offsets[:-1] + 13]
        other = np.flatnonzero(et != ETHERTYPE)
        if len(other):
            i = int(other[0])
            raise ConfigError(f"{path}: frame {rec + i + 1}: EtherType 0x{int(et[i]):04x}, not an MCF frame "
                              f"(0x{ETHERTYPE:04x}); send puts MCF frames only")
        _, codes, _, _ = scan_frames(buf, offsets)
        malformed += int((codes != 0).sum())
        k = int(lens.argmax())
        if lens[k] > largest:
            largest, largest_at = int(lens[k]), rec + k
        first = int(ts[0]) if first is None else first
        last = int(ts[-1])
        frames += n
    return Survey(frames, largest, largest_at, malformed, first, last)


@contextmanager
def trace_capture(trace: str, *, topology: str = "auto", filters=(), progress: bool = False):
    """Replay ``trace`` on the emulator with a headers-only capture; yields the capture's path."""
    with replay_capture(trace, topology=topology, filters=filters, progress=progress) as (path, _):
        yield path


@contextmanager
def replay_capture(trace, *, topology: str = "auto", filters=(), progress: bool = False, **options):
    """Replay ``trace`` with a headers-only capture in a temporary file (``options``: more of
    ``emu.replay.session.replay``'s); yields (the capture's path, the replay's Result)."""
    from ..replay.session import replay

    fd, path = tempfile.mkstemp(prefix="mcfemu-send-", suffix=".pcap")
    os.close(fd)
    os.unlink(path)
    try:
        res = replay(trace, topology=topology, capture=path, capture_filter=list(filters), snaplen=FRAME_HEADER_LEN,
                     progress=progress, **options)
        yield path, res
    finally:
        if os.path.exists(path):
            os.unlink(path)


@dataclass
class SendStats:
    frames: int = 0
    bytes: int = 0
    elapsed: float = 0.0
    late_ns: int = 0  # how far behind its schedule the paced send ended (the last frame left late)
    scheduled_ns: int = 0  # when the schedule had the last frame leave (paced sends; 0: unpaced)

    # A paced send this far behind its schedule (and at least 1 % of it) did not keep the pace.
    BEHIND_NS = 1_000_000

    @property
    def behind(self) -> bool:
        return self.late_ns > max(self.BEHIND_NS, self.scheduled_ns // 100)

    def line(self) -> str:
        fps = self.frames / self.elapsed if self.elapsed > 0 else 0.0
        bps = self.bytes * 8 / self.elapsed if self.elapsed > 0 else 0.0
        text = (f"sent {self.frames:,} frames ({self.bytes:,} bytes) in {self.elapsed:.3f} s: "
                f"{fps:,.0f} frames/s, {bps / 1e6:,.1f} Mbit/s of frames")
        if self.behind:  # said on the human line, not only in --json: the pace asked was not kept
            text += (f"; BEHIND SCHEDULE: the last frame left {self.late_ns / 1e9:.3f} s late on a "
                     f"{self.scheduled_ns / 1e9:.3f} s schedule (this host could not keep the pace asked)")
        return text


def check_mtu(sock: RawSocket, sv: Survey, where: str) -> None:
    if sv.largest - ETH_LEN > sock.mtu:
        need = sv.largest - ETH_LEN
        raise MtuTooSmall(f"{where}: frame {sv.largest_at + 1}: a frame of {sv.largest} bytes needs MTU {need}, "
                          f"{sock.iface} has MTU {sock.mtu}; raise it: ip link set {sock.iface} mtu {need}")


def send(sock: RawSocket, path, *, rate_bps: int | None = None, original: bool = False, count: int | None = None,
         frames_in_source: int | None = None, stop=None, sent_ns: np.ndarray | None = None) -> SendStats:
    """Send the capture's frames (all, or ``count``, cycling) paced by ``rate_bps`` or the original timing.
    ``sent_ns``: an array of one slot per frame sent, filled with the wall-clock ns (``time.time_ns``,
    the clock of received frames' kernel timestamps) when the socket took each frame."""
    st = SendStats()
    t0 = time.perf_counter_ns()
    base = 0          # schedule time (ns from t0) of the current pass's first frame
    prev_pass_span = 0
    sent = 0
    total = count
    while total is None or sent < total:
        pass_first_ts = None
        any_frames = False
        for buf, offsets, ts, _ in batches(path):
            n = len(offsets) - 1
            if n == 0:
                continue
            any_frames = True
            if total is not None and sent + n > total:
                n = total - sent
                offsets = offsets[: n + 1]
                ts = ts[:n]
            if pass_first_ts is None:
                pass_first_ts = int(ts[0])
            lens = np.diff(offsets)
            if rate_bps:
                line = (np.maximum(lens, MIN_FRAME) + WIRE_OVERHEAD) * 8 * 1_000_000_000
                before = np.concatenate([[0], np.cumsum(line)[:-1]]) // rate_bps
                due = base + before
                base = base + int(line.sum() // rate_bps)
            elif original:
                due = base + (ts - pass_first_ts)
                prev_pass_span = int(ts[-1] - pass_first_ts)
            else:
                due = None
            _paced(sock, buf, offsets, due, t0, st, stop, sent_ns)
            sent += n
            if stop is not None and stop():
                total = sent
                break
            if total is not None and sent >= total:
                break
        if not any_frames:
            break
        if count is None:
            break
        if original:
            # the next pass starts one average gap after this one ended
            gap = prev_pass_span // max(1, (frames_in_source or 2) - 1)
            base += prev_pass_span + gap
    done = time.perf_counter_ns() - t0
    st.elapsed = done / 1e9
    if st.scheduled_ns:  # how far behind its schedule the paced send ended
        st.late_ns = max(0, done - st.scheduled_ns)
    return st


def _paced(sock: RawSocket, buf, offsets, due, t0: int, st: SendStats, stop, sent_ns=None) -> None:
    n = len(offsets) - 1
    if due is None:
        sock.send(buf, offsets, 0, n)
        if sent_ns is not None:
            sent_ns[st.frames : st.frames + n] = time.time_ns()
        st.frames += n
        st.bytes += int(offsets[n] - offsets[0])
        return
    i = 0
    while i < n:
        now = time.perf_counter_ns() - t0
        k = int(np.searchsorted(due, now, side="right"))
        if k > i:
            sock.send(buf, offsets, i, k)
            if sent_ns is not None:
                sent_ns[st.frames : st.frames + k - i] = time.time_ns()
            st.frames += k - i
            st.bytes += int(offsets[k] - offsets[i])
            st.scheduled_ns = int(due[k - 1])
            i = k
            continue
        wait = int(due[i]) - now
        if wait > 200_000:
            time.sleep((wait - 100_000) / 1e9)
            if stop is not None and stop():
                return
        elif wait > 20_000:
            time.sleep(0)
