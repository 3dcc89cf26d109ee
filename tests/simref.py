"""An independent per-frame reference of the packet network, on SimPy's clock.

Written from the behaviour spec (the port and link model that docs/engine.md
describes), not from the engine's code: every frame is an object, every port has an
explicit local queue of packetizer streams, an explicit transit FIFO and one
transmitter, and every transmission start, arrival and change is its own event. The
engine computes departures from queue order; this model simply plays the frames
out, so the two agree only if both follow the spec.

Order at one instant
--------------------
The spec fixes the order of things that happen at the same picosecond. SimPy sorts
its queue by (time, priority, insertion order), so each model event is a bare SimPy
event whose priority encodes its phase at the instant:

    priority = phase * (links + 1) + key

- REROUTE (0): re-routing replaces the tables before anything else at its time, so
  frames arriving then use the new tables ("at or after t_d").
- ARRIVE (1), key = link id: frame arrivals in ascending link id (a node's datapath
  "link" u->u is numbered after every physical link).
- PAUSE (2), key = 2 x link id + (0 PAUSE, 1 resume): flow-control frames reaching the
  port they govern (Scenario.pause), after the arrivals and before the link changes and
  grants of their instant.
  A credit return (Scenario.credit) reaching its port takes the same phase, key = 2 x link id.
- LINK (2): link down/up, node down/up, rate and loss changes, in scenario order.
  After the arrivals at their time (a frame due then has arrived), before the grants
  (a link coming up is usable, a new rate or loss model applies to frames starting
  then). The spec leaves this point open; this is the one docs/engine.md states.
- GRANT (3), key = link id: a port whose transmitter is free and that has an eligible
  frame grants one, in ascending link id. Whatever can make a frame eligible (an
  arrival into a transit queue, a stream's ready time, the end of a transmission, a
  link coming up, a re-homing) asks for a grant check at that time; requests for one
  port and instant collapse into one.
- APP (4): the application: sends and resends made "live" at that time (as from a
  delivery callback). A send made there asks for a grant check at the same time,
  which SimPy runs next: the further round of grants the spec describes (a port that
  already granted at that time is still busy).
Sends handed over before the run (send(..., at=t)) are eligible in the GRANT phase at t.

No SimPy processes or resources are used: their internal events carry SimPy's own
priorities and would interleave with the phases.

Choices where the spec is silent (each is the plain reading; a disagreement with the
engine on one of them is a spec question, not necessarily an engine bug):
- The local queue is FIFO in the order streams reach the packetizer: a send made
  before the run with at=t reaches it at t, so streams are served in ready-time order,
  ties in hand-over order (a re-homed stream is handed over again at t_d). The spec's
  "in the order the sends were handed over" read literally would put a send made early
  for a late time ahead of a resend made in between; the engine and this model do not.
- Re-homing (as the engine's `Network.rehome` documents it, where the spec is open):
  streams are visited by port in ascending link id, each local queue in order; a
  unicast stream (or resend) whose first hop is unchanged stays where it is, a moved
  one joins the tail of its new port, ready at the later of t_d and its own ready time
  (a send scheduled for later is not made earlier by a re-route). A multicast message
  whose tree changed restarts from the smallest position of its waiting streams on
  every first-hop port of the new tree; one whose tree did not change stays.
- A local frame dropped for its MTU still counts as the arbiter's grant (rr turns).
- A transit frame offered to a port is checked for link down, then MTU, then space.
- A node's datapath FIFO has no capacity limit, no loss and no MTU.
- Queue capacity in bytes counts frame lengths (`len`), not wire bytes.
- Explicit drop lists index the link's transmissions from the start of the run.
- A packetizer frame with no first hop (no route at hand-over or after re-routing) is
  counted as offered and dropped (`no_route` at the source), so conservation holds.
- Busy time of a frame cut by a link going down ends at the down time.
- A resend stream (explicit fragments towards one board) re-homes as a unicast stream to
  that board; a multicast message's "old streams" are its own tree streams only.
- The priority class (docs/engine.md, "The egress port"): a port keeps its prio streams in a
  FIFO of their own, served before any data stream (one with frames sent already too); a
  stream handed over with prio joins that FIFO only while the streams in it have fewer than
  PRIO_CAP frames left to send, else it is a data stream like any other. Prio streams are
  handed over when they are ready (live, or before the run for time 0). On re-homing a prio
  stream that moves asks for the class at its new port again; a restarted multicast is data.
- Every transmission that starts has a record, also one cut by a link going down (fate
  `link_down`, time = the down time, whether it was on the wire or propagating); a
  link's `transmitted` counts them all, as its drop list's transmission indices do.

Where the port spec allowed two readings, `Rules` holds both; the default is the one
docs/engine.md states.

Output: `records` (one Transmission per frame start), `deliveries[(msg, node, frag)]`
(accepted delivery times), `done[(msg, node)]`, `link_counters()`, `node_counters()`,
`totals()` and `conserved()`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import simpy

ETH_HEADER = 14
MIN_FRAME = 60
WIRE_OVERHEAD = 24          # preamble + SFD 8, FCS 4, inter-frame gap 12
PS = 10**12

REROUTE, ARRIVE, PAUSE, LINK, GRANT, APP = 0, 1, 2, 3, 4, 5
LINK_CAUSES = ("queue_full", "loss", "corrupt", "link_down", "mtu")
NODE_CAUSES = ("no_route", "duplicate", "mtu")
ARBITERS = ("rr", "transit-first", "local-first")
PRIO_CAP = 64               # frames left in a port's prio FIFO below which a prio stream joins it


def ser_ps(length: int, rate_bps: int) -> int:
    """Serialization time of a frame of `length` bytes: ceil((max(len, 60) + 24) * 8e12 / rate)."""
    bits_ps = (max(length, MIN_FRAME) + WIRE_OVERHEAD) * 8 * PS
    return -(-bits_ps // rate_bps)


# ----------------------------------------------------------------------------- scenario

@dataclass(frozen=True)
class LossModel:
    """Loss in force on a link: explicit lost transmission indices, or p / corrupt in {0, 1}."""
    p: float = 0.0
    drops: tuple[int, ...] = ()
    corrupt: float = 0.0

    def __post_init__(self):
        if self.p not in (0.0, 1.0) or self.corrupt not in (0.0, 1.0):
            raise ValueError("the reference draws no random numbers: p and corrupt must be 0 or 1")


@dataclass
class LinkSpec:
    u: int
    v: int
    rate: int               # bit/s
    prop: int               # ps
    mtu: int                # max Ethernet payload (len - 14)
    queue_frames: int = 0   # 0: no frame limit
    queue_bytes: int = 0    # 0: no byte limit
    loss: LossModel = field(default_factory=LossModel)


@dataclass
class Send:
    src: int
    dsts: tuple[int, ...]
    nfrags: int
    frame_len: int
    last_len: int
    at: int
    tree: int | None = None   # index into Scenario.trees; None: unicast to dsts[0]
    track: bool = False
    live: bool = False        # handed over at `at` by the application, not before the run
    prio: bool = False        # the ports' priority class (unicast, handed over when ready)


@dataclass
class Resend:
    """Fragments `frags` of message `msg` (hand-over index) again, unicast towards `dst`."""
    msg: int
    dst: int
    frags: tuple[int, ...]
    at: int
    live: bool = False
    prio: bool = False


@dataclass
class Change:
    """One change at time t. kind: down/up (link), node_down/node_up (node), rate (link, value),
    loss (link, LossModel), reroute (next_hop, trees: {tree index: (tree, members)})."""
    t: int
    kind: str
    link: int = -1
    node: int = -1
    value: object = None


@dataclass
class Scenario:
    kinds: list[str]                 # per node: "board" | "switch"; boards first
    latency: list[int]               # per node forwarding latency, ps
    dp_rate: list[int]               # per node datapath rate, bit/s (0: none)
    links: list[LinkSpec]
    next_hop: list[list[int]]        # [node][board] -> next node, -1 unreachable
    trees: list[tuple[dict[int, list[int]], tuple[int, ...]]] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)        # messages are numbered in hand-over
    resends: list[Resend] = field(default_factory=list)    # order: sends before the run, then live
    changes: list[Change] = field(default_factory=list)
    lossless: bool = True
    arbiter: str = "rr"
    pause: bool = False     # 802.3x PAUSE on every link, from its queue_bytes (lossless)
    credit: bool = False    # hop-by-hop credits on every link, its queue_bytes of them (lossless)

    @property
    def boards(self) -> int:
        return sum(k == "board" for k in self.kinds)


@dataclass(frozen=True)
class Rules:
    """Points where the port spec allowed two readings; docs/engine.md ("Choices where the
    port spec is silent or loose") decides each, and the defaults are its choices (what the
    comparison asserts). The alternatives are the spec's literal reading, kept so a change of
    mind is one line and the model shows what it would change:
    - in_flight_multicast: "new-tables" (frames arriving at or after t_d use the new
      tables) or "old-tree" (frames past their source keep the tree they left on);
    - duplicates: "tracked" (discarded at tracked destinations only) or
      "every-destination";
    - unrouted_multicast: "fragments" (a multicast with no route left drops its
      remaining fragments, from the smallest position, once each) or "stream-copies"
      (each waiting stream drops its own unsent copies).
    """
    in_flight_multicast: str = "old-tree"
    duplicates: str = "every-destination"
    unrouted_multicast: str = "stream-copies"

    def __post_init__(self):
        for name, allowed in (("in_flight_multicast", ("new-tables", "old-tree")),
                              ("duplicates", ("tracked", "every-destination")),
                              ("unrouted_multicast", ("fragments", "stream-copies"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"Rules.{name}={getattr(self, name)!r}: expected one of {allowed}")


# ----------------------------------------------------------------------------- model objects

@dataclass
class Frame:
    msg: int
    frag: int
    len: int
    to: int = -1            # -1: the message's route; else unicast towards this board (a resend)
    tree: tuple | None = None   # the multicast tree it left its source on (Rules "old-tree")
    came: int = -1          # the physical link it last arrived over (pause accounting)
    cred: int = 0           # credit its start on the link it is on spent


@dataclass
class Transmission:
    """One frame on one link: start, end, arrival (or drop) time and fate."""
    link: int
    msg: int
    frag: int
    len: int
    start: int
    end: int
    retx: bool = False
    time: int = -1          # arrival at the far node, or when it was cut
    fate: str = "flying"    # ok | loss | corrupt | link_down
    cred: int = 0           # credit the transmission spent (given back if it is cut)


@dataclass(eq=False)          # identity: two streams may carry the same fragments
class Stream:
    msg: int
    frags: list[int]
    ready: int
    to: int = -1            # as Frame.to
    seq: int = 0            # hand-over order (re-homing hands over again)
    pos: int = 0
    prio: bool = False      # in its port's prio FIFO

    @property
    def done(self) -> bool:
        return self.pos >= len(self.frags)


class Port:
    """Egress port u->v: local queue of streams, transit FIFO, one transmitter, arbiter."""

    def __init__(self, lid: int, u: int, v: int, rate: int, prop: int, mtu: int | None,
                 cap_frames: int, cap_bytes: int, loss: LossModel, datapath: bool = False):
        self.id, self.u, self.v = lid, u, v
        self.rate, self.prop, self.mtu = rate, prop, mtu
        self.cap_frames, self.cap_bytes = cap_frames, cap_bytes
        self.loss = loss
        self.datapath = datapath
        self.up = True
        self.local: list[Stream] = []    # data streams, served by (ready, seq)
        self.prio: list[Stream] = []     # the priority class, FIFO, served first
        self.transit: deque[Frame] = deque()
        self.transit_bytes = 0
        self.free_at = 0
        self.granted_last = "transit"
        self.tx_index = 0
        self.flying: dict[int, tuple[Transmission, simpy.Event]] = {}   # record index -> (rec, arrival)
        self.checks: set[int] = set()     # times with a grant check pending
        self.c = dict(offered=0, transmitted=0, delivered=0, busy=0, **{k: 0 for k in LINK_CAUSES})
        self.xoff = self.xon = self.pause_delay = None   # pause: set by RefNet when Scenario.pause
        self.held = self.held_max = 0    # bytes v holds for this link (frames that came over it)
        self.pause_sent = False          # v's last word to u was PAUSE
        self.paused = False
        self.paused_since = 0
        self.paused_ps = 0
        self.credit = None               # credit: bytes it may still send into v (None: no credit)
        self.credit_delay = 0

    def in_order(self) -> list[Stream]:
        """The streams waiting, in the order the port serves them."""
        return self.prio + sorted((s for s in self.local if not s.done), key=lambda x: (x.ready, x.seq))

    def unqueue(self, st: Stream) -> None:
        (self.prio if st.prio else self.local).remove(st)

    def eligible_stream(self, t: int) -> Stream | None:
        if self.prio:
            return self.prio[0]       # handed over when ready: eligible
        best = None
        for s in self.local:
            if s.ready <= t and not s.done and (best is None or (s.ready, s.seq) < (best.ready, best.seq)):
                best = s
        return best


class Message:
    def __init__(self, mid: int, send: Send):
        self.id = mid
        self.src = send.src
        self.dsts = tuple(send.dsts)
        self.nfrags = send.nfrags
        self.frame_len, self.last_len = send.frame_len, send.last_len
        self.tree = send.tree
        self.track = send.track
        self.streams: list[tuple[Port, Stream]] = []
        self.got = {d: set() for d in self.dsts}

    def frame_len_of(self, frag: int) -> int:
        return self.last_len if frag == self.nfrags - 1 else self.frame_len


class _At(simpy.events.Event):
    """A SimPy event at an absolute time with an explicit priority (see the module docstring)."""

    def __init__(self, env: simpy.Environment, time: int, priority: int, fn, args):
        self.env = env
        self.callbacks = [lambda _ev: fn(*args)]
        self._value = None
        self._ok = True
        env.schedule(self, priority, time - env.now)


# ----------------------------------------------------------------------------- the network

class RefNet:
    def __init__(self, sc: Scenario, rules: Rules = Rules()):
        self.rules = rules
        if sc.arbiter not in ARBITERS:
            raise ValueError(f"arbiter {sc.arbiter!r}: expected one of {ARBITERS}")
        self.sc = sc
        self.env = simpy.Environment()
        self.nodes = len(sc.kinds)
        self.next_hop = [list(r) for r in sc.next_hop]
        self.trees = [(self._norm_tree(t), tuple(sorted(m))) for t, m in sc.trees]
        self.ports: list[Port] = []
        self.out: dict[tuple[int, int], Port] = {}
        for i, l in enumerate(sc.links):
            p = Port(i, l.u, l.v, l.rate, l.prop, l.mtu, l.queue_frames, l.queue_bytes, l.loss)
            self.ports.append(p)
            self.out[(l.u, l.v)] = p
        self.dp: dict[int, Port] = {}
        for n in range(self.nodes):
            if sc.dp_rate[n]:
                p = Port(len(self.ports), n, n, sc.dp_rate[n], sc.latency[n], None, 0, 0,
                         LossModel(), datapath=True)
                self.ports.append(p)
                self.dp[n] = p
        self.M = 2 * len(self.ports) + 2
        if sc.pause:
            self._pause_thresholds()
        if sc.credit:
            # docs/engine.md: u->v starts with v's buffer for it as credit; v's returns take a
            # minimum frame's wire time on v->u plus v->u's propagation.
            for p in self.ports[:len(sc.links)]:
                back = self.out.get((p.v, p.u), p)  # a one-way link: the cable's other direction
                p.credit = p.cap_bytes or 65536
                p.credit_delay = ser_ps(MIN_FRAME, back.rate) + back.prop
        self.records: list[Transmission] = []
        self.deliveries: dict[tuple[int, int, int], list[int]] = {}
        self.done: dict[tuple[int, int], int] = {}
        self.node_drops = [{k: 0 for k in NODE_CAUSES} for _ in range(self.nodes)]
        self.drops: list[tuple[int, str, str, int, int, int]] = []   # (time, place kind, cause, place, msg, frag)
        self.offered = 0       # packetizer copies
        self.replicated = 0
        self.delivered = 0
        self.node_c = [dict(offered=0, replicated=0, delivered=0) for _ in range(self.nodes)]
        self.messages: list[Message] = []
        self.seq = 0
        self.prio_seen = dict(placed=0, over_cap=0)   # prio hand-overs: into the class, past the cap
        for ch in sc.changes:
            self._at(ch.t, REROUTE if ch.kind == "reroute" else LINK, 0, self._change, ch)
        for s in sc.sends:
            if s.live:
                self._at(s.at, APP, 0, self._hand_over, s)
            else:
                self._hand_over(s)
        for r in sc.resends:
            if r.live:
                self._at(r.at, APP, 0, self._hand_over_resend, r)
            else:
                self._hand_over_resend(r)

    def _pause_thresholds(self) -> None:
        """docs/engine.md, "Port buffers and flow control": for link u->v, with frame = mtu + 14,
        delay = the PAUSE frame's wire time on v->u + v->u's propagation; window = u->v's latency
        to v's forwarding + delay + (with a datapath at v: one frame per ingress port at its
        rate + its latency) + one frame's time on u->v; headroom = (window x rate / 8 + 2 frames)
        x v's out-degree; XOFF = buffer - headroom; XON = XOFF - 2 frames."""
        links = self.sc.links
        for p in self.ports[:len(links)]:
            back = self.out[(p.v, p.u)]
            frame = p.mtu + ETH_HEADER
            delay = ser_ps(MIN_FRAME, back.rate) + back.prop
            dp = self.sc.dp_rate[p.v]
            window = p.prop + (0 if dp else self.sc.latency[p.v]) + delay + ser_ps(frame, p.rate)
            if dp:
                window += sum(1 for l in links if l.v == p.v) * ser_ps(frame, dp) + self.sc.latency[p.v]
            copies = max(1, sum(1 for l in links if l.u == p.v))
            headroom = (-(-window * p.rate // (8 * PS)) + 2 * frame) * copies
            p.xoff = (p.cap_bytes or 65536) - headroom
            p.xon = p.xoff - 2 * frame
            p.pause_delay = delay

    def _hold(self, f: Frame, nbytes: int, t: int) -> None:
        """The node f is at holds nbytes more (or fewer) for the link f came over: PAUSE at XOFF,
        the resume below XON after one, each reaching that link's port pause_delay later."""
        if f.came >= 0 and self.sc.credit:
            p = self.ports[f.came]
            p.held += nbytes
            p.held_max = max(p.held_max, p.held)
            if nbytes < 0:
                self._give_back(f.came, -nbytes, t)   # a copy left v's buffer: its credit goes home
            return
        if f.came < 0 or not self.sc.pause:
            return
        p = self.ports[f.came]
        p.held += nbytes
        p.held_max = max(p.held_max, p.held)
        if not p.pause_sent and p.held >= p.xoff:
            p.pause_sent = True
            self._at(t + p.pause_delay, PAUSE, 2 * p.id, self._paused, p, True)
        elif p.pause_sent and p.held < p.xon:
            p.pause_sent = False
            self._at(t + p.pause_delay, PAUSE, 2 * p.id + 1, self._paused, p, False)

    def _give_back(self, link: int, n: int, t: int) -> None:
        """Credit: n bytes (negative: taken back) decided at t, on their way to port `link`."""
        if link < 0 or not self.sc.credit or n == 0:
            return
        p = self.ports[link]
        self._at(t + p.credit_delay, PAUSE, 2 * p.id, self._credit_home, p, n)

    def _credit_home(self, p: Port, n: int) -> None:
        p.credit += n
        if p.paused:
            self._want_grant(p, self.env.now)

    def _starve(self, p: Port, on: bool, t: int) -> None:
        """Credit: p's head frame waits for credit (on) or does not any more: counted as paused."""
        if p.credit is None:
            return
        if on and not p.paused:
            p.paused, p.paused_since = True, t
        elif not on and p.paused:
            p.paused = False
            p.paused_ps += t - p.paused_since

    def _cost(self, p: Port, f: Frame) -> int:
        """Credit frame f spends on p: its length per egress port its route gives it at v."""
        m = self.messages[f.msg]
        tree = f.tree if self.rules.in_flight_multicast == "old-tree" else None
        return f.len * len(self._egress(m, p.v, f.to, tree))

    def _paused(self, p: Port, on: bool) -> None:
        t = self.env.now
        if on and not p.paused:
            p.paused, p.paused_since = True, t
        elif not on and p.paused:
            p.paused = False
            p.paused_ps += t - p.paused_since
            self._want_grant(p, t)

    # -- scheduling
    def _at(self, t: int, phase: int, key: int, fn, *args) -> None:
        _At(self.env, t, phase * self.M + key, fn, args)

    def _want_grant(self, p: Port, t: int) -> None:
        if t in p.checks:
            return
        p.checks.add(t)
        self._at(t, GRANT, p.id, self._grant, p)

    @staticmethod
    def _norm_tree(tree: dict) -> dict[int, tuple[int, ...]]:
        return {int(k): tuple(sorted(int(c) for c in v)) for k, v in tree.items() if len(v)}

    # -- routes
    def _members(self, m: Message, to: int, tree: tuple | None = None) -> tuple[int, ...]:
        if to >= 0:
            return (to,)
        if m.tree is None:
            return (m.dsts[0],)
        return (tree or self.trees[m.tree])[1]

    def _egress(self, m: Message, node: int, to: int = -1, tree: tuple | None = None) -> list[Port]:
        if m.tree is not None and to < 0:
            kids = (tree or self.trees[m.tree])[0].get(node, ())
        else:
            d = to if to >= 0 else m.dsts[0]
            nh = self.next_hop[node][d] if node != d else -1
            kids = (nh,) if nh >= 0 else ()
        return sorted((self.out[(node, c)] for c in kids), key=lambda p: p.id)

    # -- drops
    def _drop_node(self, node: int, cause: str, f: Frame, t: int) -> None:
        self.node_drops[node][cause] += 1
        self.drops.append((t, "node", cause, node, f.msg, f.frag))

    def _drop_link(self, p: Port, cause: str, f: Frame, t: int) -> None:
        p.c[cause] += 1
        self.drops.append((t, "link", cause, p.id, f.msg, f.frag))

    # -- the packetizer
    def _hand_over(self, s: Send) -> None:
        m = Message(len(self.messages), s)
        self.messages.append(m)
        ports = self._egress(m, m.src)
        frags = list(range(m.nfrags))
        if not ports:
            self._at(s.at, APP, 0, self._drop_at_source, m, frags)
        for p in ports:
            self._add_stream(m, p, frags, s.at, prio=s.prio)

    def _hand_over_resend(self, r: Resend) -> None:
        m = self.messages[r.msg]
        ports = self._egress(m, m.src, r.dst)
        if not ports:
            self._at(r.at, APP, 0, self._drop_at_source, m, list(r.frags))
        for p in ports:
            self._add_stream(m, p, list(r.frags), r.at, r.dst, prio=r.prio)

    def _add_stream(self, m: Message, p: Port, frags: list[int], ready: int, to: int = -1,
                    prio: bool = False) -> None:
        self.seq += 1
        st = Stream(m.id, list(frags), ready, to, self.seq)
        if prio and sum(len(x.frags) - x.pos for x in p.prio) < PRIO_CAP:
            st.prio = True
            p.prio.append(st)
            self.prio_seen["placed"] += 1
        else:
            self.prio_seen["over_cap"] += prio
            p.local.append(st)
        m.streams.append((p, st))
        self._want_grant(p, max(ready, self.env.now))

    def _drop_at_source(self, m: Message, frags: list[int]) -> None:
        t = self.env.now
        for k in frags:
            self.offered += 1
            self.node_c[m.src]["offered"] += 1
            self._drop_node(m.src, "no_route", Frame(m.id, k, m.frame_len_of(k)), t)

    # -- the port
    def _grant(self, p: Port) -> None:
        t = self.env.now
        p.checks.discard(t)
        if not p.up or p.free_at > t or (p.paused and p.credit is None):
            return
        while True:
            st = p.eligible_stream(t)
            have_t, have_l = bool(p.transit), st is not None
            if not have_t and not have_l:
                self._starve(p, False, t)
                return
            if have_t and have_l:
                pol = self.sc.arbiter
                if pol == "rr":
                    pick = "local" if p.granted_last == "transit" else "transit"
                else:
                    pick = "transit" if pol == "transit-first" else "local"
            else:
                pick = "transit" if have_t else "local"
            cost = 0
            if p.credit is not None:
                if pick == "transit":
                    head = p.transit[0]
                else:
                    m = self.messages[st.msg]
                    k = st.frags[st.pos]
                    head = Frame(m.id, k, m.frame_len_of(k), st.to,
                                 self.trees[m.tree] if m.tree is not None and st.to < 0 else None)
                    if p.mtu is not None and head.len - ETH_HEADER > p.mtu:
                        head = None       # dropped at the source: it spends nothing
                cost = self._cost(p, head) if head is not None else 0
                if cost and cost > p.credit:
                    self._starve(p, True, t)          # the port waits; the arbiter's turn stays
                    return
                self._starve(p, False, t)
                p.credit -= cost
            p.granted_last = pick
            if pick == "transit":
                f = p.transit.popleft()
                p.transit_bytes -= f.len
                if not p.datapath:
                    self._hold(f, -f.len, t)
            else:
                m = self.messages[st.msg]
                k = st.frags[st.pos]
                st.pos += 1
                if st.done:
                    p.unqueue(st)
                f = Frame(m.id, k, m.frame_len_of(k), st.to,
                          self.trees[m.tree] if m.tree is not None and st.to < 0 else None)
                self.offered += 1
                self.node_c[p.u]["offered"] += 1
                if p.mtu is not None and f.len - ETH_HEADER > p.mtu:
                    self._drop_node(p.u, "mtu", f, t)
                    continue
                p.c["offered"] += 1
            if p.credit is not None:
                f.cred = cost
            self._transmit(p, f, t)
            return

    def _transmit(self, p: Port, f: Frame, t: int) -> None:
        idx = p.tx_index
        p.tx_index += 1
        fate = "ok"
        if idx in p.loss.drops or p.loss.p == 1.0:
            fate = "loss"
        elif p.loss.corrupt == 1.0:
            fate = "corrupt"
        end = t + ser_ps(f.len, p.rate)
        rec = Transmission(p.id, f.msg, f.frag, f.len, t, end, retx=f.to >= 0, cred=f.cred)
        self.records.append(rec)
        p.c["transmitted"] += 1
        p.free_at = end
        if p.datapath:
            arrive = end + p.prop                     # prop = the node's forwarding latency
        elif p.v in self.dp:
            arrive = end + p.prop                     # into v's datapath FIFO
        else:
            arrive = end + p.prop + self.sc.latency[p.v]
        ev_key = len(self.records) - 1
        ev = _At(self.env, arrive, ARRIVE * self.M + p.id, self._arrive, (p, f, rec, fate, ev_key))
        p.flying[ev_key] = (rec, ev)
        self._want_grant(p, end)

    def _arrive(self, p: Port, f: Frame, rec: Transmission, fate: str, key: int) -> None:
        if rec.fate != "flying":          # cut by a link going down
            return
        t = self.env.now
        del p.flying[key]
        rec.time = t
        rec.fate = fate
        p.c["busy"] += rec.end - rec.start
        if fate != "ok":
            self._drop_link(p, fate, f, t)
            if not p.datapath:
                self._give_back(p.id, f.cred, t)   # lost on u->v: v returns what it cost
            return
        p.c["delivered"] += 1
        if not p.datapath:
            f.came = p.id
        if not p.datapath and p.v in self.dp:
            dp = self.dp[p.v]
            dp.c["offered"] += 1
            dp.transit.append(f)
            dp.transit_bytes += f.len
            self._want_grant(dp, t)
            return
        self._forward(p.v, f, t)

    def _forward(self, v: int, f: Frame, t: int) -> None:
        m = self.messages[f.msg]
        tree = f.tree if self.rules.in_flight_multicast == "old-tree" else None
        here = v in self._members(m, f.to, tree)
        egress = self._egress(m, v, f.to, tree)
        if self.sc.credit:
            self._give_back(f.came, f.cred - f.len * len(egress), t)  # copies not as paid for
        if not here and not egress:
            self._drop_node(v, "no_route", f, t)
            return
        self.replicated += int(here) + len(egress) - 1
        self.node_c[v]["replicated"] += int(here) + len(egress) - 1
        if here:
            got = m.got.setdefault(v, set())
            if (m.track or self.rules.duplicates == "every-destination") and f.frag in got:
                self._drop_node(v, "duplicate", f, t)
            else:
                got.add(f.frag)
                self.delivered += 1
                self.node_c[v]["delivered"] += 1
                self.deliveries.setdefault((m.id, v, f.frag), []).append(t)
                if len(got) == m.nfrags and (m.id, v) not in self.done:
                    self.done[(m.id, v)] = t
        for q in egress:
            self._offer_transit(q, Frame(f.msg, f.frag, f.len, f.to, f.tree, f.came), t)

    def _offer_transit(self, q: Port, f: Frame, t: int) -> None:
        q.c["offered"] += 1
        if not q.up:
            self._drop_link(q, "link_down", f, t)
            self._give_back(f.came, f.len, t)
            return
        if q.mtu is not None and f.len - ETH_HEADER > q.mtu:
            self._drop_link(q, "mtu", f, t)
            self._give_back(f.came, f.len, t)
            return
        if not self.sc.lossless and not self.sc.pause and not self.sc.credit:
            cap_f, cap_b = q.cap_frames, q.cap_bytes
            if (cap_f and len(q.transit) + 1 > cap_f) or (cap_b and q.transit_bytes + f.len > cap_b):
                self._drop_link(q, "queue_full", f, t)
                return
        q.transit.append(f)
        q.transit_bytes += f.len
        self._hold(f, f.len, t)
        self._want_grant(q, t)

    # -- changes
    def _change(self, ch: Change) -> None:
        t = self.env.now
        k = ch.kind
        if k == "down":
            self._link_down(self.ports[ch.link], t)
        elif k == "up":
            self._link_up(self.ports[ch.link], t)
        elif k in ("node_down", "node_up"):
            for p in self.ports[:len(self.sc.links)]:
                if ch.node in (p.u, p.v):
                    (self._link_down if k == "node_down" else self._link_up)(p, t)
        elif k == "rate":
            self.ports[ch.link].rate = int(ch.value)
        elif k == "loss":
            self.ports[ch.link].loss = ch.value
        elif k == "reroute":
            nh, trees = ch.value
            self._reroute([list(r) for r in nh], trees, t)
        else:
            raise ValueError(f"unknown change {k!r}")

    def _link_down(self, p: Port, t: int) -> None:
        if not p.up:
            return
        p.up = False
        self._starve(p, False, t)
        self._give_back(p.id, sum(rec.cred for rec, _ev in p.flying.values()), t)
        for key in sorted(p.flying):
            rec, _ev = p.flying[key]
            rec.fate, rec.time = "link_down", t
            p.c["busy"] += min(rec.end, t) - rec.start
            self._drop_link(p, "link_down", Frame(rec.msg, rec.frag, rec.len), t)
        p.flying.clear()
        while p.transit:
            f = p.transit.popleft()
            self._hold(f, -f.len, t)
            self._drop_link(p, "link_down", f, t)
        p.transit_bytes = 0
        p.free_at = t

    def _link_up(self, p: Port, t: int) -> None:
        if p.up:
            return
        p.up = True
        self._want_grant(p, t)

    def _reroute(self, nh: list[list[int]], trees: dict, t: int) -> None:
        old_trees = list(self.trees)
        self.next_hop = nh
        for i, (tree, members) in trees.items():
            self.trees[i] = (self._norm_tree(tree), tuple(sorted(members)))
        waiting = [(p, s) for p in self.ports for s in p.in_order()]   # each queue in service order
        restarted = set()
        for p, s in waiting:
            m = self.messages[s.msg]
            if s.to < 0 and m.tree is not None:
                if self.trees[m.tree] == old_trees[m.tree] or m.id in restarted:
                    continue
                # A replaced tree: from the smallest waiting position, on every new first hop.
                restarted.add(m.id)
                own = [(q, x) for q, x in m.streams if x.to < 0 and not x.done]
                start = min(x.frags[x.pos] for _, x in own)
                ready = max(min(x.ready for _, x in own), t)
                for q, x in own:
                    q.unqueue(x)
                gone = {id(x) for _, x in own}
                m.streams = [(q, x) for q, x in m.streams if id(x) not in gone]
                frags = list(range(start, m.nfrags))
                ports = self._egress(m, m.src)
                if not ports and self.rules.unrouted_multicast == "stream-copies":
                    for _, x in own:
                        self._drop_at_source(m, x.frags[x.pos:])
                elif not ports:
                    self._drop_at_source(m, frags)
                for q in ports:
                    self._add_stream(m, q, frags, ready)
                continue
            ports = self._egress(m, m.src, s.to)
            if ports and ports[0] is p:
                continue                        # unicast, first hop unchanged: stays
            p.unqueue(s)
            m.streams = [(q, x) for q, x in m.streams if x is not s]
            if not ports:
                self._drop_at_source(m, s.frags[s.pos:])
            else:
                self._add_stream(m, ports[0], s.frags[s.pos:], max(s.ready, t), s.to, prio=s.prio)
        for p in self.ports:
            if p.credit is not None and p.paused:
                self._want_grant(p, t)    # what a head frame costs follows the new routes

    # -- run and results
    def run(self) -> "RefNet":
        self.env.run()
        return self

    def link_counters(self) -> list[dict]:
        return [dict(link=p.id, u=p.u, v=p.v, **p.c) for p in self.ports]

    def node_counters(self) -> list[dict]:
        return [dict(node=n, **self.node_c[n], **self.node_drops[n]) for n in range(self.nodes)]

    def totals(self) -> dict:
        dropped = {}
        for p in self.ports:
            for k in LINK_CAUSES:
                dropped[k] = dropped.get(k, 0) + p.c[k]
        for nd in self.node_drops:
            for k, v in nd.items():
                dropped[k] = dropped.get(k, 0) + v
        return dict(offered=self.offered, replicated=self.replicated,
                    delivered=self.delivered, dropped=dropped)

    def conserved(self) -> bool:
        tot = self.totals()
        return tot["offered"] + tot["replicated"] == tot["delivered"] + sum(tot["dropped"].values())


def simulate(sc: Scenario, rules: Rules = Rules()) -> RefNet:
    """Run a scenario to completion and return the model (records, deliveries, counters)."""
    return RefNet(sc, rules).run()
