"""Point claims: two sweeps on one output folder never run the same point at once.

Before a point is sent to a worker, the sweep process creates ``OUT/claims/<point>.claim``
with ``O_EXCL`` (exactly one process succeeds) holding its owner: pid, host and the pid's
start time. Another sweep on the same folder skips a point claimed by a live owner and waits
for its part. A claim outlives its owner only when the owner is killed (SIGKILL, a crash);
it is then reclaimed: on the owner's host when that pid no longer runs (or runs another
process: the start time differs), from another host when the owner stopped refreshing it
(its mtime, touched every ``REFRESH_S``) for ``STALE_S``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from ..outputs import pid_runs, start_ticks

REFRESH_S = 30.0
STALE_S = 180.0


def owner() -> dict:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "start": start_ticks(pid)}


def alive(who: dict | None, mtime: float) -> bool:
    """Whether the owner of a claim may still be running its point."""
    if not isinstance(who, dict):
        return False
    if who.get("host") != socket.gethostname():
        return time.time() - mtime < STALE_S
    pid, start = who.get("pid"), who.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    return pid_runs(pid, start if isinstance(start, int) and not isinstance(start, bool) else None)


class Claims:
    """This process's claims on the points of one output folder."""

    def __init__(self, out: Path):
        self.dir = Path(out) / "claims"
        self.me = owner()
        self.mine: set[str] = set()
        self._refreshed = time.monotonic()

    def path(self, pid: str) -> Path:
        return self.dir / f"{pid}.claim"

    def holder(self, pid: str) -> tuple[dict | None, float] | None:
        """(owner, mtime) of a point's claim; None when it is not claimed."""
        p = self.path(pid)
        try:
            st = p.stat()
            who = json.loads(p.read_text() or "null")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None, 0.0  # unreadable: a claim torn by a crash while written
        return who, st.st_mtime

    def held_elsewhere(self, pid: str) -> dict | None:
        """The owner of a live claim by another process (None: free, stale or ours)."""
        h = self.holder(pid)
        if h is None or pid in self.mine or not alive(*h):
            return None
        return h[0]

    def take(self, pid: str) -> bool:
        """Claim a point; False when another live sweep holds it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._create(pid):
            return True
        with self._locked():  # reclaiming: one process at a time looks and replaces
            h = self.holder(pid)
            if h is not None and alive(*h):
                return False
            with contextlib.suppress(FileNotFoundError):
                self.path(pid).unlink()
            return self._create(pid)

    def _create(self, pid: str) -> bool:
        try:
            fd = os.open(self.path(pid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump(self.me, fh)
        self.mine.add(pid)
        return True

    @contextlib.contextmanager
    def _locked(self):
        with open(self.dir / ".lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def release(self, pid: str) -> None:
        if pid in self.mine:
            self.mine.discard(pid)
            with contextlib.suppress(OSError):
                self.path(pid).unlink()

    def refresh(self) -> None:
        """Touch this process's claims now and then, so other hosts see it is alive."""
        if time.monotonic() - self._refreshed < REFRESH_S:
            return
        self._refreshed = time.monotonic()
        for pid in list(self.mine):
            with contextlib.suppress(OSError):
                os.utime(self.path(pid))

    def close(self) -> None:
        """Release every claim left; remove the folder when no other sweep uses it."""
        for pid in list(self.mine):
            self.release(pid)
        with contextlib.suppress(OSError):
            if not any(self.dir.glob("*.claim")):
                (self.dir / ".lock").unlink(missing_ok=True)
                self.dir.rmdir()
