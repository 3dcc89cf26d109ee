"""Datapath pull (docs/engine.md, "Datapath pull"): a node's datapath takes the frames that
arrived over the links into the node itself, so those arrivals are no events of their own.

Each scenario runs without a log sink (a sink turns the pull off) against the per-frame
reference (tests/netref.py, through run_both) and against the engine with trains off (per-frame
arrivals): completions, counters, drops and in-loop bins must be identical. The scenarios
are built for the pull's rules: frames arriving at one instant over two links (arrival order),
a datapath slower than its links (frames wait on their links, arrived and not yet taken)
read from Python and failed while they wait, frames lost on a link into a datapath, a node
with more links in than the datapath has slots, and a log sink that comes mid-run.
"""

import random

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from emu.net import Loss, Network
from emu.net import kernel as K
from emu.net.linkstats import LinkStats
from emu.sim import Simulator

from test_engine_exact import bfs_next_hop, random_changes, random_scenario, run_both
from test_engine_trains import bins_equal


def same_counters(a, b):
    pd.testing.assert_frame_equal(a.counters(), b.counters())
    pd.testing.assert_frame_equal(a.node_counters(), b.node_counters())
    bins_equal(a.link_bins(), b.link_bins())


def both(D, n, nh, msgs, cap, **kw):
    """The run with the pull and the run with per-frame arrivals, each checked against the reference."""
    pulled, _ref, done = run_both(D, n, nh, msgs, cap, trains=True, log=False, **kw)
    per_frame, _ref, _done = run_both(D, n, nh, msgs, cap, trains=False, log=False, **kw)
    same_counters(pulled, per_frame)
    return pulled, per_frame, done


def line(rates, lat=1_000_000):
    D = nx.DiGraph()
    for u, v, r in rates:
        D.add_edge(u, v, rate_bps=r, latency_ps=lat, mtu=1500)
        D.add_edge(v, u, rate_bps=r, latency_ps=lat, mtu=1500)
    return D


def test_frames_arriving_at_one_instant_enter_the_datapath_in_link_order():
    # 0 and 1 each send to 3 through 2, on equal links: their frames reach 2 at the same
    # picosecond over links 0->2 and 1->2, and its datapath takes the lower link's first;
    # the order shows in when each message completes at 3.
    D = line([(0, 2, 10**9), (1, 2, 10**9), (2, 3, 10**9)])
    n = 4
    nh = bfs_next_hop(D, n, n)
    msgs = [(0, (3,), 3, 3, 1462, 1462, 0), (1, (3,), 3, 3, 1462, 1462, 0)]
    pulled, per_frame, done = both(D, n, nh, msgs, (0, 64 * 1024), nic=500_000, nic_rate=16 * 10**9)
    assert len(done) == 2
    assert pulled.run_counters()["events"] < per_frame.run_counters()["events"]


@pytest.mark.parametrize("seed", range(12))
def test_a_datapath_slower_than_its_links_takes_the_waiting_frames_in_arrival_order(seed):
    # A 0.4 Gb/s datapath behind 1 and 2.5 Gb/s links: frames wait on their links, arrived
    # and not yet taken; failures and rate changes hit the links meanwhile.
    D, n, nh, msgs, cap, rng = random_scenario(7100 + seed, max_at=2_000_000)
    changes = random_changes(D, rng, 2_000_000) if seed % 2 else []
    both(D, n, nh, msgs, cap, lossless=bool(seed % 3), seed=seed, changes=changes, nic=rng.choice([0, 500_000]),
         nic_rate=400_000_000)


def test_a_frame_lost_on_its_link_takes_no_time_in_the_datapath():
    # A full-size frame from 0 is lost on 0->2; a small one from 1 arrives just after it. The
    # datapath (1 Gb/s) is free for the small one at once: had the lost frame entered it,
    # the small one would leave 12 us later.
    D = line([(0, 2, 10**9), (1, 2, 10**9)])
    n = 3
    msgs = [(0, (2,), 2, 1, 1462, 1462, 0), (1, (2,), 2, 1, 62, 62, 12_800_000)]
    pulled, _per_frame, done = both(D, n, bfs_next_hop(D, n, n), msgs, (0, 64 * 1024), lossless=False,
                                    losses=[(sorted(D.edges).index((0, 2)), Loss(drops=(0,)))], nic=500_000,
                                    nic_rate=10**9)
    assert len(done) == 1 and pulled.drops_by_cause()["loss"] == 1


