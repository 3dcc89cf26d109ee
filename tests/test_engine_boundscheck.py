"""The engine's tests once more with numba's bounds checking on (NUMBA_BOUNDSCHECK=1): an
index past one of the kernel's tables is then an IndexError, never a crash or silent
garbage read from the memory beyond it; so is a negative one (the engine's code takes an
index as it is, without numba's wrap from the end: emu.numba_compile).

Slow by nature: the frame kernel is compiled afresh with the checks (into a private
NUMBA_CACHE_DIR, so checked machine code never lands in the cache every other test and
replay loads), a few minutes on a 2-core machine. So one subprocess runs one selection:
tests/test_engine.py whole (timing, failures, re-routing, loss, drop-tail, memory,
tracked resends and duplicates, bins, a datapath, the kernel's boundary) and one or two
seeds of each randomized family that reaches other parts of the kernel (multicast trees,
re-routed trees, node failures, datapaths, contention under the three arbiters, trains
split, cut and delivered as one).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SELECTION = [
    "tests/test_engine.py",
    *(f"tests/test_engine_exact.py::{name}[{case}]" for name, cases in (
        ("test_droptail_and_loss_match_reference", ("trains-0", "per-frame-1")),
        ("test_multicast_trees_match_reference", ("trains-0", "per-frame-0")),
        ("test_finite_rate_datapath_matches_reference", ("trains-0",)),
        ("test_contention_between_local_and_transit_matches_reference", ("trains-0", "trains-1", "per-frame-2")),
        ("test_failures_rate_changes_and_loss_windows_match_reference", ("trains-0", "per-frame-1")),
        ("test_multicast_rerouted_onto_new_trees_matches_reference", ("trains-0",)),
        ("test_node_failure_under_multicast_and_unicast_matches_reference", ("trains-0",)),
    ) for case in cases),
    *(f"tests/test_engine_trains.py::{name}[{seed}]" for name, seeds in (
        ("test_trains_cut_by_failures_rate_changes_and_reroutes_match_reference", (1,)),
        ("test_trains_under_multicast_trees_match_reference", (0,)),
        ("test_trains_delivered_as_one_match_reference", (0, 1, 2, 5)),
    ) for seed in seeds),
    "tests/test_engine_trains.py::test_a_train_delivered_as_one_completed_from_another_path_completes_where_per_frame",
]


@pytest.mark.slow("compiles the frame kernel afresh with bounds checks")
def test_the_engine_tests_pass_with_numba_bounds_checking(tmp_path):
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SELECTION],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, (p.stdout[-6000:], p.stderr[-3000:])
    assert " passed" in p.stdout.splitlines()[-1] and "deselected" not in p.stdout
