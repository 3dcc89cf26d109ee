"""The Perfetto export of a replay against the replay itself, measured in the same run: a
shipped trace (default mars_16k) replayed into a temporary results folder, then
``emu export perfetto`` of that folder; CPU seconds and wall seconds of each, the file's
size and events, and the export's ratio to the replay. Goal: export at most the replay's time.

    python benchmarks/perfetto_export.py [mars_16k] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default="mars_16k", help="a shipped trace name or a trace file")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import emu
    from emu.export.perfetto import write_perfetto

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        _, r_cpu, r_wall = timed(lambda: emu.replay(a.trace, out=out))
        size, e_cpu, e_wall = timed(lambda: write_perfetto(out, Path(tmp) / "run.json"))
        with open(Path(tmp) / "run.json", "rb") as fh:
            events = sum(1 for _ in fh) - 2  # one event a line between the header and the trailer
    fig = {"trace": a.trace, "replay_cpu_s": round(r_cpu, 2), "replay_wall_s": round(r_wall, 2),
           "export_cpu_s": round(e_cpu, 2), "export_wall_s": round(e_wall, 2), "file_mib": round(size / 2**20, 1),
           "events": events, "export_over_replay_cpu": round(e_cpu / r_cpu, 2),
           "export_over_replay_wall": round(e_wall / r_wall, 2)}
    if a.json:
        print(json.dumps(fig, indent=2))
    else:
        print(f"{a.trace}: replay {r_cpu:.2f} CPU-s ({r_wall:.2f} s wall); export {e_cpu:.2f} CPU-s "
              f"({e_wall:.2f} s wall), {size / 2**20:.1f} MiB, {events:,} events; "
              f"export / replay {e_cpu / r_cpu:.2f}x CPU, {e_wall / r_wall:.2f}x wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
