"""Hop-by-hop credit flow control in the engine equals the plain reference model (tests/netref.py),
frame by frame.

Randomized incasts (many boards to one, through random topologies, with and without finite
datapaths), multi-hop multicast trees on a grid and priority streams, with port buffers a few
frames above the least credit accepts: every transmission, completion, "sent" and drop, and per
link the most its far node held and the time its port waited for credit, must be the
reference's (run_both). And the point of credit: no frame is dropped for want of buffer, no node
ever held more than its buffer for a link, and when the run is over every port has all its
credit back (docs/engine.md, "Port buffers and flow control"). A ring whose traffic waits around
it deadlocks under credit too; the cycle of ports waiting for credit is found and named
(emu.net.deadlock).
"""

import random

import networkx as nx
import numpy as np
import pytest

from emu.codec.mac import ETH_LEN
from emu.errors import ConfigError
from emu.net import Network, deadlock
from emu.net import kernel as K
from emu.sim import Simulator

from test_engine_exact import ARBITERS, grid_multicast_scenario, incast_scenario, prio_scenario, random_scenario, run_both

TOTALS = {"waited_ps": 0, "runs": 0}


def least_buffer(D):
    """The smallest port buffer credit accepts on every link of ``D``: the largest frame copied to
    every egress port of the far node."""
    return max((D.edges[u, v]["mtu"] + ETH_LEN) * D.out_degree(v) for u, v in D.edges)


def incast(seed):
    return incast_scenario(9000 + seed)


def check(net, buf):
    c = net.counters()
    assert c.dropped_queue_full.sum() == 0
    assert (c.peak_held_bytes <= buf).all()
    nl = len(net.links)
    assert (net.LK[:nl, K.L_CREDIT] == buf).all() and net.SC[K.SC_CTOKENS] == 0  # all credit came home
    TOTALS["waited_ps"] += int(c.paused_ps.sum())
    TOTALS["runs"] += 1


@pytest.mark.parametrize("seed", range(12))
def test_incast_under_credit_matches_reference(seed):
    D, n, nh, msgs, rng = incast(seed)
    buf = least_buffer(D) + rng.randint(0, 8) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), credit=True, arbiter=ARBITERS[seed % 3])
    assert len(done) == len(msgs)
    check(net, buf)


@pytest.mark.parametrize("seed", range(6))
def test_incast_through_finite_datapaths_under_credit_matches_reference(seed):
    D, n, nh, msgs, rng = incast(100 + seed)
    nic = {v: rng.choice([0, 300_000]) for v in range(n)}
    nic_rate = {v: rng.choice([0, 4 * 10**9, 10**10]) for v in range(n)}
    buf = least_buffer(D) + rng.randint(0, 8) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), credit=True, nic=nic, nic_rate=nic_rate,
                              arbiter=ARBITERS[seed % 3])
    assert len(done) == len(msgs)
    check(net, buf)


@pytest.mark.parametrize("seed", range(8))
def test_multicast_trees_under_credit_match_reference(seed):
    """A multicast frame spends its length once per copy its next node makes (3 on the grid's
    centre), and each copy gives its share back when that node grants it."""
    rng = random.Random(700 + seed)
    n, D, nh, _links, trees, msgs = grid_multicast_scenario(rng, unicasts=6, tree_frags=(30, 150), span=10**6)
    buf = least_buffer(D) + rng.randint(0, 6) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), trees=trees, credit=True, arbiter=ARBITERS[seed % 3])
    for i, (root, members, *_rest) in enumerate(msgs[:3]):
        assert {node for (m, node) in done if m == i} == set(members)
    check(net, buf)


@pytest.mark.parametrize("seed", range(8))
def test_prio_streams_under_credit_match_reference(seed):
    """The ports' priority class under credit: a prio frame at the head waits for credit like any
    other (head of line), and the round robin's turn does not move while the port waits."""
    D, n, nh, msgs, _cap, rng, live = prio_scenario(8500 + seed)
    msgs = [(s, d, r, nf * 4, fl, ll, at) for s, d, r, nf, fl, ll, at in msgs]
    buf = least_buffer(D) + rng.randint(0, 6) * 1500
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), credit=True, arbiter=ARBITERS[seed % 3], track=True,
                              live=live)
    check(net, buf)


def test_the_scenarios_above_waited_for_credit():
    """Not vacuous: the randomized runs above did make ports wait for credit (run after them)."""
    assert TOTALS["runs"] > 0 and TOTALS["waited_ps"] > 0


