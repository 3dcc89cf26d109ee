"""A ring order of the boards embedded in any topology, for ring schemes.

Rings: natural order. Meshes and tori: a snake (boustrophedon) that closes into a cycle of
1-hop steps whenever the grid has one (every torus; a mesh when rows*cols is even), and
otherwise has a single 2-hop step (odd x odd mesh) or is a line (1 x n mesh). Star,
full mesh, fat-tree: 0..N-1 (neighbours share a switch). Any other graph (files): greedy
nearest neighbour from board 0, ties to the lowest id. A builder's shape is used only when
its ring is no longer, in total hops, than the greedy one, so a wrong ``shape`` attribute
in a file cannot make the ring worse.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from .routing import Routes


def _cycle(length: int, start: int, step: int) -> list[int]:
    return [(start + step * j) % length for j in range(length)]


def _torus_cycle(rows: int, cols: int) -> list[tuple[int, int]]:
    """A Hamiltonian cycle of 1-hop steps on a rows x cols torus, as (row, col)."""
    if rows == 1 or cols == 1:
        return [(i // cols, i % cols) for i in range(rows * cols)]
    # Walk whole rows (wrapping around), each row starting under the previous row's end and
    # going in direction d_r. The walk closes at its start iff sum(d_r) = 0 (mod cols): an
    # even row count alternates directions (the plain snake); with both sizes odd, walk along
    # the longer side and let the shorter side's worth of rows go the same way.
    transpose = rows % 2 == 1 and (cols % 2 == 0 or cols > rows)
    R, C = (cols, rows) if transpose else (rows, cols)
    target = 0 if R % 2 == 0 else C
    minus = (R - target) // 2
    dirs = [1 if r % 2 == 0 else -1 for r in range(2 * minus)] + [1] * (R - 2 * minus)
    out, s = [], 0
    for r, d in enumerate(dirs):
        out += [(r, c) for c in _cycle(C, s, d)]
        s = (s - d) % C
    return [(c, r) for r, c in out] if transpose else out


def _mesh_cycle(rows: int, cols: int) -> list[tuple[int, int]]:
    """A closed snake on a rows x cols mesh: row 0 left to right, the other rows snaking over
    columns 1.., back up column 0. All steps 1 hop if rows*cols is even, else one 2-hop step."""
    if rows == 1 or cols == 1:
        return [(i // cols, i % cols) for i in range(rows * cols)]
    transpose = rows % 2 == 1 and cols % 2 == 0
    R, C = (cols, rows) if transpose else (rows, cols)
    out = [(0, c) for c in range(C)]
    # Rows 1..R-1 snake (R even); with R odd the last two rows are zigzagged column by column
    # so that the walk ends next to column 0 but one (the unavoidable 2-hop step).
    snake_rows = R - 1 if R % 2 == 0 else R - 3
    for r in range(1, snake_rows + 1):
        span = range(C - 1, 0, -1) if r % 2 == 1 else range(1, C)
        out += [(r, c) for c in span]
    if R % 2 == 1:
        for k, c in enumerate(range(C - 1, 0, -1)):
            pair = [(R - 2, c), (R - 1, c)]
            out += pair if k % 2 == 0 else pair[::-1]
    out += [(r, 0) for r in range(R - 1, 0, -1)]
    return [(c, r) for r, c in out] if transpose else out


def _shape_order(G: nx.DiGraph) -> list[int] | None:
    N = int(G.graph["boards"])
    shape = G.graph.get("shape")
    rows, cols = G.graph.get("rows"), G.graph.get("cols")
    if shape in ("mesh", "torus") and isinstance(rows, int) and isinstance(cols, int) and rows * cols == N:
        cells = (_torus_cycle if shape == "torus" else _mesh_cycle)(rows, cols)
        return [r * cols + c for r, c in cells]
    if shape in ("ring", "bring", "star", "full", "fattree"):
        return list(range(N))
    return None


def _greedy_order(hops: np.ndarray) -> list[int]:
    """Nearest unvisited board next (directed hops; unreachable counts as farthest)."""
    N = hops.shape[0]
    dist = np.where(hops < 0, np.iinfo(np.int64).max, hops.astype(np.int64))
    visited = np.zeros(N, dtype=bool)
    order = [0]
    visited[0] = True
    for _ in range(N - 1):
        row = np.where(visited, np.iinfo(np.int64).max, dist[order[-1]])
        nxt = int(np.argmin(row))  # argmin returns the first minimum: lowest id on ties
        if visited[nxt]:  # only unreachable boards left: take the lowest unvisited
            nxt = int(np.flatnonzero(~visited)[0])
        order.append(nxt)
        visited[nxt] = True
    return order


def _cost(order: list[int], hops: np.ndarray) -> int:
    steps = hops[order, np.roll(order, -1)].astype(np.int64)
    return int(np.where(steps < 0, hops.shape[0] ** 2, steps).sum())


def ring_order(G: nx.DiGraph, routes: Routes | None = None) -> list[int]:
    """Every board once, in ring order (the ring closes from the last back to the first)."""
    routes = routes or Routes(G)
    N = routes.n_boards
    hops = np.asarray(routes.hop_count[:N, :N])
    greedy = _greedy_order(hops)
    shaped = _shape_order(G)
    if shaped is not None and _cost(shaped, hops) <= _cost(greedy, hops):
        return shaped
    return greedy


def ring_order_among(G: nx.DiGraph, boards, routes: Routes | None = None) -> list[int]:
    """A ring over a subset of the boards (PD's prefill pool): the order the whole-topology
    ring visits them in, or greedy nearest neighbour from the lowest board, whichever has
    fewer hops in total (ties: the former). Routes are the full topology's: boards outside
    the subset still forward."""
    routes = routes or Routes(G)
    boards = sorted(set(int(b) for b in boards))
    if len(boards) == routes.n_boards:
        return ring_order(G, routes)
    hops = np.asarray(routes.hop_count[:routes.n_boards, :routes.n_boards])
    sub = hops[np.ix_(boards, boards)]
    induced = [b for b in ring_order(G, routes) if b in set(boards)]
    greedy = [boards[i] for i in _greedy_order(sub)]
    return induced if _cost(induced, hops) <= _cost(greedy, hops) else greedy


def ring_hops(G: nx.DiGraph, order: list[int] | None = None, routes: Routes | None = None) -> list[int]:
    """Hops of each ring step order[i] -> order[i+1] (the last step closes the ring).
    NoRoute if a step has no route."""
    routes = routes or Routes(G)
    order = ring_order(G, routes) if order is None else list(order)
    return [routes.hops(a, b) for a, b in zip(order, order[1:] + order[:1])]
