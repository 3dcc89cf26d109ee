"""The Perfetto export of a replay against the replay itself, measured in the same run: a
shipped trace (default mars_16k) replayed into a temporary results folder, then
``emu export perfetto`` of that folder; CPU seconds and wall seconds of each (medians of
``--repeat`` runs), the file's size and events, and the export's ratio to the replay. Goal:
export at most the replay's time.

    python benchmarks/perfetto_export.py [mars_16k] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measure import medians, timed  # noqa: E402

TIMES = ("replay_cpu_s", "replay_wall_s", "export_cpu_s", "export_wall_s")


def once(trace: str, tmp: Path) -> dict:
    """One replay of ``trace`` into ``tmp`` and its export: the four times, the file's size and events."""
    import emu
    from emu.export.perfetto import write_perfetto

    out = tmp / "run"
    _, r_cpu, r_wall = timed(lambda: emu.replay(trace, out=out))
    size, e_cpu, e_wall = timed(lambda: write_perfetto(out, tmp / "run.json"))
    with open(tmp / "run.json", "rb") as fh:
        events = sum(1 for _ in fh) - 2  # one event a line between the header and the trailer
    return dict(zip(TIMES, (r_cpu, r_wall, e_cpu, e_wall)), size=size, events=events)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", default="mars_16k", help="a shipped trace name or a trace file")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median of each time is reported")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {a.repeat}")
    runs = []
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(once(a.trace, Path(tmp)))
    r_cpu, r_wall, e_cpu, e_wall = medians(runs, TIMES).values()
    size, events = runs[0]["size"], runs[0]["events"]
    fig = {"trace": a.trace, "repeat": a.repeat, "replay_cpu_s": round(r_cpu, 2), "replay_wall_s": round(r_wall, 2),
           "export_cpu_s": round(e_cpu, 2), "export_wall_s": round(e_wall, 2), "file_mib": round(size / 2**20, 1),
           "events": events, "export_over_replay_cpu": round(e_cpu / r_cpu, 2),
           "export_over_replay_wall": round(e_wall / r_wall, 2)}
    if a.json:
        print(json.dumps(fig, indent=2))
    else:
        print(f"{a.trace}, medians of {a.repeat}: replay {r_cpu:.2f} CPU-s ({r_wall:.2f} s wall); export {e_cpu:.2f} CPU-s "
              f"({e_wall:.2f} s wall), {size / 2**20:.1f} MiB, {events:,} events; "
              f"export / replay {e_cpu / r_cpu:.2f}x CPU, {e_wall / r_wall:.2f}x wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
