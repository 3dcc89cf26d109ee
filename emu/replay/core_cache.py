"""The compiled replay's on-disk cache is fresh only if every source it was compiled from is.

numba caches a compiled function with the machine code of every compiled function it
calls (the frame kernel's included), but checks only its own file for changes. A change
to emu/net/kernel.py would leave the replay loop running the old kernel. So the cached
functions of the emu/replay/core*.py modules are stamped with a hash of all the sources
they are compiled from: the kernel, the Ethernet arithmetic, every compiled core module
(``COMPILED``) and the board protocol's rules it calls (``NIC_COMPILED``). Any change to one of them recompiles the loop. Imported (by emu.replay.core_state) before any
of those functions is defined.
"""

from __future__ import annotations

import hashlib
import os

from numba.core import caching

_HERE = os.path.dirname(os.path.abspath(__file__))
_NET = os.path.join(os.path.dirname(_HERE), "net")
_NIC = os.path.join(os.path.dirname(_HERE), "nic")
# The board protocol's compiled rules the loop calls (replica_transition, reduction_complete/_next)
# and what they import (the RTO functions protocol.py compiles).
NIC_COMPILED = ("directory.py", "protocol.py", "rto.py")


# The modules with compiled code or constants compiled into it (not core_tables/core_run: Python).
COMPILED = ("core.py", "core_compute.py", "core_dir.py", "core_events.py", "core_layout.py", "core_nic.py",
            "core_reliable.py", "core_state.py")


def _sources() -> list[str]:
    return ([os.path.join(_HERE, f) for f in COMPILED] + [os.path.join(_NET, f) for f in ("kernel.py", "ethernet.py")]
            + [os.path.join(_NIC, f) for f in NIC_COMPILED])


_seen: dict[tuple, bytes] = {}


def stamp() -> bytes:
    """One hash of every source the compiled loop is built from (re-read when one changes)."""
    files = _sources()
    key = tuple((p, os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in files)
    if key not in _seen:
        h = hashlib.sha256()
        for path in files:
            with open(path, "rb") as f:
                h.update(os.path.basename(path).encode() + b"\0" + f.read())
        _seen[key] = h.digest()
    return _seen[key]


class _Stamped:
    """A cache locator for the core modules whose freshness is ``stamp()``."""

    def get_source_stamp(self):
        return stamp()

    @classmethod
    def from_function(cls, py_func, py_file):
        here = os.path.dirname(os.path.abspath(py_file)) == _HERE
        if not (here and os.path.basename(py_file).startswith("core")):
            return None
        return super().from_function(py_func, py_file)


_LOCATORS = [type(f"Core{base.__name__}", (_Stamped, base), {})
             for base in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator,
                          caching.UserWideCacheLocator)]
if not any(getattr(k, "__name__", "").startswith("CoreUser") for k in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS
