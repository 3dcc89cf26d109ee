"""The engine against the independent SimPy reference, on randomized scenarios.

Each seed draws a small topology of boards and switches (rates, latencies, MTUs,
datapath rates, queue limits, lossless or drop-tail, port arbiter), unicast and
multicast sends that contend with transit traffic, and a timeline of link flaps, node
failures, rate changes, loss and corruption windows and re-routes after a detection
delay, plus resends and sends made by the application during the run. Both sides must
give identical per-transmission records on physical links (link, message, fragment,
start, end, arrival or drop time, fate, resend flag), delivery times per (message,
destination, fragment), completion times, per-link and per-node counters, and the
same network-wide frame balance, which must hold on both.

The scenario -> engine adapter is `run_engine` (one place to change when the Network
API changes); the reference is driven by `simref.simulate`.
"""

from __future__ import annotations

import random
import sys
from collections import deque

import networkx as nx
import numpy as np
import pytest

from simref import ARBITERS, Change, LinkSpec, LossModel, Resend, Rules, Scenario, Send, simulate

US = 10**6
SEEDS = range(200)
TRAINS = True  # set per test by the fixture below


@pytest.fixture(autouse=True, params=[True, False], ids=["trains", "per-frame"])
def trains(request, monkeypatch):
    """Every scenario runs with trains on and off: both must equal the reference."""
    monkeypatch.setattr(sys.modules[__name__], "TRAINS", request.param)
    return request.param
# The rules docs/engine.md states (simref.Rules names the points where the port spec
# allowed two readings).
RULES = Rules()


# ----------------------------------------------------------------------------- scenarios

def shortest_next_hop(n: int, boards: int, up: set[tuple[int, int]]) -> list[list[int]]:
    """next_hop[v][d]: BFS towards board d over up links; ties go to the smallest node id."""
    nh = [[-1] * boards for _ in range(n)]
    into = {v: sorted(u for u, w in up if w == v) for v in range(n)}
    for d in range(boards):
        dist = {d: 0}
        q = deque([d])
        while q:
            w = q.popleft()
            for u in into[w]:
                if u not in dist:
                    dist[u] = dist[w] + 1
                    q.append(u)
        for v in dist:
            if v != d:
                nh[v][d] = min(u for u in range(n) if (v, u) in up and dist.get(u) == dist[v] - 1)
    return nh


