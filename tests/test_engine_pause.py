"""802.3x PAUSE in the engine equals the plain reference model (tests/netref.py), frame by frame.

Randomized incasts (many boards to one, through random topologies, with and without finite
datapaths) and multi-hop multicast trees on a grid, with port buffers a few frames above
what pause needs: every transmission, completion, "sent" and drop, and per link the most
its far node held and the time it was paused, must be the reference's (run_both). And the
point of pause: no frame is dropped for want of buffer, and no node ever held more than its
buffer for a link (docs/engine.md, "Port buffers and flow control"). A ring whose traffic waits around it
deadlocks under pause; the cycle of paused ports is found and named (emu.net.deadlock).
"""

import random

import networkx as nx
import numpy as np
import pytest

from emu.errors import ConfigError
from emu.net import Network, deadlock
from emu.codec.mac import ETH_LEN
from emu.net.flowcontrol import thresholds
from emu.sim import Simulator

from test_engine_exact import ARBITERS, grid_multicast_scenario, incast_scenario, prio_scenario, random_scenario, run_both

TOTALS = {"paused_ps": 0, "runs": 0}


def least_buffer(D, nic=0, nic_rate=0):
    """The smallest port buffer pause accepts on every link of ``D`` (3 frames above the headroom)."""
    lat_of = nic if isinstance(nic, dict) else dict.fromkeys(D.nodes, nic)
    rate_of = nic_rate if isinstance(nic_rate, dict) else dict.fromkeys(D.nodes, nic_rate)
    need = 0
    for u, v in D.edges:
        dp = rate_of.get(v, 0)
        lat = D.edges[u, v]["latency_ps"] + (0 if dp else lat_of.get(v, 0))
        th = thresholds(D, u, v, 1 << 40, lat, dp, lat_of.get(v, 0) if dp else 0)
        need = max(need, th.headroom + 3 * (D.edges[u, v]["mtu"] + ETH_LEN))
    return need


def incast(seed):
    return incast_scenario(7000 + seed)


def check(net, ref):
    c = net.counters()
    assert c.dropped_queue_full.sum() == 0
    TOTALS["paused_ps"] += int(c.paused_ps.sum())
    TOTALS["runs"] += 1


@pytest.mark.parametrize("seed", range(12))
def test_incast_under_pause_matches_reference(seed):
    D, n, nh, msgs, rng = incast(seed)
    buf = least_buffer(D) + rng.randint(0, 8) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), pause=True, arbiter=ARBITERS[seed % 3])
    assert len(done) == len(msgs)
    check(net, ref)


@pytest.mark.parametrize("seed", range(6))
def test_incast_through_finite_datapaths_under_pause_matches_reference(seed):
    D, n, nh, msgs, rng = incast(100 + seed)
    nic = {v: rng.choice([0, 300_000]) for v in range(n)}
    nic_rate = {v: rng.choice([0, 4 * 10**9, 10**10]) for v in range(n)}
    buf = least_buffer(D, nic, nic_rate) + rng.randint(0, 8) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), pause=True, nic=nic, nic_rate=nic_rate,
                              arbiter=ARBITERS[seed % 3])
    assert len(done) == len(msgs)
    check(net, ref)


@pytest.mark.parametrize("seed", range(8))
def test_multicast_trees_under_pause_match_reference(seed):
    rng = random.Random(500 + seed)
    n, D, nh, _links, trees, msgs = grid_multicast_scenario(rng, unicasts=6, tree_frags=(30, 150), span=10**6)
    buf = least_buffer(D) + rng.randint(0, 6) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), trees=trees, pause=True, arbiter=ARBITERS[seed % 3])
    for i, (root, members, *_rest) in enumerate(msgs[:3]):
        assert {node for (m, node) in done if m == i} == set(members)
    check(net, ref)


@pytest.mark.parametrize("seed", range(8))
def test_prio_streams_under_pause_match_reference(seed):
    """The ports' priority class under pause: prio bursts, sends and resends (test_engine_exact's
    prio_scenario, heavier) while ports pause; a paused port starts no frame, prio or not."""
    D, n, nh, msgs, _cap, rng, live = prio_scenario(8000 + seed)
    msgs = [(s, d, r, nf * 4, fl, ll, at) for s, d, r, nf, fl, ll, at in msgs]
    buf = least_buffer(D) + rng.randint(0, 6) * 1500
    # Statistics in 1 us bins with no limit: the scenario's own 7-71 ns bins held 17 GB at its
    # longest run (the bins grow with the run, ST_NEED_BINS, as with the fine ones).
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), pause=True, arbiter=ARBITERS[seed % 3], track=True,
                              live=live, bins=(1_000_000, 0))
    check(net, ref)


def test_the_scenarios_above_paused_ports():
    """Not vacuous: the randomized runs above did pause ports (run after them, in file order)."""
    assert TOTALS["runs"] > 0 and TOTALS["paused_ps"] > 0


def test_a_buffer_too_small_for_the_headroom_is_refused_in_one_line():
    D, n, nh, _msgs, _cap, _rng = random_scenario(3)
    for e in D.edges:
        D.edges[e]["queue_bytes"] = 4096
    with pytest.raises(ConfigError, match=r"leaves no room for pause: it needs \d+ B of headroom"):
        Network(Simulator(), D, nh, boards=n, pause=True)


def ring(n, buf=None):
    D = nx.DiGraph()
    for i in range(n):
        for u, v in ((i, (i + 1) % n), ((i + 1) % n, i)):
            D.add_edge(u, v, rate_bps=10**9, latency_ps=1_000_000, mtu=1500)
    buf = buf or least_buffer(D)
    for e in D.edges:
        D.edges[e]["queue_bytes"] = buf
    clockwise = np.array([[d if d == s else (s + 1) % n for d in range(n)] for s in range(n)])
    return D, clockwise


@pytest.mark.parametrize("n", [4, 5])
def test_a_pause_cycle_on_a_ring_is_found_and_named(n):
    """Every board sends three hops clockwise: each port's frames wait at the next port, which
    the next board pauses for the same reason, around the ring: a cyclic buffer dependency."""
    D, clockwise = ring(n)
    net = Network(Simulator(), D, clockwise, boards=n, pause=True)
    done = []
    for i in range(n):
        net.send(i, ((i + 3) % n,), 400, 1500, on_event=lambda kind, *a: done.append(kind))
    net.run()
    assert "done" not in done
    stuck = deadlock.cycle(net)
    assert sorted(stuck) == sorted((i, (i + 1) % n) for i in range(n))
    line = deadlock.describe(stuck)
    assert line.startswith("ports ") and line.count("->") == 2 * n + 1 and "\n" not in line
    c = net.counters()
    assert (c.paused_ps[[net.link_id[(i, (i + 1) % n)] for i in range(n)]] > 0).all()


def test_two_hops_on_the_same_ring_drain_and_no_cycle_is_reported():
    """The same ring with two hops: each port's transit frames leave the ring at the next board."""
    D, clockwise = ring(5)
    net = Network(Simulator(), D, clockwise, boards=5, pause=True)
    done = []
    for i in range(5):
        net.send(i, ((i + 2) % 5,), 400, 1500, on_event=lambda kind, *a: done.append(kind))
    net.run()
    assert done.count("done") == 5 and deadlock.cycle(net) is None
