"""Instructions per frame-hop of the replay loop, counted by valgrind: a figure the machine's noise does not move.

Wall time on a shared 2-core machine moves by 5-15% from run to run, more than most single
changes to the engine gain, so a change is judged here by the instructions the loop executes.
Two processes run under ``valgrind --tool=cachegrind`` (instruction counts only). Both first
replay a tiny trace (so numba's cache is loaded) and load the trace; then one builds the
replay's tables and the other replays it (which builds them too). Their difference is the
replay loop, divided by the frame-hops it made. Hash seeds are fixed (``PYTHONHASHSEED=0``),
so the Python side runs the same way each time.

valgrind emulates a processor without AVX-512, so the engine is compiled for ``haswell``
(``NUMBA_CPU_NAME``, no extra features) into a cache of its own (``~/.cache/mcf-emu/valgrind``,
or ``--cache``), outside valgrind, before the counts: the first run compiles it (minutes). The
machine code is therefore not the native build's, but a change that takes instructions out of
one takes them out of the other.

    python benchmarks/instructions.py TRACE [--routing dateline] [--json]

Needs valgrind (Debian: ``apt-get install valgrind``). ``--tree DIR`` counts another checkout
of the project (its own cache under the cache folder), so two trees compare in one command:
``--tree /path/to/a --tree /path/to/b``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys
from emu.api import trace
from emu.replay.run import Options, Replay
from emu.workload.trace import load_trace
import emu.net.kernel as K
# A tiny replay first, in both processes: numba's cache is loaded (and the first calls made)
# before what is counted, so the difference holds the measured trace's loop alone.
Replay(trace("mars", seq=1024, nodes=4, chunk=256, decode_tokens=1), Options()).run()
rp = Replay(load_trace(sys.argv[1]), Options(routing=sys.argv[2]))
if sys.argv[3] == "run":
    rp.run()
    n = int(rp.net.SC[K.SC_NLINKS])
    print(int(rp.net.LK[:n, K.L_TXN].sum()), rp.net.run_counters()["events"])
else:
    from emu.engine.tables import Tables
    Tables(rp)
    print(0, 0)
"""


def environment(tree: Path, cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", NUMBA_CPU_NAME="haswell",
               NUMBA_CPU_FEATURES="", NUMBA_CACHE_DIR=str(cache), OPENBLAS_NUM_THREADS="1")
    return env


def counted(cmd: list[str], env: dict | None = None) -> tuple[int, str]:
    """The instructions process ``cmd`` executed, by cachegrind, and its stdout."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "cg.out"
        proc = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--branch-sim=no",
                               f"--cachegrind-out-file={out}", *cmd], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"instructions: valgrind run failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        m = re.search(r"^summary:\s+(\d+)", out.read_text(), re.M)
        if m is None:
            raise SystemExit(f"instructions: no summary line in cachegrind's output for {' '.join(cmd)}")
        return int(m.group(1)), proc.stdout


def instructions(env: dict, trace: str, routing: str, what: str) -> tuple[int, int, int]:
    """(instructions, frame-hops, events) of one child process."""
    n, out = counted([sys.executable, "-c", CHILD, trace, routing, what], env)
    hops, events = (int(x) for x in out.split()[-2:])
    return n, hops, events


def count(tree: Path, cache_root: Path, trace: str, routing: str) -> dict:
    cache = cache_root / hashlib.sha1(str(tree.resolve()).encode()).hexdigest()[:12]
    env = environment(tree, cache)
    warm = subprocess.run([sys.executable, "-m", "emu.engine.warm"], env=env, capture_output=True, text=True)
    if warm.returncode != 0:
        raise SystemExit(f"instructions: compiling {tree} for haswell failed: {warm.stderr.strip()[-200:]}")
    built, _, _ = instructions(env, trace, routing, "build")
    total, hops, events = instructions(env, trace, routing, "run")
    run = total - built
    return {"tree": str(tree), "trace": trace, "routing": routing, "instructions_build": built,
            "instructions_run": run, "frame_hops": hops, "events": events,
            "instructions_per_frame_hop": run / hops, "instructions_per_event": run / events}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--routing", default="dateline", help="as emu replay --routing (default dateline)")
    ap.add_argument("--tree", action="append", type=Path, help="a checkout to count (default this one); repeatable")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mcf-emu" / "valgrind")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("instructions: valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 1
    if not Path(args.trace).is_file():
        print(f"instructions: {args.trace}: no such trace", file=sys.stderr)
        return 1
    rows = [count(tree, args.cache, os.path.abspath(args.trace), args.routing) for tree in (args.tree or [ROOT])]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    base = rows[0]["instructions_per_frame_hop"]
    print(f"{'tree':40} {'frame-hops':>12} {'events':>12} {'instr/hop':>10} {'instr/event':>12} {'vs first':>9}")
    for r in rows:
        print(f"{r['tree'][-40:]:40} {r['frame_hops']:>12,} {r['events']:>12,} {r['instructions_per_frame_hop']:>10.1f} "
              f"{r['instructions_per_event']:>12.1f} {r['instructions_per_frame_hop'] / base:>8.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
