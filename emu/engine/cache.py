"""Whether the compiled replay loop is in numba's disk cache, and what a first run says if not.

Apart from emu.engine.warm (which compiles it ahead, from scripts/install) so that the
compiled loop's driver can ask without importing what warm replays with.
"""

from __future__ import annotations

import hashlib


def compiled() -> bool:
    """Whether numba's disk cache holds the replay loop and a capture's frame kernels compiled
    from the sources as they are now (each stamp covers every source a function is built from:
    emu.compiled_cache; an index written from other sources reads as empty). False whenever it
    cannot tell."""
    try:
        from ..replay.capture_frames import select, stamp
        from .loop import drive

        return all(_cached(fn) for fn in (drive, select, stamp))
    except Exception:  # numba's cache internals moved: say "not compiled", never fail a run
        return False


def _cached(fn) -> bool:
    from numba.core import caching

    cache = fn._cache
    index = caching.IndexDataCacheFile(cache._cache_path, cache._impl.filename_base,
                                       cache._impl.locator.get_source_stamp())._load_index()
    magic = fn.targetctx.codegen().magic_tuple()
    code = hashlib.sha256(fn.py_func.__code__.co_code).hexdigest()
    return any(key[1] == magic and key[2][0] == code for key in index)


warming = False  # warm() is running: it has said what it does, the replays need not

NOTICE = ("mcf-emu: compiling the replay engine for its first run (about a minute on two CPUs, once; "
          "cached on disk; `python -m emu.engine.warm` does it ahead) ...")
