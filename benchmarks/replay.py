"""Replay speed and memory: shipped 16K traces, generated 64K traces, trains on and off.

Every replay runs as its own `emu replay TRACE --json --no-results` process, as a
user would run it, and the benchmark prints for each:

- the whole command's wall seconds (interpreter start, imports, trace load, the run,
  the summary) and the replay loop's (the summary's ``wall_s``);
- frame-hops, frame-hops per second of the loop, and the process's peak RSS;
- the same figures with trains off (`--no-trains`): the plain per-frame run of the
  same engine, measured in the same benchmark run, and the ratio between the two.

Figures are medians of ``--repeat`` runs. Every run also measures the numpy FIFO limit
(benchmarks/fifo_limit.py: the FIFO recursion of a port evaluated a whole stream at a time,
the least a frame-level model spends per frame-hop) and prints each replay's loop ns per
frame-hop as a multiple of it. With ``--scaling`` it also replays MARS at
8K, 16K, 32K and 64K tokens on 16 boards and prints the loop's cost per op and per
frame-hop at each size, plus a least-squares fit loop = c + a * ops + b * frame-hops over
the four (c: what every run pays once): cost is linear when the fit's error stays small.
MARS sends more frame-hops per op the longer the context (attention traffic), so its
loop seconds per op grow with the context even at a constant cost per op and per hop.
Then it generates and replays MARS at 16K tokens on 16, 64 and 128 boards and at 128K
tokens on 16 (minutes): each trace's generation and replay command, their peak RSS,
and the loop's ns per frame-hop with its ratio to the 16K/16 run of the same benchmark.
``--cold`` times, from an empty numba cache, a first replay that compiles the engine, the
compile scripts/install runs (``python -m emu.engine.warm``) and the first replay after it,
and the CPU seconds a process spends importing the compiled replay (what every CLI call and
sweep worker pays before its first step), median of ``--repeat``.

Generated traces are kept in ``$XDG_CACHE_HOME/mcf-emu/bench`` (made once, reused).

    python benchmarks/replay.py                    # 16K shipped + 64K generated, trains on/off
    python benchmarks/replay.py --scaling --cold   # plus cost per op/frame-hop, boards, first-run cost
    python benchmarks/replay.py --traces traces/mars_16k.json --repeat 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from measure import command, medians

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [ROOT / "traces" / f"{s}_16k.json" for s in ("mars", "ring")]
LONG = [("mars", 65536), ("ring", 65536)]
SCALING = (8192, 16384, 32768, 65536)
WIDE = ((16384, 16), (16384, 64), (16384, 128), (131072, 16))  # MARS (tokens, boards)

# The goals on the project's 2-core reference machine.
GOALS = {
    "mars_16k command s": 5.0,
    "mars_16k loop s": 3.0,
    "ring_64k command s": 60.0,
    "ring_64k peak RSS MiB": 2048.0,
    "loop frame-hops/s, trains": 10e6,
    "loop frame-hops/s, per frame": 3e6,
    "first run after install s": 30.0,
    "compile at install s": 60.0,
    "import of the replay engine, CPU s": 1.0,
    # the scaling rows: whole commands (generation apart) and their memory
    "mars_16k loop, x the numpy FIFO limit": 20.0,
    "mars 16K/64 command s": 15.0,
    "mars 16K/128 command s": 60.0,
    "mars 128K/16 command s": 30.0,
    "mars 16K/64 peak RSS MiB": 2048.0,
    "mars 16K/128 peak RSS MiB": 2048.0,
    "mars 128K/16 peak RSS MiB": 2048.0,
    # generating those traces: within 2 GiB and at most a quarter of the replay's time
    "mars 16K/64 generate peak RSS MiB": 2048.0,
    "mars 16K/128 generate peak RSS MiB": 2048.0,
    "mars 128K/16 generate peak RSS MiB": 2048.0,
    "mars 16K/64 generate / replay s": 0.25,
    "mars 16K/128 generate / replay s": 0.25,
    "mars 128K/16 generate / replay s": 0.25,
}


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    d = base / "mcf-emu" / "bench"
    d.mkdir(parents=True, exist_ok=True)
    return d


def generated(scheme: str, seq: int) -> Path:
    """A 16-board trace of ``scheme`` at ``seq`` tokens (chunk 1024, 32 decode tokens), made once."""
    path = cache_dir() / f"{scheme}_{seq // 1024}k.json"
    if not path.exists():
        tmp = path.with_suffix(".part.json")
        command([sys.executable, "-m", "emu", "trace", scheme, "--seq", str(seq), "--nodes", "16",
             "--chunk", "1024", "--decode-tokens", "32", "-o", str(tmp)])
        tmp.replace(path)
    return path


def replay(trace: Path, trains: bool, env: dict | None = None, args=()) -> dict:
    """One `emu replay` process: its wall time, its own peak RSS, its summary."""
    cmd = [sys.executable, "-m", "emu", "replay", str(trace), "--json", "--no-results", *args]
    if not trains:
        cmd.append("--no-trains")
    wall, _cpu, rss, out = command(cmd, env)
    s = json.loads(out)
    return {"command_s": wall, "loop_s": float(s["wall_s"]), "frame_hops": int(s["frames"]),
            "peak_rss_mib": rss, "ttft_s": s["ttft_s"], "summary": s}


def wide() -> list[dict]:
    """MARS generated and replayed at each (tokens, boards) of WIDE, trains on, once each,
    on dateline routing."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for seq, nodes in WIDE:
            path = Path(d) / f"mars_{seq // 1024}k_{nodes}.json"
            gen_s, _cpu, gen_rss, _ = command([sys.executable, "-m", "emu", "trace", "mars", "--seq", str(seq), "--nodes",
                                     str(nodes), "--chunk", "1024", "--decode-tokens", "32", "-o", str(path)])
            # Dateline routing: on the 8x8 and 16x8 tori the default shortest paths close a
            # cycle of paused ports (a PAUSE deadlock the replay reports); the 4x4 as well, so
            # every row runs the same way.
            r = replay(path, True, args=("--routing", "dateline"))
            rows.append({"name": f"mars {seq // 1024}K/{nodes}", "ops": ops_of(path), "generate_s": gen_s,
                         "generate_rss_mib": gen_rss, "command_s": r["command_s"], "loop_s": r["loop_s"],
                         "frame_hops": r["frame_hops"], "peak_rss_mib": r["peak_rss_mib"],
                         "ns_per_frame_hop": 1e9 * r["loop_s"] / r["frame_hops"]})
            path.unlink()
    base = rows[0]["ns_per_frame_hop"]
    for r in rows:
        r["ns_ratio"] = r["ns_per_frame_hop"] / base
    return rows