def bfs_tree(n: int, src: int, members: tuple[int, ...], up: set[tuple[int, int]]) -> dict[int, list[int]]:
    """Shortest-path tree from src over up links, pruned to the reachable members."""
    parent = {src: -1}
    q = deque([src])
    while q:
        u = q.popleft()
        for v in sorted(w for x, w in up if x == u):
            if v not in parent:
                parent[v] = u
                q.append(v)
    tree: dict[int, set[int]] = {}
    for m in members:
        if m not in parent:
            continue
        v = m
        while parent[v] != -1:
            tree.setdefault(parent[v], set()).add(v)
            v = parent[v]
    return {u: sorted(c) for u, c in tree.items()}


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    boards = rng.randint(2, 5)
    n = boards + rng.randint(0, 2)
    kinds = ["board"] * boards + ["switch"] * (n - boards)
    order = list(range(n))
    rng.shuffle(order)
    edges = set()
    for i in range(1, n):
        a, b = order[i], order[rng.randrange(i)]
        edges.add((min(a, b), max(a, b)))
    for _ in range(rng.randint(0, n)):
        a, b = rng.sample(range(n), 2)
        edges.add((min(a, b), max(a, b)))
    lossless = rng.random() < 0.5
    rates = [10**8, 4 * 10**8, 10**9, 10**9, 25 * 10**8, 10**10, 999_999_937]
    links = []
    for a, b in sorted(edges):
        rate = rng.choice(rates)
        for u, v in ((a, b), (b, a)):
            links.append(LinkSpec(
                u, v, rate if rng.random() < 0.8 else rng.choice(rates),
                rng.choice([0, 100_000, 1 * US, rng.randint(0, 5 * US)]),
                1500 if rng.random() < 0.95 else rng.choice([576, 1000]),
                queue_frames=rng.choice([2, 4, 8, 1000]),
                queue_bytes=rng.choice([3100, 9000, 65536]),
                loss=LossModel(drops=tuple(sorted(rng.sample(range(40), rng.randint(1, 3)))))
                if rng.random() < 0.15 else LossModel()))
    links.sort(key=lambda l: (l.u, l.v))      # the engine numbers links in networkx edge order
    board_lat = rng.choice([0, 500_000, rng.randint(0, 1 * US)])
    switch_lat = rng.choice([0, 300_000, rng.randint(0, 1 * US)])
    latency = [board_lat if k == "board" else switch_lat for k in kinds]
    dp_rate = [0] * n
    if rng.random() < 0.3:
        br, sr = rng.choice([2 * 10**9, 5 * 10**9, 10**10]), rng.choice([0, 10**10, 4 * 10**10])
        dp_rate = [br if k == "board" else sr for k in kinds]
    up = {(l.u, l.v) for l in links}
    nh0 = shortest_next_hop(n, boards, up)

    trees, sends = [], []
    for _ in range(rng.randint(2, 8)):
        src = rng.randrange(boards)
        others = [b for b in range(boards) if b != src]
        nfrags = rng.randint(1, 30)
        flen = rng.randint(63, 1514) if rng.random() < 0.6 else 1514
        last = rng.randint(63, flen)
        at = 0 if rng.random() < 0.4 else rng.randint(0, 300 * US)
        if len(others) >= 2 and rng.random() < 0.3:
            members = tuple(sorted(rng.sample(others, rng.randint(2, len(others)))))
            trees.append((bfs_tree(n, src, members, up), members))
            sends.append(Send(src, members, nfrags, flen, last, at, tree=len(trees) - 1,
                              track=rng.random() < 0.6))
        else:
            sends.append(Send(src, (rng.choice(others),), nfrags, flen, last, at,
                              track=rng.random() < 0.3))
    # Some sends are made live by the application at their time; messages are numbered in
    # hand-over order: the sends made before the run, then the live ones in time order.
    for s in sends:
        s.live = s.at > 0 and rng.random() < 0.3
    sends.sort(key=lambda s: (s.live, s.at))
    # Resends of some fragments of tracked messages, towards one of their destinations.
    resends = []
    for i, s in enumerate(sends):
        if s.track and rng.random() < 0.4:
            frags = tuple(sorted(rng.sample(range(s.nfrags), rng.randint(1, min(4, s.nfrags)))))
            resends.append(Resend(i, rng.choice(s.dsts), frags, s.at + rng.randint(0, 300 * US),
                                  live=s.live or rng.random() < 0.5))
    resends.sort(key=lambda r: (r.live, r.at))

    # The timeline: failures and repairs, each followed by a re-route after `detect`.
    changes: list[Change] = []
    detect = rng.choice([0, 10 * US, 50 * US])
    topo: list[tuple[int, str, tuple]] = []          # (t, what, links) for the state replay
    for _ in range(rng.randint(0, 4)):
        what = rng.choice(["flap", "flap", "node", "rate", "loss", "corrupt"])
        t1 = rng.randint(0, 400 * US)
        t2 = t1 + rng.randint(1, 200 * US)
        if what == "flap":
            a, b = rng.choice(sorted(edges))
            ids = [i for i, l in enumerate(links) if {l.u, l.v} == {a, b}]
            if rng.random() < 0.3:
                ids = ids[:1]
            for i in ids:
                changes.append(Change(t1, "down", link=i))
            topo.append((t1, "down", tuple(ids)))
            if rng.random() < 0.7:
                for i in ids:
                    changes.append(Change(t2, "up", link=i))
                topo.append((t2, "up", tuple(ids)))
        elif what == "node":
            v = rng.randrange(n)
            ids = tuple(i for i, l in enumerate(links) if v in (l.u, l.v))
            changes.append(Change(t1, "node_down", node=v))
            topo.append((t1, "down", ids))
            if rng.random() < 0.5:
                changes.append(Change(t2, "node_up", node=v))
                topo.append((t2, "up", ids))
        elif what == "rate":
            changes.append(Change(t1, "rate", link=rng.randrange(len(links)),
                                  value=rng.choice(rates)))
        else:
            i = rng.randrange(len(links))
            on = LossModel(p=1.0) if what == "loss" else LossModel(corrupt=1.0)
            changes.append(Change(t1, "loss", link=i, value=on))
            changes.append(Change(t2, "loss", link=i, value=links[i].loss))
    # Re-routes: the tables of the link state in force at each detection time.
    events = sorted(topo, key=lambda e: e[0])
    for td in sorted({t + detect for t, _w, _i in events}):
        state_at = set(up)
        for t0, w, ids in events:
            if t0 <= td:
                for i in ids:
                    (state_at.discard if w == "down" else state_at.add)((links[i].u, links[i].v))
        nh = shortest_next_hop(n, boards, state_at)
        new_trees = {k: (bfs_tree(n, sends_src(sends, k), m, state_at), m)
                     for k, (_t, m) in enumerate(trees)}
        changes.append(Change(td, "reroute", value=(nh, new_trees)))
    changes.sort(key=lambda c: c.t)
    return Scenario(kinds, latency, dp_rate, links, nh0, trees=trees, sends=sends,
                    resends=resends, changes=changes, lossless=lossless, arbiter=rng.choice(ARBITERS))


