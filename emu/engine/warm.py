"""Compile the replay engine ahead of the first replay: ``python -m emu.engine.warm``.

numba compiles the compiled replay loop and the frame kernel at their first call and
keeps the machine code on disk (beside the sources, or in NUMBA_CACHE_DIR). Compiling
takes about a minute and a half of CPU, so scripts/install runs this once after installing: a
user's first ``emu replay`` then loads the cache instead. Two parts compile it:
- the loop: a replay of the shipped MARS 16K trace on the compiled loop (every trace gives the
  loop tables of the same types, so the same code serves them all);
- the kernel: a frame-level run of emu.net.Network from Python (the kernel's entries, a
  timeline's link flap among them), then a small replay with frame loss and a link failure,
  captured to a temporary file, which compiles a capture's frame kernels
  (emu.replay.capture_frames).
On a machine with more than one CPU the two parts run in two processes at once, sharing each
function's compile (emu.engine.compile_share): the wall time is about that of the longer part.
EMU_COMPILE_PROCESSES=1 compiles in one process (what the benchmark measures it against).
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
import types

from ..errors import ConfigError
from . import cache, compile_share
from .compile_share import PARTS


def warm(parts=PARTS) -> float:
    """Compile (or load) the engine's ``parts`` in this process; returns the seconds it took."""
    t0 = time.perf_counter()
    cache.warming = True
    collecting = gc.isenabled()
    gc.disable()  # numba's compiler makes millions of objects for the collector to re-scan (emu.engine.runner)
    try:
        for part in parts:
            {"loop": _loop, "kernel": _kernel}[part]()
    finally:
        cache.warming = False
        if collecting:
            gc.enable()
    return time.perf_counter() - t0


def _loop() -> None:
    from ..replay.session import replay

    replay("mars_16k", engine="compiled")


def _kernel() -> None:
    from ..api import trace
    from ..codec.fragment import max_payload
    from ..codec.layer import FRAME_HEADER_LEN
    from ..net import Network
    from ..replay.capture import Capture
    from ..replay.session import replay
    from ..sim import MS, US, Simulator
    from ..topology import LinkDefaults, Routes, mesh2d

    line = mesh2d(1, 3, link=LinkDefaults(rate_bps=10**9, latency_ps=US, mtu=1500))
    net = Network(Simulator(), line, Routes(line).next_hop)
    per, frames = max_payload(1500), 1000
    for src in (0, 1):  # two boards' frames meet at board 1's port towards board 2
        net.send(src, [2], frames, FRAME_HEADER_LEN + per,
                 meta={"src_node": src, "dst_set": 1 << 2, "msg_len": frames * per})
    link = net.link(1, 2)
    net.schedule_change(MS, lambda: net.link_down(link))  # the entries a timeline change calls
    net.schedule_change(2 * MS, lambda: net.link_up(link))
    with tempfile.TemporaryDirectory(prefix="mcf-emu-warm-") as d:
        capture = Capture(os.path.join(d, "line.pcapng"))  # a capture's frame kernels (no need of the loop)
        capture.attach(types.SimpleNamespace(net=net, hw={"mtu": 1500}))
        net.run()
        capture.close()
        # the replay's own Python-side calls into the kernel: a timeline and frame loss
        replay(trace("mars", seq=1024, nodes=4, chunk=256, decode_tokens=1), engine="compiled", loss=0.01,
               fail=("link 0-1 down at 1ms up at 2ms",), topology="full", capture=os.path.join(d, "warm.pcapng"))


def main() -> int:
    if cache.compiled():
        print("mcf-emu: replay engine already compiled (numba's disk cache is up to date)", file=sys.stderr)
        return 0
    try:
        shared = compile_share.processes() > 1
    except ConfigError as e:
        print(f"mcf-emu: {e}", file=sys.stderr)
        return 2
    print(f"mcf-emu: compiling the replay engine (once; cached on disk{'; two processes' if shared else ''}) ...",
          file=sys.stderr, flush=True)
    try:
        s = compile_share.compile_engine() if shared else warm()
    except RuntimeError as e:
        print(f"mcf-emu: {e}", file=sys.stderr)
        return 1
    print(f"mcf-emu: replay engine ready ({s:.0f} s)", file=sys.stderr)
    return 0


def _part(part: str, locks: str) -> int:
    """One process of compile_share.compile_engine: compile ``part``, sharing compiles through ``locks``."""
    compile_share.install(locks)
    warm((part,))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--part"]:
        sys.exit(_part(*sys.argv[2:4]))
    sys.exit(main())
