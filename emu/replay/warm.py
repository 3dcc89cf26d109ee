"""Compile the replay engine ahead of the first replay: ``python -m emu.replay.warm``.

numba compiles the compiled replay loop and the frame kernel at their first call and
keeps the machine code on disk (beside the sources, or in NUMBA_CACHE_DIR). Compiling
takes about a minute of CPU, so scripts/install runs this once after installing: a
user's first ``emu replay`` then loads the cache instead. It replays the shipped MARS
16K trace on the compiled loop (every trace gives the loop tables of the same types, so
the same code serves them all), then a small replay with frame loss and a link failure,
which also compiles the kernel entries a timeline change calls from Python.
"""

from __future__ import annotations

import hashlib
import sys
import time


def compiled() -> bool:
    """Whether numba's disk cache holds the replay loop compiled from the sources as they are
    now (the loop's stamp covers every source it is built from: emu.compiled_cache; an index
    written from other sources reads as empty). False whenever it cannot tell."""
    try:
        from numba.core import caching

        from .core import drive

        cache = drive._cache
        index = caching.IndexDataCacheFile(cache._cache_path, cache._impl.filename_base,
                                           cache._impl.locator.get_source_stamp())._load_index()
        magic = drive.targetctx.codegen().magic_tuple()
        code = hashlib.sha256(drive.py_func.__code__.co_code).hexdigest()
        return any(key[1] == magic and key[2][0] == code for key in index)
    except Exception:  # numba's cache internals moved: say "not compiled", never fail a run
        return False


warming = False  # warm() is running: it has said what it does, the replays need not

NOTICE = ("mcf-emu: compiling the replay engine for its first run (1-4 minutes of CPU, once; "
          "cached on disk; `python -m emu.replay.warm` does it ahead) ...")


def warm() -> float:
    """Compile (or load) the engine; returns the seconds it took."""
    from ..api import trace
    from .session import replay

    global warming
    t0 = time.perf_counter()
    warming = True
    try:
        _replays(trace, replay)
    finally:
        warming = False
    return time.perf_counter() - t0


def _replays(trace, replay) -> None:
    replay("mars_16k", engine="compiled")
    replay(trace("mars", seq=1024, nodes=4, chunk=256, decode_tokens=1), engine="compiled", loss=0.01,
           fail=("link 0-1 down at 1ms up at 2ms",), topology="full")


def main() -> int:
    if compiled():
        print("mcf-emu: replay engine already compiled (numba's disk cache is up to date)", file=sys.stderr)
        return 0
    print("mcf-emu: compiling the replay engine (once; cached on disk) ...", file=sys.stderr, flush=True)
    s = warm()
    print(f"mcf-emu: replay engine ready ({s:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
