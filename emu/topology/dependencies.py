"""The channel dependency graph of a set of routes: can back-pressure deadlock on them?

Under PAUSE or credits a frame that entered node x over link a keeps its buffer there until
x grants it on its next link b: link a depends on link b. Draw an edge a -> b for every
(a, b) some route or multicast tree takes in a row; back-pressure can deadlock only if this
graph has a cycle (Dally and Seitz, "Deadlock-free message routing in multiprocessor
interconnection networks", 1987). Whether one does depends on the traffic; without a cycle
none can. The replay reports the cycle it finds (summary ``dependency_cycle``) so a run that
happened not to deadlock is not taken for a fabric that cannot.
"""

from __future__ import annotations

import networkx as nx

from .routing import Routes
from .trees import Tree


def cycle(routes: Routes, trees: list[Tree] = ()) -> list[tuple[int, int]] | None:
    """Link directions (u, v) of a cycle of the routes between every pair of reachable boards
    and of ``trees`` (parent -> children dicts), each depending on the next; None if acyclic."""
    deps = nx.DiGraph()
    n, nh, nl = routes.n_boards, routes.next_hop, routes.next_link
    for t in range(n):
        walked = set()  # routes to t are suffix consistent: past a walked node the edges are in
        for s in range(n):
            if s == t or nh[s, t] < 0:
                continue
            v, a = int(nh[s, t]), int(nl[s, t])
            while v != t:
                b = int(nl[v, t])
                deps.add_edge(a, b)
                if v in walked:
                    break
                walked.add(v)
                v, a = int(nh[v, t]), b
    link = routes.edge_index
    for tree in trees:
        parent = {c: p for p, children in tree.items() for c in children}
        for x, children in tree.items():
            if x in parent:
                for c in children:
                    deps.add_edge(link[(parent[x], x)], link[(x, c)])
    try:
        found = nx.find_cycle(deps)
    except nx.NetworkXNoCycle:
        return None
    return [tuple(int(x) for x in routes.links[a]) for a, _b in found]
