"""The engine's frame timestamps equal the plain reference model's, to the picosecond."""

import random

import networkx as nx
import numpy as np
import pytest

from emu.net import Loss, Network
from emu.sim import Simulator

from netref import RefNet


def bfs_next_hop(G, nodes, boards):
    """Deterministic next hops by hop count (lowest next-hop id wins ties)."""
    nh = np.full((nodes, boards), -1, np.int64)
    for d in range(boards):
        dist = nx.single_source_shortest_path_length(G.reverse(copy=False), d)
        for v in range(nodes):
            if v == d or v not in dist:
                continue
            cands = sorted(w for w in G.successors(v) if dist.get(w, 1e9) == dist[v] - 1)
            nh[v, d] = cands[0]
    return nh


def random_scenario(seed):
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
        at = rng.choice([0, 0, rng.randint(0, 400_000_000)])
        msgs.append((src, (dst,), dst, nfrags, flen, llen, at))
    cap = rng.choice([(0, 64 * 1024), (4, 0), (0, 3000), (1, 0)])
    return D, n, nh, msgs, cap, rng


def run_both(D, n, nh, msgs, cap, *, lossless=True, trees=(), losses=(), nic=0, seed=0, nic_rate=0):
    for e in D.edges:
        D.edges[e]["queue_frames"] = cap[0] or None
        D.edges[e]["queue_bytes"] = cap[1] or None
    sim = Simulator()
    net = Network(sim, D, nh, nic_latency_ps=nic, nic_rate_bps=nic_rate, lossless=lossless, seed=seed)
    log = []
    net.log_sinks.append(log.append)
    links = sorted(D.edges)
    ref = RefNet([(u, v, D.edges[u, v]["rate_bps"], D.edges[u, v]["latency_ps"]) for u, v in links],
                 n, nh, nic, cap, lossless=lossless, seed=seed, nic_rate=nic_rate)
    for link, loss in losses:
        net.set_loss(link, loss)
        rl = ref.links[link]
        rl.loss = None if not loss.p and loss.r is None else ((loss.p,) if loss.r is None else (loss.p, loss.r, loss.loss_good, loss.loss_bad))
        rl.corrupt = loss.corrupt
        rl.drops = set(loss.drops)
    routes = []
    for tree, members in trees:
        r = net.add_tree(tree, members)
        ref.trees[r] = (tree, set(members))
        routes.append(r)
    done = {}
    for i, (src, dsts, route, nfrags, flen, llen, at) in enumerate(msgs):
        if isinstance(route, str):
            route = routes[int(route)]
        m = net.send(src, dsts, nfrags, flen, llen, route=route, at=at,
                     on_event=lambda kind, m, node, frag, t: kind == "done" and done.__setitem__((m.id, node), t))
        ref.send(i, src, dsts, route, nfrags, flen, llen, at)
    net.run()
    ref.run()
    rows = np.concatenate(log) if log else np.zeros((0, 11), np.int64)
    ours = sorted((int(r[0]), int(r[1]), int(r[2]), int(r[4]), int(r[5]), int(r[6]), int(r[9]))
                  for r in rows)
    fate = {None: 0, "loss": 1, "corrupt": 2}
    theirs = sorted((l, m, f, s, e, a, fate[x]) for l, m, f, s, e, a, x in ref.log)
    return net, ref, ours, theirs, done


@pytest.mark.parametrize("seed", range(40))
def test_unicast_random_topologies_match_reference(seed):
    D, n, nh, msgs, cap, _ = random_scenario(seed)
    net, ref, ours, theirs, done = run_both(D, n, nh, msgs, cap, lossless=True, nic=seed * 100)
    assert ours == theirs
    assert done == ref.delivered
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
    net, ref, ours, theirs, done = run_both(D, n, nh, msgs, cap, lossless=False, losses=losses, seed=seed)
    assert ours == theirs
    assert done == ref.delivered
    c = net.counters()
    # Conservation: every frame offered to a link was delivered or dropped.
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all()
    assert net.frames_in_flight == 0


@pytest.mark.parametrize("seed", range(10))
def test_multicast_trees_match_reference(seed):
    rng = random.Random(seed)
    n = 9
    D = nx.DiGraph()
    for u, v in nx.grid_2d_graph(3, 3).edges:
        a, b = u[0] * 3 + u[1], v[0] * 3 + v[1]
        D.add_edge(a, b, rate_bps=10**9, latency_ps=500_000, mtu=1500)
        D.add_edge(b, a, rate_bps=10**9, latency_ps=500_000, mtu=1500)
    nh = bfs_next_hop(D, n, n)
    trees, msgs = [], []
    for k in range(3):
        root = rng.randrange(n)
        members = rng.sample([x for x in range(n) if x != root], k=rng.randint(2, 6))
        tree = {}
        for m in members:  # union of the unicast paths: a shortest-path tree
            v = root
            while v != m:
                h = int(nh[v, m])
                tree.setdefault(v, set()).add(h)
                v = h
        trees.append(({u: sorted(c) for u, c in tree.items()}, members))
        msgs.append((root, tuple(members), str(k), rng.randint(1, 30), 1462, 700, rng.randint(0, 10**8)))
    for i in range(4):
        s, d = rng.sample(range(n), 2)
        msgs.append((s, (d,), d, rng.randint(1, 30), 1462, 100, rng.randint(0, 10**8)))
    net, ref, ours, theirs, done = run_both(D, n, nh, msgs, (0, 16 * 1024), trees=trees)
    assert ours == theirs
    assert done == ref.delivered
    # Each member of each tree completed exactly once.
    for i, (root, members, *_rest) in enumerate(msgs[:3]):
        assert {node for (m, node) in done if m == i} == set(members)


@pytest.mark.parametrize("seed", range(10))
def test_finite_rate_nic_datapath_matches_reference(seed):
    # A slow datapath (1-4 Gb/s behind several ports) makes frames from different ports queue.
    D, n, nh, msgs, cap, rng = random_scenario(2000 + seed)
    net, ref, ours, theirs, done = run_both(D, n, nh, msgs, cap, nic=300 * seed,
                                            nic_rate=rng.choice([10**9, 2 * 10**9, 4 * 10**9]))
    assert ours == theirs
    assert done == ref.delivered
    assert len(done) == len(msgs)
