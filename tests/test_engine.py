"""Engine behaviour: timing formulas, failures, re-routing, rate changes, loss, queues, memory."""

import re

import networkx as nx
import numpy as np
import pytest

from emu.errors import ConfigError
from emu.net import Loss, Network
from emu.net.framing import frame_sizes, serialization_ps
from emu.net.timeline import Timeline, parse
from emu.sim import MS, NS, US, Simulator
from emu.topology import LinkDefaults, Routes, mesh2d, multicast_tree, ring, star

GBPS = 10**9


def make(G, **kw):
    sim = Simulator()
    routes = Routes(G)
    net = Network(sim, G, routes.next_hop, **kw)
    return sim, net, routes


def recorder():
    events = []
    return events, lambda kind, m, node, frag, t: events.append((kind, m.id, node, frag, t))


# ---- event core ----------------------------------------------------------------

def test_simulator_orders_by_time_then_schedule_order():
    sim, out = Simulator(), []
    sim.at(5, out.append, "b")
    sim.at(3, out.append, "a")
    sim.at(5, out.append, "c")
    ev = sim.at(4, out.append, "x")
    ev.cancel()
    sim.at(9, lambda: sim.after(0, out.append, "d"))
    assert sim.run() == 9
    assert out == ["a", "b", "c", "d"]
    with pytest.raises(ValueError):
        sim.at(1, out.append, "past")


def test_simulator_until_stops_before_later_events():
    sim, out = Simulator(), []
    sim.at(10, out.append, 1)
    sim.at(20, out.append, 2)
    assert sim.run(until=15) == 15
    assert out == [1] and sim.peek() == 20


# ---- timing ----------------------------------------------------------------------

def test_single_link_store_and_forward_timing_is_exact():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=1 * US, mtu=1500)
    sim, net, _ = make(ring(2, bidirectional=False, link=link), nic_latency_ps=250 * NS)
    ev, cb = recorder()
    nfrags, full, last = frame_sizes(10_000, 1500)
    net.send(0, [1], nfrags, full, last, on_event=cb)
    net.run()
    ser_full, ser_last = serialization_ps(full, GBPS), serialization_ps(last, GBPS)
    assert ser_full == (1452 + 62 + 24) * 8000
    done = [e for e in ev if e[0] == "done"]
    assert done == [("done", 0, 1, -1, (nfrags - 1) * ser_full + ser_last + 1 * US + 250 * NS)]


def test_two_flows_share_a_link_fifo_and_counters_add_up():
    G = star(3, link=LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500))
    sim, net, _ = make(G)
    ev, cb = recorder()
    for src in (0, 1):
        net.send(src, [2], 20, 1462, on_event=cb)
    net.run()
    c = net.counters()
    ser = serialization_ps(1462, GBPS)
    # The switch's link to board 2 carries 40 frames back to back after the first arrives.
    down = c[(c.src == 3) & (c.dst == 2)].iloc[0]
    assert down.sent_frames == 40 and down.busy_ps == 40 * ser
    finish = sorted(t for k, *_x, t in ev if k == "done")
    assert finish[-1] == ser + 40 * ser
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all()


# ---- failures and re-routing ------------------------------------------------------

def test_link_down_drops_what_is_on_it_and_reroute_moves_the_unsent_rest():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=1 * US, mtu=1500)
    G = ring(4, bidirectional=True, link=link)
    sim, net, routes = make(G)
    tl = Timeline(parse("link 0-1 down at 50us up at 2ms"), detect_ps=10 * US)
    rerouted = []
    tl.on_reroute.append(rerouted.append)
    tl.install(net, routes)
    ev, cb = recorder()
    m0 = net.send(0, [1], 100, 1462, track=True, on_event=cb)  # crosses 0->1 while it fails
    sim.at(100 * US, lambda: net.send(0, [1], 10, 1462, on_event=cb))  # after detection: 0-3-2-1
    net.run()
    c = net.counters().set_index(["src", "dst"])
    ser = serialization_ps(1462, GBPS)
    # At 50 us frames 0-3 have arrived and frame 4 is on the wire: it is cut off.
    assert 4 * ser + US < 50 * US < 5 * ser
    assert c.loc[(0, 1), "dropped_link_down"] == 1 and list(net.missing(m0, 1)) == [4]
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all()
    done = {(m, n) for k, m, n, _f, _t in ev if k == "done"}
    assert (1, 1) in done and (0, 1) not in done
    # The 95 frames not yet sent at the re-route (60 us) went the other way, then the second message.
    assert c.loc[(0, 3), "sent_frames"] == 105 and c.loc[(2, 1), "sent_frames"] == 105
    # The cut frame started: it counts as sent (a transmission; docs/engine.md), busy until 50 us.
    assert c.loc[(0, 1), "sent_frames"] == 5
    assert c.loc[(0, 1), "busy_ps"] == 4 * ser + (50 * US - (4 * ser))
    assert len(rerouted) == 2 and not rerouted[-1].failed_links
    cons = net.conservation()
    assert cons["balance"] == 0 and cons["dropped"] == 1 and cons["in_flight"] == 0


