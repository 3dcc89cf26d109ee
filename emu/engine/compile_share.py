"""One compile shared by processes: whichever process first needs a compiled function compiles
it; another that needs it meanwhile waits and then loads it from numba's disk cache.

emu.engine.warm compiles the engine in two processes that start from two ends (the replay
loop, the frame kernel). numba compiles a function's callees while it types the function, so
without this both would compile what both call. Here each ``emu`` function's compile holds a
lock file of its own (in a directory the processes share): a process that finds the lock held
waits for it, then finds the function in the disk cache (numba looks there before compiling).
A process takes locks along its chain of nested compiles, callee after caller, and the call
graph has no cycles, so two processes never wait on each other.

``compile_engine`` starts those processes (``python -m emu.engine.warm --part ...``, one per
part of ``PARTS``); emu.engine.warm runs them, and so does a replay that finds the engine
uncompiled (emu.engine.runner), without importing what the parts replay with.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time

from numba.core import dispatcher, sigutils

from ..compiled_cache import ROOT
from ..errors import ConfigError

PARTS = ("loop", "kernel")  # emu.engine.warm's parts: the replay loop, the frame kernel
PROCESSES = "EMU_COMPILE_PROCESSES"

_compile = dispatcher.Dispatcher.compile
_directory: list[str] = []  # where the lock files are, once installed
_holding: set[int] = set()  # the dispatchers this process is compiling (a nested compile of one holds its lock)


def _lock_path(disp, directory: str) -> str:
    code = disp.py_func.__code__
    key = f"{os.path.relpath(code.co_filename, ROOT)}:{disp.py_func.__qualname__}"
    return os.path.join(directory, hashlib.sha256(key.encode()).hexdigest()[:32])


def _shared_compile(self, sig):
    """Dispatcher.compile, holding the function's lock when it may have to compile."""
    code = getattr(self.py_func, "__code__", None)
    if (not _directory or code is None or not code.co_filename.startswith(ROOT + os.sep)
            or id(self) in _holding or tuple(sigutils.normalize_signature(sig)[0]) in self.overloads):
        return _compile(self, sig)
    # One lock for all of a function's signatures: numba keeps them in one index file, which two
    # processes saving at once would each write without the other's entry.
    fd = os.open(_lock_path(self, _directory[0]), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _holding.add(id(self))
        try:
            return _compile(self, sig)
        finally:
            _holding.discard(id(self))
    finally:
        os.close(fd)  # releases the lock


def install(directory: str) -> None:
    """Share this process's compiles through the lock files in ``directory``."""
    _directory[:] = [directory]
    dispatcher.Dispatcher.compile = _shared_compile


def processes() -> int:
    """How many processes compile the engine: $EMU_COMPILE_PROCESSES (1 or 2), else two where
    the machine has more than one CPU."""
    value = os.environ.get(PROCESSES)
    if value is None:
        return 2 if (os.cpu_count() or 1) > 1 else 1
    if value.strip() not in ("1", "2"):
        raise ConfigError(f"{PROCESSES}={value!r}: expected 1 or 2 (processes that compile the replay engine)")
    return int(value)


def compile_engine() -> float:
    """Compile the engine's parts in one process each, at once; returns the seconds it took."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mcf-emu-compile-") as locks:
        # this emu package, wherever the caller's working directory is (-P: not the directory's own)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        workers = [subprocess.Popen([sys.executable, "-P", "-m", "emu.engine.warm", "--part", part, locks], env=env)
                   for part in PARTS]
        failed = [f"{part} ({_ended(code)})" for part, code in zip(PARTS, [w.wait() for w in workers]) if code != 0]
    if failed:
        raise RuntimeError(f"compiling the replay engine's {' and '.join(failed)} failed (its error, if it printed one, is above)")
    return time.perf_counter() - t0


def _ended(code: int) -> str:
    """How a compiling process ended: a process the kernel killed (the out-of-memory killer
    sends SIGKILL) prints nothing, so its exit status is all there is to say."""
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}" + (": out of memory?" if -code == signal.SIGKILL else "")
