"""Whose point claim is alive (emu.sweep.claims; docs/sweeps.md, "Two sweeps on one folder"):
on this host a claim lives while its pid runs the process that made it (the same start time),
a claim from another host while its owner refreshes it. A dead owner's claim is taken over,
a live one never."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from emu.outputs import start_ticks
from emu.sweep.claims import STALE_S, Claims


def claim(c: Claims, point: str, who: dict, age_s: float = 0.0) -> None:
    """The claim file another sweep process ``who`` holds on ``point``, last refreshed ``age_s`` ago."""
    c.dir.mkdir(parents=True, exist_ok=True)
    path = c.path(point)
    path.write_text(json.dumps(who))
    t = time.time() - age_s
    os.utime(path, (t, t))


@pytest.fixture
def other():
    """A live process of this host, as another sweep: (pid, its start time)."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield p.pid, start_ticks(p.pid)
    finally:
        p.stdin.close()
        p.wait()


def test_a_claim_by_a_pid_that_now_runs_another_process_is_taken_over(tmp_path, other):
    pid, start = other
    assert start
    c = Claims(tmp_path)
    here = socket.gethostname()
    claim(c, "p1", {"pid": pid, "host": here, "start": start})
    assert c.held_elsewhere("p1") == {"pid": pid, "host": here, "start": start} and not c.take("p1")
    # the same pid, started at another time: the claim's owner ended and its pid was reused
    claim(c, "p2", {"pid": pid, "host": here, "start": start + 1})
    assert c.held_elsewhere("p2") is None and c.take("p2")
    assert json.loads(c.path("p2").read_text())["pid"] == os.getpid()


def test_a_claim_from_another_host_lives_while_its_owner_refreshes_it(tmp_path, other):
    pid, start = other
    c = Claims(tmp_path)
    there = socket.gethostname() + "-elsewhere"
    # a pid that runs here says nothing of a process on another host, nor does one that does not
    claim(c, "fresh", {"pid": pid, "host": there, "start": start + 1})
    claim(c, "fresh-gone", {"pid": 2**22 + 1, "host": there, "start": 1})
    claim(c, "stale", {"pid": pid, "host": there, "start": start}, age_s=STALE_S + 60)
    assert not c.take("fresh") and not c.take("fresh-gone")
    assert c.take("stale")