def sends_src(sends: list[Send], tree: int) -> int:
    return next(s.src for s in sends if s.tree == tree)


# ----------------------------------------------------------------------------- the engine adapter

FATES = {0: "ok", 1: "loss", 2: "corrupt", 3: "link_down"}
LINK_CAUSES = ("queue_full", "loss", "corrupt", "link_down", "mtu")
NODE_COLUMNS = ("offered", "replicated", "delivered", "no_route", "duplicate", "mtu")


def run_engine(sc: Scenario) -> dict:
    """Drive emu.net.Network with a scenario; return records, deliveries and counters."""
    from emu.net import kernel as K
    from emu.net.network import Loss, Network
    from emu.sim import Simulator

    n, boards = len(sc.kinds), sc.boards
    G = nx.DiGraph()
    for v, k in enumerate(sc.kinds):
        G.add_node(v, kind=k)
    for l in sc.links:
        G.add_edge(l.u, l.v, rate_bps=l.rate, latency_ps=l.prop, mtu=l.mtu,
                   queue_frames=l.queue_frames, queue_bytes=l.queue_bytes)
    sim = Simulator()
    net = Network(sim, G, np.array(sc.next_hop, np.int64), boards=boards,
                  nic_latency_ps={v: sc.latency[v] for v in range(n)},
                  nic_rate_bps={v: sc.dp_rate[v] for v in range(n)},
                  arbiter=sc.arbiter, lossless=sc.lossless, seed=0, log=True, trains=TRAINS, pause=sc.pause,
                  credit=sc.credit)
    links = [tuple(map(int, x)) for x in net.links]
    assert links[:len(sc.links)] == [(l.u, l.v) for l in sc.links], "engine numbers links differently"
    rows: list[np.ndarray] = []
    net.log_sinks.append(rows.append)

    def loss(m: LossModel):
        return Loss(p=m.p, drops=m.drops, corrupt=m.corrupt)

    for i, l in enumerate(sc.links):
        if l.loss != LossModel():
            net.set_loss(i, loss(l.loss))
    routes = [net.add_tree({u: list(c) for u, c in t.items()}, m) for t, m in sc.trees]
    deliveries: dict[tuple[int, int, int], list[int]] = {}
    done: dict[tuple[int, int], int] = {}
    msgs = []

    def on_event(kind, msg, node, frag, t):
        if kind == "frame":
            deliveries.setdefault((msg.id, node, frag), []).append(int(t))
        elif kind == "done":
            done.setdefault((msg.id, node), int(t))

    def send(s: Send, at):
        msgs.append(net.send(s.src, s.dsts, s.nfrags, s.frame_len, s.last_len,
                             route=None if s.tree is None else routes[s.tree], at=at,
                             track=s.track, frame_upcalls=True, prio=s.prio, on_event=on_event))

    for s in sc.sends:
        if s.live:
            sim.at(s.at, send, s, None)
        else:
            send(s, s.at)
    for r in sc.resends:
        if r.live:
            sim.at(r.at, lambda r=r: net.resend(msgs[r.msg], r.dst, r.frags, prio=r.prio))
        else:
            net.resend(msgs[r.msg], r.dst, r.frags, at=r.at, prio=r.prio)

    def apply(ch: Change):
        if ch.kind == "down":
            net.link_down(ch.link)
        elif ch.kind == "up":
            net.link_up(ch.link)
        elif ch.kind in ("node_down", "node_up"):
            for i, l in enumerate(sc.links):
                if ch.node in (l.u, l.v):
                    (net.link_down if ch.kind == "node_down" else net.link_up)(i)
        elif ch.kind == "rate":
            net.set_rate(ch.link, ch.value)
        elif ch.kind == "loss":
            net.set_loss(ch.link, loss(ch.value))
        elif ch.kind == "reroute":
            nh, trees = ch.value
            net.set_unicast(np.array(nh, np.int64))
            for k, (t, m) in trees.items():
                routes[k] = net.replace_tree(routes[k], {u: list(c) for u, c in t.items()}, m)
            net.rehome()

    for ch in sc.changes:
        net.schedule_change(ch.t, lambda ch=ch: apply(ch),
                            before="arrivals" if ch.kind == "reroute" else "grants")
    net.run()
    net.flush_log()
    assert [m.id for m in msgs] == list(range(len(msgs))), "engine numbers messages differently"
    R = np.concatenate(rows) if rows else np.zeros((0, K.G_NCOLS), np.int64)
    records = sorted(
        (int(r[K.G_START]), links[int(r[K.G_LINK])], int(r[K.G_MSG]), int(r[K.G_FRAG]),
         int(r[K.G_END]), int(r[K.G_ARR]), FATES.get(int(r[K.G_FATE]), str(int(r[K.G_FATE]))),
         bool(r[K.G_RETX]))
        for r in R)
    counters = {links[int(r.link)]: dict(
        offered=int(r.offered_frames), transmitted=int(r.sent_frames),
        delivered=int(r.delivered_frames), busy=int(r.busy_ps),
        held_max=int(r.peak_held_bytes), paused_ps=int(r.paused_ps),
        **{k: int(getattr(r, "dropped_" + k)) for k in LINK_CAUSES})
        for r in net.counters().itertuples()}
    nodes = {int(r.node): dict(
        offered=int(r.offered_frames), replicated=int(r.replicated_frames),
        delivered=int(r.delivered_frames),
        **{k: int(getattr(r, "dropped_" + k)) for k in NODE_COLUMNS[3:]})
        for r in net.node_counters().itertuples()}
    return dict(records=records, deliveries=deliveries, done=done, counters=counters,
                nodes=nodes, conservation=net.conservation())


