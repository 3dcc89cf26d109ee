"""Deterministic shortest-path routing, precomputed for every (node, destination board).

Metric ``"hops"``: fewest links. Metric ``"latency"``: least total ``latency_ps``, then fewest
links. Ties: from node v towards board d, the next hop is the *lowest-numbered* neighbour u
with cost(v->u) + dist(u, d) == dist(v, d). Routing is per destination, so the path from
any node on a route onwards is that node's own route (suffix consistent), and the routes to
one destination form a tree.

All costs are strictly positive (the latency metric adds one per hop), so next hops strictly
decrease the distance: no loops, even with zero-latency links.

Arrays (rows: every node 0..M-1 including switches; columns: destination boards 0..N-1):
``next_hop`` (next node, d at d itself, -1 if unreachable), ``next_link`` (link id or -1),
``hop_count`` (-1 if unreachable); ``path_latency_ps`` (sum of link latencies of the route).
Link ids number every directed edge of G in ascending (u, v) order, failed or not, so link
ids (and counters indexed by them) stay the same across ``without``.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx
import numpy as np

from ..errors import ConfigError
from . import dateline
from .graph import check

WEIGHTS = ("hops", "latency")
# "shortest": the metric's shortest paths; "dateline": dimension order with a dateline on a
# torus, mesh or bidirectional ring, whose routes cannot deadlock under back-pressure
# (emu.topology.dateline). After a failure the re-routes are shortest paths.
ROUTINGS = ("shortest", "dateline")

_INF = np.int64(1) << 62
# Bound on the (edges x destinations) working arrays of one chunk, to keep memory flat.
_CHUNK_CELLS = 1 << 20


class NoRoute(ConfigError):
    """A (src, dst) pair has no route (disconnected topology, or failures cut it off)."""


class Routes:
    """Routes of topology ``G`` under ``weight`` ("hops" or "latency"), avoiding the failed
    directed links (link ids or (u, v) pairs) and nodes. G is snapshotted: rebuild the
    Routes after changing G's links."""

    def __init__(self, G: nx.DiGraph, weight: str = "hops",
                 failed_links: Iterable = (), failed_nodes: Iterable[int] = (), routing: str = "shortest"):
        if weight not in WEIGHTS:
            raise ConfigError(f"routing: weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
        if routing not in ROUTINGS:
            raise ConfigError(f"routing: must be one of {', '.join(ROUTINGS)}, got {routing!r}")
        check(G)
        self.G = G
        self.weight = weight
        self.routing = routing
        self.name = str(G.graph.get("name", "topology"))
        self.n_boards = N = int(G.graph["boards"])
        self.n_nodes = M = G.number_of_nodes()
        edges = sorted(G.edges)
        self.edge_index: dict[tuple[int, int], int] = {e: i for i, e in enumerate(edges)}
        self.links = np.array(edges, dtype=np.int64).reshape(-1, 2)
        self.link_latency_ps = np.array([G.edges[e]["latency_ps"] for e in edges], dtype=np.int64)
        self.failed_links = frozenset(self._link_id(x) for x in failed_links)
        self.failed_nodes = frozenset(self._node(x) for x in failed_nodes)
        self.next_hop = np.full((M, N), -1, dtype=np.int32)
        self.next_link = np.full((M, N), -1, dtype=np.int32)
        self.hop_count = np.full((M, N), -1, dtype=np.int32)
        self._latency: np.ndarray | None = None
        if routing == "dateline":
            dateline.grid(G)  # refuses a shape it does not know, failures or not
        if routing == "dateline" and not (self.failed_links or self.failed_nodes):
            self._dateline()
        else:
            self._compute()

    # ----------------------------------------------------------------- inputs
    def _node(self, x) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < self.n_nodes:
            raise ConfigError(f"{self.name}: no node {x!r}")
        return int(x)

    def _board(self, x, what: str) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < self.n_boards:
            raise ConfigError(f"{self.name}: {what} {x!r} is not a board (0..{self.n_boards - 1})")
        return int(x)

    def _link_id(self, x) -> int:
        if isinstance(x, (tuple, list)) and len(x) == 2:
            try:
                e = (int(x[0]), int(x[1]))
            except (TypeError, ValueError):
                raise ConfigError(f"{self.name}: no link {x!r}") from None
            if e not in self.edge_index:
                raise ConfigError(f"{self.name}: no link {e[0]}-{e[1]}")
            return self.edge_index[e]
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < len(self.links):
            return int(x)
        raise ConfigError(f"{self.name}: no link {x!r} (give a link id or a (u, v) pair)")

    def link_of(self, u: int, v: int) -> int:
        """Link id of the directed edge u->v."""
        return self._link_id((u, v))

    # ------------------------------------------------------------ computation
    def _compute(self) -> None:
        M, N = self.n_nodes, self.n_boards
        usable = np.ones(len(self.links), dtype=bool)
        if self.failed_links:
            usable[list(self.failed_links)] = False
        if self.failed_nodes:
            dead = np.zeros(M, dtype=bool)
            dead[list(self.failed_nodes)] = True
            usable &= ~dead[self.links[:, 0]] & ~dead[self.links[:, 1]]
        ids = np.flatnonzero(usable)  # still in ascending (u, v) order
        eu, ev = self.links[ids, 0], self.links[ids, 1]
        if self.weight == "hops":
            cost = np.ones(len(ids), dtype=np.int64)
        else:
            # Lexicographic (latency, hops) in one integer: a path has fewer than M hops.
            lat = self.link_latency_ps[ids]
            if len(ids) and int(lat.max()) * M * M >= int(_INF) // 4:
                raise ConfigError(f"{self.name}: link latencies too large to route by latency")
            cost = lat * M + 1
        # In-edges of every node (for relaxing towards a destination), grouped by head.
        by_head = np.argsort(ev, kind="stable")
        in_deg = np.bincount(ev, minlength=M)
        in_ptr = np.concatenate(([0], np.cumsum(in_deg)))
        # Out-edges grouped by tail: ids are sorted by (u, v), so each group is contiguous
        # and ordered by next-hop id, which is what the tie-break needs.
        tails, first_out = np.unique(eu, return_index=True)
        chunk = max(1, min(N, _CHUNK_CELLS // max(1, len(ids), M)))
        for d0 in range(0, N, chunk):
            dsts = np.arange(d0, min(N, d0 + chunk))
            D = self._distances(dsts, eu, cost, by_head, in_deg, in_ptr)
            reach = D < _INF
            # dist(v, d) modulo M is the hop count under the latency metric; hops metric: dist.
            self.hop_count[:, dsts] = np.where(reach, D if self.weight == "hops" else D % M, -1)
            if not len(ids):
                continue
            Du = D[eu]
            tight = (D[ev] + cost[:, None] == Du) & (Du < _INF)
            score = np.where(tight, np.arange(len(ids))[:, None], len(ids))
            best = np.minimum.reduceat(score, first_out, axis=0)
            found = best < len(ids)
            link = np.where(found, ids[np.minimum(best, len(ids) - 1)], -1)
            self.next_link[tails[:, None], dsts[None, :]] = link
            self.next_hop[tails[:, None], dsts[None, :]] = np.where(found, self.links[np.maximum(link, 0), 1], -1)
        for d in range(N):
            if d not in self.failed_nodes:
                self.next_hop[d, d] = d
        self.next_hop.setflags(write=False)
        self.next_link.setflags(write=False)
        self.hop_count.setflags(write=False)

    def _dateline(self) -> None:
        """Dimension-order routes with a dateline (emu.topology.dateline); boards only."""
        nh, hops = dateline.tables(self.G)
        self.next_hop[:], self.hop_count[:] = nh, hops
        n = nh.shape[0]
        v = np.repeat(np.arange(n), n)
        away = v != nh.reshape(-1)
        keys = v[away] * self.n_nodes + nh.reshape(-1)[away]
        lookup = self.links[:, 0] * self.n_nodes + self.links[:, 1]
        order = np.argsort(lookup)
        at = np.searchsorted(lookup, keys, sorter=order)
        self.next_link.reshape(-1)[np.flatnonzero(away)] = order[at]
        for a in (self.next_hop, self.next_link, self.hop_count):
            a.setflags(write=False)

    def _distances(self, dsts, eu, cost, by_head, in_deg, in_ptr) -> np.ndarray:
        """dist[v, j] from every node v to board dsts[j]: Bellman-Ford relaxing only the pairs
        whose distance just improved, all destinations of the chunk at once (BFS for hops)."""
        M, C = self.n_nodes, len(dsts)
        D = np.full((M, C), _INF, dtype=np.int64)
        flat_D = D.reshape(-1)
        alive = np.array([d not in self.failed_nodes for d in dsts], dtype=bool)
        act_v = dsts[alive].astype(np.int64)
        act_c = np.flatnonzero(alive)
        D[act_v, act_c] = 0
        while act_v.size:
            deg = in_deg[act_v]
            total = int(deg.sum())
            if not total:
                break
            pair = np.repeat(np.arange(act_v.size), deg)
            # Position of each in-edge within by_head: group start + rank inside the group.
            pos = np.arange(total) - np.repeat(np.cumsum(deg) - deg, deg) + np.repeat(in_ptr[act_v], deg)
            e = by_head[pos]
            col = act_c[pair]
            cand = D[act_v[pair], col] + cost[e]
            key = eu[e] * C + col
            better = cand < flat_D[key]
            key, cand = key[better], cand[better]
            if not key.size:
                break
            np.minimum.at(flat_D, key, cand)
            key = np.unique(key)
            act_v, act_c = key // C, key % C
        return D

    # ----------------------------------------------------------------- lookup
    def reachable(self, src: int, dst: int) -> bool:
        return self.next_hop[self._node(src), self._board(dst, "destination")] != -1

    def _need_route(self, src: int, dst: int) -> tuple[int, int]:
        src, dst = self._node(src), self._board(dst, "destination")
        if self.next_hop[src, dst] == -1:
            why = ""
            if self.failed_links or self.failed_nodes:
                why = f" with {len(self.failed_links)} failed link(s) and {len(self.failed_nodes)} failed node(s)"
            raise NoRoute(f"{self.name}: no route from {src} to {dst}{why}")
        return src, dst

    def hops(self, src: int, dst: int) -> int:
        """Links on the route; NoRoute if there is none."""
        src, dst = self._need_route(src, dst)
        return int(self.hop_count[src, dst])

    def path(self, src: int, dst: int) -> list[int]:
        """Nodes of the route from node src to board dst, both included."""
        src, dst = self._need_route(src, dst)
        out = [src]
        nh = self.next_hop
        while out[-1] != dst:
            out.append(int(nh[out[-1], dst]))
        return out

    def path_links(self, src: int, dst: int) -> list[int]:
        """Link ids of the route from node src to board dst, in order."""
        src, dst = self._need_route(src, dst)
        out, v, nl, nh = [], src, self.next_link, self.next_hop
        while v != dst:
            out.append(int(nl[v, dst]))
            v = int(nh[v, dst])
        return out

    @property
    def path_latency_ps(self) -> np.ndarray:
        """[node, board] sum of link latencies along the route (-1 if unreachable)."""
        if self._latency is None:
            lat = np.full(self.next_hop.shape, -1, dtype=np.int64)
            rows, cols = np.nonzero(self.hop_count >= 0)
            h = self.hop_count[rows, cols]
            order = np.argsort(h, kind="stable")
            rows, cols, h = rows[order], cols[order], h[order]
            bounds = np.searchsorted(h, np.arange(int(h.max(initial=0)) + 2))
            lat[rows[: bounds[1]], cols[: bounds[1]]] = 0
            # Routes are suffix consistent: latency(v, d) = link(v) + latency(next_hop(v), d),
            # filled in order of hop count so the suffix is always known.
            for k in range(1, len(bounds) - 1):
                r, c = rows[bounds[k]: bounds[k + 1]], cols[bounds[k]: bounds[k + 1]]
                lat[r, c] = self.link_latency_ps[self.next_link[r, c]] + lat[self.next_hop[r, c], c]
            lat.setflags(write=False)
            self._latency = lat
        return self._latency

    def unreachable(self) -> list[tuple[int, int]]:
        """Board pairs (src, dst), src != dst, without a route."""
        sub = self.next_hop[: self.n_boards]
        return [(int(s), int(d)) for s, d in zip(*np.nonzero(sub == -1)) if s != d]

    def without(self, links: Iterable = (), nodes: Iterable[int] = (), both: bool = False) -> "Routes":
        """New routes that also avoid ``links`` (ids or (u, v) pairs; with ``both`` the reverse
        directions too) and ``nodes``. Link ids are unchanged."""
        ids = {self._link_id(x) for x in links}
        if both:
            for i in list(ids):
                u, v = (int(x) for x in self.links[i])
                if (v, u) in self.edge_index:
                    ids.add(self.edge_index[(v, u)])
        return Routes(self.G, self.weight, self.failed_links | ids, self.failed_nodes | {self._node(n) for n in nodes},
                      self.routing)

    def __repr__(self) -> str:
        return (f"Routes({self.name}, weight={self.weight!r}, routing={self.routing!r}, boards={self.n_boards}, nodes={self.n_nodes}, "
                f"failed_links={len(self.failed_links)}, failed_nodes={len(self.failed_nodes)})")
