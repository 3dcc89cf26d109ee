"""The SimPy and ns-3 peers of benchmarks/ring.py count and time the scenario exactly.

Each peer runs as a subprocess, as benchmarks/ring.py runs it, on a tiny ring.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from waits import HANG_S

PEERS = Path(__file__).resolve().parent.parent / "benchmarks" / "peers"
PS_PER_BYTE = 8000  # 1 Gb/s
LATENCY_PS = 1_000_000


def frames(mib: float) -> tuple[int, int]:
    nbytes = int(mib * 2**20)
    n = -(-nbytes // 1400)
    return n, nbytes - (n - 1) * 1400


def line_ps(payload: int) -> int:
    # 14 Ethernet + 48 MCF + payload, plus 24 B of FCS, preamble/SFD and inter-frame gap.
    return (14 + 48 + payload + 24) * PS_PER_BYTE


def peer(name: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(PEERS / f"{name}_ring.py"), *args, "--json"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def uncontended_end_s(mib: float) -> float:
    """hops=1: each link carries one flow, so the last frame leaves the source after the
    n-1 full frames and its own line time, and is delivered one latency later."""
    n, last = frames(mib)
    return ((n - 1) * line_ps(1400) + line_ps(last) + LATENCY_PS) / 1e12


REQUIRED = {"packet_hops", "wall_s", "sim_end_s", "packet_hops_per_s", "peak_rss_mib", "engine"}


def check(r: dict, nodes: int, mib: float, hops: int) -> None:
    assert REQUIRED <= r.keys()
    n, _ = frames(mib)
    assert n == 38  # 0.05 MiB = 52428 B: 37 full frames and one of 628 B
    assert r["packet_hops"] == n * hops * nodes
    assert r["packet_hops_per_s"] == pytest.approx(r["packet_hops"] / r["wall_s"])


def test_simpy_counts_every_hop_under_contention():
    r = peer("simpy", "--nodes", "4", "--mib", "0.05", "--hops", "2")
    assert r["engine"] == "simpy"
    check(r, 4, 0.05, 2)


def test_simpy_end_time_is_store_and_forward_exact():
    r = peer("simpy", "--nodes", "4", "--mib", "0.05", "--hops", "1")
    check(r, 4, 0.05, 1)
    assert r["sim_end_s"] == uncontended_end_s(0.05)  # (n-1)*ser_full + ser_last + latency


def test_simpy_contended_links_stay_busy():
    # hops=2 on 3 nodes: every link carries its own source's flow and one transit flow.
    # The source alone keeps it busy from t=0 (line rate), so a FIFO link never idles and
    # the last delivery is two flows' line time plus one latency.
    r = peer("simpy", "--nodes", "3", "--mib", "0.05", "--hops", "2")
    n, last = frames(0.05)
    assert r["packet_hops"] == n * 2 * 3
    assert r["sim_end_s"] == (2 * ((n - 1) * line_ps(1400) + line_ps(last)) + LATENCY_PS) / 1e12


needs_ns3 = pytest.mark.skipif(importlib.util.find_spec("ns3") is None,
                               reason="optional ns-3 Python bindings not installed (pip install ns3)")


@needs_ns3
def test_ns3_matches_the_same_counts_and_times():
    r = peer("ns3", "--nodes", "4", "--mib", "0.05", "--hops", "1")
    assert r["engine"].startswith("ns3 3.")
    check(r, 4, 0.05, 1)
    assert r["sim_end_s"] == pytest.approx(uncontended_end_s(0.05), abs=1e-12)
    contended = peer("ns3", "--nodes", "4", "--mib", "0.05", "--hops", "2")
    check(contended, 4, 0.05, 2)
    assert contended["sim_end_s"] == pytest.approx(
        peer("simpy", "--nodes", "4", "--mib", "0.05", "--hops", "2")["sim_end_s"], abs=1e-12)


def test_ns3_peer_without_the_package_says_so_and_exits_3():
    # Hide the package even where it is installed: the import then fails as on a bare machine.
    code = ("import runpy, sys; sys.modules['ns3'] = None; sys.argv = ['ns3_ring.py', '--json']; "
            f"runpy.run_path({str(PEERS / 'ns3_ring.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "pip install ns3" in proc.stderr
