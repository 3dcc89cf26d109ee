"""The Frames page's time filter on a capture's index (under 0.5 s on the 16K MARS
capture).

Builds (or reuses, from the user cache) the frame index of CAPTURE, then times
``CaptureIndex.query`` with a time window of ``--window`` seconds in the middle of the
capture (first page of 100 rows plus the filtered histogram, as the page asks), median of
``--repeats``. Reference, measured in the same run: reading the index's ``ts_ns`` column
whole (the least any unindexed scan must do). Prints both and the ratio.

    emu replay traces/mars_16k.json --out /tmp/m16 --capture cap.pcap   # once: ~900 MB
    python benchmarks/frames_filter.py /tmp/m16/cap.pcap [--window 0.1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboard.frames import CaptureIndex, FrameFilter  # noqa: E402
from dashboard.state import user_cache_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--window", type=float, default=0.1, help="seconds of capture time in the filter (default 0.1)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=None, help="index folder (default the user cache)")
    a = ap.parse_args()
    ix = CaptureIndex(a.capture, a.cache or user_cache_dir())
    t0 = time.perf_counter()
    ix.wait()
    if ix.state != "ready":
        print(f"index failed: {ix.error}", file=sys.stderr)
        return 2
    print(f"index: {ix.n_frames:,} frames, ready in {time.perf_counter() - t0:.2f} s "
          f"({'built' if ix.build_s else 'from the cache'})")
    edges = ix.hist[0]
    mid = (edges[0] + edges[-1]) / 2
    flt = FrameFilter(t_from=mid, t_to=mid + a.window)
    times, refs = [], []
    for _ in range(a.repeats):
        t = time.perf_counter()
        total, rows, _ = ix.query(flt, 0, 100)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        pq.read_table(ix.path, columns=["ts_ns"])
        refs.append(time.perf_counter() - t)
    q, r = statistics.median(times), statistics.median(refs)
    print(f"time filter {a.window:g} s ({total:,} frames match): {q:.3f} s  (goal < 0.5 s)")
    print(f"reference, read ts_ns of the whole index: {r:.3f} s")
    print(f"ratio filter / reference: {q / r:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
