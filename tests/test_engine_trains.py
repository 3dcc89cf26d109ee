"""Trains (a port granting a stream's consecutive frames as one event) change nothing.

Scenarios built so trains form and are split: long messages, several local streams
and transit traffic on the same ports under all three arbiters, multicast trees,
failures, repairs and rate changes while trains are on the wire, re-routing, and an
application that sends while trains run. Each run is compared with the per-frame
reference (tests/netref.py) frame by frame, and with the engine itself, trains off:
the transmission records, completions, "sent" upcalls, drops, counters and in-loop
link statistics must be identical, and trains must actually have been granted and cut.
"""

import random

import numpy as np
import pandas as pd
import pytest

from emu.net import kernel as K
from emu.net.linkstats import LinkStats
from emu.sim import Simulator
from emu.net import Loss, Network

from test_engine_exact import (ARBITERS, bfs_next_hop, grid_multicast_scenario, random_changes, random_scenario,
                               reroutes_for, run_both)

TOTALS = {"trains": 0, "train_cuts": 0}


def long_messages(seed, n_msgs=(4, 12)):
    """Random topology, messages of many frames, started close together: ports carry
    long local streams and transit at once."""
    D, n, nh, _msgs, cap, rng = random_scenario(9000 + seed, max_at=3_000_000)
    msgs = []
    for _ in range(rng.randint(*n_msgs)):
        src = rng.randrange(n)
        dst = rng.choice([x for x in range(n) if x != src])
        msgs.append((src, (dst,), dst, rng.randint(20, 150), rng.choice([1462, 1000, 200]), rng.randint(62, 200),
                     rng.choice([0, 0, rng.randint(0, 3_000_000)])))
    return D, n, nh, msgs, cap, rng


def check_trains(net):
    c = net.run_counters()
    TOTALS["trains"] += c["trains"]
    TOTALS["train_cuts"] += c["train_cuts"]
    assert 0 <= c["train_frames"] <= net.counters().local_frames.sum()


@pytest.mark.parametrize("seed", range(30))
def test_trains_split_by_transit_and_local_streams_match_reference(seed):
    D, n, nh, msgs, cap, rng = long_messages(seed)
    net, ref, done = run_both(D, n, nh, msgs, cap, lossless=bool(seed % 2), arbiter=ARBITERS[seed % 3],
                              nic=rng.choice([0, 500_000]), trains=True)
    assert len(done) == len(msgs) or not seed % 2
    check_trains(net)


@pytest.mark.parametrize("seed", range(30))
def test_trains_cut_by_failures_rate_changes_and_reroutes_match_reference(seed):
    D, n, nh, msgs, cap, rng = long_messages(100 + seed)
    changes = random_changes(D, rng, 3_000_000)
    reroutes = reroutes_for(D, n, changes, rng.choice([0, 1, 100_000])) if seed % 3 else []
    net, _ref, _done = run_both(D, n, nh, msgs, cap, lossless=bool(seed % 2), seed=seed, arbiter=ARBITERS[seed % 3],
                                changes=changes, reroutes=reroutes, track=bool(seed % 4 == 0), trains=True,
                                nic=rng.choice([0, 500_000]))
    check_trains(net)


@pytest.mark.parametrize("seed", range(12))
def test_trains_under_multicast_trees_match_reference(seed):
    rng = random.Random(600 + seed)
    n, D, nh, _links, trees, msgs = grid_multicast_scenario(rng, unicasts=5, tree_frags=(30, 120))
    net, _ref, _done = run_both(D, n, nh, msgs, (0, 16 * 1024), trees=trees, arbiter=ARBITERS[seed % 3],
                                trains=True, nic_rate=rng.choice([0, 4 * 10**9]))
    check_trains(net)


def test_the_scenarios_above_granted_and_split_trains():
    # Runs after the tests above (file order): the scenarios must have exercised trains.
    assert TOTALS["trains"] > 100 and TOTALS["train_cuts"] > 50