def measured(trace: Path, repeat: int) -> dict:
    """Medians over ``repeat`` runs with trains and as many without."""
    row = {"trace": trace.name.removesuffix(".json"), "ops": ops_of(trace)}
    for trains in (True, False):
        runs = [replay(trace, trains) for _ in range(repeat)]
        tag = "trains" if trains else "frames"
        row.update({f"{key}_{tag}": v for key, v in medians(runs, ("command_s", "loop_s", "peak_rss_mib")).items()})
        row["frame_hops"] = runs[0]["frame_hops"]
        row["ttft_s"] = runs[0]["ttft_s"]
        row[f"hops_per_s_{tag}"] = row["frame_hops"] / row[f"loop_s_{tag}"]
        row[f"summary_{tag}"] = _comparable(runs[0]["summary"])
    row["same_results"] = row.pop("summary_trains") == row.pop("summary_frames")
    row["trains_speedup"] = row["loop_s_frames"] / row["loop_s_trains"]
    return row


def per_hop_ns(row: dict) -> float:
    """A measured trace's loop ns per frame-hop, trains on."""
    return 1e9 / row["hops_per_s_trains"]


def _higher_is_better(goal: str) -> bool:
    return "/s" in goal


def _comparable(summary: dict) -> dict:
    """A summary without what describes the run rather than its result."""
    return {k: v for k, v in summary.items() if k not in ("wall_s", "engine", "trains")}


