"""Ring embeddings and multicast / bounded / reduction trees."""

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_routing import SETTINGS, random_topology

from emu.errors import ConfigError
from emu.topology import (
    NoRoute,
    Routes,
    bounded_tree,
    fat_tree,
    full_mesh,
    load,
    mesh2d,
    multicast_tree,
    reduction_tree,
    ring,
    ring_hops,
    ring_order,
    save,
    star,
    torus2d,
    tree_depth,
    tree_edges,
    tree_links,
    tree_root,
)

# ---------------------------------------------------------------- ring order
GRIDS = [(r, c) for r in range(1, 7) for c in range(1, 7) if r * c >= 2]


@pytest.mark.parametrize("rows, cols", GRIDS)
def test_torus_ring_order_is_all_one_hop(rows, cols):
    # Every torus has a Hamiltonian cycle; the snake must find it, odd sizes included.
    G = torus2d(rows, cols)
    order = ring_order(G)
    assert sorted(order) == list(range(rows * cols))
    assert ring_hops(G, order) == [1] * (rows * cols)


@pytest.mark.parametrize("rows, cols", GRIDS)
def test_mesh_ring_order_is_as_adjacent_as_possible(rows, cols):
    G = mesh2d(rows, cols)
    n = rows * cols
    order = ring_order(G)
    assert sorted(order) == list(range(n))
    hops = sorted(ring_hops(G, order))
    if rows == 1 or cols == 1:  # a line: the ring must come back along it
        assert hops == [1] * (n - 1) + [n - 1]
    elif n % 2 == 0:  # a Hamiltonian cycle exists
        assert hops == [1] * n
    else:  # bipartite with an odd count: one step must be longer; only one is
        assert hops == [1] * (n - 1) + [2]


def test_snake_order_on_4x4_mesh():
    assert ring_order(mesh2d(4, 4)) == [0, 1, 2, 3, 7, 6, 5, 9, 10, 11, 15, 14, 13, 12, 8, 4]
    assert ring_order(torus2d(4, 4)) == [0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12]


@pytest.mark.parametrize("G", [ring(6, bidirectional=False), ring(6), star(6), full_mesh(6), fat_tree(4)],
                         ids=lambda G: G.graph["name"])
def test_natural_order_elsewhere(G):
    n = G.graph["boards"]
    assert ring_order(G) == list(range(n))


def test_unidirectional_ring_steps_are_one_hop():
    assert ring_hops(ring(7, bidirectional=False)) == [1] * 7


def test_ring_order_of_a_file_without_shape_is_greedy(tmp_path):
    G = torus2d(3, 5)
    del G.graph["shape"]
    path = tmp_path / "t.json"
    save(G, path)
    H = load(path)
    order = ring_order(H)
    assert sorted(order) == list(range(15)) and order[0] == 0
    assert ring_hops(H, order)[:-1] == [1] * 14  # nearest neighbour keeps each step short


def test_wrong_shape_attribute_cannot_make_ring_worse():
    G = ring(16)
    G.graph.update(shape="torus", rows=4, cols=4)  # lies: this is a ring
    assert sum(ring_hops(G)) == 16


def test_ring_hops_reports_unreachable_steps():
    G = ring(4, bidirectional=False)
    R = Routes(G).without([(3, 0)])
    with pytest.raises(NoRoute):
        ring_hops(G, routes=R)


# --------------------------------------------------------------------- trees
def assert_tree_of_real_links(G, tree, root, members):
    children = [c for ch in tree.values() for c in ch]
    # Every node other than the root has exactly one parent: a tree, each node once.
    assert sorted(children) == sorted(set(tree) - {root}) and len(children) == len(set(children))
    assert tree_root(tree) == root
    assert all(G.has_edge(p, c) for p, c in tree_edges(tree))
    assert set(members) <= set(tree)
    # Everything hangs from the root (no detached cycle).
    assert len(tree_edges(tree)) == len(tree) - 1


@SETTINGS
@given(random_topology(), st.data())
def test_multicast_tree_random(G, data):
    N = G.graph["boards"]
    R = Routes(G, data.draw(st.sampled_from(["hops", "latency"])))
    src = data.draw(st.integers(0, N - 1))
    dsts = data.draw(st.sets(st.integers(0, N - 1)))
    reach = [d for d in dsts if R.reachable(src, d)]
    tree = multicast_tree(G, R, src, reach)
    assert_tree_of_real_links(G, tree, src, reach)
    depth = {src: 0}
    for p, c in tree_edges(tree):
        depth[c] = depth[p] + 1
    # Grafting keeps every destination at its routed distance.
    for d in reach:
        if R.weight == "hops":
            assert depth[d] == R.hops(src, d)
    assert multicast_tree(G, R, src, sorted(reach, reverse=True)) == tree  # order-independent
    links = tree_links(tree, R)
    assert [tuple(R.links[i]) for i in links] == tree_edges(tree)
    if len(reach) < len(dsts - {src}):
        with pytest.raises(NoRoute):
            multicast_tree(G, R, src, dsts)


