r"""Suite-wide settings. Tests wait on events, never on the clock (tests/waits.py holds the one
hang guard). To check that no wall-clock threshold crept back in:

    grep -nE 'timeout=[0-9]|timeout *[:=] *[0-9]|sleep\(|deadline *=|perf_counter|monotonic\(|time\.time\(|wait_for_timeout|set_default_timeout\([0-9]|alarm\([0-9]|elapsed *[<>]' tests/*.py | grep -v 'deadline=None'

finds only tests/waits.py's guard and test_hw.py's virtual clock. A command's own --timeout in a
test (bad input refused before any wait, a peer that never answers) is not a threshold.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import pyreplay  # noqa: F401  (registers the Python reference replay path: engine="python")
from waits import HANG_S

# dask's own connect timeout (30 s) is a clock limit too: its clients and workers get the guard
os.environ.setdefault("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", f"{HANG_S}s")

# Hypothesis times each example against a deadline (200 ms) and calls slow data generation a
# failure (too_slow): both are the machine's speed, not the code's behaviour.
settings.register_profile("mcf", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mcf")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow(why): takes minutes by nature (why says what), e.g. compiles the engine afresh; "
        "-m 'not slow' leaves it out")


@pytest.fixture(scope="session")
def small_trace(tmp_path_factory) -> Path:
    """A MARS trace (4K tokens) whose replay takes a few seconds and captures tens of MB: long
    enough to signal, kill or fill a disk under (test_outputs.py, test_stale_claims.py)."""
    path = tmp_path_factory.mktemp("trace") / "m4k.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-m", "emu", "trace", "mars", "--seq", "4096", "-o", str(path)], env=env,
                   check=True, capture_output=True)
    return path
