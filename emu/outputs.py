"""Output folders: claimed atomically, filled in a private staging folder, published whole.

A results folder goes through three states, so that whatever happens its files come from
one run and no half-written file is left behind:

1. **claim**: the staging folder ``.<name>.<owner>.<random>.part`` is made first, then
   ``os.mkdir(out)``, which succeeds for exactly one process. An explicit ``--out`` that
   already exists is refused (one line); the default timestamped name takes the next free
   ``-2``, ``-3``... suffix instead, so two runs started in the same second both succeed.
   The claimed folder stays empty while the run works.
2. **stage**: every file (summary, parquet, the capture) is written into the staging folder,
   which only this run knows.
3. **publish**: the staging folder is renamed onto the empty claimed folder (POSIX
   ``rename`` replaces an empty directory atomically). On any error or signal the claim is
   released and then the staging folder deleted instead.

``<owner>`` names the process (``o<pid>-<start>-<host>-<boot>``: its id, its start time in
clock ticks since boot, and hashes of the host name and of the boot), so an empty claim
always has a staging sibling saying whose it is. SIGKILL (the OOM killer, a CI timeout)
leaves both behind; ``reclaim_stale`` finds owners that are dead (same host, and another
boot, or no such process, or a process of that id started at another time), removes what
they staged and their empty claim, and says so in one line. Claims and exports call it on
the folder they write into; files written with ``emu.atomic`` carry the same owner.

``check_writable`` probes an output location before a long run starts, so an unwritable
path fails in a second, not after the replay.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import signal
import socket
import sys
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


def signal_of(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or Terminated that ``exc`` is, or that it was raised from: a signal
    that lands while compiled code is in a Python callback (numba boxing an array it returns)
    reaches the caller as a SystemError caused by it. None if no signal is behind ``exc``."""
    while exc is not None:
        if isinstance(exc, (KeyboardInterrupt, Terminated)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


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


# ---------------------------------------------------------------- owners of staged names
STAGED = re.compile(r"\.(?P<name>.+)\.o(?P<pid>\d+)-(?P<start>\d+)-(?P<host>[0-9a-f]{8})-(?P<boot>[0-9a-f]{8})"
                    r"\.[A-Za-z0-9_]+\.part")


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:8]


def _boot() -> str:
    try:
        return _hash(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        return "0" * 8  # no /proc: process ids alone decide


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, starttime


def owner_token(pid: int | None = None) -> str:
    """``o<pid>-<start>-<host>-<boot>`` of process ``pid`` (default this one)."""
    pid = os.getpid() if pid is None else pid
    return f"o{pid}-{start_ticks(pid) or 0}-{_hash(socket.gethostname())}-{_boot()}"


def staged_prefix(name: str) -> str:
    """The start of a staging name for ``name`` owned by this process (``tempfile`` adds the rest)."""
    return f".{name}.{owner_token()}."


def owner_gone(m: re.Match) -> bool:
    """Whether the owner of a staged name (a ``STAGED`` match) is dead: it ran on this host and
    this boot is another, or no process has its id, or one does that started at another time.
    An owner on another host (a shared file system) is never taken for dead."""
    if m["host"] != _hash(socket.gethostname()):
        return False
    if m["boot"] != _boot():
        return True
    return not pid_runs(int(m["pid"]), int(m["start"]))


def pid_runs(pid: int, start: int | None) -> bool:
    """Whether process ``pid`` runs and is the one that started at ``start`` (clock ticks since
    boot; 0 or None: not known, any process of that id counts). Results-folder claims and a
    sweep's point claims (emu.sweep.claims) decide their owners' life with it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    now = start_ticks(pid)
    return now is not None and (not start or now == 0 or now == start)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def reclaim_stale(folder: str | os.PathLike, what: str = "emu", say=_say) -> list[Path]:
    """Remove what killed runs left in ``folder``: staged folders and files (``STAGED``) whose
    owner is dead, and the empty folder each staged folder had claimed. One line per removal
    through ``say``; returns what was removed. Safe against concurrent callers: a staged name
    is first renamed to one of this process's own, which only one caller can do."""
    folder = Path(folder)
    removed: list[Path] = []
    for e, m in _staged(folder):
        if not owner_gone(m):
            continue
        is_dir = e.is_dir(follow_symlinks=False)
        taken = folder / (staged_prefix(m["name"]) + os.urandom(4).hex() + ".part")
        try:
            os.rename(e.path, taken)
        except OSError:
            continue  # another run took it first, or it is gone
        _remove(taken, is_dir)
        removed.append(Path(e.path))
        claim = folder / m["name"]
        note = ""
        if is_dir and claim.is_dir() and not claim.is_symlink():
            # Only the caller that took the staging folder gets here, and the claim cannot have
            # been made again while it existed; rmdir never removes a published (full) folder.
            with contextlib.suppress(OSError):
                os.rmdir(claim)
                note = f" and its empty claim {claim}"
        say(f"{what}: removed {e.path}{note}, left by process {m['pid']} (killed: it no longer runs)")
    return removed


def remove_own_staged(folder: str | os.PathLike) -> None:
    """Remove the staged files and folders this process left in ``folder``: a signal that lands
    between a temporary file's creation and the code that would remove it (``emu.atomic``)
    leaves one, and the process that made it is the one that knows it is not being written."""
    mine = owner_token()
    for e, m in _staged(Path(folder)):
        if f"o{m['pid']}-{m['start']}-{m['host']}-{m['boot']}" == mine:
            _remove(e.path, e.is_dir(follow_symlinks=False))


def _staged(folder: Path) -> list:
    """The staged names in ``folder``: (entry, its ``STAGED`` match); none if it cannot be read."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(".") and e.name.endswith(".part")]
    except OSError:
        return []
    return [(e, m) for e in entries if (m := STAGED.fullmatch(e.name)) is not None]


def _remove(path, is_dir: bool) -> None:
    if is_dir:
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


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
        reclaim_stale(req.parent, self.what)
        candidates = [req] if self.explicit else [req] + [req.with_name(f"{req.name}-{k}") for k in range(2, MAX_SUFFIX + 1)]
        for cand in candidates:
            # the staging folder first: an empty claim always has a sibling naming its owner
            try:
                staging = Path(tempfile.mkdtemp(prefix=staged_prefix(cand.name), suffix=".part", dir=cand.parent))
                os.chmod(staging, 0o777 & ~_umask())
            except OSError as exc:
                raise _problem(cand, exc, self.what) from None
            try:
                os.mkdir(cand)
            except FileExistsError:
                os.rmdir(staging)
                continue
            except OSError as exc:
                os.rmdir(staging)
                raise _problem(cand, exc, self.what) from None
            except BaseException:  # a signal between the two
                os.rmdir(staging)
                raise
            self.path, self.staging = cand, staging
            return self.path
        if self.explicit:
            raise ConfigError(f"{self.what} {req}: already exists; choose another --out")
        raise ConfigError(f"{self.what} {req}: {MAX_SUFFIX} folders of that name exist; choose --out")

    # -- finish -----------------------------------------------------------------------
    def publish(self) -> Path:
        assert self.path is not None and self.staging is not None, "claim() first"
        os.replace(self.staging, self.path)  # the claim is an empty folder: replaced atomically
        self.staging = None
        self.published = True
        return self.path

    def abort(self) -> None:
        self._release()  # the claim first: killed in between, the staging left says whose it was
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

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
