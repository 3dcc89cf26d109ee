"""A file appears whole or not at all: written to a temporary sibling, then renamed (folders: emu.outputs).

The temporary sibling's name says which process owns it (``emu.outputs.staged_prefix``), so
what a killed process left can be told from what a running one is writing, and removed
(``emu.outputs.reclaim_stale``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb"):
    """Yield a file object; on success it replaces ``path``, on error nothing is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from .outputs import staged_prefix

    fd, tmp = tempfile.mkstemp(prefix=staged_prefix(path.name), suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual permissions
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
