"""`emu hw listen`: receive MCF frames from an interface, validate them in batches, count, capture.

The hot loop does one ``recvmmsg`` per batch (up to ``batch`` frames), one
``scan_frames`` per batch (every check of the wire format, vectorized), a few
``bincount``s, and, with a capture, one ``CaptureWriter.write`` per batch.
Messages are tracked by 16 bytes per valid frame (message key, fragment index,
fragment count) and put together at the end: complete, incomplete (with their
missing fragments) and duplicate fragments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..codec import Op
from ..codec.batch import REASONS, scan_frames
from .rawsock import RawSocket

EXAMPLES = 5


@dataclass
class Stats:
    frames: int = 0
    bytes: int = 0
    valid: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    started: float = 0.0
    elapsed: float = 0.0
    cpu: float = 0.0      # CPU seconds of this process while listening
    kernel_drops: int = 0
    interrupted: bool = False
    truncated: int = 0
    malformed: np.ndarray = field(default_factory=lambda: np.zeros(len(REASONS), np.int64))
    per_op: np.ndarray = field(default_factory=lambda: np.zeros(256, np.int64))
    per_src: np.ndarray = field(default_factory=lambda: np.zeros(1 << 16, np.int64))
    examples: list = field(default_factory=list)
    keys: list = field(default_factory=list)
    idxs: list = field(default_factory=list)
    cnts: list = field(default_factory=list)

    def add(self, buf, offsets, ts) -> None:
        n = len(offsets) - 1
        h, codes, _, _ = scan_frames(buf, offsets)
        self.frames += n
        self.bytes += int(offsets[-1] - offsets[0])
        if self.first_ns is None:
            self.first_ns = int(ts[0])
        self.last_ns = int(ts[-1])
        if codes.any():
            self.malformed += np.bincount(codes, minlength=len(REASONS))
            from ..codec.batch import describe

            for i in np.flatnonzero(codes)[: max(0, EXAMPLES - len(self.examples))].tolist():
                row = {f: h[f][i] for f in h.dtype.names}
                row["ethertype"] = int(buf[offsets[i] + 12]) << 8 | int(buf[offsets[i] + 13])
                self.examples.append(describe(int(codes[i]), self.frames - n + i, row, int(offsets[i + 1] - offsets[i])))
            h = h[codes == 0]
        self.valid += len(h)
        self.per_op += np.bincount(h["op"], minlength=256)
        self.per_src += np.bincount(h["src_node"], minlength=1 << 16)
        self.keys.append(h["src_node"].astype(np.uint64) << np.uint64(32) | h["msg_id"].astype(np.uint64))
        self.idxs.append(h["frag_idx"].astype(np.uint64))
        self.cnts.append(h["frag_cnt"].astype(np.int64))

    def messages(self, limit: int = 10):
        """(summary, incomplete messages): each message by (src_node, msg_id)."""
        from ..codec.summary import message_accounting

        return message_accounting(self.keys, self.idxs, self.cnts, limit)

    def as_dict(self) -> dict:
        msgs, incomplete = self.messages()
        span = (self.last_ns - self.first_ns) / 1e9 if self.first_ns is not None else 0.0
        return {
            "frames": self.frames,
            "bytes": self.bytes,
            "valid_frames": self.valid,
            "elapsed_s": round(self.elapsed, 6),
            "cpu_s": round(self.cpu, 6),
            "arrival_span_s": span,
            "frames_per_s": round((self.frames - 1) / span, 1) if span > 0 else None,
            "kernel_drops": self.kernel_drops,
            "truncated": self.truncated,
            "malformed": {REASONS[i]: int(c) for i, c in enumerate(self.malformed) if i and c},
            "malformed_examples": self.examples,
            "per_op": {(Op(i).name if i in Op._value2member_map_ else f"op{i}"): int(c)
                       for i, c in enumerate(self.per_op) if c},
            "per_src": {str(i): int(c) for i, c in enumerate(self.per_src) if c},
            "messages": msgs,
            "incomplete": incomplete,
        }


def listen(sock: RawSocket, *, count: int | None = None, timeout: float | None = None, writer=None,
           stop=None, on_batch=None) -> Stats:
    """Receive until ``count`` frames, ``timeout`` seconds, or ``stop()``; count and optionally capture."""
    st = Stats(started=time.monotonic())
    cpu0 = time.process_time()
    end = None if timeout is None else st.started + timeout
    sock.kernel_stats()  # reset the kernel's counters
    try:
        while (count is None or st.frames < count) and (stop is None or not stop()):
            now = time.monotonic()
            if end is not None and now >= end:
                break
            wait = 0.2 if end is None else min(0.2, end - now)
            buf, offsets, ts = sock.recv(timeout=wait)
            n = len(offsets) - 1
            if n == 0:
                continue
            if count is not None and st.frames + n > count:
                n = count - st.frames
                offsets, ts = offsets[: n + 1], ts[:n]
                buf = buf[: int(offsets[-1])]
            st.add(buf, offsets, ts)
            if writer is not None:
                writer.write(buf, offsets, ts)
            if on_batch is not None:
                on_batch(st)
    except KeyboardInterrupt:  # Ctrl-C ends a listen like --timeout: the counters still count
        st.interrupted = True
    finally:
        st.elapsed = time.monotonic() - st.started
        st.cpu = time.process_time() - cpu0
        st.kernel_drops += sock.kernel_stats()[1]
        st.truncated = sock.truncated
    return st


def render(s: dict, iface: str, out: str | None) -> str:
    lines = [f"listened on {iface} for {s['elapsed_s']:.3f} s" + (f", capture {out}" if out else "")]
    rate = f", {s['frames_per_s']:,.0f} frames/s over {s['arrival_span_s']:.3f} s of arrivals" if s["frames_per_s"] else ""
    lines.append(f"frames     {s['frames']:,} ({s['valid_frames']:,} valid), {s['bytes']:,} bytes{rate}")
    bad = s["malformed"]
    lines.append(f"malformed  {sum(bad.values()):,}" + (" (" + ", ".join(f"{k}: {v:,}" for k, v in bad.items()) + ")"
                                                       if bad else ""))
    lines += [f"  {e}" for e in s["malformed_examples"]]
    if s["kernel_drops"] or s["truncated"]:
        lines.append(f"lost       {s['kernel_drops']:,} dropped by the kernel (socket buffer full), "
                     f"{s['truncated']:,} cut (longer than the interface MTU)")
    m = s["messages"]
    lines.append(f"messages   {m['total']:,}: {m['complete']:,} complete, {m['incomplete']:,} incomplete, "
                 f"{m['duplicate_fragments']:,} duplicate fragments")
    if s["per_op"]:
        lines.append("per op     " + ", ".join(f"{k}: {v:,}" for k, v in s["per_op"].items()))
    if s["incomplete"]:
        lines.append("incomplete (first 10): src msg_id received/frag_cnt missing")
        for r in s["incomplete"]:
            lines.append(f"  n{r['src_node']} #{r['msg_id']} {r['received']}/{r['frag_cnt']} "
                         + ",".join(map(str, r["missing"])))
    return "\n".join(lines)