def run_app(trains, seed):
    """An application that sends more when something completes (sends made mid-train),
    with in-loop link statistics; returns everything observable."""
    import networkx as nx
    rng = random.Random(seed)
    n = 6
    G = nx.cycle_graph(n)
    D = nx.DiGraph()
    for u, v in G.edges:
        for a, b in ((u, v), (v, u)):
            D.add_edge(a, b, rate_bps=rng.choice([10**9, 10**10]), latency_ps=rng.choice([0, 1_000_000]), mtu=1500)
    sim = Simulator()
    net = Network(sim, D, bfs_next_hop(D, n, n), boards=n, arbiter=ARBITERS[seed % 3], trains=trains,
                  nic_latency_ps=500_000)
    stats = LinkStats.of(net, 50_000_000)
    log, events = [], []
    net.log_sinks.append(log.append)
    left = [20]

    def on_event(kind, m, node, frag, t):
        events.append((kind, m.id, node, frag, t))
        if kind == "done" and left[0] > 0:
            left[0] -= 1
            s = rng.randrange(n)
            d = rng.choice([x for x in range(n) if x != s])
            net.send(s, [d], rng.randint(1, 300), 1462, rng.randint(62, 1462), on_event=on_event,
                     at=sim.now + rng.choice([0, 0, 5_000_000]))

    for i in range(8):
        s, d = rng.sample(range(n), 2)
        net.send(s, [d], rng.randint(50, 400), 1462, 700, on_event=on_event, at=rng.randint(0, 2_000_000))
    net.run()
    rows = np.concatenate(log)
    return net, rows, events, stats.frame(net.links, None, sim.now)


@pytest.mark.parametrize("seed", range(6))
def test_trains_on_and_off_give_identical_runs(seed):
    a, rows_a, ev_a, ls_a = run_app(True, seed)
    b, rows_b, ev_b, ls_b = run_app(False, seed)
    order = lambda r: r[np.lexsort((r[:, K.G_FRAG], r[:, K.G_MSG], r[:, K.G_LINK], r[:, K.G_ARR]))]
    assert np.array_equal(order(rows_a), order(rows_b))
    assert ev_a == ev_b
    pd.testing.assert_frame_equal(a.counters(), b.counters())
    pd.testing.assert_frame_equal(a.node_counters(), b.node_counters())
    pd.testing.assert_frame_equal(ls_a, ls_b)
    ca, cb = a.run_counters(), b.run_counters()
    assert ca["trains"] > 0 and cb["trains"] == 0
    assert ca["events"] < cb["events"]


def run_ticking(trains, change=None):
    """One long message 0 -> 1 -> 2 while Python has an event every 3 us (the frame loop
    returns to it each time); ``change(net)`` is called directly from one of those events."""
    import networkx as nx
    D = nx.DiGraph()
    for a, b in ((0, 1), (1, 0), (1, 2), (2, 1)):
        D.add_edge(a, b, rate_bps=10**9, latency_ps=1_000_000, mtu=1500)
    sim = Simulator()
    net = Network(sim, D, bfs_next_hop(D, 3, 3), boards=3, trains=trains, nic_latency_ps=500_000)
    stats = LinkStats.of(net, 20_000_000)
    log, events = [], []
    net.log_sinks.append(log.append)
    on_event = lambda kind, m, node, frag, t: events.append((kind, m.id, node, frag, t))
    net.send(0, [2], 200, 1462, 700, on_event=on_event)
    net.send(2, [0], 30, 1462, 700, on_event=on_event, at=40_000_000)  # the other way, a train on 2->1

    def tick(k):
        if change is not None and k == 40:
            change(net)
        if k < 900:
            sim.at(sim.now + 3_000_000 + 7 * k, tick, k + 1)  # not in step with the frames

    sim.at(1_000_000, tick, 0)
    net.run()
    rows = np.concatenate(log)
    return net, rows, events, stats.frame(net.links, None, sim.now)


def assert_same_runs(a, b):
    net_a, rows_a, ev_a, ls_a = a
    net_b, rows_b, ev_b, ls_b = b
    order = lambda r: r[np.lexsort((r[:, K.G_FRAG], r[:, K.G_MSG], r[:, K.G_LINK], r[:, K.G_ARR]))]
    assert np.array_equal(order(rows_a), order(rows_b))
    assert ev_a == ev_b
    pd.testing.assert_frame_equal(net_a.counters(), net_b.counters())
    pd.testing.assert_frame_equal(net_a.node_counters(), net_b.node_counters())
    pd.testing.assert_frame_equal(ls_a, ls_b)


def test_returning_to_python_does_not_cut_trains():
    # Hundreds of returns to Python while message 0's 199-frame train is on 0->1: the
    # train stays whole (one train, no cut), and the run equals the per-frame one.
    a, b = run_ticking(True), run_ticking(False)
    assert_same_runs(a, b)
    c = a[0].run_counters()
    assert c["train_cuts"] == 0
    assert c["trains"] == 2 and c["train_frames"] == 199 + 29  # and message 1 on 2->1


