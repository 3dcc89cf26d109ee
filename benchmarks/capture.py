"""Capture cost: `emu replay TRACE --capture FILE` against the same command without it.

Each run is its own `emu replay TRACE --json --no-results` process, as a user runs it, the
runs with and without `--capture` taking turns (a pcapng in a temporary folder, on the disk
the results go to, removed after each run outside the timing). Prints for each the medians
of ``--repeat`` runs: the whole command's wall seconds, its CPU seconds (user + system, from
wait4), the replay loop's wall seconds (the summary's ``wall_s``; the capture is written
from within the loop), and the ratios with / without, against its goal: a capture
costs at most as much again as the replay (command wall ratio <= 2.0). For scale, from the
same run: the capture's size and frames, and the seconds a plain write of as many bytes
(8 MiB writes, a new file in the same folder) took, which no capture can undercut.

    python benchmarks/capture.py                         # traces/mars_16k.json, 3 runs each
    python benchmarks/capture.py --repeat 5 --json
    python benchmarks/capture.py --trace traces/ring_16k.json --format pcap
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from measure import command, medians

ROOT = Path(__file__).resolve().parent.parent
GOAL = 2.0  # the command with --capture within 2x of the command without


def replay(trace: Path, capture: Path | None) -> dict:
    cmd = [sys.executable, "-m", "emu", "replay", str(trace), "--json", "--no-results"]
    if capture is not None:
        cmd += ["--capture", str(capture)]
    wall, cpu, _rss, out = command(cmd)
    summary = json.loads(out)
    return {"command_s": wall, "cpu_s": cpu, "loop_s": float(summary["wall_s"]), "frames": int(summary["frames"])}


def plain_write(folder: Path, size: int) -> float:
    """Seconds to write ``size`` bytes to a new file in ``folder`` in 8 MiB writes (and close it)."""
    chunk = memoryview(bytes(8 << 20))
    path = folder / "plain.bin"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for at in range(0, size, len(chunk)):
            f.write(chunk[: min(len(chunk), size - at)])
    seconds = time.perf_counter() - t0
    path.unlink()
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "traces" / "mars_16k.json"), help="trace file (default mars_16k)")
    ap.add_argument("--format", choices=("pcapng", "pcap"), default="pcapng", help="capture file format")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the median is reported")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    trace = Path(args.trace)
    if not trace.is_file():
        raise SystemExit(f"--trace {args.trace}: no such file")
    keys = ("command_s", "cpu_s", "loop_s")
    with tempfile.TemporaryDirectory(prefix="mcf-capture-bench-") as d:
        folder = Path(d)
        cap = folder / f"cap.{args.format}"
        replay(trace, cap)  # compile (or load the compiled cache) before timing
        cap.unlink()
        plain, captured = [], []
        for _ in range(args.repeat):
            plain.append(replay(trace, None))
            captured.append(replay(trace, cap))
            size = cap.stat().st_size
            cap.unlink()
        disk_s = plain_write(folder, size)
    frames = plain[0]["frames"]
    without, with_ = medians(plain, keys), medians(captured, keys)
    ratio = {k: with_[k] / without[k] for k in keys}
    result = {"trace": trace.name, "format": args.format, "repeat": args.repeat, "without": without,
              "with_capture": with_, "ratio": ratio, "goal_ratio": GOAL, "met": ratio["command_s"] <= GOAL,
              "capture_bytes": size, "frames": frames, "plain_write_s": disk_s}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{trace.name}, medians of {args.repeat} runs each (load average {os.getloadavg()[0]:.1f})")
    print(f"{'':<18}{'command s':>10}{'CPU s':>8}{'loop s':>8}")
    for name, row in (("without capture", without), (f"--capture .{args.format}", with_)):
        print(f"{name:<18}{row['command_s']:>10.2f}{row['cpu_s']:>8.2f}{row['loop_s']:>8.2f}")
    print(f"{'ratio':<18}{ratio['command_s']:>9.2f}x{ratio['cpu_s']:>7.2f}x{ratio['loop_s']:>7.2f}x")
    print(f"\ncapture: {size / 2**20:,.0f} MiB, {frames:,} frame-hops in the replay; a plain write of as many "
          f"bytes took {disk_s:.2f} s")
    print(f"goal: command with --capture <= {GOAL:.1f}x without: "
          f"{ratio['command_s']:.2f}x, {'met' if result['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
