"""Forwarding rows: what a node does with a frame of a route, as one table row.

Row layout: column 0 is 1 when the node delivers the frame locally, the next columns
the egress links of its copies, -1 after the last. The network kernel's FW table holds
these rows (emu.net.network installs them) and a board's NIC reads the same row for a
frame (emu.nic.protocol, emu hw serve): one rule for the emulator and the board.
"""

from __future__ import annotations

import numpy as np


def tree_rows(tree: dict, members, nodes: int, max_out: int, out_link) -> np.ndarray:
    """Forwarding rows of a multicast tree (node -> children, ``emu.topology.multicast_tree``):
    row v = [v is a member, egress link to each child in ascending child order, -1 ...].
    ``out_link(u, v)`` is the link id of u -> v. These are the rows the network kernel's
    FW table holds for the tree."""
    rows = np.full((nodes, max_out + 1), -1, np.int32)
    rows[:, 0] = 0
    for m in members:
        rows[m, 0] = 1
    for u, children in tree.items():
        for k, c in enumerate(sorted(children)):
            rows[u, 1 + k] = out_link(u, c)
    return rows


def unicast_rows(next_hop: np.ndarray, nodes: int, boards: int, max_out: int, out_link) -> np.ndarray:
    """Forwarding rows of the unicast routes: row d * nodes + v = [v == d, link v -> next hop]."""
    rows = np.full((boards * nodes, max_out + 1), -1, np.int32)
    rows[:, 0] = 0
    for d in range(boards):
        rows[d * nodes + d, 0] = 1
        for v in range(nodes):
            h = next_hop[v, d]
            if v != d and h >= 0:
                rows[d * nodes + v, 1] = out_link(v, int(h))
    return rows
