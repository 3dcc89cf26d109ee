"""How the benchmarks measure: one call's CPU and wall seconds, and the medians of repeated
runs' figures (each run a dict of figures). Run a benchmark as ``python benchmarks/X.py``:
its folder is then on the import path."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time


def timed(fn):
    """``fn()``'s result, its CPU seconds (this process) and its wall seconds."""
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def medians(runs: list[dict], keys) -> dict:
    """Each of ``keys``' median over ``runs``."""
    return {key: statistics.median(run[key] for run in runs) for key in keys}


def command(cmd: list[str], env: dict | None = None) -> tuple[float, float, float, bytes]:
    """One process: its wall seconds, its own CPU seconds (user + system) and peak RSS in MiB
    (from wait4), and its stdout; SystemExit with its last stderr line if it fails."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status):
            last = err.read().decode(errors="replace").strip().splitlines()[-1:] or [f"exit {status}"]
            raise SystemExit(f"{' '.join(cmd)}: {last[0]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()
