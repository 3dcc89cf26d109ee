"""Routes: shortest paths against networkx, tie-breaking, determinism, failures."""

import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emu.errors import ConfigError
from emu.topology import (
    LinkDefaults,
    NoRoute,
    Routes,
    fat_tree,
    full_mesh,
    mesh2d,
    ring,
    ring_order,
    ring_order_among,
    set_link,
    star,
    torus2d,
)
from emu.topology.graph import new_graph

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def random_topology(draw):
    """Small random DiGraphs: some links full duplex, some one-way, small latencies so that
    equal-cost ties are common, sometimes disconnected."""
    n_boards = draw(st.integers(2, 9))
    n_switches = draw(st.integers(0, 3))
    M = n_boards + n_switches
    G = new_graph("random", n_boards)
    G.add_nodes_from(range(n_boards, M), kind="switch")
    pairs = [(u, v) for u in range(M) for v in range(u + 1, M)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=min(len(pairs), 3 * M)))
    for u, v in chosen:
        mode = draw(st.sampled_from(["both", "both", "forward", "backward"]))
        for a, b in {"both": [(u, v), (v, u)], "forward": [(u, v)], "backward": [(v, u)]}[mode]:
            G.add_edge(a, b, **LinkDefaults(latency_ps=draw(st.integers(0, 4))).attrs())
    return G


def lexicographic_cost(G):
    """(latency, hops) as one number, the latency metric's documented order."""
    M = G.number_of_nodes()
    return lambda u, v, d: d["latency_ps"] * M + 1


@SETTINGS
@given(random_topology())
def test_hop_routes_match_networkx(G):
    R = Routes(G)
    N, M = G.graph["boards"], G.number_of_nodes()
    for src in range(M):
        lengths = nx.single_source_shortest_path_length(G, src)
        for dst in range(N):
            if dst not in lengths:
                assert not R.reachable(src, dst) and R.hop_count[src, dst] == -1
                with pytest.raises(NoRoute):
                    R.path(src, dst)
                continue
            p = R.path(src, dst)
            assert p[0] == src and p[-1] == dst and len(p) == len(set(p))
            assert len(p) - 1 == R.hops(src, dst) == lengths[dst]
            assert R.path_links(src, dst) == [R.edge_index[e] for e in zip(p, p[1:])]
            assert R.path_latency_ps[src, dst] == sum(G.edges[e]["latency_ps"] for e in zip(p, p[1:]))


@SETTINGS
@given(random_topology())
def test_latency_routes_are_least_latency_then_fewest_hops(G):
    R = Routes(G, "latency")
    N, M = G.graph["boards"], G.number_of_nodes()
    cost = lexicographic_cost(G)
    for src in range(M):
        best = nx.single_source_dijkstra_path_length(G, src, weight=cost)
        for dst in range(N):
            assert R.reachable(src, dst) == (dst in best)
            if dst in best:
                p = R.path(src, dst)
                lat = sum(G.edges[e]["latency_ps"] for e in zip(p, p[1:]))
                assert (lat, len(p) - 1) == divmod(best[dst], M)
                assert R.path_latency_ps[src, dst] == lat and R.hops(src, dst) == len(p) - 1


@SETTINGS
@given(random_topology(), st.sampled_from(["hops", "latency"]))
def test_next_hop_is_lowest_id_among_shortest(G, weight):
    # The documented tie-break, checked from networkx distances, not from our own.
    R = Routes(G, weight)
    cost = (lambda u, v, d: 1) if weight == "hops" else lexicographic_cost(G)
    for d in range(G.graph["boards"]):
        dist = nx.single_source_dijkstra_path_length(G.reverse(copy=False), d, weight=lambda a, b, e: cost(b, a, e))
        for v in G.nodes:
            if v == d or v not in dist:
                continue
            tight = [u for u in G.successors(v) if u in dist and cost(v, u, G.edges[v, u]) + dist[u] == dist[v]]
            assert R.next_hop[v, d] == min(tight)
            assert R.next_link[v, d] == R.edge_index[(v, min(tight))]