def run_reference(sc: Scenario, rules: Rules = RULES) -> dict:
    net = simulate(sc, rules)
    ends = {p.id: (p.u, p.v) for p in net.ports}
    # Physical links only: the spec does not ask for a log of datapath services (their
    # timing shows in every later hop and delivery).
    records = sorted((r.start, ends[r.link], r.msg, r.frag, r.end, r.time, r.fate, r.retx)
                     for r in net.records if ends[r.link][0] != ends[r.link][1])
    counters = {(c["u"], c["v"]): {k: c[k] for k in (
        "offered", "transmitted", "delivered", "busy") + LINK_CAUSES}
        for c in net.link_counters()}
    for p in net.ports:
        counters[(p.u, p.v)].update(held_max=p.held_max,
                                    paused_ps=p.paused_ps + (net.env.now - p.paused_since if p.paused else 0))
    nodes = {c["node"]: {k: c[k] for k in NODE_COLUMNS} for c in net.node_counters()}
    return dict(records=records, deliveries=net.deliveries, done=net.done, counters=counters,
                nodes=nodes, net=net)


def first_difference(a: list, b: list):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, x, y
    if len(a) != len(b):
        i = min(len(a), len(b))
        return i, a[i] if i < len(a) else None, b[i] if i < len(b) else None
    return None


def paused_scenario(seed: int) -> Scenario:
    """scenario(seed) under pause, each port's buffer a few frames above the headroom the
    reference computes from docs/engine.md, and heavier sends so that buffers fill."""
    sc = scenario(seed)
    rng = random.Random(seed)
    sc.pause = True
    for s in sc.sends:
        s.nfrags *= 5
    for l in sc.links:
        l.queue_bytes = 1 << 30
    probe = simulate_thresholds(sc)
    for l, p in zip(sc.links, probe.ports):
        l.queue_bytes = (1 << 30) - p.xoff + (3 + rng.randint(0, 6)) * (l.mtu + 14)
    return sc


def credit_scenario(seed: int) -> Scenario:
    """scenario(seed) under credit, each port's buffer the largest frame times its far node's
    out-degree (the least credit accepts) plus a few frames, and heavier sends so that ports wait."""
    sc = scenario(seed)
    rng = random.Random(seed)
    sc.credit = True
    for s in sc.sends:
        s.nfrags *= 5
    out = {}
    for l in sc.links:
        out[l.u] = out.get(l.u, 0) + 1
    for l in sc.links:
        l.queue_bytes = (l.mtu + 14) * (out[l.v] + rng.randint(0, 4))
    return sc


def simulate_thresholds(sc: Scenario):
    from simref import RefNet
    return RefNet(sc, RULES)


