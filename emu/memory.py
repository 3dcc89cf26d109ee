"""Large freed arrays go back to the system at once (glibc's malloc).

glibc serves a request above its mmap threshold (128 KiB at first) with a mapping of its
own, unmapped when freed; but each such free raises the threshold, up to 32 MiB, so once a
table build's first temporaries are freed, the next arrays of a few MiB come from the heap,
where memory freed stays with the process. Building the replay's tables for MARS 16K on 64
boards left 0.8 GB so (docs/engine.md, "Memory"). A fixed threshold keeps every array of
1 MiB or more in a mapping of its own, whatever was freed before.
"""

from __future__ import annotations

import ctypes

import numpy as np

MALLOPT_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
THRESHOLD = 1 << 20


def return_large_frees() -> bool:
    """Fix glibc's mmap threshold at THRESHOLD; False where the C library has no mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # another C library: its own policy stands
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(MALLOPT_MMAP_THRESHOLD, THRESHOLD))


_ALIGN = 64  # each array starts on a cache line in the file


def _mapping(a: np.ndarray):
    """The mmap under a file-backed array (None: the array is in the heap)."""
    import mmap

    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    if isinstance(a, memoryview):
        a = a.obj
    return a if isinstance(a, mmap.mmap) else None


def drop_resident(arrays) -> None:
    """The pages of file-backed arrays (``file_backed``) read so far leave the process's
    memory: a later read maps them from the file again (the kernel's page cache, or the
    disk). Arrays in the heap are left as they are. For a reader that goes through such
    arrays once per step (the tables' build through the trace)."""
    import mmap

    done = set()
    for a in arrays:
        m = _mapping(a)
        if m is not None and id(m) not in done:
            done.add(id(m))
            m.madvise(mmap.MADV_DONTNEED)


def _map_read_only(f, size: int):
    """``size`` bytes of open file ``f``, mapped read-only; the mapping keeps the file's data
    after ``f`` closes (both file_backed and Spill read their file this way)."""
    import mmap

    f.flush()
    return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


def file_backed(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The same values, read-only, in one temporary file mapped into memory.

    A mapped file's page counts in the process's memory only while it is read, and the
    kernel may drop it again (it is on disk), where an array in the heap stays resident
    whether or not it is read. For arrays a run holds but does not read for most of its
    length (a loaded trace, once the engine's tables are built from it). The file is
    unlinked before anything is written to it (``tempfile.TemporaryFile``), so nothing is
    left behind whatever ends the process; ``TMPDIR`` says where it goes (a tmpfs there
    keeps the pages in memory, though not in the process's own)."""
    import tempfile

    offsets, end = [], 0
    for a in arrays:
        end = -(-end // _ALIGN) * _ALIGN
        offsets.append(end)
        end += a.nbytes
    if end == 0:
        return [a.copy() for a in arrays]
    with tempfile.TemporaryFile() as f:
        for a, at in zip(arrays, offsets):
            f.seek(at)
            np.ascontiguousarray(a).tofile(f)  # written from the array itself, no copy of it
        f.truncate(end)
        mapped = _map_read_only(f, end)
    return [np.frombuffer(mapped, a.dtype, a.size, at).reshape(a.shape) for a, at in zip(arrays, offsets)]


class Spill:
    """Rows of one dtype and width appended to an unlinked temporary file as they come, read
    back as one read-only array mapped from it (``rows()``, after the last append). What a
    table the loop fills for Python to read afterwards becomes when it would otherwise grow
    with the run (the directory's history: 541 MiB at 128 boards); ``TMPDIR`` as for
    ``file_backed``."""

    def __init__(self, dtype, width: int):
        import tempfile

        self.dtype, self.width, self.n = np.dtype(dtype), int(width), 0
        self._file = tempfile.TemporaryFile()
        self._rows = None

    def append(self, rows: np.ndarray) -> None:
        if self._rows is not None:
            raise RuntimeError("Spill: appended to after its rows were read")
        rows = np.ascontiguousarray(rows, self.dtype).reshape(-1, self.width)
        rows.tofile(self._file)
        self.n += len(rows)

    def rows(self) -> np.ndarray:
        """Every row appended, in order, read-only (the file closes: nothing more is appended)."""
        if self._rows is None:
            size = self.n * self.width * self.dtype.itemsize
            if size:
                mapped = _map_read_only(self._file, size)
                self._rows = np.frombuffer(mapped, self.dtype).reshape(self.n, self.width)
            else:
                self._rows = np.zeros((0, self.width), self.dtype)
            self._file.close()
        return self._rows
