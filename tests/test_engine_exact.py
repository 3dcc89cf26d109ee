"""The engine's frame timestamps equal the plain reference model's (tests/netref.py), to the picosecond.

Randomized scenarios: topologies, rates, latencies, sizes, start times, queue limits,
contention between a node's own traffic and the traffic it forwards (all three port
arbiters), loss, finite-rate datapaths, multicast trees, and links that go down and
up, change rate or loss while frames are queued, with re-routing after a detection
delay. Every transmission (link, message, fragment, start, end, arrival, fate, hops),
every completion, every "sent" and every drop (cause and place) must be identical.
"""

import random
import sys

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from emu.net import Loss, Network
from emu.net import kernel as K
from emu.net.linkstats import LinkStats
from emu.sim import Simulator

from netref import RefNet

FATE = {0: 0, K.DROP_LOSS: 1, K.DROP_CORRUPT: 2, K.DROP_DOWN: 3}
TRAINS = True  # set per test by the fixture below


@pytest.fixture(autouse=True, params=[True, False], ids=["trains", "per-frame"])
def trains(request, monkeypatch):
    """Every scenario runs with trains on and off: both must equal the reference."""
    monkeypatch.setattr(sys.modules[__name__], "TRAINS", request.param)
    return request.param
ARBITERS = ("rr", "transit-first", "local-first")


def bfs_next_hop(G, nodes, boards, dead=frozenset()):
    """Deterministic next hops by hop count avoiding ``dead`` links (lowest next-hop id wins ties)."""
    H = nx.DiGraph()
    H.add_nodes_from(G.nodes)
    H.add_edges_from(e for e in G.edges if e not in dead)
    nh = np.full((nodes, boards), -1, np.int64)
    for d in range(boards):
        dist = nx.single_source_shortest_path_length(H.reverse(copy=False), d)
        for v in range(nodes):
            if v == d or v not in dist:
                continue
            cands = sorted(w for w in H.successors(v) if dist.get(w, 1e9) == dist[v] - 1)
            nh[v, d] = cands[0]
    return nh


def random_scenario(seed, *, max_at=400_000_000):
    rng = random.Random(seed)
    n = rng.randint(3, 7)
    G = nx.connected_watts_strogatz_graph(n, 2, 0.5, seed=seed) if n > 3 else nx.complete_graph(n)
    D = nx.DiGraph()
    for u, v in G.edges:
        for a, b in ((u, v), (v, u)):
            D.add_edge(a, b, rate_bps=rng.choice([10**9, 10**10, 2_500_000_000, 333_000_000]),
                       latency_ps=rng.choice([0, 1000, 1_000_000, 5_000_000]), mtu=1500)
    nh = bfs_next_hop(D, n, n)
    msgs = []
    for i in range(rng.randint(1, 12)):
        src = rng.randrange(n)
        dst = rng.choice([x for x in range(n) if x != src])
        nfrags = rng.randint(1, 40)
        flen = rng.choice([1462, 1000, 200, 62])
        llen = rng.randint(62, flen)
        at = rng.choice([0, 0, rng.randint(0, max_at)])
        msgs.append((src, (dst,), dst, nfrags, flen, llen, at))
    cap = rng.choice([(0, 64 * 1024), (4, 0), (0, 3000), (1, 0)])
    return D, n, nh, msgs, cap, rng


def incast_scenario(seed):
    """A random topology's boards all sending to one of them (random_scenario's network)."""
    D, n, nh, _msgs, _cap, rng = random_scenario(seed)
    sink = rng.randrange(n)
    msgs = [(src, (sink,), sink, rng.randint(30, 200), 1462, rng.randint(62, 1462), rng.randint(0, 2_000_000))
            for src in range(n) if src != sink]
    return D, n, nh, msgs, rng


