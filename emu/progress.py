"""Progress on stderr, for a person (a bar) or a program (one JSON object per line).

The bar is one line redrawn with a carriage return, which terminals and notebooks both
honour; its last drawing is the end state (100 % for a run that completed), whatever the
step between drawings. The stream is looked up at each write: Jupyter swaps sys.stderr
per cell. ``--progress json`` lines (docs/api.md):

    {"progress": "replay", "ops_done": 2000, "ops_total": 179429, "simulated_s": 0.0123,
     "wall_s": 1.52, "eta_s": 134.8, "end": false}
"""

from __future__ import annotations

import json
import sys
import threading
import time

MODES = ("bar", "json")
REPLAY_STEP_OPS = 2000  # ops a replay completes between two progress reports (both engines)


def mode(value, stderr_is_terminal: bool) -> str | None:
    """The mode a command's ``--progress [MODE]`` asks for: None (not given: a bar on a
    terminal), "bar", "json" or "none"; returns "bar", "json" or None (no progress)."""
    if value is None:
        return "bar" if stderr_is_terminal else None
    return None if value == "none" else value


def clock(seconds: float) -> str:
    """Wall time as m:ss (h:mm:ss past an hour), as the sweep's bar shows it."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """``label``'s progress: ``update`` as it goes, ``end`` once (the last line, then a newline)."""

    _lock = threading.Lock()  # a Ticker's thread and the main thread draw the same line

    def __init__(self, label: str, total: int | None, mode: str = "bar"):
        if mode not in MODES:
            raise ValueError(mode)
        self.label, self.total, self.mode = label, total, mode
        self.t0 = time.perf_counter()
        self._width = 0  # of the last drawing, which the next one blanks
        self._first = None  # (time, done) of the first report

    def update(self, done: int, sim_ps: int | None = None, phase: str | None = None, end: bool = False,
               step: tuple[int, int] | None = None) -> None:
        """``done`` ops (of ``total``) at simulated ``sim_ps``; ``phase`` names what runs now and
        ``step`` its (done, total) when it is counted apart from the ops (the functional checks
        after a compiled loop, which follow every op's completion)."""
        now = time.perf_counter()
        wall = now - self.t0
        if self._first is None:  # the ETA extrapolates from here: setup before the first report is not work done
            self._first = (now, done)
        total, (t1, d1) = self.total, self._first
        eta = (now - t1) * (total - done) / (done - d1) if total and d1 < done < total and not end else None
        if self.mode == "json":
            row = {"progress": self.label}
            if phase is not None:
                row["phase"] = phase
            if step is not None:
                row.update(phase_done=step[0], phase_total=step[1])
            row.update(ops_done=done, ops_total=total)
            if sim_ps is not None:
                row["simulated_s"] = sim_ps / 1e12
            row.update(wall_s=round(wall, 3), eta_s=None if eta is None else round(eta, 3), end=end)
            self._write(json.dumps(row) + "\n")
            return
        if total:
            frac = done / total
            text = f"  {self.label} [{'#' * int(30 * frac):<30}] {frac:6.1%}"
            if phase is not None:
                text += f"  {phase}" + (f" {step[0]:,}/{step[1]:,}" if step is not None else "")
        else:
            text = f"  {self.label}: {phase + ' ' if phase else ''}{done:,} ops"
        if sim_ps is not None:
            text += f"  simulated {sim_ps / 1e12:9.4f} s"
        text += f"  wall {clock(wall)}" + (f"  ETA {clock(eta)}" if eta is not None else "")
        self._write(f"\r{text:<{self._width}}" + ("\n" if end else ""))
        self._width = 0 if end else len(text)

    def end(self, done: int, sim_ps: int | None = None, phase: str | None = None) -> None:
        self.update(done, sim_ps, phase, end=True)

    def stop(self) -> None:
        """Stopped short (an error): end the bar's line, if one is drawn, so what follows starts a line."""
        if self.mode == "bar" and self._width:
            self._write("\n")
            self._width = 0

    @classmethod
    def _write(cls, text: str) -> None:
        with cls._lock:
            sys.stderr.write(text)
            sys.stderr.flush()


class Ticker:
    """Reports ``count()`` as ``phase`` every ``every`` seconds from a thread, while the caller
    works (a generator that cannot report itself: its op builder's length is read).
    Nothing is shown before the count starts, so an early error is the only line on stderr."""

    def __init__(self, progress: Progress, count, phase: str, every: float = 0.5):
        self.progress, self.count, self.phase, self.every = progress, count, phase, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)

    def __enter__(self) -> "Ticker":
        self._thread.start()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self._stop.set()
        self._thread.join()
        if kind is not None:
            self.progress.stop()

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            n = self.count()
            if n:
                self.progress.update(n, phase=self.phase)
