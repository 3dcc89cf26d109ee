"""Waiting in tests: on events, under one hang guard.

No test depends on how fast the machine is. A test waits for what it needs (a line printed,
a file appearing, a process or thread ending, a socket answering, a page element appearing),
never for a fixed time. ``HANG_S`` only keeps a test from waiting forever when the product
hangs: it is far above the longest wait a loaded machine has shown (a cold engine compile
inside a fresh install, minutes at load 16 on 2 cores) and is never what a test asserts.
``EMU_TEST_HANG_SCALE`` multiplies it (say 4 on an emulated CPU, 0.1 to find a hang sooner on
an idle machine). Timing goals are benchmarks (benchmarks/), not tests.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

HANG_S = max(1, round(3600 * float(os.environ.get("EMU_TEST_HANG_SCALE", "1"))))  # whole seconds
HANG_MS = HANG_S * 1000  # Playwright counts milliseconds
POLL_S = 0.05  # how often wait_until looks again: how soon it notices, not how long it allows


def wait_until(ready, what: str, *, proc=None) -> None:
    """Return once ``ready()`` is true. Fails if ``proc`` (a Popen) ends first, since then it
    never will, or after the hang guard."""
    end = time.monotonic() + HANG_S
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ended before {what}: exit {proc.returncode}")
        if time.monotonic() > end:
            raise AssertionError(f"hang: no {what} after {HANG_S:.0f} s")
        time.sleep(POLL_S)


@contextmanager
def guarded(proc):
    """Kill ``proc`` (a Popen) if the block outlasts the hang guard: a blocking read of its
    output (waiting for a line it prints when ready) then ends at EOF instead of never."""
    timer = threading.Timer(HANG_S, proc.kill)
    timer.daemon = True
    timer.start()
    try:
        yield proc
    finally:
        timer.cancel()