def run_both(D, n, nh, msgs, cap, *, lossless=True, trees=(), losses=(), nic=0, seed=0, nic_rate=0,
             arbiter="rr", changes=(), reroutes=(), track=False, trains=None, log=True, pause=False, live=(),
             credit=False, bins=None):
    """``changes``: (t, kind, args) as RefNet.change; ``reroutes``: (t, next_hop, {tree index: (tree, members)}).
    ``live``: what the application hands over during the run, in time order: (t, "send", (src, dst,
    nfrags, flen, llen, prio)) or (t, "resend", (message index, dst, frags, prio)); live sends are
    numbered after ``msgs`` in that order.
    ``pause``: 802.3x PAUSE on every link, thresholds from each port's byte capacity ``cap[1]``.
    ``credit``: hop-by-hop credits on every link, ``cap[1]`` bytes of them per port.

    ``log=False``: no log sink (the engine writes no transmission records, as in replay):
    completions, "sent", drops and conservation are still compared with the reference.
    ``bins``: (bin width ps, most bins) of the link statistics instead of the fine ones picked
    from the scenario (a run of many milliseconds in 7 ns bins with no limit is gigabytes)."""
    for e in D.edges:
        D.edges[e]["queue_frames"] = cap[0] or None
        D.edges[e]["queue_bytes"] = cap[1] or None
    sim = Simulator()
    net = Network(sim, D, nh, boards=n, nic_latency_ps=nic, nic_rate_bps=nic_rate, lossless=lossless,
                  seed=seed, arbiter=arbiter, trains=TRAINS if trains is None else trains, pause=pause, credit=credit)
    log_on, log = log, []
    if log_on:
        net.log_sinks.append(log.append)
    links = sorted(D.edges)
    # Link statistics two ways: binned in the frame loop, and folded from the log.
    bin_ps = 7_000 + 1_000 * (len(msgs) % 5) ** 3
    # Limits on the number of bins (0: none), small enough that most runs widen them many times.
    max_bins = (0, 2, 3, 7)[len(msgs) % 4]
    if bins is not None:
        bin_ps, max_bins = bins
    binned, folded = LinkStats.of(net, bin_ps, max_bins), LinkStats(len(links), bin_ps, max_bins)
    if log_on:
        net.log_sinks.append(folded)
    ref = RefNet([(u, v, D.edges[u, v]["rate_bps"], D.edges[u, v]["latency_ps"]) for u, v in links],
                 n, n, nh, nic, cap, lossless=lossless, seed=seed, nic_rate=nic_rate, arbiter=arbiter,
                 pause={i: (int(net.LK[i, K.L_XOFF]), int(net.LK[i, K.L_XON]), int(net.LK[i, K.L_PAUSE_DLY]))
                        for i in range(len(links))} if pause else None, credit=credit)

    def ref_loss(loss):
        return None if not loss.p and loss.r is None else ((loss.p,) if loss.r is None else
                                                           (loss.p, loss.r, loss.loss_good, loss.loss_bad))

    for link, loss in losses:
        net.set_loss(link, loss)
        p = ref.ports[link]
        p.loss, p.corrupt, p.drops = ref_loss(loss), loss.corrupt, set(loss.drops)
    routes = []
    for tree, members in trees:
        r = net.add_tree(tree, members)
        ref.trees[r] = (tree, set(members))
        routes.append(r)
    for t, kind, args in changes:
        link = args[0]
        if kind == "down":
            net.schedule_change(t, lambda l=link: net.link_down(l))
            ref.change(t, "down", link)
        elif kind == "up":
            net.schedule_change(t, lambda l=link: net.link_up(l))
            ref.change(t, "up", link)
        elif kind == "rate":
            net.schedule_change(t, lambda l=link, r=args[1]: net.set_rate(l, r))
            ref.change(t, "rate", link, args[1])
        else:
            loss = args[1]
            net.schedule_change(t, lambda l=link, x=loss: net.set_loss(l, x))
            ref.change(t, "loss", link, ref_loss(loss), loss.corrupt, loss.drops)
    for t, table, new_trees in reroutes:
        def reroute(table=table, new_trees=new_trees, t=t):
            net.set_unicast(table)
            repl = {}
            for k, (tree, members) in new_trees.items():
                new = net.replace_tree(routes[k], tree, members)
                if new != routes[k]:
                    repl[routes[k]] = (new, tree, members)
            ref.reroute(t, table, repl)
            net.rehome()
        net.schedule_change(t, reroute, before="arrivals")
    done, sent = {}, []

    def on_event(kind, m, node, frag, t):
        if kind == "done":
            done[(m.id, node)] = t
        elif kind == "sent":
            sent.append((m.id, node, t))

    for i, (src, dsts, route, nfrags, flen, llen, at) in enumerate(msgs):
        if isinstance(route, str):
            route = routes[int(route)]
        net.send(src, dsts, nfrags, flen, llen, route=route, at=at, track=track, on_event=on_event)
        ref.send(i, src, dsts, route, nfrags, flen, llen, at, track=track)
    handles = [net.messages[i] for i in range(len(msgs))]
    mid = len(msgs)
    for t, what, args in live:
        if what == "send":
            src, dst, nfrags, flen, llen, prio = args
            net.sim.at(t, lambda a=args: net.send(a[0], (a[1],), a[2], a[3], a[4], track=track, prio=a[5],
                                                  on_event=on_event))
            ref.live_send(t, mid, src, (dst,), dst, nfrags, flen, llen, track=track, prio=prio)
            mid += 1
        else:
            m, dst, frags, prio = args
            net.sim.at(t, lambda a=args: net.resend(handles[a[0]], a[1], a[2], prio=a[3]))
            ref.live_resend(t, m, dst, frags, prio=prio)
    # The reference learns of re-routes from the engine's callbacks, so it runs after.
    net.run()
    ref.run()
    rows = np.concatenate(log) if log else np.zeros((0, K.G_NCOLS), np.int64)
    ours = sorted((int(r[K.G_LINK]), int(r[K.G_MSG]), int(r[K.G_FRAG]), int(r[K.G_START]), int(r[K.G_END]),
                   int(r[K.G_ARR]), FATE[int(r[K.G_FATE])], int(r[K.G_HOPS])) for r in rows)
    theirs = sorted(ref.log)
    assert ours == theirs or not log_on
    assert net.SC[K.SC_LATE] == 0  # no rule scheduled an event before the clock
    assert done == ref.delivered
    assert sorted(sent) == sorted(ref.sent)
    assert engine_drops(net) == {k: v for k, v in ref.drops.items() if v}
    c = net.conservation()
    assert c["in_flight"] == 0 and c["balance"] == 0
    if not net.SC[K.SC_TRAINS]:
        assert net.run_counters()["trains"] == 0
    assert (c["offered"], c["replicated"], c["delivered"]) == (ref.offered, ref.replicated, ref.delivered_frames)
    end = max(net.sim.now, 1)
    if log_on:
        tables = binned.frame(links, None, end), folded.frame(links, None, end)
        # Widening is exact: each table is the one folded from scratch at the width it ended with.
        for table, stats in zip(tables, (binned, folded)):
            fresh = LinkStats(len(links), stats.bin_ps)
            fresh(rows)
            pd.testing.assert_frame_equal(table, fresh.frame(links, None, end))
            assert not max_bins or table.groupby("link").size().max() <= max_bins
        if binned.bin_ps == folded.bin_ps:
            pd.testing.assert_frame_equal(*tables)
    lk = net.counters()
    # Per link: every frame offered to a port reached the far node or was dropped on the link.
    assert (lk.offered_frames == lk.delivered_frames + lk.dropped_frames).all()
    nl = len(links)
    assert lk.peak_held_bytes.tolist() == [p.held_max for p in ref.ports[:nl]]
    assert lk.paused_ps.tolist() == [p.paused_ps + (end - p.paused_since if p.paused else 0) for p in ref.ports[:nl]]
    if pause:
        assert (lk.peak_held_bytes <= cap[1]).all()  # a paused fabric never overflows its buffers
        assert not net.LK[:nl, K.L_HELD].any() and not net.LK[:nl, K.L_PAUSED].any()  # all released
    if credit:
        assert (lk.peak_held_bytes <= cap[1]).all()  # by construction: a port never overdraws its credit
        # drained: every credit came back, and nothing waits for any
        assert (net.LK[:nl, K.L_CREDIT] == cap[1]).all() and (net.LK[:nl, K.L_CHEAD] == -1).all()
        assert not net.LK[:nl, K.L_HELD].any() and net.SC[K.SC_CTOKENS] == 0 and not net.LK[:nl, K.L_PAUSED].any()
    return net, ref, done


