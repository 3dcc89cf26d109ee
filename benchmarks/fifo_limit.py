"""The numpy FIFO limit: the least a frame-level model can spend per frame-hop in numpy.

Every frame-level model of a port computes, for each frame in turn, the FIFO (Lindley)
recursion: it starts when it has arrived and the frame before it has left, and leaves one
serialization later. numpy evaluates that recursion for a whole stream at once (prefix sums
and a running maximum: end_i = C_i + max_{j<=i}(arr_j - C_{j-1}), C the serialization times
summed), so a stream of frames through a tandem of links, one vectorised pass per link,
costs a few array passes per frame-hop: no routing, no merge of streams at a port, no
arbiter, no events. That is the floor this script measures, in nanoseconds per frame-hop,
for the replay benchmark to print each run's distance to it (benchmarks/replay.py).

    python benchmarks/fifo_limit.py [--frames 2000000] [--hops 8] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def through_links(arrive: np.ndarray, ser: np.ndarray, hops: int, latency: int) -> np.ndarray:
    """Arrival times at the far end of ``hops`` FIFO links in series, each with serialization
    times ``ser`` (the frames keep their sizes) and ``latency`` ps of propagation."""
    done = np.cumsum(ser)  # C_i
    before = done - ser    # C_{i-1}
    t = arrive
    for _ in range(hops):
        t = done + np.maximum.accumulate(t - before) + latency
    return t


def fifo(arrive: np.ndarray, ser: np.ndarray) -> np.ndarray:
    """The plain recursion, one frame at a time: what ``through_links`` must equal for one link."""
    end = np.empty_like(arrive)
    last = np.iinfo(np.int64).min
    for i in range(arrive.size):
        last = max(int(arrive[i]), last) + int(ser[i])
        end[i] = last
    return end


def measure(frames: int, hops: int, repeat: int, seed: int = 0) -> float:
    """Median ns per frame-hop of ``through_links`` over ``frames`` frames and ``hops`` links."""
    rng = np.random.default_rng(seed)
    # 1 Gb/s: 8 ps per byte; frames of 64-1538 bytes offered at about 80% of the line rate
    ser = 8 * rng.integers(84, 1538, frames, dtype=np.int64)
    arrive = np.cumsum(rng.exponential(ser.mean() / 0.8, frames).astype(np.int64))
    through_links(arrive[:1000], ser[:1000], hops, 1_000_000)  # warm the code paths
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        through_links(arrive, ser, hops, 1_000_000)
        runs.append((time.perf_counter() - t0) * 1e9 / (frames * hops))
    return statistics.median(runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=2_000_000)
    ap.add_argument("--hops", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ns = measure(args.frames, args.hops, args.repeat)
    if args.json:
        print(json.dumps({"ns_per_frame_hop": ns, "frames": args.frames, "hops": args.hops}))
    else:
        print(f"numpy FIFO limit: {ns:.2f} ns per frame-hop ({args.frames:,} frames through {args.hops} links, "
              f"median of {args.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
