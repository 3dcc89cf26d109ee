"""What the frame kernel's event heap costs per event as it grows, against a bucketed calendar.

The kernel keeps its pending events in a binary heap (emu.heap) of about one entry per busy
link: a port's next look and the next arrival on its wire. Its median size was 29 entries
replaying MARS 16K on 16 boards and 256 on 64 boards (``--trace`` measures it for a trace), so
each event's sift costs more on a larger cluster. This script runs the hold model an event
simulator's queue is timed with: pop the earliest entry, push one later entry. The later
entry follows the kernel's mix: a third at the same instant (a grant after the arrivals of
that instant: a larger key), a third about 1.25 us ahead (a frame leaving a board's 16 Gb/s
datapath) and a third about 12.3 us ahead (an arrival after a 1500-byte frame at 1 Gb/s).

- ``heap``: the engine's own ``emu.heap.sift_down``, the popped root replaced by the new entry
  as the kernel does (one sift per event);
- ``calendar``: a sketch of a calendar queue (65.5 ns buckets on a wheel of 1024, entries
  in a bucket scanned for the earliest (time, key)), which the engine does not use: the
  comparison says what a queue whose cost does not grow with its size would save.

Both pop the same sequence (checked in the run). Each figure is ns per event (pop and push,
the model's own random draw included), the best of ``--repeat`` runs of ``--events``.

    python benchmarks/event_queue.py [--sizes 32,64,256,512,1024] [--json]
    python benchmarks/event_queue.py --trace mars_16k_64.json   # the kernel heap's size during a replay
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu import heap  # noqa: E402

BUCKET_SHIFT = 16  # a bucket spans 2**16 ps = 65.5 ns
BUCKETS = 1024     # the wheel: 67 us, past every entry the mix makes
CAPACITY = 256     # entries a bucket holds (the run stops if one would overflow)


@njit(inline="always")
def _pushed(t, k, n, r):
    """The entry pushed after popping (t, k): the kernel's mix of three kinds of event (``r``
    uniform in [0, 1)). Keys stay unique: entry i's key is always i modulo n."""
    if r < 1 / 3:  # the same instant, a later phase (a larger key); after the last phase, 1 ps on
        return (t, k + n) if k + n < 4 * n else (t + 1, k - 3 * n)
    if r < 2 / 3:
        return t + 1_250_000 + int(r * 1000), k
    return t + 12_300_000 + int(r * 100_000), k


@njit
def heap_hold(n, events, seed):
    np.random.seed(seed)
    H = np.zeros((n + 1, 2), np.int64)
    for i in range(n):
        heap.sift_up(H, 0, i, (np.int64(np.random.randint(0, 13_000_000)), np.int64(i)))
    check = 0
    for _ in range(events):
        t, k = H[0, 0], H[0, 1]
        check = check * 31 + t * 7 + k
        heap.sift_down(H, 0, n, 0, _pushed(t, k, n, np.random.random()))
    return check


@njit(inline="always")
def _cal_push(B, C, t, k):
    b = (t >> BUCKET_SHIFT) & (BUCKETS - 1)
    c = C[b]
    if c == CAPACITY:
        return False
    B[b, c, 0] = t
    B[b, c, 1] = k
    C[b] = c + 1
    return True


@njit(inline="always")
def _cal_pop(B, C, cur):
    """The earliest entry from bucket number ``cur`` (absolute) on: (time, key, its bucket number)."""
    while True:
        b = cur & (BUCKETS - 1)
        best, bt, bk = -1, np.int64(0), np.int64(0)
        for i in range(C[b]):
            t = B[b, i, 0]
            if t >> BUCKET_SHIFT == cur:  # this lap's entries only
                k = B[b, i, 1]
                if best < 0 or t < bt or (t == bt and k < bk):
                    best, bt, bk = i, t, k
        if best >= 0:
            last = C[b] - 1
            B[b, best, 0] = B[b, last, 0]
            B[b, best, 1] = B[b, last, 1]
            C[b] = last
            return bt, bk, cur
        cur += 1


@njit
def calendar_hold(n, events, seed):
    np.random.seed(seed)
    B = np.zeros((BUCKETS, CAPACITY, 2), np.int64)
    C = np.zeros(BUCKETS, np.int64)
    for i in range(n):
        if not _cal_push(B, C, np.int64(np.random.randint(0, 13_000_000)), np.int64(i)):
            return -1
    cur = np.int64(0)
    check = 0
    for _ in range(events):
        t, k, cur = _cal_pop(B, C, cur)
        check = check * 31 + t * 7 + k
        t2, k2 = _pushed(t, k, n, np.random.random())
        if not _cal_push(B, C, t2, k2):
            return -1
    return check


def timed(fn, n, events, repeat) -> float:
    fn(n, 1000, 1)  # compiled
    best = min(_once(fn, n, events) for _ in range(repeat))
    return 1e9 * best / events


def _once(fn, n, events) -> float:
    t0 = time.perf_counter()
    fn(n, events, 1)
    return time.perf_counter() - t0


def trace_heap(path: str) -> dict:
    """The kernel heap's size during a replay of ``path`` (on dateline routing), sampled at every
    progress step (2000 ops)."""
    from emu.net import kernel as K
    from emu.replay.run import Options, Replay
    from emu.workload.trace import load_trace

    rp = Replay(load_trace(path), Options(routing="dateline", progress="json"))
    SC, sizes = rp.net.SC, []
    rp._progress = lambda end=False: sizes.append(int(SC[K.SC_HEAP]))
    rp.run()
    a = np.array(sizes[1:-1] or sizes)
    return {"trace": path, "links": len(rp.net.links), "samples": int(a.size), "median": float(np.median(a)),
            "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)), "max": int(a.max())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32,64,256,512,1024", help="queue sizes (entries)")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", help="also measure the kernel heap's size replaying this trace")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        cal = calendar_hold(n, 200_000, 3)
        if cal == -1:
            print(f"event_queue: a calendar bucket overflowed ({CAPACITY} entries) at {n} entries", file=sys.stderr)
            return 1
        if cal != heap_hold(n, 200_000, 3):
            print(f"event_queue: the calendar sketch popped another order at {n} entries", file=sys.stderr)
            return 1
        h, c = timed(heap_hold, n, args.events, args.repeat), timed(calendar_hold, n, args.events, args.repeat)
        rows.append({"entries": n, "heap_ns": h, "calendar_ns": c, "heap_over_calendar": h / c})
    out = {"rows": rows}
    if args.trace:
        out["trace_heap"] = trace_heap(args.trace)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{'entries':>8} {'heap ns':>8} {'calendar ns':>12} {'heap/calendar':>14}")
    for r in rows:
        print(f"{r['entries']:>8} {r['heap_ns']:>8.1f} {r['calendar_ns']:>12.1f} {r['heap_over_calendar']:>13.2f}x")
    if args.trace:
        t = out["trace_heap"]
        print(f"kernel heap replaying {t['trace']} ({t['links']} links): median {t['median']:.0f} entries, "
              f"p10 {t['p10']:.0f}, p90 {t['p90']:.0f}, max {t['max']} ({t['samples']} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
