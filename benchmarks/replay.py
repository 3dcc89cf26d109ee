"""Replay speed and memory on the shipped traces, and how cost grows with the prompt.

For each trace it runs `emu replay` in a fresh process, once per engine (the compiled
loop, emu.replay.core, and the Python path), and prints the command's wall time (load,
replay and summary), the replay loop alone, packet-hops per second, peak RSS, and the
compiled loop's speed-up over the Python path measured in the same run. With --scaling it generates MARS traces of 2K, 4K, 8K and 16K tokens on 16
boards and prints the time per op and per packet-hop of each: the work is ops (Python:
NICs, DAG) plus frames (compiled engine), and neither cost per unit may grow with S. As a reference measured in the same run it prints the bare
engine's rate on the ring benchmark scenario, and each replay's rate as a fraction
of it (the price of the NICs and the op DAG).

    python benchmarks/replay.py [--json] [--scaling] [--engines compiled python] [--ring64k]
                                [--traces traces/mars_16k.json ...]

--ring64k adds a generated 64K-token Ring trace on 16 boards (compiled engine only, to keep
the run short).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [ROOT / "traces" / f"{s}_16k.json" for s in ("mars", "ring", "zigzag", "pd")]


def one(trace: str, engine: str) -> dict:
    """Run in a child process: replay one trace, report its own wall time and peak RSS."""
    t0 = time.perf_counter()
    from emu.replay.results import summarize
    from emu.replay.run import Options, Replay
    from emu.workload.trace import load_trace

    rp = Replay(load_trace(trace), Options(engine=engine)).run()
    s = summarize(rp)
    wall = time.perf_counter() - t0
    return {
        "trace": Path(trace).name,
        "engine": rp.engine,
        "scheme": s["scheme"],
        "seq": s["seq"],
        "ttft_s": s["ttft_s"],
        "wire_bytes": s["wire_bytes"],
        "kv_bytes": s["kv_bytes"],
        "packet_hops": s["frames"],
        "ops": rp.trace.n_ops,
        "wall_s": wall,
        "replay_s": s["wall_s"],
        "packet_hops_per_s": s["frames"] / s["wall_s"],
        "us_per_packet_hop": 1e6 * s["wall_s"] / max(s["frames"], 1),
        "us_per_op": 1e6 * s["wall_s"] / rp.trace.n_ops,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "owner_only": s["final_layout_owner_only"],
    }


def child(trace, engine: str = "compiled") -> dict:
    proc = subprocess.run([sys.executable, __file__, "--one", str(trace), "--engine", engine],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"replay of {trace} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


def engine_reference() -> float:
    sys.path.insert(0, str(Path(__file__).parent))
    import ring

    ring.run(4, 0.01, 1)
    return ring.run(16, 8, 4)["packet_hops_per_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="*", default=[str(p) for p in SHIPPED])
    ap.add_argument("--scaling", action="store_true", help="also time MARS at 2K, 4K, 8K and 16K tokens")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--engines", nargs="+", default=["compiled", "python"], choices=("compiled", "python"))
    ap.add_argument("--ring64k", action="store_true", help="also a 64K-token Ring trace on 16 boards (compiled)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="compiled", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.engine)))
        return 0
    ref = engine_reference()
    rows = [child(t, e) for t in args.traces for e in args.engines]
    tmp = tempfile.TemporaryDirectory()
    if args.ring64k:
        path = Path(tmp.name) / "ring_64k.json"
        subprocess.run([sys.executable, "-m", "emu", "trace", "ring", "--seq", "65536", "--nodes", "16",
                        "--chunk", "1024", "-o", str(path)], check=True, capture_output=True)
        rows.append(child(path, "compiled"))
    by = {(r["trace"], r["engine"]): r for r in rows}
    for r in rows:
        py = by.get((r["trace"], "python"))
        r["speedup_vs_python"] = py["wall_s"] / r["wall_s"] if py and r["engine"] == "compiled" else None
    scaling = []
    if args.scaling:
        with tempfile.TemporaryDirectory() as d:
            for seq in (2048, 4096, 8192, 16384):
                path = Path(d) / f"mars_{seq}.json"
                subprocess.run([sys.executable, "-m", "emu", "trace", "mars", "--seq", str(seq), "--nodes", "16",
                                "--chunk", "1024", "--decode-tokens", "32", "-o", str(path)],
                               check=True, capture_output=True)
                scaling.append(child(path, args.engines[0]))
    for r in rows + scaling:
        r["fraction_of_engine_rate"] = r["packet_hops_per_s"] / ref
    if args.json:
        print(json.dumps({"engine_packet_hops_per_s": ref, "traces": rows, "scaling": scaling}, indent=2))
        return 0
    print(f"reference: bare engine on the ring scenario (16 nodes, 8 MiB, 4 hops): {ref:,.0f} packet-hops/s\n")
    head = (f"{'trace':<18}{'engine':>9}{'ops':>9}{'packet-hops':>13}{'wall s':>8}{'replay s':>9}{'hops/s':>11}"
            f"{'x engine':>9}{'RSS MiB':>9}{'TTFT s':>9}{'x python':>9}")
    print(head)
    for r in rows:
        sp = f"{r['speedup_vs_python']:>9.2f}" if r["speedup_vs_python"] else f"{'':>9}"
        print(f"{r['trace']:<18}{r['engine']:>9}{r['ops']:>9,}{r['packet_hops']:>13,}{r['wall_s']:>8.1f}{r['replay_s']:>9.1f}"
              f"{r['packet_hops_per_s']:>11,.0f}{r['fraction_of_engine_rate']:>9.2f}{r['peak_rss_mib']:>9.0f}{r['ttft_s']:>9.3f}{sp}")
    if scaling:
        print(f"\n{'MARS, 16 boards':<18}{'seq':>7}{'ops':>9}{'packet-hops':>13}{'replay s':>9}{'us/op':>8}{'us/packet-hop':>15}")
        for r in scaling:
            print(f"{'':<18}{r['seq']:>7}{r['ops']:>9,}{r['packet_hops']:>13,}{r['replay_s']:>9.2f}{r['us_per_op']:>8.1f}"
                  f"{r['us_per_packet_hop']:>15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