def test_tie_break_example():
    # Square 0-1-3-2-0: two 2-hop ways from 0 to 3; the lower next hop (1) wins.
    G = new_graph("square", 4)
    for u, v in [(0, 1), (1, 3), (3, 2), (2, 0)]:
        G.add_edge(u, v, **LinkDefaults().attrs())
        G.add_edge(v, u, **LinkDefaults().attrs())
    R = Routes(G)
    assert R.path(0, 3) == [0, 1, 3] and R.path(3, 0) == [3, 1, 0]
    assert R.path(1, 2) == [1, 0, 2] and R.path(2, 1) == [2, 0, 1]
    assert R.next_hop[3, 3] == 3 and R.hops(3, 3) == 0 and R.path(3, 3) == [3]


def test_same_input_gives_identical_routes():
    G = torus2d(4, 4)
    # Same graph with edges inserted in reverse order: networkx iteration order differs.
    H = nx.DiGraph()
    H.graph.update(G.graph)
    H.add_nodes_from(sorted(G.nodes(data=True), reverse=True))
    H.add_edges_from(reversed(list(G.edges(data=True))))
    a, b = Routes(G), Routes(H)
    assert a.edge_index == b.edge_index
    for name in ("next_hop", "next_link", "hop_count", "path_latency_ps"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_latency_metric_avoids_slow_link():
    G = ring(6)
    set_link(G, 0, 1, latency_ps=10_000_000)  # slower than going the long way round
    assert Routes(G).path(0, 1) == [0, 1]
    assert Routes(G, "latency").path(0, 1) == [0, 5, 4, 3, 2, 1]


def test_zero_latency_links_do_not_loop():
    G = ring(5, link=LinkDefaults(latency_ps=0))
    R = Routes(G, "latency")
    # All latencies tie at 0: fewest hops decides, then the lowest next hop.
    assert R.path(0, 2) == [0, 1, 2] and R.path(0, 3) == [0, 4, 3]


def test_switches_forward_but_are_not_destinations():
    G = star(4)
    R = Routes(G)
    assert R.next_hop.shape == (5, 4) and R.path(0, 3) == [0, 4, 3] and R.path(4, 1) == [4, 1]
    with pytest.raises(ConfigError, match="destination 4 is not a board"):
        R.path(0, 4)


def test_fat_tree_1024_routes():
    R = Routes(fat_tree(16))
    hc = R.hop_count[:1024, :1024]
    same_edge = np.arange(1024) // 8
    pod = np.arange(1024) // 64
    # Hosts under one edge switch: 2 hops; one pod: 4; else via the core: 6.
    expect = np.where(same_edge[:, None] == same_edge, 2, np.where(pod[:, None] == pod, 4, 6))
    np.fill_diagonal(expect, 0)
    assert np.array_equal(hc, expect)
    p = R.path(0, 1023)
    assert [R.G.nodes[v].get("layer") for v in p[1:-1]] == ["edge", "agg", "core", "agg", "edge"]


def test_bad_weight():
    with pytest.raises(ConfigError, match="weight must be one of hops, latency"):
        Routes(ring(3), "cost")


# ------------------------------------------------------------------- failures
def test_reroute_avoids_failed_link():
    G = torus2d(4, 4)
    R = Routes(G)
    assert R.path(0, 1) == [0, 1]
    F = R.without([(0, 1)])
    assert F.hops(0, 1) == 3 and R.edge_index[(0, 1)] not in F.path_links(0, 1)
    for s in range(16):
        for d in range(16):
            assert R.edge_index[(0, 1)] not in F.path_links(s, d)
    assert F.path(1, 0) == [1, 0]  # only that direction failed
    assert F.edge_index == R.edge_index  # link ids stay put for counters
    assert R.hops(0, 1) == 1  # the original routes are untouched


def test_reroute_both_directions_and_link_ids():
    R = Routes(torus2d(4, 4))
    F = R.without([R.link_of(0, 1)], both=True)
    assert F.hops(0, 1) == 3 and F.hops(1, 0) == 3
    assert F.failed_links == {R.link_of(0, 1), R.link_of(1, 0)}
    G2 = F.without([(4, 5)])  # failures accumulate
    assert len(G2.failed_links) == 3 and G2.hops(0, 1) == 3


def test_failed_node_is_avoided_and_unreachable():
    R = Routes(torus2d(4, 4)).without(nodes=[5])
    assert not R.reachable(0, 5) and not R.reachable(5, 0)
    assert (R.next_hop[:, 5] == -1).all()
    for s in range(16):
        for d in range(16):
            if 5 not in (s, d):
                assert 5 not in R.path(s, d)
    with pytest.raises(NoRoute, match="no route from 0 to 5 with 0 failed link\\(s\\) and 1 failed node"):
        R.path(0, 5)


def test_unidirectional_ring_cut_is_reported():
    R = Routes(ring(4, bidirectional=False)).without([(1, 2)])
    assert R.path(2, 1) == [2, 3, 0, 1]
    # Everything that has to cross 1->2 is gone.
    assert R.unreachable() == [(0, 2), (0, 3), (1, 0), (1, 2), (1, 3), (3, 2)]
    assert R.next_hop[0, 2] == -1 and R.next_link[0, 2] == -1 and R.hop_count[0, 2] == -1
    with pytest.raises(NoRoute, match="ring4: no route from 1 to 3"):
        R.hops(1, 3)


def test_without_rejects_unknown_links():
    R = Routes(ring(4))
    with pytest.raises(ConfigError, match="no link 0-2"):
        R.without([(0, 2)])
    with pytest.raises(ConfigError, match="no link 99"):
        R.without([99])


def test_random_failures_match_networkx():
    rng = random.Random(7)
    G = torus2d(4, 5)
    for _ in range(5):
        dead = rng.sample(sorted(G.edges), 8)
        R = Routes(G).without(dead)
        H = G.copy()
        H.remove_edges_from(dead)
        for s in range(20):
            lengths = nx.single_source_shortest_path_length(H, s)
            assert [R.hop_count[s, d] for d in range(20)] == [lengths.get(d, -1) for d in range(20)]


# ---- ring embedding: which ring wins, and ties ----------------------------------------

def test_ring_order_keeps_the_builders_shape_on_a_tie():
    """A builder's shape is used when its ring is no longer than the greedy one: on a full
    mesh every ring of 4 boards is 4 hops, so the snake of a 2x2 mesh (0, 1, 3, 2) is kept
    over greedy nearest neighbour (0, 1, 2, 3)."""
    G = full_mesh(4)
    G.graph.update(shape="mesh", rows=2, cols=2)
    assert ring_order(G) == [0, 1, 3, 2]


def test_ring_order_among_takes_the_fewer_hops_and_on_a_tie_the_whole_rings_order():
    """Boards {0, 3, 4} of a bidirectional 6-ring: the whole ring visits them as 0, 3, 4
    (3 + 1 + 2 hops), greedy from 0 takes the nearer 4 first, 0, 4, 3 (2 + 1 + 3): 6 hops
    each, and the tie goes to the whole ring's order. On a 3x3 mesh (the snake 0 1 2 5 8 7
    4 6 3) {0, 1, 3, 5} in the snake's order is 1 + 2 + 2 + 1 = 6 hops against greedy's
    0, 1, 3, 5 (1 + 2 + 2 + 3 = 8); {0, 4, 6, 7} greedy 0, 4, 7, 6 (2 + 1 + 1 + 2 = 6)
    against the snake's 0, 7, 4, 6 (3 + 1 + 2 + 2 = 8)."""
    assert ring_order_among(ring(6), [4, 0, 3]) == [0, 3, 4]
    assert ring_order_among(mesh2d(3, 3), [5, 3, 1, 0]) == [0, 1, 5, 3]
    assert ring_order_among(mesh2d(3, 3), [7, 6, 4, 0]) == [0, 4, 7, 6]
