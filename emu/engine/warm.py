"""Compile the replay engine ahead of the first replay: ``python -m emu.engine.warm``.

numba compiles the compiled replay loop and the frame kernel at their first call and
keeps the machine code on disk (beside the sources, or in NUMBA_CACHE_DIR). Compiling
takes about two minutes, so scripts/install runs this once after installing: a
user's first ``emu replay`` then loads the cache instead. It replays the shipped MARS
16K trace on the compiled loop (every trace gives the loop tables of the same types, so
the same code serves them all), then a small replay with frame loss and a link failure,
which also compiles the kernel entries a timeline change calls from Python, captured to a
temporary file, which compiles a capture's frame kernels (emu.replay.capture_frames).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from . import cache


def warm() -> float:
    """Compile (or load) the engine; returns the seconds it took."""
    from ..api import trace
    from ..replay.session import replay

    t0 = time.perf_counter()
    cache.warming = True
    try:
        _replays(trace, replay)
    finally:
        cache.warming = False
    return time.perf_counter() - t0


def _replays(trace, replay) -> None:
    replay("mars_16k", engine="compiled")
    with tempfile.TemporaryDirectory(prefix="mcf-emu-warm-") as d:  # a capture's frame kernels too
        replay(trace("mars", seq=1024, nodes=4, chunk=256, decode_tokens=1), engine="compiled", loss=0.01,
               fail=("link 0-1 down at 1ms up at 2ms",), topology="full", capture=os.path.join(d, "warm.pcapng"))


def main() -> int:
    if cache.compiled():
        print("mcf-emu: replay engine already compiled (numba's disk cache is up to date)", file=sys.stderr)
        return 0
    print("mcf-emu: compiling the replay engine (once; cached on disk) ...", file=sys.stderr, flush=True)
    s = warm()
    print(f"mcf-emu: replay engine ready ({s:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
