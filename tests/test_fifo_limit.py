"""The numpy FIFO limit the replay benchmark measures against (benchmarks/fifo_limit.py)
computes what a FIFO port computes: its vectorised recursion gives every frame's time,
through one link and through several in series, as the per-frame recursion does."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "fifo_limit.py"
spec = importlib.util.spec_from_file_location("fifo_limit", SCRIPT)
fifo_limit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fifo_limit)


@pytest.mark.parametrize("load", [0.3, 0.95, 3.0])  # idle gaps, near line rate, a backlog that only grows
@pytest.mark.parametrize("hops", [1, 4])
def test_the_vectorised_recursion_times_every_frame_as_one_at_a_time(load, hops):
    rng = np.random.default_rng(hops)
    ser = 8 * rng.integers(84, 1538, 3000, dtype=np.int64)
    arrive = np.cumsum(rng.exponential(ser.mean() / load, 3000).astype(np.int64))
    want = arrive
    for _ in range(hops):
        want = fifo_limit.fifo(want, ser) + 500
    np.testing.assert_array_equal(fifo_limit.through_links(arrive, ser, hops, 500), want)


def test_a_frame_waits_for_the_one_before_and_leaves_one_serialization_later():
    # 0: arrives at 0, leaves at 10; 1: arrives at 5, waits, leaves at 20; 2: arrives idle at 30
    arrive, ser = np.array([0, 5, 30]), np.array([10, 10, 4])
    np.testing.assert_array_equal(fifo_limit.fifo(arrive, ser), [10, 20, 34])
    np.testing.assert_array_equal(fifo_limit.through_links(arrive, ser, 1, 0), [10, 20, 34])


def test_the_script_prints_its_figure_as_json():
    out = subprocess.run([sys.executable, str(SCRIPT), "--frames", "20000", "--hops", "2", "--repeat", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    assert got["frames"] == 20000 and got["hops"] == 2 and 0 < got["ns_per_frame_hop"] < 1e4
