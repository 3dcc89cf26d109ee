"""Conditions that change during a run: failures, repairs, degraded rates, loss.

A scenario is written as clauses, one per change, e.g.::

    link 3-4 down at 0.5s up at 0.8s     (both directions; 3>4 is one direction)
    node 5 down at 1s
    link 3-4 degrade 0.25 at 1s until 2s (a quarter of its rate)
    link 3-4 rate 100Mbps at 1s
    link * loss 0.01 at 0s until 5ms     (Bernoulli loss on every link)

Frames in the transit queue or on the wire of a link that goes down are dropped
and counted (cause ``link_down``); its local queue (packetizer streams) waits,
and resumes the moment the link is up again. A node going down takes all its
links down. Routing notices a failure or repair only ``detect`` later: until
then transit frames keep following the old tables and are dropped at the dead
link; at the re-route the unsent fragments of messages move to their new first
hops (``Network.rehome``). A change at t applies after the frame arrivals at t
and before the ports grant at t; a re-route at t before the arrivals at t
(docs/engine.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..errors import ConfigError
from ..topology.graph import MAX_NODES
from ..units import parse_float, parse_rate, parse_time
from . import kernel as K
from .network import Loss, Network


@dataclass(frozen=True)
class Change:
    time_ps: int
    kind: str                  # down | up | rate | degrade | loss
    target: str                # "link" or "node"
    items: tuple               # ((u, v), ...) or (node, ...); () with all=True
    all: bool = False
    both: bool = True
    value: float | int | None = None
    clause: str = ""


MAX_NODE_ID = MAX_NODES - 1  # no topology has more nodes (boards and switches)
# keywords in any case; values keep theirs (a rate's unit is case-sensitive: Mb is not MB)
_TARGET = re.compile(r"^(link)\s+(\*|\d+\s*[->]\s*\d+)\s+(.*)$|^(node)\s+(\d+)\s+(.*)$", re.I)
_ACTION = re.compile(
    r"^(?:(?P<state>down|up)|(?P<what>rate|degrade|loss)\s+(?P<value>\S+))\s+at\s+(?P<at>\S+)"
    r"(?:\s+(?:(?P<up>up|until)\s+(?:at\s+)?(?P<until>\S+)))?$",
    re.I,
)


def parse(clauses: Iterable[str] | str) -> list[Change]:
    """Parse scenario clauses (a string may hold several separated by ';')."""
    if isinstance(clauses, str):
        clauses = [clauses]
    changes: list[Change] = []
    for raw in clauses:
        for clause in (c.strip() for c in raw.split(";")):
            if clause:
                changes.extend(_parse_clause(clause))
    return sorted(changes, key=lambda c: c.time_ps)


def _node_id(text: str, clause: str) -> int:
    """A node id no topology can exceed (boards and switches), so a clause is refused before any
    topology is at hand (the dashboard's what-if form parses clauses before it starts a run)."""
    digits = text.lstrip("0") or "0"  # its length first: int() refuses 4,300 digits and more
    if len(digits) > len(str(MAX_NODE_ID)) or int(digits) > MAX_NODE_ID:
        raise ConfigError(f"scenario clause {clause!r}: no node {text[:24]}{'...' if len(text) > 24 else ''}; "
                          f"node ids are 0..{MAX_NODE_ID}")
    return int(digits)


def _parse_clause(clause: str) -> list[Change]:
    m = _TARGET.match(clause)
    if not m:
        raise ConfigError(f"scenario clause {clause!r}: expected 'link U-V ...', 'link * ...' or 'node N ...'")
    if m.group(1):
        target, spec, rest = "link", m.group(2).replace(" ", ""), m.group(3)
        if spec == "*":
            items, every, both = (), True, True
        else:
            both = "-" in spec
            u, v = (_node_id(x, clause) for x in re.split(r"[->]", spec))
            items, every = ((u, v),), False
    else:
        target, items, every, both, rest = "node", (_node_id(m.group(5), clause),), False, True, m.group(6)
    a = _ACTION.match(rest.strip())
    if not a:
        raise ConfigError(
            f"scenario clause {clause!r}: expected 'down at T [up at T]', 'rate R at T [until T]', "
            f"'degrade F at T [until T]' or 'loss P at T [until T]'"
        )
    at = parse_time(a["at"], f"{clause!r}: time")
    common = dict(target=target, items=items, all=every, both=both, clause=clause)
    out: list[Change] = []
    state = (a["state"] or "").lower()
    if state:
        if state == "up" and a["until"]:
            raise ConfigError(f"scenario clause {clause!r}: 'up' takes no second time")
        out.append(Change(at, state, **common))
        if a["until"]:
            out.append(Change(parse_time(a["until"], f"{clause!r}: time"), "up", **common))
    else:
        if target == "node":
            raise ConfigError(f"scenario clause {clause!r}: nodes only go down or up")
        what = a["what"].lower()
        if what == "rate":
            value = parse_rate(a["value"], f"{clause!r}: rate")
            if value <= 0:
                raise ConfigError(f"scenario clause {clause!r}: rate must be positive")
        else:
            value = parse_float(a["value"], f"{clause!r}: {what}")
            if what == "degrade" and not 0 < value <= 1:
                raise ConfigError(f"scenario clause {clause!r}: degrade takes a fraction in (0, 1]")
            if what == "loss" and not 0 <= value <= 1:
                raise ConfigError(f"scenario clause {clause!r}: loss takes a probability in [0, 1]")
        out.append(Change(at, what, value=value, **common))
        if a["until"]:
            out.append(Change(parse_time(a["until"], f"{clause!r}: time"), f"restore-{what}", **common))
    if len(out) == 2 and out[1].time_ps < out[0].time_ps:
        raise ConfigError(f"scenario clause {clause!r}: ends before it starts")
    if len(out) == 2 and out[1].time_ps == out[0].time_ps:
        # a change undone at its own instant would leave no trace in the run, only a re-route
        raise ConfigError(f"scenario clause {clause!r}: ends when it starts; give a later end or drop it")
    return out


@dataclass
class Timeline:
    """Applies changes to a Network at their times and re-routes after ``detect_ps``.

    ``routes`` is the healthy topology's Routes; on every failure or repair the
    network gets tables that avoid what is down, and each ``on_reroute(routes)``
    callback runs (the NICs rebuild their multicast trees there).
    """

    changes: list[Change]
    detect_ps: int = 0
    base_loss: dict[int, Loss] = field(default_factory=dict)
    on_reroute: list[Callable] = field(default_factory=list)

    def install(self, net: Network, routes) -> None:
        self.net, self.routes, self.current = net, routes, routes
        self.down_links: set[int] = set()
        self.down_nodes: set[int] = set()
        self.base_rate = {i: int(net.LK[i, K.L_RATE]) for i in range(len(net.links))}
        for ch in self.changes:
            self._links(ch)  # validate every target before the run starts
            net.schedule_change(ch.time_ps, lambda ch=ch: self._apply(ch))

    def _links(self, ch: Change) -> list[int]:
        net = self.net
        if ch.all:
            return list(range(len(net.links)))
        if ch.target == "node":
            (n,) = ch.items
            if n not in net.topology:
                raise ConfigError(f"scenario clause {ch.clause!r}: no node {n}")
            return sorted(net.link_id[e] for e in list(net.topology.in_edges(n)) + list(net.topology.out_edges(n)))
        (u, v), = ch.items
        ids = []
        for e in ([(u, v), (v, u)] if ch.both else [(u, v)]):
            if e in net.link_id:
                ids.append(net.link_id[e])
        if not ids:
            raise ConfigError(f"scenario clause {ch.clause!r}: no link {u}-{v} in the topology")
        return ids

    def _apply(self, ch: Change) -> None:
        net = self.net
        links = self._links(ch)
        if ch.kind in ("down", "up"):
            for l in links:
                if ch.kind == "down":
                    net.link_down(l)
                    self.down_links.add(l)
                else:
                    net.link_up(l)
                    self.down_links.discard(l)
            if ch.target == "node":
                (self.down_nodes.add if ch.kind == "down" else self.down_nodes.discard)(ch.items[0])
            net.schedule_change(net.sim.now + self.detect_ps, self._reroute, before="arrivals")
        elif ch.kind == "rate":
            for l in links:
                net.set_rate(l, int(ch.value))
        elif ch.kind == "degrade":
            for l in links:
                net.set_rate(l, max(1, int(self.base_rate[l] * ch.value)))
        elif ch.kind in ("restore-rate", "restore-degrade"):
            for l in links:
                net.set_rate(l, self.base_rate[l])
        elif ch.kind == "loss":
            for l in links:
                net.set_loss(l, Loss(p=ch.value))
        elif ch.kind == "restore-loss":
            for l in links:
                net.set_loss(l, self.base_loss.get(l, Loss()))

    def _reroute(self) -> None:
        self.current = self.routes.without(links=self.down_links, nodes=self.down_nodes)
        self.net.set_unicast(self.current.next_hop)
        for cb in self.on_reroute:
            cb(self.current)  # the NICs replace the trees of multicasts in progress here
        self.net.rehome()