def prio_scenario(seed: int, pause: bool = False, credit: bool = False) -> Scenario:
    """scenario(seed) (or paused_scenario) with the ports' priority class: the unicast sends and
    the resends handed over when ready (live, or at 0 before the run) are prio at random, and a
    burst of live prio sends from one board to another, close together, passes the cap."""
    sc = paused_scenario(seed) if pause else credit_scenario(seed) if credit else scenario(seed)
    rng = random.Random(10_000 + seed)
    for s in sc.sends:
        s.prio = s.tree is None and (s.live or s.at == 0) and rng.random() < 0.6
    for r in sc.resends:
        r.prio = (r.live or r.at == 0) and rng.random() < 0.8
    boards = sc.boards
    src = rng.randrange(boards)
    dst = rng.choice([b for b in range(boards) if b != src])
    t = rng.randint(1, 300 * US)
    for _ in range(rng.randint(2, 5)):
        t += rng.choice([1, 1000, rng.randint(1, 40 * US)])
        nf = rng.randint(10, 50)
        sc.sends.append(Send(src, (dst,), nf, 1514, rng.randint(63, 1514), t, track=rng.random() < 0.5,
                             live=True, prio=True))
    # messages are numbered in hand-over order: re-sort, and the resends follow their messages
    order = sorted(range(len(sc.sends)), key=lambda i: (sc.sends[i].live, sc.sends[i].at))
    new = {old: k for k, old in enumerate(order)}
    sc.sends = [sc.sends[i] for i in order]
    for r in sc.resends:
        r.msg = new[r.msg]
    return sc


PRIO_SEEN = {"placed": 0, "over_cap": 0}


def count_prio(ref: dict) -> None:
    for k, v in ref["net"].prio_seen.items():
        PRIO_SEEN[k] += v


@pytest.mark.parametrize("seed", range(60))
def test_engine_matches_reference_with_prio_streams(seed):
    count_prio(check_against_reference(prio_scenario(seed), seed))


@pytest.mark.parametrize("seed", range(20))
def test_engine_matches_reference_with_prio_streams_under_pause(seed):
    sc = prio_scenario(seed, pause=True)
    ref = check_against_reference(sc, seed)
    count_prio(ref)
    for p in ref["net"].ports[:len(sc.links)]:
        assert p.held_max <= p.cap_bytes
    assert not any(c["queue_full"] for c in ref["counters"].values())


@pytest.mark.parametrize("seed", range(20))
def test_engine_matches_reference_with_prio_streams_under_credit(seed):
    sc = prio_scenario(seed, credit=True)
    ref = check_against_reference(sc, seed)
    count_prio(ref)
    assert not any(c["queue_full"] for c in ref["counters"].values())


def test_the_prio_scenarios_placed_prio_streams_and_passed_the_cap():
    """Not vacuous: the runs above (in file order) put streams in the class and refused some at the cap."""
    assert all(PRIO_SEEN.values()), PRIO_SEEN


@pytest.mark.parametrize("seed", SEEDS)
def test_engine_matches_reference(seed):
    check_against_reference(scenario(seed), seed)


PAUSED = {"paused_ps": 0}


@pytest.mark.parametrize("seed", range(60))
def test_engine_matches_reference_under_pause(seed):
    """Pause on the same randomized scenarios (failures, re-routes, multicast, resends): the
    engine's per-link held bytes and paused time are the reference's, and no node ever held
    more than its buffer for a link."""
    sc = paused_scenario(seed)
    ref = check_against_reference(sc, seed)
    for p in ref["net"].ports[:len(sc.links)]:
        assert p.held_max <= p.cap_bytes
        PAUSED["paused_ps"] += p.paused_ps
    assert not any(c["queue_full"] for c in ref["counters"].values())


def test_the_paused_scenarios_paused_ports():
    assert PAUSED["paused_ps"] > 0


CREDIT = {"waited_ps": 0, "over": 0}


@pytest.mark.parametrize("seed", range(60))
def test_engine_matches_reference_under_credit(seed):
    """Credit on the same randomized scenarios (failures, re-routes, multicast, resends, loss): the
    engine's per-link held bytes and time waiting for credit are the reference's, nothing is
    dropped for want of buffer, and without re-routes no node ever held more than its buffer for
    a link (a route changed on the way can make a frame need more copies than it paid for)."""
    sc = credit_scenario(seed)
    ref = check_against_reference(sc, seed)
    rerouted = any(c.kind == "reroute" for c in sc.changes)
    for p in ref["net"].ports[:len(sc.links)]:
        CREDIT["waited_ps"] += p.paused_ps
        if not rerouted:
            assert p.held_max <= p.cap_bytes
    assert not any(c["queue_full"] for c in ref["counters"].values())