def engine_drops(net):
    out = {}
    nl = len(net.links)
    for c, name in enumerate(K.CAUSE_NAMES):
        for l in np.flatnonzero(net.LD[:nl, c, 0]).tolist():
            out[(name, "link", l)] = int(net.LD[l, c, 0])
        for v in np.flatnonzero(net.ND[:, c, 0]).tolist():
            out[(name, "node", v)] = int(net.ND[v, c, 0])
    assert not net.LD[nl:].any()  # a datapath never drops
    return out


@pytest.mark.parametrize("seed", range(40))
def test_unicast_random_topologies_match_reference(seed):
    D, n, nh, msgs, cap, rng = random_scenario(seed)
    net, ref, done = run_both(D, n, nh, msgs, cap, lossless=True, nic=seed * 100, arbiter=ARBITERS[seed % 3])
    assert len(done) == len(msgs)


@pytest.mark.parametrize("seed", range(20))
def test_droptail_and_loss_match_reference(seed):
    D, n, nh, msgs, cap, rng = random_scenario(1000 + seed)
    links = sorted(D.edges)
    losses = []
    for li in rng.sample(range(len(links)), k=min(3, len(links))):
        kind = rng.choice(["bern", "ge", "list", "corrupt"])
        if kind == "bern":
            losses.append((li, Loss(p=0.2)))
        elif kind == "ge":
            losses.append((li, Loss(p=0.1, r=0.3, loss_good=0.01, loss_bad=0.7)))
        elif kind == "list":
            losses.append((li, Loss(drops=(0, 3, 4, 17))))
        else:
            losses.append((li, Loss(corrupt=0.15)))
    run_both(D, n, nh, msgs, cap, lossless=False, losses=losses, seed=seed, arbiter=ARBITERS[seed % 3])


