"""How the benchmarks measure: one call's CPU and wall seconds, and the medians of repeated
runs' figures (each run a dict of figures). Run a benchmark as ``python benchmarks/X.py``:
its folder is then on the import path."""

from __future__ import annotations

import statistics
import time


def timed(fn):
    """``fn()``'s result, its CPU seconds (this process) and its wall seconds."""
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def medians(runs: list[dict], keys) -> dict:
    """Each of ``keys``' median over ``runs``."""
    return {key: statistics.median(run[key] for run in runs) for key in keys}