def ops_of(trace: Path) -> int:
    """The trace's op count, read in a process of its own: a parent that loaded a large trace
    would hand its peak RSS on to every replay it starts after (see engine_reference)."""
    code = "import sys; from emu.workload.trace import load_trace; print(load_trace(sys.argv[1]).n_ops)"
    return int(subprocess.run([sys.executable, "-c", code, str(trace)], check=True, capture_output=True,
                              text=True).stdout)


def scaling(repeat: int) -> dict:
    rows = []
    for seq in SCALING:
        path = generated("mars", seq)
        runs = [replay(path, True) for _ in range(repeat)]
        loop = statistics.median(r["loop_s"] for r in runs)
        ops, hops = ops_of(path), runs[0]["frame_hops"]
        rows.append({"seq": seq, "ops": ops, "frame_hops": hops, "loop_s": loop,
                     "us_per_op": 1e6 * loop / ops, "ns_per_frame_hop": 1e9 * loop / hops})
    # The loop's time (the summary's wall_s) = once per run (numba loading its own modules,
    # about 0.6 s on the reference machine) + per op (tables, DAG, NICs) + per frame-hop
    # (the kernel). Without the constant the fit blames it on the ops, most at 8K.
    A = np.array([[1.0, r["ops"], r["frame_hops"]] for r in rows], float)
    y = np.array([r["loop_s"] for r in rows])
    (c, a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    fit = A @ np.array([c, a, b])
    return {"rows": rows, "fit_s_per_run": c, "fit_us_per_op": a * 1e6, "fit_ns_per_frame_hop": b * 1e9,
            "fit_max_rel_error": float(np.max(np.abs(fit - y) / y))}


def cold() -> tuple[float, float, float, float]:
    """With an empty numba cache: the first `emu replay traces/mars_16k.json` when nothing is
    compiled (what the first run costs with EMU_NO_WARM=1); the compile at install
    (`python -m emu.engine.warm`); the first replay after that install; and, as the reference
    of the same run, the compile at install in one process (EMU_COMPILE_PROCESSES=1)."""
    mars = ROOT / "traces" / "mars_16k.json"
    with tempfile.TemporaryDirectory() as d:
        uncompiled = replay(mars, True, env=dict(os.environ, NUMBA_CACHE_DIR=d))["command_s"]

    def install(**env) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "emu.engine.warm"], cwd=tempfile.gettempdir(), env={**os.environ, **env},
                       check=True, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as d:
        shared = install(NUMBA_CACHE_DIR=d)
        first = replay(mars, True, env=dict(os.environ, NUMBA_CACHE_DIR=d))["command_s"]
    with tempfile.TemporaryDirectory() as d:
        one = install(NUMBA_CACHE_DIR=d, EMU_COMPILE_PROCESSES="1")
    return uncompiled, shared, first, one


def import_cpu(repeat: int) -> float:
    """CPU seconds (user + system) of a process that imports the compiled replay and exits."""
    runs = []
    for _ in range(repeat):
        before = os.times()
        subprocess.run([sys.executable, "-c", "import emu.engine.runner, emu.engine.loop"], check=True,
                       cwd=tempfile.gettempdir())
        after = os.times()
        runs.append(after.children_user + after.children_system - before.children_user - before.children_system)
    return statistics.median(runs)


def fifo_limit() -> float:
    """The numpy FIFO limit, ns per frame-hop (benchmarks/fifo_limit.py), in a process of its
    own for the reason engine_reference gives."""
    cmd = [sys.executable, str(Path(__file__).parent / "fifo_limit.py"), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["ns_per_frame_hop"])


def engine_reference() -> float:
    """The bare engine's per-frame rate on the ring scenario, measured in this run. In a
    process of its own: Linux hands a parent's peak RSS on to the children it forks (kept
    across exec), so a parent that compiled the kernel would inflate every replay's figure."""
    # unbounded queues, named: four flows on every port of a one-way ring deadlock a bounded
    # buffer under pause or credit (ring.py says so), and this is the engine's rate, not a fabric's
    cmd = [sys.executable, str(Path(__file__).parent / "ring.py"), "--nodes", "16", "--mib", "8", "--hops", "4",
           "--flow-control", "ideal", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["packet_hops_per_s"])