def test_node_down_takes_its_links_down():
    G = mesh2d(2, 2, link=LinkDefaults(rate_bps=GBPS, latency_ps=US, mtu=1500))
    sim, net, routes = make(G)
    Timeline(parse("node 1 down at 0s"), detect_ps=0).install(net, routes)
    ev, cb = recorder()
    sim.at(1 * US, lambda: net.send(0, [3], 5, 1462, on_event=cb))
    net.run()
    c = net.counters()
    assert c[(c.src == 1) | (c.dst == 1)].sent_frames.sum() == 0
    assert [e[0] for e in ev].count("done") == 1


def test_degrade_retimes_frames_not_yet_started():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500)
    sim, net, routes = make(ring(2, bidirectional=False, link=link))
    ser = serialization_ps(1462, GBPS)
    Timeline(parse(f"link 0>1 degrade 0.5 at {ser * 10 + ser // 2}ps")).install(net, routes)
    ev, cb = recorder()
    net.send(0, [1], 20, 1462, on_event=cb)
    net.run()
    # Frame 10 was on the wire at the change and keeps its rate; the next 9 take twice as long.
    assert ev[-1][-1] == 11 * ser + 9 * serialization_ps(1462, GBPS // 2)


def test_scenario_rates_keep_their_unit_case_and_keywords_take_any_case():
    # the documented example: a unit's case is its meaning (Mb is bits, MB bytes)
    (c,) = parse("link 3>4 rate 100Mbps at 1s")
    assert (c.kind, c.items, c.both, c.value) == ("rate", ((3, 4),), False, 100_000_000)
    assert parse("link 3>4 rate 100MB/s at 1s")[0].value == 800_000_000
    down, up = parse("Link 3-4 DOWN at 1s UP at 2s")
    assert (down.kind, down.time_ps, up.kind, up.time_ps) == ("down", 10**12, "up", 2 * 10**12)


def test_scenario_errors_name_the_clause():
    for bad, what in [("link 1-2 sideways at 1s", "expected"), ("node x down at 1s", "expected"),
                      ("link 1-2 degrade 2 at 1s", "fraction"), ("link 1-2 down at 2s up at 1s", "ends before"),
                      ("link 1-2 loss 0.5 at soon", "time")]:
        with pytest.raises(ConfigError, match=what):
            parse(bad)
    sim, net, routes = make(ring(3))
    with pytest.raises(ConfigError, match="no link 0-7"):
        Timeline(parse("link 0-7 down at 1s")).install(net, routes)


# ---- loss --------------------------------------------------------------------------

def run_lossy(seed, loss):
    link = LinkDefaults(rate_bps=10 * GBPS, latency_ps=0, mtu=1500)
    sim, net, _ = make(ring(2, bidirectional=False, link=link), seed=seed, lossless=False)
    net.set_loss(0, loss)
    log = []
    net.log_sinks.append(log.append)
    net.send(0, [1], 5000, 1462)
    net.run()
    rows = np.concatenate(log)
    from emu.net import kernel as K

    return rows[rows[:, K.G_FATE] != 0, K.G_FRAG]


def test_loss_is_seeded_per_stream():
    a, b, c = run_lossy(1, Loss(p=0.05)), run_lossy(1, Loss(p=0.05)), run_lossy(2, Loss(p=0.05))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert 180 < len(a) < 320  # 5% of 5000, within a wide binomial band


def test_gilbert_elliott_is_bursty_with_the_stationary_rate():
    p, r = 0.01, 0.2
    lost = run_lossy(3, Loss(p=p, r=r, loss_good=0.0, loss_bad=1.0))
    stationary = p / (p + r)
    assert abs(len(lost) / 5000 - stationary) < 0.03
    runs = np.split(lost, np.flatnonzero(np.diff(lost) != 1) + 1)
    assert np.mean([len(x) for x in runs]) > 2  # bursts, unlike independent loss at this rate


def test_explicit_drops_and_corruption_are_counted_apart():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500)
    sim, net, _ = make(ring(2, bidirectional=False, link=link), lossless=False)
    net.set_loss(0, Loss(drops=(0, 7), corrupt=0.5))
    net.send(0, [1], 100, 1462)
    net.run()
    c = net.counters().iloc[0]
    assert c.dropped_loss == 2 and 20 < c.dropped_corrupt < 80
    assert c.offered_frames == c.delivered_frames + c.dropped_frames == 100