def grid(n_side=3, rate=10**9, lat=500_000):
    D = nx.DiGraph()
    for u, v in nx.grid_2d_graph(n_side, n_side).edges:
        a, b = u[0] * n_side + u[1], v[0] * n_side + v[1]
        D.add_edge(a, b, rate_bps=rate, latency_ps=lat, mtu=1500)
        D.add_edge(b, a, rate_bps=rate, latency_ps=lat, mtu=1500)
    return D


def spt(nh, root, members):
    """Union of the unicast paths from ``root``: a shortest-path tree."""
    tree = {}
    for m in members:
        v = root
        while v != m:
            h = int(nh[v, m])
            if h < 0:
                break
            tree.setdefault(v, set()).add(h)
            v = h
    return {u: sorted(c) for u, c in tree.items()}


def grid_multicast_scenario(rng, unicasts, lat=None, tree_frags=(10, 60), span=10**6):
    """A 3x3 grid with three multicast trees (shortest-path) and some unicasts between them,
    all starting within ``span`` ps; ``lat`` None: 0 or 500 ns, drawn."""
    n = 9
    D = grid(lat=rng.choice([0, 500_000]) if lat is None else lat)
    nh = bfs_next_hop(D, n, n)
    trees, msgs = [], []
    for k in range(3):
        root = rng.randrange(n)
        members = rng.sample([x for x in range(n) if x != root], k=rng.randint(2, 6))
        trees.append((spt(nh, root, members), members))
        msgs.append((root, tuple(members), str(k), rng.randint(*tree_frags), 1462, 700, rng.randint(0, span)))
    for _ in range(unicasts):
        s, d = rng.sample(range(n), 2)
        msgs.append((s, (d,), d, rng.randint(1, 30), 1462, 100, rng.randint(0, span)))
    return n, D, nh, sorted(D.edges), trees, msgs


