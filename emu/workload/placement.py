"""Where MARS puts replicas, and what the topology costs it.

The generator only needs hop distances and multicast-tree sizes; it takes them from
``emu.topology`` (same builders and routes as the replay), never from the engine.

Placement: for owner o, replica holders are the prefix of a fixed sequence chosen greedily
so that every node's distance to its nearest copy is small (k-median, greedy): the next
holder is the node that most reduces the sum over all nodes of the hop distance to the
nearest copy; ties go to the node closer to the owner, then the lower id. Sequences are
nested, so lowering r(c) drops the tail of the sequence. On vertex-transitive topologies
(torus, ring, full mesh, star) the sequence of owner 0 is translated to every owner, so
every node holds exactly r - 1 replicas per chunk and memory stays balanced.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..errors import ConfigError


class Net:
    def __init__(self, spec: str | None, nodes: int, hw: dict):
        from ..topology import LinkDefaults, Routes, build

        link = LinkDefaults(rate_bps=hw["link_rate"], latency_ps=hw["link_latency_ps"], mtu=hw["mtu"])
        self.G = build(spec or "auto", nodes, link=link, ports=hw["ports"])
        if int(self.G.graph["boards"]) != nodes:
            raise ConfigError(f"topology {spec!r}: has {self.G.graph['boards']} boards, expected {nodes}")
        self.routes = Routes(self.G)
        self.nodes = nodes
        self.name = str(self.G.graph.get("name"))
        hops = np.asarray(self.routes.hop_count[:nodes, :nodes], dtype=np.int64)
        if (hops < 0).any():
            a, b = np.argwhere(hops < 0)[0]
            raise ConfigError(f"topology {self.name}: no route from board {a} to board {b}")
        self.hops = hops

    # ------------------------------------------------------------- symmetry
    def _translate(self, o: int):
        """Map of an automorphism taking board 0 to board o, or None if we know none."""
        g = self.G.graph
        n = self.nodes
        if g.get("shape") == "torus":
            rows, cols = int(g["rows"]), int(g["cols"])
            r0, c0 = divmod(o, cols)
            return lambda h: ((h // cols + r0) % rows) * cols + (h % cols + c0) % cols
        if g.get("shape") in ("bring", "full", "star"):
            return lambda h: (h + o) % n
        return None

    def _greedy(self, o: int, load: np.ndarray | None) -> list[int]:
        D = self.hops
        nearest = D[o].copy()
        seq, left = [], [h for h in range(self.nodes) if h != o]
        for pos in range(self.nodes - 1):
            cand = np.array(left)
            cost = np.minimum(nearest[None, :], D[cand]).sum(axis=1)
            tie = load[cand] if load is not None else np.zeros(len(cand), dtype=np.int64)
            # lexicographic (cost, distance from owner, load, id)
            best = min(range(len(cand)), key=lambda i: (cost[i], D[o, cand[i]], tie[i], cand[i]))
            h = int(cand[best])
            seq.append(h)
            left.remove(h)
            nearest = np.minimum(nearest, D[h])
            if load is not None:
                load[h] += self.nodes - pos  # early positions weigh more: they are always used
        return seq

    @cached_property
    def sequences(self) -> list[list[int]]:
        """Replica holder sequence of every owner (holders for factor r: the first r - 1)."""
        if self.nodes == 1:
            return [[]]
        if self.symmetric:
            base = self._greedy(0, None)
            out = [[self._translate(o)(h) for h in base] for o in range(self.nodes)]
            # the translation must be a permutation of the other boards for every owner
            if all(sorted(s + [o]) == list(range(self.nodes)) for o, s in enumerate(out)):
                return out
        load = np.zeros(self.nodes, dtype=np.int64)
        return [self._greedy(o, load) for o in range(self.nodes)]

    @property
    def symmetric(self) -> bool:
        return self._translate(0) is not None

    def holders(self, owner: int, r: int) -> list[int]:
        return self.sequences[owner][: max(0, r - 1)]

    def nearest(self, node: int, candidates) -> int:
        """The candidate nearest to ``node`` (ties: lower id)."""
        return min(candidates, key=lambda h: (self.hops[node, h], h))

    # ------------------------------------------------------------- rings
    def ring(self, boards=None) -> list[int]:
        """The best ring embedding over ``boards`` (default all): every step one link when the
        topology has such a cycle (emu.topology.ring_order)."""
        from ..topology import ring_order_among

        return ring_order_among(self.G, range(self.nodes) if boards is None else boards, self.routes)

    def ring_hops(self, order) -> list[int]:
        """Hops of each ring step order[i] -> order[i+1], the last closing the ring."""
        order = list(order)
        return [int(self.hops[a, b]) for a, b in zip(order, order[1:] + order[:1])]

    # ------------------------------------------------------------- trees
    @cached_property
    def _tree_stats(self) -> dict[int, tuple[float, float]]:
        from ..topology import multicast_tree, tree_depth, tree_edges

        out = {1: (0.0, 0.0)}
        for r in range(2, self.nodes + 1):
            edges, depth = [], []
            for o in range(self.nodes):
                t = multicast_tree(self.G, self.routes, o, self.holders(o, r))
                edges.append(len(tree_edges(t)))
                depth.append(tree_depth(t))
            out[r] = (float(np.mean(edges)), float(np.mean(depth)))
        return out

    def tree_edges(self, r: int) -> float:
        """Links of the multicast tree from an owner to its r - 1 holders (mean over owners)."""
        return self._tree_stats[r][0]

    def tree_depth(self, r: int) -> float:
        return self._tree_stats[r][1]

    def mean_nearest(self, r: int) -> float:
        """Mean hop distance from a node without a copy to its nearest copy (h_near, eq. 19)."""
        vals = []
        for o in range(self.nodes):
            copies = [o] + self.holders(o, r)
            others = [n for n in range(self.nodes) if n not in copies]
            vals += [self.hops[n, copies].min() for n in others]
        return float(np.mean(vals)) if vals else 0.0