def test_multicast_tree_is_union_of_routes_on_torus():
    G = torus2d(4, 4)
    R = Routes(G)
    tree = multicast_tree(G, R, 5, range(16))
    assert_tree_of_real_links(G, tree, 5, range(16))
    assert tree_depth(tree) == 4
    for d in range(16):  # no conflicts here: every route is kept as routed
        path, v = [d], d
        while v != 5:
            v = next(p for p, ch in tree.items() if v in ch)
            path.append(v)
        assert path[::-1] == R.path(5, d)


def test_multicast_tree_on_fat_tree_goes_through_switches():
    G = fat_tree(4)
    tree = multicast_tree(G, None, 0, [1, 4, 15])
    assert_tree_of_real_links(G, tree, 0, [1, 4, 15])
    assert tree[0] == [16]  # the host's only port
    assert sum(1 for v in tree if v < 16) == 4  # no other boards on the way


def test_trivial_trees():
    G = ring(5)
    assert multicast_tree(G, None, 2, []) == {2: []}
    assert multicast_tree(G, None, 2, [2]) == {2: []}
    with pytest.raises(ConfigError, match="destination 9 is not a board"):
        multicast_tree(G, None, 2, [9])


@pytest.mark.parametrize("max_depth", [1, 2, 3, 10])
def test_bounded_tree_depth_and_members(max_depth):
    G = torus2d(4, 4)
    R = Routes(G)
    members = [0, 2, 3, 5, 7, 10, 13, 15]
    tree = bounded_tree(G, 5, members, max_depth, R)
    children = [c for ch in tree.values() for c in ch]
    assert set(tree) == set(members) and sorted(children) == sorted(set(members) - {5})
    assert tree_root(tree) == 5 and tree_depth(tree) <= max_depth
    # Its links are the unicast routes of its edges.
    assert tree_links(tree, R) == [i for p, c in tree_edges(tree) for i in R.path_links(p, c)]


def test_bounded_tree_depth_one_is_root_fan_out():
    G = ring(8)
    assert bounded_tree(G, 0, range(8), 1) == {0: list(range(1, 8)), **{i: [] for i in range(1, 8)}}


def test_bounded_tree_unbounded_is_the_contracted_shortest_path_tree():
    G = ring(8)
    # Ring from 0: 1-2-3-4 one way, 7-6-5 the other; members relay for each other.
    assert bounded_tree(G, 0, [2, 4, 6], 5) == {0: [2, 6], 2: [4], 4: [], 6: []}
    assert bounded_tree(G, 0, [2, 4, 6], 1) == {0: [2, 4, 6], 2: [], 4: [], 6: []}
    with pytest.raises(ConfigError, match="max_depth must be an integer >= 1"):
        bounded_tree(G, 0, [2], 0)


@pytest.mark.parametrize("G", [torus2d(3, 4), ring(6, bidirectional=False), fat_tree(4)], ids=lambda G: G.graph["name"])
def test_reduction_tree_follows_routes_to_root(G):
    R = Routes(G)
    srcs = list(range(1, G.graph["boards"], 2))
    tree = reduction_tree(G, R, 0, srcs)
    children = [c for ch in tree.values() for c in ch]
    assert sorted(children) == sorted(set(tree) - {0}) and tree_root(tree) == 0
    for p, c in tree_edges(tree):
        assert G.has_edge(c, p)  # children send to parents over real links
    parent = {c: p for p, c in tree_edges(tree)}
    for s in srcs:
        path = [s]
        while path[-1] != 0:
            path.append(parent[path[-1]])
        assert path == R.path(s, 0)
    assert tree_links(tree, R, reverse=True) == [R.link_of(c, p) for p, c in tree_edges(tree)]


def test_reverse_of_multicast_tree_is_a_reduction_on_full_duplex_links():
    G = torus2d(4, 4)
    R = Routes(G)
    tree = multicast_tree(G, R, 0, range(16))
    assert tree_links(tree, R, reverse=True) == [R.link_of(c, p) for p, c in tree_edges(tree)]


def test_tree_root_rejects_forests():
    with pytest.raises(ConfigError, match="2 roots"):
        tree_root({0: [], 1: []})
    assert nx.is_arborescence(nx.DiGraph(tree_edges(multicast_tree(ring(6), None, 0, range(6)))))