@pytest.mark.parametrize("seed", range(8))
def test_frames_lost_on_a_link_into_a_datapath_are_dropped_as_they_arrive(seed):
    D, n, nh, msgs, cap, rng = random_scenario(7200 + seed, max_at=2_000_000)
    links = sorted(D.edges)
    losses = [(i, Loss(p=rng.choice([0.05, 0.3]), corrupt=rng.choice([0.0, 0.1])))
              for i in rng.sample(range(len(links)), max(1, len(links) // 2))]
    pulled, _per_frame, _done = both(D, n, nh, msgs, cap, lossless=False, seed=seed, losses=losses,
                                     nic_rate=rng.choice([400_000_000, 16 * 10**9]))
    assert sum(pulled.drops_by_cause().get(c, 0) for c in ("loss", "corrupt")) > 0


def _reading_run(trains, fail_at=None, reading=True, nic_rate=600_000_000):
    """0 and 1 stream into 2 (a datapath at 0.6 Gb/s behind two 1 Gb/s links, or as given); the
    counters, bins and what 2 received are read every 7 us, and link 0->2 may fail mid-run."""
    D = line([(0, 2, 10**9), (1, 2, 10**9)])
    sim = Simulator()
    net = Network(sim, D, bfs_next_hop(D, 3, 3), boards=3, trains=trains, nic_latency_ps=500_000,
                  nic_rate_bps=nic_rate)
    LinkStats.of(net, 20_000_000)
    m0 = net.send(0, [2], 80, 1462, 700, track=True)
    m1 = net.send(1, [2], 60, 1000, 300, track=True)
    reads = []

    def read():
        reads.append((sim.now, net.counters(), net.link_bins().copy(), net.received(m0, 2), net.received(m1, 2)))

    for k in range(1, 120 if reading else 1):
        sim.at(k * 7_000_000 + 333, read)
    if fail_at is not None:
        sim.at(fail_at, lambda: net.link_down(net.link(0, 2)))
    net.run()
    return net, reads


def test_readers_see_the_frames_that_arrived_and_wait_for_the_datapath():
    pulled, reads_p = _reading_run(True)
    per_frame, reads_f = _reading_run(False)
    assert len(reads_p) == len(reads_f) > 100
    for (t, c, b, r0, r1), (t2, c2, b2, q0, q1) in zip(reads_p, reads_f):
        assert t == t2 and (r0, r1) == (q0, q1)
        pd.testing.assert_frame_equal(c, c2)
        bins_equal(b, b2)
    same_counters(pulled, per_frame)
    # Unread (a reader cuts the trains), trains alone would take the first hop's grants
    # (2 events a frame-hop of 3); the pull takes the arrivals too.
    pulled, _ = _reading_run(True, reading=False)
    per_frame, _ = _reading_run(False, reading=False)
    assert pulled.run_counters()["events"] < 0.5 * per_frame.run_counters()["events"]


def test_a_failed_link_first_gives_its_arrived_frames_to_the_datapath():
    # Link 0->2 fails at 40 instants spread over the run: frames that arrived over it and
    # wait for the datapath are taken, the rest on its wire dropped, as per frame.
    for k in range(40):
        fail_at = 20_000_000 + k * 17_345_679
        pulled, _ = _reading_run(True, fail_at, reading=False)
        per_frame, _ = _reading_run(False, fail_at, reading=False)
        same_counters(pulled, per_frame)
        assert pulled.drops_by_cause()["link_down"] > 0


def test_a_node_with_more_links_in_than_slots_gets_an_event_per_arrival():
    # Eight boards send to a hub's neighbour through the hub: its datapath has nine links in,
    # one more than it has slots (K.PULL_SLOTS); the leaves' own datapaths still pull.
    leaves = K.PULL_SLOTS  # and the neighbour: one link in more than the slots
    D = line([(leaf, leaves, 10**9) for leaf in range(leaves)] + [(leaves, leaves + 1, 10**10)])
    n = leaves + 2
    nh = bfs_next_hop(D, n, n)
    rng = random.Random(5)
    msgs = [(leaf, (leaves + 1,), leaves + 1, rng.randint(5, 30), 1462, rng.randint(62, 1462), rng.randint(0, 50_000))
            for leaf in range(leaves)]
    msgs += [(leaves + 1, (leaf,), leaf, 4, 1000, 500, 0) for leaf in range(0, leaves, 3)]
    pulled, per_frame, done = both(D, n, nh, msgs, (0, 64 * 1024), nic=500_000, nic_rate=16 * 10**9)
    assert len(done) == len(msgs)
    hub = pulled.datapath[leaves]
    assert pulled.LK[hub, K.L_IN_N] == 0 and pulled.LK[pulled.datapath[0], K.L_IN_N] == 1


def test_a_log_sink_that_comes_mid_run_gets_every_transmission_from_then_on():
    # The pull writes no records (they are in event order): a sink that comes mid-run gives
    # every link its arrival events back, and the records from then on are the per-frame run's.
    runs = {}
    for trains in (True, False):
        D = line([(0, 1, 10**9), (1, 2, 10**9), (2, 3, 10**9)])
        sim = Simulator()
        net = Network(sim, D, bfs_next_hop(D, 4, 4), boards=4, trains=trains, nic_latency_ps=500_000,
                      nic_rate_bps=800_000_000)
        net.send(0, [3], 40, 1462, 900)
        net.send(3, [1], 30, 1000, 100)
        log = []

        def attach():
            net.log_sinks.append(log.append)
            net._logging()

        sim.at(200_000_000, attach)
        net.run()
        runs[trains] = (np.concatenate(log) if log else np.zeros((0, K.G_NCOLS), np.int64), net)
    (log_p, net_p), (log_f, net_f) = runs[True], runs[False]
    assert len(log_p) > 50
    assert np.array_equal(log_p, log_f)
    same_counters(net_p, net_f)


# ---- trains the node only delivers, through a datapath that pulls ("Trains": DEFER_DATAPATH) ----

SER_1462 = 11_888_000  # a 1462-byte frame on 1 Gb/s: ceil((1462 + 24) * 8 ps)


def test_a_train_into_an_idle_datapath_enters_it_as_one():
    # 0 streams 40 frames to 1: they pass 1's idle 16 Gb/s datapath as they arrive, so the
    # datapath takes the train whole (one event) and 1 takes its frames as they leave.
    D = line([(0, 1, 10**9)])
    msgs = [(0, (1,), 1, 40, 1462, 1462, 0)]
    pulled, per_frame, done = both(D, 2, bfs_next_hop(D, 2, 2), msgs, (0, 64 * 1024), nic=500_000,
                                   nic_rate=16 * 10**9)
    assert len(done) == 1
    c = pulled.run_counters()
    assert c["train_deliveries"] == 1
    assert c["events"] <= 8 < per_frame.run_counters()["events"]


def test_a_short_train_behind_a_slow_datapath_latency_enters_at_once():
    # A 3-frame train into a datapath whose latency (40 us) is longer than the train: by the
    # time its first frame would leave the datapath, all of it has arrived, so it enters as
    # one at once (its last arrival is in the past: no event may be scheduled there).
    D = line([(0, 1, 10**9)])
    msgs = [(0, (1,), 1, 4, 1462, 1462, 0), (0, (1,), 1, 4, 1462, 600, 70_000_000)]
    pulled, _per_frame, done = both(D, 2, bfs_next_hop(D, 2, 2), msgs, (0, 64 * 1024), nic=40_000_000,
                                    nic_rate=16 * 10**9)
    assert len(done) == 2
    c = pulled.run_counters()
    assert c["train_deliveries"] == 2 and c["late"] == 0


@pytest.mark.parametrize("low", [True, False])
@pytest.mark.parametrize("offset", [0, 1, -1, SER_1462 // 2])
@pytest.mark.parametrize("k", [0, 1, 5, 17, 38])
def test_another_links_frames_arriving_amid_a_train_enter_between_its_frames(low, offset, k):
    # A 40-frame train reaches 2 over one link while a 3-frame message reaches it over the
    # other, arriving at the train's k-th frame (offset 0: the same picosecond, where the
    # lower link's frame enters first), just before or after it, or between two. The train's
    # frames arrived before each of them enter first, the rest frame by frame.
    train_src, other = (0, 1) if low else (1, 0)
    D = line([(0, 2, 10**9), (1, 2, 10**9), (2, 3, 10**9)])
    n = 4
    msgs = [(train_src, (2,), 2, 40, 1462, 1462, 0),
            (other, (2,), 2, 3, 1462, 1462, k * SER_1462 + offset)]
    pulled, per_frame, done = both(D, n, bfs_next_hop(D, n, n), msgs, (0, 64 * 1024), nic=500_000,
                                   nic_rate=16 * 10**9)
    assert len(done) == 2
    assert pulled.run_counters()["train_deliveries"] >= 1


@pytest.mark.parametrize("seed", range(10))
def test_frames_granted_while_a_train_passes_the_datapath_enter_between_its_frames(seed):
    # The other link's frames are granted after the train was deferred (its sender was busy
    # with a message to another board), so the datapath learns of them mid-train; some are
    # forwarded on (2 is not their only stop), one board sends to 2 and 3 at once.
    rng = random.Random(seed)
    D = line([(0, 2, 10**9), (1, 2, rng.choice([10**9, 25 * 10**8])), (2, 3, 10**9)])
    n = 4
    nh = bfs_next_hop(D, n, n)
    msgs = [(0, (2,), 2, rng.randint(20, 60), 1462, rng.randint(62, 1462), rng.randint(0, 5_000_000)),
            (1, (0,), 0, rng.randint(1, 9), 1462, 1462, 0)]
    for _ in range(rng.randint(2, 6)):
        msgs.append((1, (rng.choice([2, 3]),), None, rng.randint(1, 4), rng.choice([62, 700, 1462]),
                     rng.choice([62, 1462]), rng.randint(0, 300_000_000)))
    msgs = [(s, d, d[0] if r is None else r, *rest) for s, d, r, *rest in msgs]
    pulled, _per_frame, done = both(D, n, nh, msgs, (0, 64 * 1024), nic=rng.choice([0, 500_000]),
                                    nic_rate=rng.choice([16 * 10**9, 10**10]))
    assert len(done) == len(msgs)


@pytest.mark.parametrize("k", range(24))
def test_a_train_passing_the_datapath_read_and_failed_midway(k):
    # Readers every 7 us and a failure of the train's link at one of 24 instants, with a
    # 16 Gb/s datapath that takes the trains as one: what was read and dropped is per frame.
    fail_at = 20_000_000 + k * 13_579_011
    pulled, reads_p = _reading_run(True, fail_at, nic_rate=16 * 10**9)
    per_frame, reads_f = _reading_run(False, fail_at, nic_rate=16 * 10**9)
    assert len(reads_p) == len(reads_f)
    for (t, c, b, r0, r1), (t2, c2, b2, q0, q1) in zip(reads_p, reads_f):
        assert t == t2 and (r0, r1) == (q0, q1)
        pd.testing.assert_frame_equal(c, c2)
        bins_equal(b, b2)
    same_counters(pulled, per_frame)


def test_a_train_cut_at_its_source_while_it_passes_the_datapath():
    # 0's 50-frame train to 2 is cut when 3's frames, forwarded by 0, reach 0's port: the
    # datapath at 2 waits for the kept frames only, and the rest come as a new train.
    D = line([(3, 0, 10**9), (0, 2, 10**9), (1, 2, 10**9)])
    n = 4
    nh = bfs_next_hop(D, n, n)
    for at in (30_000_000, 100_000_000, 250_000_000):
        msgs = [(0, (2,), 2, 50, 1462, 1462, 0), (3, (2,), 2, 2, 1462, 1462, at)]
        pulled, _per_frame, done = both(D, n, nh, msgs, (0, 64 * 1024), nic=500_000, nic_rate=16 * 10**9)
        assert len(done) == 2
        assert pulled.run_counters()["train_cuts"] >= 1 and pulled.run_counters()["train_deliveries"] >= 1


@pytest.mark.parametrize("delta", [1_000, 300_000, 5_000_000])
def test_small_frames_amid_a_train_into_a_datapath_as_fast_as_its_links_keep_their_order(delta):
    # A 1 Gb/s datapath behind 1 Gb/s links is as fast as the train's spacing, so the train
    # passes it as one; 4 small frames from the other link arrive amid it. The first splits
    # the train; the others arrive while the train's last entered frame is still in the
    # datapath (they wait on their link), before the train's next frame: they enter first.
    D = line([(0, 2, 10**9), (1, 2, 10**9)])
    n = 3
    msgs = [(0, (2,), 2, 30, 1462, 1462, 0), (1, (2,), 2, 4, 62, 62, 6 * SER_1462 + delta)]
    pulled, _per_frame, done = both(D, n, bfs_next_hop(D, n, n), msgs, (0, 64 * 1024), nic=500_000,
                                    nic_rate=10**9)
    assert len(done) == 2
    assert pulled.run_counters()["train_deliveries"] >= 1