@pytest.mark.parametrize("seed", range(10))
def test_multicast_trees_match_reference(seed):
    rng = random.Random(seed)
    n, D, nh, _links, trees, msgs = grid_multicast_scenario(rng, unicasts=4, lat=500_000, tree_frags=(1, 30),
                                                            span=10**8)
    net, ref, done = run_both(D, n, nh, msgs, (0, 16 * 1024), trees=trees, arbiter=ARBITERS[seed % 3])
    # Each member of each tree completed exactly once.
    for i, (root, members, *_rest) in enumerate(msgs[:3]):
        assert {node for (m, node) in done if m == i} == set(members)


@pytest.mark.parametrize("seed", range(10))
def test_finite_rate_datapath_matches_reference(seed):
    # A slow datapath (1-4 Gb/s behind several ports) makes frames from different ports queue.
    D, n, nh, msgs, cap, rng = random_scenario(2000 + seed)
    rate = rng.choice([10**9, 2 * 10**9, 4 * 10**9])
    # Some nodes (the "switches" of this test) have their own latency and datapath rate.
    nic = {v: (300 * seed if v % 2 else 77_000) for v in range(n)}
    nic_rate = {v: (rate if v % 2 else 10**10) for v in range(n)}
    net, ref, done = run_both(D, n, nh, msgs, cap, nic=nic, nic_rate=nic_rate, arbiter=ARBITERS[seed % 3])
    assert len(done) == len(msgs)


def contention_scenario(seed):
    """Many flows through shared nodes, so ports see local and transit traffic at once."""
    D, n, nh, _msgs, cap, rng = random_scenario(3000 + seed, max_at=2_000_000)
    msgs = []
    for i in range(rng.randint(6, 16)):
        src = rng.randrange(n)
        dst = rng.choice([x for x in range(n) if x != src])
        msgs.append((src, (dst,), dst, rng.randint(5, 60), rng.choice([1462, 600, 62]), 62,
                     rng.choice([0, rng.randint(0, 2_000_000)])))
    return D, n, nh, msgs, cap, rng


@pytest.mark.parametrize("seed", range(30))
def test_contention_between_local_and_transit_matches_reference(seed):
    D, n, nh, msgs, cap, rng = contention_scenario(seed)
    net, ref, done = run_both(D, n, nh, msgs, cap, lossless=bool(seed % 2), arbiter=ARBITERS[seed % 3],
                              nic=rng.choice([0, 500_000]))
    c = net.counters()
    assert c.local_frames.sum() + c.transit_frames.sum() == c.sent_frames.sum()