# ---- queues and memory ----------------------------------------------------------------

def test_droptail_drops_transit_frames_at_a_full_switch_port():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500, queue_bytes=None, queue_frames=4)
    sim, net, _ = make(star(4, link=link), lossless=False)
    for src in (0, 1, 2):
        net.send(src, [3], 50, 1462)
    net.run()
    c = net.counters().set_index(["src", "dst"])
    assert c.loc[(4, 3), "dropped_queue_full"] > 0
    assert c.loc[(4, 3), "peak_queue_bytes"] <= 4 * 1462
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all()


def test_lossless_never_drops_at_an_incast_switch_port():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=US, mtu=1500)
    sim, net, _ = make(star(4, link=link))
    for src in (0, 1, 2):
        net.send(src, [3], 2000, 1462)
    net.run()
    c = net.counters().set_index(["src", "dst"])
    assert c.dropped_frames.sum() == 0
    # Three line-rate sources into one port: the switch buffer absorbs two thirds of it.
    assert c.loc[(4, 3), "peak_queue_bytes"] > 1000 * 1462
    assert net.frames_in_flight == 0


def test_memory_follows_frames_in_flight_not_message_size():
    # transit-first: forwarded frames never wait behind a node's own, so transit queues stay
    # short (with rr a line-rate source keeps half of its port and transit backs up).
    link = LinkDefaults(rate_bps=GBPS, latency_ps=US, mtu=1500)
    sim, net, _ = make(ring(8, bidirectional=False, link=link), arbiter="transit-first")
    for src in range(8):
        net.send(src, [(src + 3) % 8], 50_000, 1462)
    net.run()
    # 1.2 million packet-hops, yet the frame pool stayed at its initial size.
    assert net.counters().sent_frames.sum() == 8 * 50_000 * 3
    assert net.FP.shape[0] == 4096 and net.frames_in_flight == 0


def test_tracked_messages_discard_duplicates_and_resend_completes():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500)
    sim, net, _ = make(ring(2, bidirectional=False, link=link), lossless=False)
    net.set_loss(0, Loss(drops=(3, 4, 9)))
    ev, cb = recorder()
    m = net.send(0, [1], 12, 1462, track=True, on_event=cb)
    net.run()
    assert list(net.missing(m, 1)) == [3, 4, 9]
    net.resend(m, 1, [3, 4, 9, 5])  # 5 arrives twice: discarded
    net.run()
    assert [e[0] for e in ev].count("done") == 1 and net.duplicates == 1
    assert list(net.missing(m, 1)) == []
    with pytest.raises(ValueError, match="0 is not a destination of message"):
        net.received(m, 0)  # the source: not one of the message's destinations


