"""Server time of each dashboard page: the layout callback Dash runs when a page is opened
(and the Sweep page's filter callbacks), first call (tables read from disk) and the median of
``--repeats`` more, over two results folders and a sweep of 16 points (MARS and Ring x 4 node
counts x 2 prompts). Goal: every page under 0.5 s, its first call too (the Sweep
page took 3.24 s; the first Memory page 2.5 s). The app is made as ``emu dashboard`` makes it
(``create_app``, which pays a process's one-time costs before the server answers), so a first
call is what the first user to open that page waits. Wall time is what a user sees; the CPU
time of the call and the load average say how much of it other jobs on the machine took.

    emu replay mars_16k --out /tmp/res/mars_16k; emu replay ring_16k --out /tmp/res/ring_16k   # once
    python benchmarks/dashboard_pages.py /tmp/res/mars_16k /tmp/res/ring_16k [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def sweep_folder(folder: Path) -> Path:
    """A sweep output folder as `emu sweep` writes it: 16 ok points."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for scheme in ("mars", "ring"):
        for nodes in (4, 8, 12, 16):
            for seq in (8192, 16384):
                rows.append(dict(sweep="bench", index=len(rows), point=f"p{len(rows)}", status="ok", error=None,
                                 scheme=scheme, nodes=nodes, seq=seq, chunk=1024, topology="auto", link_rate=None,
                                 ttft_s=seq / 1000 / nodes, wire_bytes=seq * nodes * 1000, kv_bytes=seq * nodes * 800))
    folder.mkdir(parents=True)
    axes = ["scheme", "nodes", "seq"]
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {b"emu.sweep": json.dumps({"name": "bench", "axes": axes})})
    pq.write_table(table, folder / "results.parquet")
    (folder / "sweep.json").write_text(json.dumps({"name": "bench", "axes": axes}))
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs=2, type=Path, help="two results folders")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from dashboard.app import Config, create_app
    from dashboard.pages import frames, links, memory, overview, sweep, timeline, whatif

    keys = ",".join(p.name for p in a.runs)
    with tempfile.TemporaryDirectory() as tmp:
        sw = sweep_folder(Path(tmp) / "sweeps" / "bench")
        app, st = create_app(Config(results=[str(p) for p in a.runs] + [str(sw)], whatif_dir=f"{tmp}/w",
                                    cache_dir=f"{tmp}/c"))
        ids = [{"type": "sw-filter", "col": "sweep"}]
        calls = {
            "overview": lambda: overview.layout(),
            "links": lambda: links.layout(runs=keys),
            "memory": lambda: memory.layout(runs=keys),
            "timeline": lambda: timeline.layout(runs=keys),
            "frames": lambda: frames.layout(runs=a.runs[0].name),
            "sweep": lambda: sweep.layout(),
            "sweep table": lambda: sweep.table_view(sweep.sweep_table(sweep._filtered(st, ["all"], ids), "nodes")),
            "whatif": lambda: whatif.layout(),
        }
        fig = {}
        try:
            with app.server.test_request_context():
                for name, call in calls.items():
                    t0, c0 = time.perf_counter(), time.process_time()
                    call()
                    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
                    again = []
                    for _ in range(a.repeats):
                        t0 = time.perf_counter()
                        call()
                        again.append(time.perf_counter() - t0)
                    fig[name] = {"first_s": round(first, 3), "first_cpu_s": round(first_cpu, 3),
                                 "median_s": round(statistics.median(again), 3)}
        finally:
            st.close()
    worst = max(max(v["first_s"], v["median_s"]) for v in fig.values())
    load = round(os.getloadavg()[0], 1)
    if a.json:
        print(json.dumps({"pages": fig, "worst_s": worst, "goal_s": 0.5, "load_average": load, "cores": os.cpu_count()},
                         indent=2))
    else:
        for name, v in fig.items():
            print(f"{name:12s} first {v['first_s']:.3f} s (cpu {v['first_cpu_s']:.3f} s)  median {v['median_s']:.3f} s")
        print(f"worst {worst:.3f} s (goal 0.5 s); load average {load} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