@pytest.mark.parametrize("what", ["rate", "down", "loss"])
def test_a_direct_change_mid_train_cuts_it_where_the_per_frame_loop_is(what):
    # The change is made from a Python event while the train is out, at an instant the
    # frame loop has not stopped at since the train started: its grants up to now are made.
    change = {"rate": lambda net: net.set_rate(0, 4 * 10**8),
              "down": lambda net: net.link_down(0),
              "loss": lambda net: net.set_loss(0, Loss(drops=(57, 58)))}[what]
    a, b = run_ticking(True, change), run_ticking(False, change)
    assert_same_runs(a, b)
    assert a[0].run_counters()["train_cuts"] == 1


# ---- trains delivered as one at their destination ----------------------------------

DEFERRED = {"train_deliveries": 0}


def bins_equal(a, b):
    """Two runs' in-loop statistics tables: equal rows, and zeros where one grew further."""
    n = min(a.shape[0], b.shape[0])
    assert np.array_equal(a[:n], b[:n])
    assert not a[n:].any() and not b[n:].any()


@pytest.mark.parametrize("seed", range(45))
def test_trains_delivered_as_one_match_reference(seed):
    # No log sink, as in replay: a train's frames whose far node only delivers them are
    # taken as one. Failures, rate and loss changes, re-routes and resends' duplicates
    # (tracked messages) hit them while they arrive; the reference is per frame.
    D, n, nh, msgs, cap, rng = long_messages(300 + seed)
    changes = random_changes(D, rng, 3_000_000) if seed % 2 else []
    reroutes = reroutes_for(D, n, changes, rng.choice([0, 1, 100_000])) if seed % 4 == 1 else []
    kw = dict(lossless=bool(seed % 3), seed=seed, arbiter=ARBITERS[seed % 3], changes=changes, reroutes=reroutes,
              track=bool(seed % 4 == 0), nic=rng.choice([0, 500_000]), log=False,
              nic_rate=[0, 16 * 10**9, 10**11][seed % 3])
    net, _ref, _done = run_both(D, n, nh, msgs, cap, trains=True, **kw)
    DEFERRED["train_deliveries"] += net.run_counters()["train_deliveries"]
    per_frame, _ref, _done = run_both(D, n, nh, msgs, cap, trains=False, **kw)
    assert per_frame.run_counters()["train_deliveries"] == 0
    pd.testing.assert_frame_equal(net.counters(), per_frame.counters())
    pd.testing.assert_frame_equal(net.node_counters(), per_frame.node_counters())
    bins_equal(net.link_bins(), per_frame.link_bins())


def test_the_scenarios_above_delivered_trains_as_one():
    assert DEFERRED["train_deliveries"] > 30


def net_graph(net):
    import networkx as nx
    D = nx.DiGraph()
    D.add_edges_from(net.links)
    return D


def run_reading(trains, change=None, via2=False, reads=True):
    """Messages straight to their destination (one hop) while Python looks at what has
    arrived every 3 us, and ``change(net, msgs)`` is called from one of those looks.
    ``via2``: 0 -> 1 goes through 2 until a re-route makes it direct."""
    import networkx as nx
    D = nx.DiGraph()
    for a, b in ((0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0)):
        D.add_edge(a, b, rate_bps=10**9, latency_ps=1_000_000, mtu=1500)
    sim = Simulator()
    nh = bfs_next_hop(D, 3, 3)
    if via2:
        nh = nh.copy()
        nh[0, 1] = 2
    net = Network(sim, D, nh, boards=3, trains=trains, nic_latency_ps=500_000)
    stats = LinkStats.of(net, 20_000_000)
    events, looks = [], []
    on_event = lambda kind, m, node, frag, t: events.append((kind, m.id, node, frag, t))
    msgs = [net.send(0, [1], 200, 1462, 700, on_event=on_event, track=True),
            net.send(2, [1], 120, 1462, 700, on_event=on_event, at=30_000_000),
            net.send(1, [2], 150, 1462, 900, on_event=on_event, at=10_000_000)]

    def look(k):
        if reads:
            looks.append((sim.now, net.received(msgs[0], 1), net.received(msgs[1], 1), net.received(msgs[2], 2)))
        if change is not None and k == 40:
            change(net, msgs)
        if k < 150:
            sim.at(sim.now + 3_000_000 + 7 * k, look, k + 1)

    sim.at(1_000_000, look, 0)
    net.run()
    return net, events, looks, stats.frame(net.links, None, sim.now)


