"""Output folders: claimed atomically, filled in a private staging folder, published whole.

A results folder goes through three states, so that whatever happens its files come from
one run and no half-written file is left behind:

1. **claim**: ``os.mkdir(out)`` succeeds for exactly one process. An explicit ``--out``
   that already exists is refused (one line); the default timestamped name takes the next
   free ``-2``, ``-3``... suffix instead, so two runs started in the same second both succeed.
   The claimed folder stays empty while the run works.
2. **stage**: every file (summary, parquet, the capture) is written into a hidden sibling
   ``.<name>.<random>.part`` that only this run knows.
3. **publish**: the staging folder is renamed onto the empty claimed folder (POSIX
   ``rename`` replaces an empty directory atomically). On any error or signal the staging
   folder is deleted and the claim released instead.

``check_writable`` probes an output location before a long run starts, so an unwritable
path fails in a second, not after the replay.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import tempfile
from pathlib import Path

from .errors import ConfigError

MAX_SUFFIX = 1000  # default names tried before giving up (-2 .. -1000)


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: unwind like KeyboardInterrupt, so every ``finally`` and
    staging cleanup runs. Not an Exception: a point's ``except Exception`` must not eat it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum, frame):  # pragma: no cover - exercised through subprocess tests
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP raise ``Terminated`` in the main thread (the default would kill the
    process without cleanup, leaving staged files behind)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread / not supported
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _raise_terminated)


def exit_status(exc: BaseException) -> int:
    """The shell's convention: 128 + the signal number."""
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal.SIGINT
    if isinstance(exc, Terminated):
        return 128 + exc.signum
    return 2


def describe_os_error(exc: OSError) -> str:
    """``PATH: cannot write (No space left on device)``-style one line."""
    name = exc.filename if exc.filename is not None else ""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"{name}: write failed ({reason}); partial output removed" if name else f"write failed ({reason})"
    return f"{name}: {reason}" if name else reason


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _problem(path: Path, exc: OSError, what: str) -> ConfigError:
    return ConfigError(f"{what} {path}: cannot create ({exc.strerror or exc})")


def check_writable(path: str | os.PathLike, what: str = "output") -> Path:
    """Fail now (ConfigError naming ``what`` and the path) if ``path`` cannot be written as a
    file: a folder, a parent that is a file or missing permission, a read-only mount."""
    path = Path(path)
    if str(path).endswith(os.sep) or path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; give a file name")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _problem(parent, exc, what) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write in {parent} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return path


class OutputFolder:
    """A results folder being written: ``staging`` is where the files go; see the module doc.

    Use as a context manager (``with OutputFolder(out) as f: write(f.staging ...)``): leaving
    the block normally publishes, an exception or signal removes everything this run made.
    """

    def __init__(self, out: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None,
                 what: str = "--out"):
        if out is None and default is None:
            raise ValueError("OutputFolder needs out or default")
        self.explicit = out is not None
        self.requested = Path(out if out is not None else default)
        self.what = what
        self.path: Path | None = None      # the claimed (final) folder
        self.staging: Path | None = None
        self.published = False

    # -- claim ------------------------------------------------------------------------
    def claim(self) -> Path:
        req = self.requested
        if req.exists() and not req.is_dir():
            raise ConfigError(f"{self.what} {req}: exists and is not a folder")
        try:
            req.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _problem(req.parent, exc, self.what) from None
        candidates = [req] if self.explicit else [req] + [req.with_name(f"{req.name}-{k}") for k in range(2, MAX_SUFFIX + 1)]
        for cand in candidates:
            try:
                os.mkdir(cand)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _problem(cand, exc, self.what) from None
            self.path = cand
            break
        else:
            if self.explicit:
                raise ConfigError(f"{self.what} {req}: already exists; choose another --out")
            raise ConfigError(f"{self.what} {req}: {MAX_SUFFIX} folders of that name exist; choose --out")
        try:
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".part", dir=self.path.parent))
            os.chmod(self.staging, 0o777 & ~_umask())
        except OSError as exc:
            self._release()
            raise _problem(self.path, exc, self.what) from None
        return self.path

    # -- finish -----------------------------------------------------------------------
    def publish(self) -> Path:
        assert self.path is not None and self.staging is not None, "claim() first"
        os.replace(self.staging, self.path)  # the claim is an empty folder: replaced atomically
        self.staging = None
        self.published = True
        return self.path

    def abort(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None
        self._release()

    def _release(self) -> None:
        if self.path is not None and not self.published:
            with contextlib.suppress(OSError):
                os.rmdir(self.path)  # only ever empty: never removes another run's files

    def __enter__(self) -> "OutputFolder":
        if self.path is None:
            self.claim()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self.publish()
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(self.path)  # a failed write() names no file: name the folder
        return False


def file_name(text: str, what: str, suffixes: tuple[str, ...] = ()) -> str:
    """A plain file name for a file inside an output folder (no folders, not '.' or '..')."""
    name = text.strip() if isinstance(text, str) else ""
    if not name or name != os.path.basename(name) or name in (".", "..") or "\0" in name:
        raise ConfigError(f"{what} {text!r}: expected a file name inside the results folder (no folders)")
    if suffixes and not name.lower().endswith(suffixes):
        raise ConfigError(f"{what} {text!r}: expected a name ending in {' or '.join(suffixes)}")
    return name
