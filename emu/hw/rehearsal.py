"""What `emu hw serve` can add to rehearse a bring-up: a known latency, and one rule broken on purpose.

- ``DelayedSocket`` holds every frame the device sends for ``delay_ns`` after the device
  handed it over, then sends it (a board whose NIC takes that much longer): `emu
  calibrate` must find it again.
- ``break_rule`` (the names in ``emu.hw.defaults.BROKEN_RULES``): test-only faults that break one NIC rule in what the device sends,
  so that a golden diff or a check can be seen to fail on the right frames. They act on
  the frames on their way out, so the device's own rules stay as they are.
"""

from __future__ import annotations

import collections
import time

import numpy as np

from ..codec import Flags, Op
from ..codec.layer import FRAME_OFFSETS

_TTL, _SRC, _OP, _FLAGS, _MSG_ID = (FRAME_OFFSETS[f] for f in ("ttl", "src_node", "op", "flags", "msg_id"))



def break_rule(rule: str, node: int, buf: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The frames of (``buf``, ``offsets``) with ``rule`` broken (a copy)."""
    out = np.array(buf, np.uint8)
    starts = np.asarray(offsets[:-1], np.int64)
    if rule == "ttl":
        src = out[starts + _SRC].astype(np.int64) << 8 | out[starts + _SRC + 1]
        fwd = starts[src != node]  # another board's frame going out: a forwarded copy
        out[fwd + _TTL] = np.minimum(out[fwd + _TTL].astype(np.int64) + 1, 255).astype(np.uint8)
    elif rule == "ack-msg-id":
        src = out[starts + _SRC].astype(np.int64) << 8 | out[starts + _SRC + 1]
        acks = starts[(src == node) & (out[starts + _OP] == Op.ack) & ((out[starts + _FLAGS] & Flags.ACK_REQ) == 0)]
        for s in acks.tolist():
            mid = (int.from_bytes(bytes(out[s + _MSG_ID : s + _MSG_ID + 4]), "big") + 1) & 0xFFFFFFFF
            out[s + _MSG_ID : s + _MSG_ID + 4] = np.frombuffer(mid.to_bytes(4, "big"), np.uint8)
    return out


class DelayedSocket:
    """A RawSocket whose sends leave ``delay_ns`` late (and, with ``rule``, with one rule broken)."""

    def __init__(self, sock, *, delay_ns: int = 0, rule: str | None = None, node: int = 0):
        self.sock, self.delay_ns, self.rule, self.node = sock, int(delay_ns), rule, node
        self.iface, self.mtu = sock.iface, sock.mtu
        self.held: collections.deque = collections.deque()  # (due monotonic ns, buf, offsets)

    def send(self, buf, offsets, start: int = 0, stop=None) -> int:
        offsets = np.asarray(offsets, np.int64)
        stop = len(offsets) - 1 if stop is None else stop
        offs = offsets[start : stop + 1] - offsets[start]
        frames = np.array(buf[offsets[start] : offsets[stop]], np.uint8)
        if self.rule:
            frames = break_rule(self.rule, self.node, frames, offs)
        if self.delay_ns <= 0:
            self.sock.send(frames, offs)
        else:
            self.held.append((time.monotonic_ns() + self.delay_ns, frames, offs))
        return stop - start

    def flush(self) -> None:
        now = time.monotonic_ns()
        while self.held and self.held[0][0] <= now:
            _, frames, offs = self.held.popleft()
            self.sock.send(frames, offs)

    def recv(self, timeout: float | None = 0.1):
        """The socket's recv, sending held frames as they fall due while it waits."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self.flush()
            wait = timeout if end is None else max(0.0, end - time.monotonic())
            if self.held:
                due = (self.held[0][0] - time.monotonic_ns()) / 1e9
                wait = max(0.0, due) if wait is None else min(wait, max(0.0, due))
            buf, offsets, ts = self.sock.recv(timeout=wait)
            if len(offsets) > 1 or (end is not None and time.monotonic() >= end):
                self.flush()
                return buf, offsets, ts

    def __getattr__(self, name):
        return getattr(self.sock, name)
