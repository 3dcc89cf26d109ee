"""Dateline routing: routes on a torus, mesh or bidirectional ring that cannot deadlock
under back-pressure (docs/engine.md, "Deadlock").

Under PAUSE or credits a frame holds buffer at a node while it waits for the next port, so
the routes make a *channel dependency graph* (link a -> link b when a route enters a node
over a and leaves over b); back-pressure can deadlock only if that graph has a cycle (Dally
and Seitz). Shortest paths on a ring or torus have cycles around every ring. Dimension-order
routing with a dateline breaks them:

- a route moves along the columns (its row's ring) first, then along the rows (its
  column's ring): no dependency goes from a column link back to a row link;
- in each ring, position 0 is the dateline: a route may start or end there but never pass
  through it, so no dependency crosses it and each direction of a ring is a line, not a cycle.

Within a ring the route takes the shorter of the directions that do not pass the dateline
(ties: increasing position). From a to b (a != b, ring of k) increasing is allowed unless
it wraps past 0 (b < a and b != 0), decreasing unless it wraps past 0 (a < b and a != 0):
one of the two is always allowed. On a ring of 4 every route stays minimal; on larger rings
some go the longer way round (on a 5-ring, 4 -> 1 takes 3 hops instead of 2).

Routers with virtual channels keep minimal routes instead: a frame moves to a second buffer
class when it crosses the dateline. A KR260 port has one buffer and one PAUSE class, so the
dateline here restricts the routes, as turn-restricted routing (up*/down*, dimension order
on a mesh) does for fabrics without virtual channels.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from ..errors import ConfigError

SHAPES = ("torus", "mesh", "bring")


def grid(G: nx.DiGraph) -> tuple[int, int, bool]:
    """(rows, cols, wraps) of a shape dateline routing knows; one line naming it otherwise."""
    shape = G.graph.get("shape")
    if shape == "bring":
        return 1, int(G.graph["boards"]), True
    if shape in ("torus", "mesh"):
        return int(G.graph["rows"]), int(G.graph["cols"]), shape == "torus"
    raise ConfigError(f"routing dateline: {G.graph.get('name', 'topology')} is not a torus, mesh or "
                      f"bidirectional ring (bring); its shortest routes are used as they are, and the "
                      f"summary's dependency_cycle says whether they can deadlock")


def _step(a: np.ndarray, b: np.ndarray, k: int, wraps: bool) -> tuple[np.ndarray, np.ndarray]:
    """Next position from a towards b in a ring (or line) of k, and the hops left, elementwise."""
    if not wraps or k <= 2:
        return a + np.sign(b - a), np.abs(b - a)
    up, down = (b - a) % k, (a - b) % k
    up_ok = ~((b < a) & (b != 0))
    down_ok = ~((a < b) & (a != 0))
    go_up = up_ok & (~down_ok | (up <= down))
    return np.where(go_up, (a + 1) % k, (a - 1) % k), np.where(go_up, up, down)


def tables(G: nx.DiGraph) -> tuple[np.ndarray, np.ndarray]:
    """next_hop[v, t] and hop_count[v, t] for every pair of boards (v == t: t, 0)."""
    rows, cols, wraps = grid(G)
    n = rows * cols
    v, t = np.divmod(np.arange(n * n), n)
    rv, cv, rt, ct = v // cols, v % cols, t // cols, t % cols
    c_next, c_left = _step(cv, ct, cols, wraps)
    r_next, r_left = _step(rv, rt, rows, wraps)
    along_row = cv != ct  # the row's ring first, then the column's
    nxt = np.where(along_row, rv * cols + c_next, r_next * cols + cv)
    nxt = np.where(v == t, t, nxt)
    return nxt.reshape(n, n), (c_left + r_left).reshape(n, n)