def test_link_time_series_split_busy_time_exactly_across_bins():
    from emu.net import kernel as K
    from emu.net.linkstats import LinkStats

    rng = np.random.default_rng(1)
    n, w = 5000, 7000
    rows = np.zeros((n, K.G_NCOLS), np.int64)
    rows[:, K.G_LINK] = rng.integers(0, 4, n)
    rows[:, K.G_START] = rng.integers(0, 10**7, n)
    rows[:, K.G_END] = rows[:, K.G_START] + rng.integers(1, 50_000, n)  # some span several bins
    rows[:, K.G_ENQ] = rows[:, K.G_START]
    rows[:, K.G_LEN] = 1462
    stats = LinkStats(4, w)
    stats(rows)
    ref = np.zeros_like(stats.busy)
    for l, a, b in rows[:, [K.G_LINK, K.G_START, K.G_END]].tolist():
        t = a
        while t < b:
            nxt = min(b, (t // w + 1) * w)
            ref[l, t // w] += nxt - t
            t = nxt
    assert np.array_equal(stats.busy, ref)
    df = stats.frame([(0, 1), (1, 0), (1, 2), (2, 1)], np.full(4, 10**9), int(rows[:, K.G_END].max()))
    assert df.frames.sum() == n and df.busy_s.sum() == pytest.approx((rows[:, K.G_END] - rows[:, K.G_START]).sum() / 1e12)


def test_a_finite_rate_nic_datapath_serializes_frames_from_all_ports():
    link = LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500)
    ends = []
    for rate in (0, GBPS):
        sim = Simulator()
        G = ring(3, link=link)
        net = Network(sim, G, Routes(G).next_hop, nic_rate_bps={1: rate})
        ev, cb = recorder()
        net.send(0, [1], 10, 1462, on_event=cb)
        net.send(2, [1], 10, 1462, on_event=cb)
        net.run()
        ends.append(max(t for k, *_x, t in ev if k == "done"))
    ser = serialization_ps(1462, GBPS)
    # Unlimited: both ports deliver in parallel. At the port rate, 20 frames pass one datapath.
    assert ends == [10 * ser, 21 * ser]


# ---- the kernel's boundary: a message's destinations --------------------------------

def two_trees_from_0():
    """bring:4 with the trees from board 0 for members {1, 2, 3} (0->1->2, 0->3) and {1, 2}."""
    G = ring(4, link=LinkDefaults(rate_bps=GBPS, latency_ps=0, mtu=1500))
    sim, net, routes = make(G)
    tree = {m: net.add_tree(multicast_tree(G, routes, 0, list(m)), list(m)) for m in ((1, 2, 3), (1, 2))}
    return net, tree


def test_a_frame_is_delivered_only_at_its_messages_destinations():
    """A message to [3] on the tree for {1, 2, 3} passes 1 and 2, members of the tree but
    not destinations of the message: they forward it and take nothing. A message to [1, 2]
    goes beside it, so a copy taken at a wrong member would land in its rows (counted as
    its fragments, which then arrive as duplicates) instead of reading past the table."""
    net, tree = two_trees_from_0()
    ev, cb = recorder()
    a = net.send(0, [3], 5, 1462, route=tree[1, 2, 3], on_event=cb)
    b = net.send(0, [1, 2], 7, 1462, route=tree[1, 2], on_event=cb)
    net.run()
    assert sorted((m, node) for k, m, node, _f, _t in ev if k == "done") == [(a.id, 3), (b.id, 1), (b.id, 2)]
    nodes = net.node_counters()
    assert nodes.delivered_frames.tolist() == [0, 7, 7, 5] and net.duplicates == 0
    assert [net.received(b, 1), net.received(b, 2), net.received(a, 3)] == [7, 7, 5]
    assert net.conservation()["balance"] == 0


def test_a_train_to_a_member_that_is_not_a_destination_is_dropped_there_frame_by_frame():
    """Board 3, a leaf of the tree for {1, 2, 3} that board 0 reaches over its own port, is
    not a destination of a message to [2]: the train 0->3 carries its frames there (nothing
    else uses the port) and each is a no_route drop at 3, never taken as one (a train is
    deferred only where the node delivers it), while board 2, two hops away, has none yet;
    board 2 gets every fragment once."""
    net, tree = two_trees_from_0()
    ev, cb = recorder()
    m = net.send(0, [2], 20, 1462, route=tree[1, 2, 3], on_event=cb)
    net.run()
    assert net.run_counters()["trains"] > 0  # the frames crossed 0->3 (and 0->1) as trains
    nodes = net.node_counters()
    assert nodes.delivered_frames.tolist() == [0, 0, 20, 0] and net.duplicates == 0
    assert net.received(m, 2) == 20
    assert net.conservation()["balance"] == 0
    assert [(k, node) for k, _m, node, _f, _t in ev if k == "done"] == [("done", 2)]


def test_a_destination_row_is_found_in_node_order_by_bisection_and_in_any_other_order_in_turn():
    """A frame's row among its message's destinations is looked up per delivered frame: by
    bisection where open_message found the rows in ascending node order (MF_SORTED), in turn
    otherwise. Either way each destination counts its own frames, first and last rows
    included, and tracked copies find their own bitmaps (no false duplicates)."""
    from emu.net import kernel as K

    net, tree = two_trees_from_0()
    ev, cb = recorder()
    up = net.send(0, [1, 2, 3], 5, 1462, route=tree[1, 2, 3], on_event=cb, track=True)
    mixed = net.send(0, [3, 1, 2], 7, 1462, route=tree[1, 2, 3], on_event=cb, track=True)
    down = net.send(0, [2, 1], 3, 1462, route=tree[1, 2], on_event=cb)
    flags = [int(net.MS[m.id, K.M_FLAGS]) & K.MF_SORTED for m in (up, mixed, down)]
    assert flags == [K.MF_SORTED, 0, 0]
    net.run()
    done = sorted((m, node) for k, m, node, _f, _t in ev if k == "done")
    assert done == sorted([(up.id, n) for n in (1, 2, 3)] + [(mixed.id, n) for n in (1, 2, 3)]
                          + [(down.id, n) for n in (1, 2)])
    assert [net.received(up, n) for n in (1, 2, 3)] == [5, 5, 5]
    assert [net.received(mixed, n) for n in (3, 1, 2)] == [7, 7, 7]
    assert net.node_counters().delivered_frames.tolist() == [0, 15, 15, 12] and net.duplicates == 0
    for m in (up, mixed, down):  # and the lookup itself, for every node
        rows = {int(net.MD[d, K.D_NODE]): d for d in range(net.MS[m.id, K.M_DPTR], net.MS[m.id, K.M_DEND])}
        assert [K.dest_row(net.MS, net.MD, m.id, n) for n in range(4)] == [rows.get(n, -1) for n in range(4)]


def test_a_message_outside_its_route_is_refused_before_the_kernel_sees_it():
    """Every destination of a message is a node, named once, and a member of an installed
    route (the source excepted); a resend goes to one of the message's remote destinations
    and names its fragments. Anything else is a ValueError saying what is wrong, and the
    network is left as it was."""
    net, tree = two_trees_from_0()
    bad = [
        (dict(src=0, dsts=[3], route=tree[1, 2]), "destinations [3]: not members of route"),
        (dict(src=0, dsts=[1, 3], route=tree[1, 2]), "destinations [3]: not members of route"),
        (dict(src=0, dsts=[3], route=1), "destinations [3]: not members of route 1"),
        (dict(src=0, dsts=[9]), "node 9: the network has nodes 0..3"),
        (dict(src=-1, dsts=[1]), "node -1: the network has nodes 0..3"),
        (dict(src=0, dsts=[1, 1], route=tree[1, 2]), "destinations [1, 1]: a node named twice"),
        (dict(src=0, dsts=[1], route=99), "route 99: not installed (routes 0..5)"),
        (dict(src=0, dsts=[], route=tree[1, 2]), "a message has at least one destination"),
    ]
    for kw, why in bad:
        with pytest.raises(ValueError, match=re.escape(why)):
            net.send(kw.pop("src"), kw.pop("dsts"), 3, 1462, **kw)
    m = net.send(0, [1, 2], 3, 1462, route=tree[1, 2], track=True)
    assert net.messages == [m] and m.id == 0  # nothing of the refused messages was opened
    for dst, frags, why in ((3, [0], "to 3: not one of its remote destinations"),
                            (0, [0], "to 0: not one of its remote destinations"),
                            (1, [2, 3], "fragments are 0..2, not 2..3"),
                            (1, [-1], "fragments are 0..2, not -1..-1")):
        with pytest.raises(ValueError, match=re.escape(why)):
            net.resend(m, dst, frags)
    net.run()
    assert net.received(m, 1) == net.received(m, 2) == 3 and net.duplicates == 0


@pytest.mark.parametrize("trains", [True, False])
def test_a_train_cut_by_a_link_failure_leaves_no_event_behind(trains):
    # 1000 frames handed over at t=0; the link fails at 1 us, the re-route after 100 us finds no
    # other way: the run ends at the last real event (the detection at 101 us), not at the
    # cut train's old end (~11.9 ms).
    link = LinkDefaults(rate_bps=GBPS, latency_ps=1 * US, mtu=1500)
    G = ring(2, bidirectional=True, link=link)
    sim = Simulator()
    routes = Routes(G)
    net = Network(sim, G, routes.next_hop, trains=trains)
    Timeline(parse("link 0-1 down at 1us"), detect_ps=100 * US).install(net, routes)
    net.send(0, [1], 1000, 1462)
    assert net.run() == 101 * US == sim.now


def test_a_frame_shorter_than_the_minimum_takes_the_minimum_frames_line_time():
    """Every MCF frame is longer than Ethernet's 60-byte minimum (62 bytes of headers), so no
    replay pads one; the rule still holds for the function the kernel runs (emu.net.framing)."""
    from emu.net.framing import wire_bytes

    assert wire_bytes(40) == wire_bytes(60) == 60 + 24
    assert serialization_ps(40, 10**9) == 84 * 8 * 1000
    assert wire_bytes(1500) == 1524 and serialization_ps(1500, 10**9) == 1524 * 8 * 1000
