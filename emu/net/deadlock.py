"""Pause or credit deadlock: ports paused (or waiting for credit) in a cycle, each holding back the
frames the next one waits for.

With PAUSE (docs/engine.md, "Port buffers and flow control") port u->v is paused while v holds
XOFF bytes of frames that arrived over it; those frames wait at v's egress ports. If each of
those ports is itself paused for the same reason, around a cycle, no frame of the cycle can
move again: a cyclic buffer dependency, the known PFC hazard on rings and tori. Credit has the
same hazard: port u->v waits for credit that returns only when the frames that arrived over it
leave v's egress ports, and those wait for credit of their own. Under credit the kernel marks a
port waiting for credit as paused (L_PAUSED), so one graph finds both. ``cycle`` finds one in a
network whose frame loop has nothing left to do (no progress).
"""

from __future__ import annotations

import networkx as nx

from . import kernel as K


def cycle(net) -> list[tuple[int, int]] | None:
    """The link directions (u, v) of a cycle of paused ports of ``net``, each waiting for the
    next (frames that arrived over it wait at the next, which is paused), or None."""
    LK, FP = net.LK, net.FP
    nl = len(net.links)
    waits = nx.DiGraph()
    for m in range(nl):
        if not LK[m, K.L_PAUSED]:
            continue
        e = int(LK[m, K.L_THEAD])
        while e != -1:  # the frames waiting at paused port m, by the link they arrived over
            i = int(FP[e, K.F_IN])
            if 0 <= i < nl and LK[i, K.L_PAUSED]:
                waits.add_edge(i, m)
            e = int(FP[e, K.F_NEXT])
    try:
        found = nx.find_cycle(waits)
    except nx.NetworkXNoCycle:
        return None
    return [net.links[i] for i, _m in found]


def describe(links: list[tuple[int, int]]) -> str:
    """One line naming the cycle: ``ports 0->1 -> 1->2 -> 2->0 -> 0->1``."""
    names = [f"{u}->{v}" for u, v in links]
    return "ports " + " -> ".join(names + names[:1])