def random_changes(D, rng, horizon):
    """Link failures and repairs, rate changes and loss windows at random times."""
    links = sorted(D.edges)
    changes = []
    for _ in range(rng.randint(1, 5)):
        l = rng.randrange(len(links))
        t0 = rng.randint(0, horizon)
        kind = rng.choice(["flap", "flap", "down", "rate", "loss"])
        if kind in ("flap", "down"):
            changes.append((t0, "down", (l,)))
            if kind == "flap":
                changes.append((t0 + rng.randint(1, horizon // 2), "up", (l,)))
        elif kind == "rate":
            changes.append((t0, "rate", (l, rng.choice([10**8, 5 * 10**8, 4 * 10**9]))))
            changes.append((t0 + rng.randint(1, horizon), "rate", (l, D.edges[links[l]]["rate_bps"])))
        else:
            changes.append((t0, "loss", (l, Loss(p=rng.choice([0.3, 1.0]), corrupt=0.1))))
            changes.append((t0 + rng.randint(1, horizon), "loss", (l, Loss())))
    return changes


def reroutes_for(D, n, changes, detect):
    """A re-route ``detect`` after each failure or repair, avoiding what is down then."""
    links = sorted(D.edges)
    down, out = set(), []
    for t, kind, args in sorted(changes, key=lambda c: c[0]):
        if kind in ("down", "up"):
            (down.add if kind == "down" else down.discard)(links[args[0]])
            out.append((t + detect, bfs_next_hop(D, n, n, frozenset(down)), {}))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_failures_rate_changes_and_loss_windows_match_reference(seed):
    D, n, nh, msgs, cap, rng = contention_scenario(4000 + seed)
    changes = random_changes(D, rng, 3_000_000)
    reroutes = reroutes_for(D, n, changes, rng.choice([0, 1, 100_000, 1_000_000])) if seed % 3 else []
    run_both(D, n, nh, msgs, cap, lossless=bool(seed % 2), seed=seed, arbiter=ARBITERS[seed % 3],
             changes=changes, reroutes=reroutes, track=bool(seed % 4 == 0), nic=rng.choice([0, 500_000]))


@pytest.mark.parametrize("seed", range(12))
def test_multicast_rerouted_onto_new_trees_matches_reference(seed):
    rng = random.Random(5000 + seed)
    n, D, nh, links, trees, msgs = grid_multicast_scenario(rng, unicasts=4)
    # Fail a first hop of a tree, then re-route everything (trees included) after detection.
    root, (first, *_rest) = msgs[0][0], trees[0][0][msgs[0][0]]
    l = links.index((root, first))
    t_fail = rng.randint(0, 400_000)
    changes = [(t_fail, "down", (l,))]
    detect = rng.choice([0, 20_000, 100_000])
    dead = frozenset({(root, first)})
    nh2 = bfs_next_hop(D, n, n, dead)
    new_trees = {k: (spt(nh2, msgs[k][0], members), members) for k, (_t, members) in enumerate(trees)}
    run_both(D, n, nh, msgs, (0, 16 * 1024), trees=trees, arbiter=ARBITERS[seed % 3], changes=changes,
             reroutes=[(t_fail + detect, nh2, new_trees)], track=bool(seed % 2))


@pytest.mark.parametrize("seed", range(8))
def test_node_failure_under_multicast_and_unicast_matches_reference(seed):
    # All links of one node fail; trees whose root died lose their unsent fragments at the
    # source, the others are rebuilt around the hole.
    rng = random.Random(7000 + seed)
    n, D, nh, links, trees, msgs = grid_multicast_scenario(rng, unicasts=6)
    node = rng.randrange(n)
    dead = frozenset(e for e in links if node in e)
    t_fail = rng.randint(0, 600_000)
    changes = [(t_fail, "down", (links.index(e),)) for e in sorted(dead)]
    nh2 = bfs_next_hop(D, n, n, dead)
    new_trees = {}
    for k, (_t, members) in enumerate(trees):
        reach = [m for m in members if nh2[msgs[k][0], m] >= 0]
        new_trees[k] = (spt(nh2, msgs[k][0], reach) if reach else {}, members)
    run_both(D, n, nh, msgs, (0, 16 * 1024), trees=trees, arbiter=ARBITERS[seed % 3], changes=changes,
             reroutes=[(t_fail + rng.choice([0, 20_000, 100_000]), nh2, new_trees)], lossless=bool(seed % 2),
             nic_rate=rng.choice([0, 4 * 10**9]))


PRIO_SEEN = {"placed": 0, "over_cap": 0, "overtook": 0}


def prio_scenario(seed, horizon=3_000_000):
    """contention_scenario with the application handing over prio streams during the run: bursts
    of prio sends from one board (several at once on one port, enough frames to pass the cap),
    prio and plain sends and resends at random times, ahead of data streams being sent."""
    D, n, nh, msgs, cap, rng = contention_scenario(seed)
    live = []
    src = rng.randrange(n)
    dst = rng.choice([x for x in range(n) if x != src])
    t = rng.randint(0, horizon // 2)
    for _ in range(rng.randint(2, 5)):  # a burst: each behind the last while the cap lets it
        t += rng.choice([1, 1000, rng.randint(1, 40_000_000)])
        live.append((t, "send", (src, dst, rng.randint(10, 50), rng.choice([1462, 600]), 62, True)))
    for _ in range(rng.randint(2, 8)):
        a = rng.randrange(n)
        b = rng.choice([x for x in range(n) if x != a])
        live.append((rng.randint(0, horizon), "send", (a, b, rng.randint(1, 30), rng.choice([1462, 62]),
                                                        62, rng.random() < 0.7)))
    for _ in range(rng.randint(1, 6)):
        m = rng.randrange(len(msgs))
        nf = msgs[m][3]
        frags = sorted(rng.sample(range(nf), rng.randint(1, min(nf, 12))))
        live.append((rng.randint(0, horizon), "resend", (m, msgs[m][2], frags, rng.random() < 0.8)))
    live.sort(key=lambda x: x[0])
    return D, n, nh, msgs, cap, rng, live


def count_prio(ref):
    for k, v in ref.prio_seen.items():
        PRIO_SEEN[k] += v


@pytest.mark.parametrize("seed", range(30))
def test_priority_class_matches_reference(seed):
    """Prio sends and resends (docs/engine.md, the local queue's priority class) against the
    reference, under all three arbiters, lossless and drop-tail, some with failures and re-routes."""
    D, n, nh, msgs, cap, rng, live = prio_scenario(6000 + seed)
    changes = random_changes(D, rng, 3_000_000) if seed % 3 == 0 else []
    reroutes = reroutes_for(D, n, changes, rng.choice([0, 1, 100_000])) if changes and seed % 2 else []
    net, ref, done = run_both(D, n, nh, msgs, cap, lossless=bool(seed % 2), seed=seed, arbiter=ARBITERS[seed % 3],
                              changes=changes, reroutes=reroutes, track=True, nic=rng.choice([0, 500_000]),
                              live=live)
    count_prio(ref)


def test_the_priority_scenarios_reached_the_cap_and_overtook_data():
    """Not vacuous: the runs above placed prio streams, overtook data streams with frames sent
    already, and passed the cap (run after them, in file order)."""
    assert all(PRIO_SEEN.values()), PRIO_SEEN


def test_a_prio_stream_for_later_is_refused_and_one_for_now_overtakes_the_data():
    """docs/engine.md: a prio stream is placed when handed over; one ready later would hold the
    port's data until then (a send with a later at= never holds up earlier ones), so
    Network.send and resend refuse prio with a later at=; handed over now it goes ahead."""
    D = nx.DiGraph()
    for u, v in ((0, 1), (1, 0)):
        D.add_edge(u, v, rate_bps=10**9, latency_ps=0, mtu=1500)
    sim = Simulator()
    net = Network(sim, D, np.array([[-1, 1], [0, -1]], np.int64), boards=2, trains=TRAINS)
    log = []
    net.log_sinks.append(log.append)
    data = net.send(0, (1,), 4, 1462, track=True)
    with pytest.raises(ValueError, match="prio stream is handed over now"):
        net.send(0, (1,), 1, 1462, at=100, prio=True)
    with pytest.raises(ValueError, match="prio stream is handed over now"):
        net.resend(data, 1, [0], at=100, prio=True)
    sim.at(1, lambda: net.send(0, (1,), 1, 100, prio=True))
    net.run()
    order = [int(r[K.G_MSG]) for r in np.concatenate(log)]
    assert order == [0, 1, 0, 0, 0]  # after the data frame on the wire, before the rest