@pytest.mark.parametrize("what", ["none", "down", "flap", "rate", "resend", "counters", "reroute"])
def test_trains_delivered_as_one_are_taken_where_the_per_frame_loop_is(what):
    # What the destination has received, read from Python mid-train, and a failure of the
    # train's link, a resend of some of its fragments (duplicates there) or a counter
    # read mid-train: all equal to the per-frame run.
    def flap(net, msgs):
        net.link_down(0)
        net.sim.at(net.sim.now + 20_000_000, lambda: net.link_up(0))

    def reroute(net, msgs):
        # 0 -> 1 becomes direct: its unsent frames form a train into 1 while the frames
        # already on the way through 2 still arrive there, one by one, between them.
        net.set_unicast(bfs_next_hop(net_graph(net), 3, 3))
        net.rehome()

    change = {"none": None, "down": lambda net, msgs: net.link_down(0), "flap": flap,
              "rate": lambda net, msgs: net.set_rate(0, 4 * 10**8),
              "resend": lambda net, msgs: net.resend(msgs[0], 1, range(100, 140)),
              "counters": lambda net, msgs: net.counters(),
              "reroute": reroute}[what]
    a, b = run_reading(True, change, what == "reroute"), run_reading(False, change, what == "reroute")
    net_a, ev_a, looks_a, ls_a = a
    net_b, ev_b, looks_b, ls_b = b
    assert looks_a == looks_b
    assert ev_a == ev_b
    pd.testing.assert_frame_equal(net_a.counters(), net_b.counters())
    pd.testing.assert_frame_equal(net_a.node_counters(), net_b.node_counters())
    pd.testing.assert_frame_equal(ls_a, ls_b)
    assert net_a.run_counters()["train_deliveries"] >= 1
    assert any(0 < look[1] < 200 and 0 < look[3] < 150 for look in looks_a)  # read mid-train
    assert sum(e[0] == "done" for e in ev_a) == 3 or what in ("down", "flap")


def test_a_train_delivered_as_one_completed_from_another_path_completes_where_per_frame():
    # Message 0 (tracked) goes 0 -> 1 as one train, which node 1 takes as one. Mid-train
    # the route changes to go through 2 and its last 50 fragments are resent that way:
    # they reach 1 while the train is still arriving, and one of the train's own frames
    # completes the message (the rest are duplicates). The node takes the train's frames
    # arrived before each of them, so completion is at the per-frame time.
    def resend_elsewhere(net, msgs):
        nh = bfs_next_hop(net_graph(net), 3, 3).copy()
        nh[0, 1] = 2
        net.set_unicast(nh)
        net.resend(msgs[0], 1, range(150, 200))

    runs = [run_reading(trains, resend_elsewhere, reads=False) for trains in (True, False)]
    (net_a, ev_a, _la, ls_a), (net_b, ev_b, _lb, ls_b) = runs
    assert ev_a == ev_b
    assert ("done", 0, 1, -1) in [e[:4] for e in ev_a]
    pd.testing.assert_frame_equal(net_a.counters(), net_b.counters())
    pd.testing.assert_frame_equal(net_a.node_counters(), net_b.node_counters())
    pd.testing.assert_frame_equal(ls_a, ls_b)
    assert net_a.drops_by_cause()["duplicate"] > 0
    assert net_a.run_counters()["train_deliveries"] >= 1


@pytest.mark.parametrize("nic_rate", [0, 16 * 10**9])
def test_link_bins_read_mid_train_hold_the_frames_arrived_by_then(nic_rate):
    # The in-loop statistics read from Python while node 1 takes a train as one: the
    # bins hold every frame that arrived by then, as in the per-frame run.
    import networkx as nx
    seen = {}
    for trains in (True, False):
        D = nx.DiGraph()
        for a, b in ((0, 1), (1, 0)):
            D.add_edge(a, b, rate_bps=10**9, latency_ps=1_000_000, mtu=1500)
        sim = Simulator()
        net = Network(sim, D, bfs_next_hop(D, 2, 2), boards=2, trains=trains, nic_latency_ps=500_000,
                      nic_rate_bps=nic_rate)
        LinkStats.of(net, 50_000_000)
        net.send(0, [1], 300, 1462, 700)
        reads = []
        sim.at(1_234_567_000, lambda: reads.append(net.link_bins().copy()))
        net.run()
        seen[trains] = (reads[0], net.run_counters()["train_deliveries"])
    bins_equal(seen[True][0], seen[False][0])
    assert seen[True][0][:, K.B_FRAMES].sum() > 0
    assert seen[True][1] >= 1 and seen[False][1] == 0
