"""Timing goals that tests used to assert against the clock (a test cannot know how loaded
the machine is; a benchmark says when and how it was measured):

- ``trace_load``: each shipped 16K trace loads (``load_trace``) in under 2 s;
- ``probe_after_partials``: ``emu hw serve`` answers a probe in under 2 s while it holds
  4,000 partial 65,535-fragment messages (36.9 s before the reassembly bounds).

Prints each figure (median of ``--repeats``) against its goal.

    python benchmarks/timing_goals.py [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOALS_S = {"trace_load": 2.0, "probe_after_partials": 2.0}


def trace_load() -> float:
    """The slowest of the six shipped 16K traces' loads."""
    from emu.workload.trace import load_trace

    worst = 0.0
    for name in ("mars", "ring", "zigzag", "pd", "ulysses", "usp"):
        start = time.perf_counter()
        load_trace(ROOT / "traces" / f"{name}_16k.json")
        worst = max(worst, time.perf_counter() - start)
    return worst


def probe_after_partials() -> float:
    from emu.codec import Op, encode_frames, fragment
    from emu.hw import board as M
    from emu.hw.serve import Device, ServeLimits

    class Sink:
        iface, mtu = "sink0", 1500

        def send(self, buf, offsets, start=0, stop=None):
            return (len(offsets) - 1 if stop is None else stop) - start

    d = Device(M.Board(node=1), Sink(), limits=ServeLimits(partial_messages=4000))
    for m in range(4000):
        h, p = fragment(dict(op=int(Op.kv_transfer), src_node=0, dst_set=2, msg_id=m), data=b"x" * 100)
        h["frag_cnt"], h["msg_len"] = 0xFFFF, 0xFFFF * 100
        d.handle(*encode_frames(h, p))
    h, _ = fragment(M.control_meta(0, 1, Op.ack, msg_id=3999, seq=0, probe=True), data=b"")
    frames = encode_frames(h, np.zeros(0, np.uint8))
    start = time.perf_counter()
    d.handle(*frames)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    got = {}
    for name, fn in (("trace_load", trace_load), ("probe_after_partials", probe_after_partials)):
        got[name] = statistics.median(fn() for _ in range(args.repeats))
    if args.json:
        print(json.dumps({k: {"seconds": v, "goal_s": GOALS_S[k], "met": v < GOALS_S[k]} for k, v in got.items()}))
    else:
        for k, v in got.items():
            print(f"{k:22s} {v:8.3f} s  goal < {GOALS_S[k]:.1f} s  {'met' if v < GOALS_S[k] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
