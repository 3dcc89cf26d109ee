"""How fast tshark reads a capture with the shipped Lua dissector.

Captures a MARS replay (16 boards on a 4x4 torus, a 2K prompt: the frames
``emu replay --capture`` writes, headers only), then times tshark's CPU (user + system of
the child, median of --repeats) reading its first --frames frames to their Info column,
three ways in one run: without the dissector (the reference: tshark's own work), with the shipped dissector,
and with ``--baseline FILE.lua`` if given (an earlier dissector, e.g. from
``git show REV:emu/codec/mcfemu.lua``). Prints frames per CPU-second and the ratios.

    python benchmarks/dissector.py [--frames 50000] [--repeats 3] [--baseline old.lua] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

from emu.codec.dissector import LUA_FILE


def capture(path: str) -> None:
    import emu

    emu.replay(emu.trace("mars", nodes=16, seq=2048, chunk=512, decode_tokens=2), topology="torus:4x4",
               capture=path)


def cpu_seconds(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=50000, help="frames read (of about 426,000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", help="an earlier dissector (.lua) to time beside the shipped one")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tshark = shutil.which("tshark")
    if tshark is None:
        print("dissector.py: tshark not found (apt-get install tshark)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cap = os.path.join(tmp, "frames.pcap")
        capture(cap)
        base = [tshark, "-n", "-r", cap, "-c", str(a.frames), "-T", "fields", "-e", "_ws.col.Info"]
        runs = {"without": base, "shipped": [*base, "-X", f"lua_script:{LUA_FILE}"]}
        if a.baseline:
            runs["baseline"] = [*base, "-X", f"lua_script:{a.baseline}"]
        cpu = {name: statistics.median(cpu_seconds(cmd) for _ in range(a.repeats)) for name, cmd in runs.items()}
    fps = {name: a.frames / s for name, s in cpu.items()}
    out = {"frames": a.frames, "frames_per_cpu_s": fps,
           "shipped_slowdown_vs_without": cpu["shipped"] / cpu["without"]}
    if a.baseline:
        out["shipped_speedup_vs_baseline"] = cpu["baseline"] / cpu["shipped"]
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, v in fps.items():
        print(f"{name:>9}  {v:12,.0f} frames per CPU-second")
    print(f"the dissector costs {out['shipped_slowdown_vs_without']:.1f}x tshark's own reading")
    if a.baseline:
        print(f"shipped vs baseline: {out['shipped_speedup_vs_baseline']:.2f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