def goals(rows: list[dict], first_run: float | None, wide_rows=(), startup=None,
          fifo_ns=None) -> list[tuple[str, float, float, bool]]:
    by = {r["trace"]: r for r in rows}
    got = dict(startup or {})
    for r in wide_rows:
        if f"{r['name']} command s" in GOALS:
            got[f"{r['name']} command s"] = r["command_s"]
            got[f"{r['name']} peak RSS MiB"] = r["peak_rss_mib"]
            got[f"{r['name']} generate peak RSS MiB"] = r["generate_rss_mib"]
            got[f"{r['name']} generate / replay s"] = r["generate_s"] / r["command_s"]
    if "mars_16k" in by:
        got["mars_16k command s"] = by["mars_16k"]["command_s_trains"]
        got["mars_16k loop s"] = by["mars_16k"]["loop_s_trains"]
        if fifo_ns:
            got["mars_16k loop, x the numpy FIFO limit"] = per_hop_ns(by["mars_16k"]) / fifo_ns
    if "ring_64k" in by:
        got["ring_64k command s"] = by["ring_64k"]["command_s_trains"]
        got["ring_64k peak RSS MiB"] = by["ring_64k"]["peak_rss_mib_trains"]
    if rows:
        got["loop frame-hops/s, trains"] = statistics.median(r["hops_per_s_trains"] for r in rows)
        got["loop frame-hops/s, per frame"] = statistics.median(r["hops_per_s_frames"] for r in rows)
    if first_run is not None:
        got["first run after install s"] = first_run
    out = []
    for name, value in got.items():
        goal = GOALS[name]
        ok = value >= goal if _higher_is_better(name) else value <= goal
        out.append((name, value, goal, ok))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="*", help="trace files (default: mars and ring 16K shipped, 64K generated)")
    ap.add_argument("--no-long", action="store_true", help="skip the generated 64K traces")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is reported")
    ap.add_argument("--scaling", action="store_true", help="MARS at 8K-64K on 16 boards (cost per op and per "
                    "frame-hop), then 16K on 16, 64 and 128 boards and 128K on 16 (generation and replay, ns per "
                    "frame-hop, RSS; minutes)")
    ap.add_argument("--cold", action="store_true", help="also time the first run with an empty numba cache")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    traces = [Path(t) for t in args.traces] if args.traces else list(SHIPPED)
    if not args.traces and not args.no_long:
        traces += [generated(s, n) for s, n in LONG]
    ref = engine_reference()
    fifo_ns = fifo_limit()
    replay(traces[0], True)  # compile (or load the compiled cache) before timing
    rows = [measured(t, args.repeat if t.stat().st_size < 8 << 20 else 1) for t in traces]
    scale = scaling(1) if args.scaling else None
    wide_rows = wide() if args.scaling else []
    cold_s = cold() if args.cold else None
    first = cold_s[2] if cold_s else None
    imported = import_cpu(args.repeat) if args.cold else None
    startup = {"compile at install s": cold_s[1], "import of the replay engine, CPU s": imported} if cold_s else None
    checks = goals(rows, first, wide_rows, startup, fifo_ns)
    if args.json:
        print(json.dumps({"engine_frame_hops_per_s": ref, "fifo_limit_ns_per_frame_hop": fifo_ns, "traces": rows, "scaling": scale, "wide": wide_rows, "first_run_s": first,
                          "uncompiled_first_run_s": cold_s and cold_s[0], "install_compile_s": cold_s and cold_s[1],
                          "install_compile_one_process_s": cold_s and cold_s[3],
                          "import_cpu_s": imported,
                          "goals": [dict(zip(("goal", "value", "target", "met"), g)) for g in checks]}, indent=2))
        return 0
    print(f"reference: the bare engine per frame on the ring scenario (16 nodes, 8 MiB, 4 hops, ideal queues): "
          f"{ref / 1e6:.2f}M frame-hops/s")
    print(f"numpy FIFO limit (benchmarks/fifo_limit.py): {fifo_ns:.2f} ns per frame-hop; 'x FIFO' below is a "
          f"loop's ns per frame-hop over it\n")
    print(f"{'trace':<10}{'ops':>9}{'frame-hops':>13}  {'trains: command s':>17}{'loop s':>8}{'hops/s':>8}"
          f"{'x FIFO':>7}{'RSS MiB':>8}  {'per frame: loop s':>17}{'hops/s':>8}{'RSS MiB':>8}  {'speedup':>7}  same")
    for r in rows:
        print(f"{r['trace']:<10}{r['ops']:>9,}{r['frame_hops']:>13,}  {r['command_s_trains']:>17.2f}"
              f"{r['loop_s_trains']:>8.2f}{r['hops_per_s_trains'] / 1e6:>7.2f}M{per_hop_ns(r) / fifo_ns:>6.0f}x"
              f"{r['peak_rss_mib_trains']:>8.0f}"
              f"  {r['loop_s_frames']:>17.2f}{r['hops_per_s_frames'] / 1e6:>7.2f}M{r['peak_rss_mib_frames']:>8.0f}"
              f"  {r['trains_speedup']:>6.2f}x  {'yes' if r['same_results'] else 'NO'}")
    if scale:
        print("\nMARS on 16 boards, trains on: loop cost per unit")
        print(f"{'seq':>7}{'ops':>10}{'frame-hops':>13}{'loop s':>8}{'us/op':>8}{'ns/frame-hop':>14}{'x FIFO':>8}")
        for r in scale["rows"]:
            print(f"{r['seq']:>7}{r['ops']:>10,}{r['frame_hops']:>13,}{r['loop_s']:>8.2f}{r['us_per_op']:>8.2f}"
                  f"{r['ns_per_frame_hop']:>14.1f}{r['ns_per_frame_hop'] / fifo_ns:>7.0f}x")
        print(f"fit: loop = {scale['fit_s_per_run']:.2f} s + {scale['fit_us_per_op']:.2f} us/op + "
              f"{scale['fit_ns_per_frame_hop']:.1f} ns/frame-hop (largest error {scale['fit_max_rel_error']:.1%})")
    if wide_rows:
        print("\nMARS at more boards and tokens, trains on (ratio: ns per frame-hop against 16K/16 of this run)")
        print(f"{'run':<14}{'ops':>11}{'generate s':>11}{'RSS MiB':>8}  {'replay: command s':>17}{'loop s':>8}"
              f"{'frame-hops':>13}{'ns/hop':>8}{'ratio':>7}{'x FIFO':>7}{'RSS MiB':>8}")
        for r in wide_rows:
            print(f"{r['name']:<14}{r['ops']:>11,}{r['generate_s']:>11.1f}{r['generate_rss_mib']:>8.0f}  "
                  f"{r['command_s']:>17.1f}{r['loop_s']:>8.1f}{r['frame_hops']:>13,}{r['ns_per_frame_hop']:>8.0f}"
                  f"{r['ns_ratio']:>6.2f}x{r['ns_per_frame_hop'] / fifo_ns:>6.0f}x{r['peak_rss_mib']:>8.0f}")
    if cold_s is not None:
        print(f"\nempty numba cache: a first replay that compiles the engine {cold_s[0]:.1f} s; the compile at "
              f"install (python -m emu.engine.warm) {cold_s[1]:.1f} s ({cold_s[1] / cold_s[3]:.2f}x of the "
              f"{cold_s[3]:.1f} s it takes in one process), then the first replay {cold_s[2]:.1f} s; "
              f"importing the compiled replay {imported:.2f} s of CPU")
    print("\ngoals (2-core machine):")
    for name, value, goal, ok in checks:
        target = f"{goal:,.0f}" if goal >= 10 else f"{goal:.2f}"
        print(f"  {name:<38}{value:>14,.2f}  goal {'>=' if _higher_is_better(name) else '<='} {target}  "
              f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
