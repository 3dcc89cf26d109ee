"""A lossy replay (reliable delivery on) on the compiled loop against the Python path, same run.

Runs `emu replay TRACE --json --no-results --loss P --engine E` as its own process for
E = python and compiled (medians of ``--repeat`` runs each, the compiled code loaded from
its cache after one warm-up run) and prints the whole command's and the loop's wall
seconds, the ratio, the TTFT, what reliable delivery did (retransmitted frames, probes,
nacks) and whether the two summaries are identical key by key (all but wall_s and engine).

    python benchmarks/replay_loss.py                              # traces/mars_16k.json, loss 1e-4
    python benchmarks/replay_loss.py --trace traces/ring_16k.json --loss 1e-3 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import medians

ROOT = Path(__file__).resolve().parent.parent


# The Python reference path is the test suite's (tests/pyreplay.py): its run registers it first.
REFERENCE = f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import pyreplay; from emu.cli import main; sys.exit(main())"


def replay(trace: Path, loss: str, engine: str) -> dict:
    start = ["-c", REFERENCE] if engine == "python" else ["-m", "emu"]
    cmd = [sys.executable, *start, "replay", str(trace), "--json", "--no-results", "--loss", loss, "--engine", engine]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status):
            last = err.read().decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
            raise SystemExit(f"{' '.join(cmd)}: {last[0]}")
        s = json.loads(out.read())
    return {"command_s": wall, "loop_s": float(s["wall_s"]), "peak_rss_mib": usage.ru_maxrss / 1024, "summary": s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "traces" / "mars_16k.json"))
    ap.add_argument("--loss", default="1e-4")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    trace = Path(args.trace)
    replay(trace, args.loss, "compiled")  # compile (or load the cache) before timing
    rows = {}
    for engine in ("python", "compiled"):
        runs = [replay(trace, args.loss, engine) for _ in range(args.repeat)]
        rows[engine] = medians(runs, ("command_s", "loop_s", "peak_rss_mib"))
        rows[engine]["summary"] = {k: v for k, v in runs[0]["summary"].items() if k not in ("wall_s", "engine")}
    s = rows["compiled"]["summary"]
    same = rows["python"].pop("summary") == rows["compiled"].pop("summary")
    res = {"trace": trace.name, "loss": args.loss, "ttft_s": s["ttft_s"], "retransmitted_frames": s["retransmitted_frames"],
           "probes": s["control_frames_by_op"]["probe"], "nacks": s["control_frames_by_op"]["nack"],
           "same_results": same, "engines": rows,
           "loop_speedup": rows["python"]["loop_s"] / rows["compiled"]["loop_s"],
           "command_speedup": rows["python"]["command_s"] / rows["compiled"]["command_s"]}
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{trace.name} --loss {args.loss}: TTFT {s['ttft_s']:.6f} s, retransmitted {res['retransmitted_frames']:,}, "
          f"probes {res['probes']:,}, nacks {res['nacks']:,}")
    print(f"{'engine':<10}{'command s':>10}{'loop s':>9}{'RSS MiB':>9}")
    for engine, r in rows.items():
        print(f"{engine:<10}{r['command_s']:>10.2f}{r['loop_s']:>9.2f}{r['peak_rss_mib']:>9.0f}")
    print(f"compiled vs python: loop {res['loop_speedup']:.1f}x, command {res['command_speedup']:.1f}x; "
          f"identical summaries: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