def test_a_buffer_too_small_for_the_largest_frame_and_its_copies_is_refused_in_one_line():
    D, n, nh, _msgs, _cap, _rng = random_scenario(3)
    for e in D.edges:
        D.edges[e]["queue_bytes"] = 2000
    with pytest.raises(ConfigError, match=r"^link \d+-\d+: a 2000 B port buffer is too small for credit: the "
                                          r"largest frame copied to each of node \d+'s \d+ ports needs \d+ B$"):
        Network(Simulator(), D, nh, boards=n, credit=True)
    need = least_buffer(D)
    for e in D.edges:
        D.edges[e]["queue_bytes"] = need
    Network(Simulator(), D, nh, boards=n, credit=True)  # the least it accepts


def test_credit_returns_take_the_credit_frame_and_the_reverse_propagation():
    """Two hops, one frame of credit: the source's second frame starts when the middle node's
    credit for the first is back, a minimum frame's time on the reverse link plus its propagation
    after the middle node granted the first on its egress port."""
    D = nx.DiGraph()
    for u, v, lat in ((0, 1, 1_000_000), (1, 0, 30_000_000), (1, 2, 1_000_000), (2, 1, 1_000_000)):
        D.add_edge(u, v, rate_bps=10**9, latency_ps=lat, mtu=1500, queue_bytes=1514 * 2)
    nh = np.array([[-1, 1, 1], [0, -1, 2], [1, 1, -1]])
    net = Network(Simulator(), D, nh, boards=3, credit=True)
    log = []
    net.log_sinks.append(log.append)
    net.send(0, (2,), 3, 1514)  # 1514 B each: the middle node forwards, one copy
    net.run()
    rows = np.concatenate(log)
    first = rows[rows[:, K.G_LINK] == net.link_id[(0, 1)]]
    ser = (1514 + 24) * 8 * 1000  # ps at 1 Gb/s
    hop = rows[rows[:, K.G_LINK] == net.link_id[(1, 2)]]
    # the first two frames fit the 2-frame credit; the third waits for the first's return
    assert first[1, K.G_START] == ser
    back = (60 + 24) * 8 * 1000 + 30_000_000  # credit frame on 1->0, + 1->0's propagation
    assert first[2, K.G_START] == hop[0, K.G_START] + back
    c = net.counters()
    assert c.paused_ps[net.link_id[(0, 1)]] == first[2, K.G_START] - 2 * ser


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
def test_a_credit_cycle_on_a_ring_is_found_and_named(n):
    """Every board sends three hops clockwise: each port's credit is held by frames waiting at the
    next port, which waits for credit for the same reason, around the ring."""
    D, clockwise = ring(n)
    net = Network(Simulator(), D, clockwise, boards=n, credit=True)
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
    assert c.dropped_frames.sum() == 0


def test_two_hops_on_the_same_ring_drain_and_no_cycle_is_reported():
    """The same ring with two hops: the frames a port's credit pays for leave the ring at the next
    board's egress toward their destination, which delivers them and needs no credit."""
    D, clockwise = ring(5)
    net = Network(Simulator(), D, clockwise, boards=5, credit=True)
    done = []
    for i in range(5):
        net.send(i, ((i + 2) % 5,), 400, 1500, on_event=lambda kind, *a: done.append(kind))
    net.run()
    assert done.count("done") == 5 and deadlock.cycle(net) is None
    assert (net.LK[: len(net.links), K.L_CREDIT] == least_buffer(D)).all()


@pytest.mark.parametrize("seed", range(3))
def test_a_one_way_ring_returns_credit_over_the_cables_other_direction(seed):
    """A one-way ring routes no data v -> u, but its cables are full duplex: credit comes back the
    other way at the link's own rate and latency, and the engine still equals the reference."""
    rng = random.Random(40 + seed)
    n = 5
    D = nx.DiGraph()
    for i in range(n):
        D.add_edge(i, (i + 1) % n, rate_bps=10**9, latency_ps=rng.choice([1_000_000, 5_000_000]), mtu=1500)
    nh = np.array([[-1 if d == s else (s + 1) % n for d in range(n)] for s in range(n)])
    msgs = [(s, ((s + 2) % n,), (s + 2) % n, rng.randint(20, 80), 1514, 1514, rng.randint(0, 10**6))
            for s in range(n)]
    buf = least_buffer(D) + rng.randint(0, 2) * 1514
    net, ref, done = run_both(D, n, nh, msgs, (0, buf), credit=True)
    assert len(done) == n
    check(net, buf)