def test_the_credit_scenarios_made_ports_wait():
    assert CREDIT["waited_ps"] > 0


def check_against_reference(sc: Scenario, seed: int) -> dict:
    ref = run_reference(sc)
    assert ref["net"].conserved(), "the reference does not conserve frames"
    eng = run_engine(sc)
    where = (f"seed {seed} ({len(sc.kinds)} nodes, arbiter {sc.arbiter}, "
             f"{'lossless' if sc.lossless else 'drop-tail'}, changes "
             f"{[(c.t, c.kind) for c in sc.changes]})")
    diff = first_difference(eng["records"], ref["records"])
    assert diff is None, (f"{where}: record #{diff[0]} differs "
                          f"(start, (u, v), msg, frag, end, arrival/drop, fate, retx):\n"
                          f"  engine    {diff[1]}\n  reference {diff[2]}")
    assert eng["deliveries"] == ref["deliveries"], f"{where}: delivery times differ"
    assert eng["done"] == ref["done"], f"{where}: message completion times differ"
    for uv, want in ref["counters"].items():
        if uv[0] != uv[1] or uv in eng["counters"]:
            assert eng["counters"].get(uv) == want, f"{where}: counters of {uv} differ"
    assert eng["nodes"] == ref["nodes"], f"{where}: node counters differ"
    tot = ref["net"].totals()
    want = dict(offered=tot["offered"], replicated=tot["replicated"],
                delivered=tot["delivered"], dropped=sum(tot["dropped"].values()),
                in_flight=0, balance=0)
    assert eng["conservation"] == want, f"{where}: frame balance differs"
    return ref


def issue_scenarios() -> dict[str, Scenario]:
    """The hand-checked scenarios of test_simref_model."""
    import test_simref_model as M
    ms = 10**9
    loss = Scenario(["board"] * 2, [M.L] * 2, [0] * 2, M.duplex([(0, 1)], rate=10**7),
                    [[-1, 1], [0, -1]], sends=[Send(0, (1,), 20, M.FULL, M.FULL, 0)],
                    changes=[Change(10 * ms, "loss", link=0, value=LossModel(p=1.0)),
                             Change(20 * ms, "loss", link=0, value=LossModel())])
    flap = Scenario(["board"] * 2, [M.L] * 2, [0] * 2, M.duplex([(0, 1)]), [[-1, 1], [0, -1]],
                    sends=[Send(0, (1,), 10, M.FULL, M.FULL, 0)],
                    changes=[Change(30 * US, "down", link=0), Change(40 * US, "up", link=0)])
    reroute = M.triangle([Change(50 * US, "down", link=0), Change(50 * US, "down", link=1),
                          Change(150 * US, "reroute", value=(M.NH_VIA_2, {}))],
                         [Send(0, (1,), 20, M.FULL, M.FULL, 0)], M.NH_DIRECT)
    out = {f"line-{a}": M.line_scenario(a) for a in ARBITERS}
    out.update({"loss-window": loss, "flap": flap, "reroute": reroute,
                "multicast-reroute": M.multicast_reroute_scenario(True)})
    return out


def in_engine_order(sc: Scenario) -> Scenario:
    """The same scenario with links numbered as the engine numbers them (sorted (u, v))."""
    order = sorted(range(len(sc.links)), key=lambda i: (sc.links[i].u, sc.links[i].v))
    new_id = {old: new for new, old in enumerate(order)}
    changes = [Change(c.t, c.kind, new_id.get(c.link, c.link), c.node, c.value) for c in sc.changes]
    return Scenario(sc.kinds, sc.latency, sc.dp_rate, [sc.links[i] for i in order], sc.next_hop,
                    trees=sc.trees, sends=sc.sends, resends=sc.resends, changes=changes,
                    lossless=sc.lossless, arbiter=sc.arbiter)


@pytest.mark.parametrize("name", sorted(issue_scenarios()))
def test_engine_matches_reference_on_issue_scenarios(name):
    sc = in_engine_order(issue_scenarios()[name])
    ref, eng = run_reference(sc), run_engine(sc)
    diff = first_difference(eng["records"], ref["records"])
    assert diff is None, (f"{name}: record #{diff[0]} differs\n  engine    {diff[1]}\n"
                          f"  reference {diff[2]}")
    assert eng["deliveries"] == ref["deliveries"] and eng["done"] == ref["done"], name
    assert eng["nodes"] == ref["nodes"], name
