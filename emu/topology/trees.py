"""Multicast and reduction trees over a set of boards.

A tree is a ``dict[node, list[child]]``: every node of the tree is a key exactly once (leaves
map to []), children are sorted, and the root is the one node that is nobody's child.
Multicast sends parent -> child; a reduction sends child -> parent.

- ``multicast_tree``: a shortest-path tree of real links, the union of the deterministic
  routes from the source; where two routes would reach the same node by different ways,
  the later destination (ascending order) is grafted at the deepest node of its route that
  is already in the tree, so every destination still sits at its shortest distance.
- ``bounded_tree``: a logical tree over the member boards only, each edge a unicast route,
  at most ``max_depth`` relay levels deep: members deeper than that in the contracted
  shortest-path tree hang off their ancestor at depth ``max_depth - 1``. ``max_depth=1``
  is the root sending to every destination itself.
- ``reduction_tree``: the union of the routes from every source to the root; routing is
  per destination, so this is always a tree, also on directed topologies.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from ..errors import ConfigError
from .routing import Routes

Tree = dict[int, list[int]]


def _members(routes: Routes, root: int, others: Iterable[int], what: str) -> list[int]:
    root = routes._board(root, "root")
    return sorted({routes._board(x, what) for x in others} - {root})


def multicast_tree(G: nx.DiGraph, routes: Routes | None, src: int, dsts: Iterable[int]) -> Tree:
    """Shortest-path tree from board ``src`` reaching every board in ``dsts``."""
    routes = routes or Routes(G)
    tree: Tree = {routes._board(src, "source"): []}
    for d in _members(routes, src, dsts, "destination"):
        if d in tree:  # already a relay on an earlier route
            continue
        p = routes.path(src, d)
        i = max(j for j, v in enumerate(p) if v in tree)
        for a, b in zip(p[i:], p[i + 1:]):
            tree[a].append(b)
            tree[b] = []
    return {v: sorted(ch) for v, ch in tree.items()}


def bounded_tree(G: nx.DiGraph, src: int, dsts: Iterable[int], max_depth: int,
                 routes: Routes | None = None) -> Tree:
    """Logical tree over {src} and ``dsts`` (boards only), at most ``max_depth`` levels."""
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise ConfigError(f"bounded tree: max_depth must be an integer >= 1, got {max_depth!r}")
    routes = routes or Routes(G)
    members = set(_members(routes, src, dsts, "destination")) | {src}
    spt = multicast_tree(G, routes, src, members)
    out: Tree = {v: [] for v in members}
    # Walk the physical tree carrying the chain of member ancestors (chain[j] at depth j).
    stack = [(src, [src])]
    while stack:
        v, chain = stack.pop()
        for c in spt[v]:
            if c in members:
                parent = chain[min(len(chain), max_depth) - 1]
                out[parent].append(c)
                stack.append((c, chain + [c]))
            else:
                stack.append((c, chain))
    return {v: sorted(ch) for v, ch in sorted(out.items())}


def reduction_tree(G: nx.DiGraph, routes: Routes | None, root: int, srcs: Iterable[int]) -> Tree:
    """In-tree of real links along which every board in ``srcs`` reaches ``root``."""
    routes = routes or Routes(G)
    root = routes._board(root, "root")
    parent_of: dict[int, int] = {}
    for s in _members(routes, root, srcs, "source"):
        p = routes.path(s, root)
        for child, parent in zip(p, p[1:]):
            if child in parent_of:  # the rest of this route is already in the tree
                break
            parent_of[child] = parent
    tree: Tree = {root: [], **{v: [] for v in parent_of}}
    for child, parent in parent_of.items():
        tree[parent].append(child)
    return {v: sorted(ch) for v, ch in sorted(tree.items())}


def reduction_parents(G: nx.DiGraph, routes: Routes | None, root: int, members: Iterable[int]) -> dict[int, int]:
    """Parent of each member (but the root) when ``members`` reduce towards ``root``.

    Contributions follow the in-tree of the routes to the root. Only members combine:
    a switch, or a board outside the group, just forwards, so a member reports to the
    first member on its path (the root at the latest).
    """
    routes = routes or Routes(G)
    root = routes._board(root, "root")
    members = sorted(set(int(m) for m in members) - {root})
    tree = reduction_tree(G, routes, root, members)
    parent_of = {c: p for p, cs in tree.items() for c in cs}
    combine = set(members) | {root}
    out = {}
    for m in members:
        p = parent_of[m]
        while p not in combine:
            p = parent_of[p]
        out[m] = p
    return out


def tree_root(tree: Tree) -> int:
    children = {c for ch in tree.values() for c in ch}
    roots = [v for v in tree if v not in children]
    if len(roots) != 1:
        raise ConfigError(f"not a tree: {len(roots)} roots")
    return roots[0]


def tree_edges(tree: Tree) -> list[tuple[int, int]]:
    """(parent, child) pairs, breadth first from the root, children in ascending order."""
    out, frontier = [], [tree_root(tree)]
    while frontier:
        nxt = []
        for v in frontier:
            for c in tree[v]:
                out.append((v, c))
                nxt.append(c)
        frontier = nxt
    return out


def tree_depth(tree: Tree) -> int:
    """Levels below the root (0 for a lone root)."""
    depth, frontier = 0, [tree_root(tree)]
    while True:
        frontier = [c for v in frontier for c in tree[v]]
        if not frontier:
            return depth
        depth += 1


def tree_links(tree: Tree, routes: Routes, reverse: bool = False) -> list[int]:
    """Link ids a tree uses, in ``tree_edges`` order: for each (parent, child) the route from
    parent to child (child to parent with ``reverse``, for reductions). Towards a switch,
    which is never a route destination, the direct link. For trees of real links
    (multicast_tree, reduction_tree) this is exactly one link per edge; a bounded tree's
    edges are whole routes, so a link shared by two of them appears twice."""
    out: list[int] = []
    for p, c in tree_edges(tree):
        u, v = (c, p) if reverse else (p, c)
        if v < routes.n_boards:
            out += routes.path_links(u, v)
        elif (u, v) in routes.edge_index:
            out.append(routes.edge_index[(u, v)])
        else:
            raise ConfigError(f"{routes.name}: tree edge {u}->{v}: no such link")
    return out
