"""A plain per-frame model of the port semantics in docs/engine.md, written for clarity, not speed.

It is a reference the engine is checked against: it steps through the distinct
instants at which anything happens and, at each instant t, does in this order
what docs/engine.md says: re-routes at t; frame arrivals at t in ascending link
id; link changes at t (down, up, rate, loss); then every free transmitter with
an eligible frame grants one, in ascending link id. Queues are Python lists,
one object per frame. It shares no code with emu.net; only the rules are the same:

- a port (link direction u->v) has a local queue of packetizer streams (ordered by
  ready time, ties in hand-over order; frames generated when granted), a transit
  FIFO and one transmitter; the arbiter is rr (the queue not granted last, starting
  with local), transit-first or local-first;
- serialization ceil((max(len, 60) + 24) * 8e12 / rate) ps at the rate in force at
  the start; arrival end + propagation + the receiving node's forwarding latency,
  or end + propagation into the node's datapath FIFO when it has a finite rate;
- loss and corruption drawn at transmission start from splitmix64 streams seeded
  from (seed, link);
- link down drops what is on the wire and in transit, keeps the local queue; link
  up resumes at once; re-routing moves unsent fragments to the new first hops;
- pause (``pause={link: (xoff, xon, delay)}``, docs/engine.md "Port buffers and flow
  control"): the far node of a link counts the bytes of the frame copies that arrived over
  it and wait in its ports' transit queues (from joining one until granted or dropped
  there; not while in its datapath's FIFO); on
  reaching XOFF it sends a PAUSE, on falling below XON after one the resume, each taking
  effect at the link's port ``delay`` later, after the arrivals and before the grants of
  that instant (a PAUSE before a resume due at the same instant); a paused port grants
  nothing, the frame on its wire finishes;
- credit (``credit=True``, docs/engine.md "Port buffers and flow control"): port u->v starts
  with v's buffer (the byte capacity, 64 KiB when none) as credit; a frame starts only if the port
  holds what it costs, its length times the egress ports v's route gives it (0 where v only
  delivers it; 0 for a frame dropped at the source for its MTU), else the port grants nothing
  and its round robin turn stays; v gives the length back for each copy granted on (or dropped
  at) an egress port, the whole cost for a frame lost on u->v or cut by u->v going down, and
  the cost minus length x copies when it decides on a frame (a route changed, or no_route);
  each return reaches u a minimum frame's time on v->u plus v->u's propagation later, in the
  PAUSE's place at that instant; a port's waiting time counts as paused;
- the priority class (``prio=True``, docs/engine.md "The egress port"): a stream handed
  over with prio joins the local queue behind the prio streams at its front and before
  every data stream (also one that has frames on the wire already), if the frames those
  prio streams have still to send number fewer than PRIO_CAP; otherwise it is an ordinary
  data stream. Prio hand-overs here are the application's, at an instant t (``live``):
  after the grants of t, followed by another round of grants at t.
"""

from __future__ import annotations

import heapq

M64 = 0xFFFFFFFFFFFFFFFF
OVER = 24
MIN_FRAME = 60
PRIO_CAP = 64  # frames the prio streams at the front of a local queue may hold still


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Stream64:
    def __init__(self, seed):
        self.x = seed

    def uniform(self):
        self.x = (self.x + 0x9E3779B97F4A7C15) & M64
        z = self.x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        return (z >> 11) / 9007199254740992.0


class Frame:
    def __init__(self, msg, frag, length, route, hops=0, local=False):
        self.msg, self.frag, self.length, self.route = msg, frag, length, route
        self.hops, self.local = hops, local
        self.inlink = None  # the link it last arrived over
        self.cost = 0       # credit it spent on the link it is on
        self.fate = None
        self.start = self.end = self.arrival = None
        self.last_of = None  # the stream this frame closes


class Stream:
    def __init__(self, msg, route, frags, ready, seq):
        self.msg, self.route, self.frags, self.ready, self.seq = msg, route, list(frags), ready, seq
        self.pos = 0
        self.prio = False  # in the port's priority class

    def left(self):
        return len(self.frags) - self.pos


class Port:
    def __init__(self, idx, u, v, rate, lat, capf, capb, seed, datapath=False):
        self.idx, self.u, self.v, self.rate, self.lat = idx, u, v, rate, lat
        self.capf, self.capb = capf, capb
        self.datapath = datapath
        self.up = True
        self.local: list[Stream] = []
        self.transit: list[Frame] = []
        self.wire: list[Frame] = []       # granted, not yet arrived
        self.tx_end = 0
        self.last_local = False           # rr: start as if transit was granted last
        self.loss = None                  # (p,) or (p, r, lg, lb)
        self.bad = False
        self.corrupt = 0.0
        self.drops = set()
        self.ntx = 0
        self.rng = [Stream64(mix((seed * 1_000_003 + idx) * 2 + j)) for j in range(2)]
        self.pause = None       # (xoff, xon, delay) of this link's far node, or None
        self.held = 0           # bytes its far node holds for it
        self.held_max = 0
        self.xoff_sent = False
        self.paused = False
        self.paused_since = None
        self.paused_ps = 0
        self.credit = None      # credit: bytes it may still send into its far node, or None
        self.credit_delay = 0


class RefNet:
    def __init__(self, links, nodes, boards, next_hop, nic_ps, capacity, *, lossless=True, seed=0,
                 nic_rate=0, arbiter="rr", pause=None, credit=False):
        """links: (u, v, rate_bps, latency_ps) sorted by (u, v); capacity: (frames, bytes) per transit queue.

        ``nic_ps`` and ``nic_rate`` are numbers or per-node dicts (forwarding latency, datapath rate)."""
        lat_of = nic_ps if isinstance(nic_ps, dict) else {v: nic_ps for v in range(nodes)}
        rate_of = nic_rate if isinstance(nic_rate, dict) else {v: nic_rate for v in range(nodes)}
        self.ports = []
        for i, (u, v, r, lat) in enumerate(links):
            extra = 0 if rate_of.get(v, 0) else lat_of.get(v, 0)
            self.ports.append(Port(i, u, v, r, lat + extra, capacity[0], capacity[1], seed))
        self.dp = {}
        for v in sorted(x for x in range(nodes) if rate_of.get(x, 0)):
            p = Port(len(self.ports), v, v, rate_of[v], lat_of.get(v, 0), 0, 0, seed, datapath=True)
            self.ports.append(p)
            self.dp[v] = p
        self.nlinks = len(links)
        self.by_uv = {(p.u, p.v): p for p in self.ports[: self.nlinks]}
        self.nodes, self.boards = nodes, boards
        self.next_hop = [list(map(int, row)) for row in next_hop]
        self.trees = {}
        self.lossless, self.arbiter = lossless or bool(pause) or credit, arbiter
        for i, th in (pause or {}).items():
            self.ports[i].pause = th
        self.credit = credit
        if credit:
            for p in self.ports[: self.nlinks]:
                back = self.by_uv.get((p.v, p.u), p)  # a one-way link: the cable's other direction
                p.credit = capacity[1] or 65536
                p.credit_delay = -(-(MIN_FRAME + OVER) * 8 * 10**12 // back.rate) + links[back.idx][3]
        self.credits = {}          # t -> [(link, bytes)]: credit returns reaching their port
        self.signals = {}          # t -> [(link, 0 PAUSE / 1 resume)]: flow-control frames taking effect
        self.times = []
        self.changes = {}          # t -> [(kind, args)], applied after the arrivals at t
        self.reroutes = {}         # t -> [(next_hop, {old route: (new route, tree, members)})]
        self.live = {}             # t -> [hand-over]: the application's, after the grants at t
        self.prio_seen = {"placed": 0, "over_cap": 0, "overtook": 0}  # how prio hand-overs went
        self.seq = 0
        self.msgs = {}             # mid -> (src, nfrags, flen, llen, dsts, tracked)
        self.log = []              # (link, msg, frag, start, end, arrival, fate, hops)
        self.delivered = {}        # (msg, node) -> time complete
        self.got = {}
        self.sent = []             # (msg, link, time) when a stream's last frame has left
        self.offered = 0
        self.replicated = 0
        self.delivered_frames = 0
        self.drops = {}            # (cause, "link"|"node", id) -> frames

    # ---- set-up ---------------------------------------------------------------------

    def out(self, route, node):
        """(delivers here, egress ports in ascending link id) for ``route`` at ``node``."""
        if route in self.trees:
            tree, members = self.trees[route]
            return node in members, [self.by_uv[(node, c)] for c in sorted(tree.get(node, ()))]
        if node == route:
            return True, []
        h = self.next_hop[node][route]
        return False, ([self.by_uv[(node, h)]] if h >= 0 else [])

    def _at(self, t):
        heapq.heappush(self.times, t)

    def _drop(self, cause, place, ident, n=1):
        key = (cause, place, ident)
        self.drops[key] = self.drops.get(key, 0) + n

    def _queue_stream(self, port, stream):
        # ordered by ready time, ties in hand-over order
        k = len(port.local)
        while k > 0 and (port.local[k - 1].ready, port.local[k - 1].seq) > (stream.ready, stream.seq):
            k -= 1
        port.local.insert(k, stream)
        self._at(stream.ready)

    def _queue_prio(self, port, stream):
        """Behind the prio streams at the front while they hold fewer than PRIO_CAP frames still
        to send, before everything else; past the cap, in the queue as data."""
        k = 0
        while k < len(port.local) and port.local[k].prio:
            k += 1
        if sum(x.left() for x in port.local[:k]) >= PRIO_CAP:
            self.prio_seen["over_cap"] += 1
            self._queue_stream(port, stream)
            return
        self.prio_seen["placed"] += 1
        if k < len(port.local) and port.local[k].pos > 0:
            self.prio_seen["overtook"] += 1  # a data stream with frames sent already
        stream.prio = True
        port.local.insert(k, stream)
        self._at(stream.ready)

    def send(self, mid, src, dsts, route, nfrags, flen, llen, at, track=False, prio=False):
        self.msgs[mid] = (src, nfrags, flen, llen, set(dsts), track)
        outs = self.out(route, src)[1]
        if not outs and any(d != src for d in dsts):
            self.offered += nfrags
            self._drop("no_route", "node", src, nfrags)
        for port in outs:
            self.seq += 1
            (self._queue_prio if prio else self._queue_stream)(port, Stream(mid, route, range(nfrags), at, self.seq))

    def resend(self, mid, dst, frags, at, prio=False):
        """Fragments ``frags`` of message ``mid`` again, unicast towards board ``dst``."""
        src = self.msgs[mid][0]
        frags = sorted(set(frags))
        outs = self.out(dst, src)[1]
        if not outs:
            self.offered += len(frags)
            self._drop("no_route", "node", src, len(frags))
        for port in outs:
            self.seq += 1
            (self._queue_prio if prio else self._queue_stream)(port, Stream(mid, dst, frags, at, self.seq))

    def live_send(self, t, *args, **kw):
        """``send(..., at=t)`` made by the application at t (after the grants of t)."""
        self.live.setdefault(t, []).append(lambda: self.send(*args, at=t, **kw))
        self._at(t)

    def live_resend(self, t, *args, **kw):
        self.live.setdefault(t, []).append(lambda: self.resend(*args, at=t, **kw))
        self._at(t)

    def change(self, t, kind, *args):
        """kind: down(link), up(link), rate(link, bps), loss(link, (p,) | (p, r, lg, lb) | None, corrupt, drops)."""
        self.changes.setdefault(t, []).append((kind, args))
        self._at(t)

    def reroute(self, t, next_hop, trees=None):
        self.reroutes.setdefault(t, []).append(([list(map(int, r)) for r in next_hop], trees or {}))
        self._at(t)

    # ---- the rules ----------------------------------------------------------------------

    def ser(self, port, length):
        return -(-(max(length, MIN_FRAME) + OVER) * 8 * 10**12 // port.rate)

    def draw(self, port):
        n = port.ntx
        port.ntx += 1
        if n in port.drops:
            return "loss"
        if port.loss is not None:
            if len(port.loss) == 1:
                if port.rng[0].uniform() < port.loss[0]:
                    return "loss"
            else:
                p, r, lg, lb = port.loss
                if not port.bad:
                    if port.rng[0].uniform() < p:
                        port.bad = True
                elif port.rng[0].uniform() < r:
                    port.bad = False
                if port.rng[0].uniform() < (lb if port.bad else lg):
                    return "loss"
        if port.corrupt > 0 and port.rng[1].uniform() < port.corrupt:
            return "corrupt"
        return None

    def offer(self, port, frame, t):
        if not port.up:
            self._drop("link_down", "link", port.idx)
            if not port.datapath:
                self.give_back(frame.inlink, frame.length, t)
            return
        if not self.lossless:
            waiting = sum(f.length for f in port.transit)
            if (port.capf and len(port.transit) + 1 > port.capf) or (port.capb and waiting + frame.length > port.capb):
                self._drop("queue_full", "link", port.idx)
                return
        port.transit.append(frame)
        if not port.datapath:  # the datapath's FIFO is not the port buffer
            self.hold(frame, frame.length, t)

    def hold(self, frame, n, t):
        """The far node of the link ``frame`` arrived over holds ``n`` more bytes (or fewer)."""
        if frame.inlink is not None and self.credit:
            p = self.ports[frame.inlink]
            p.held += n
            p.held_max = max(p.held_max, p.held)
            if n < 0:
                self.give_back(frame.inlink, -n, t)
            return
        if frame.inlink is None or self.ports[frame.inlink].pause is None:
            return
        p = self.ports[frame.inlink]
        xoff, xon, delay = p.pause
        p.held += n
        p.held_max = max(p.held_max, p.held)
        if not p.xoff_sent and p.held >= xoff:
            p.xoff_sent = True
            self.signals.setdefault(t + delay, []).append((p.idx, 0))
            self._at(t + delay)
        elif p.xoff_sent and p.held < xon:
            p.xoff_sent = False
            self.signals.setdefault(t + delay, []).append((p.idx, 1))
            self._at(t + delay)

    def give_back(self, link, n, t):
        """Credit: ``n`` bytes (< 0: taken back) on their way back to port ``link``."""
        if link is None or not self.credit or n == 0:
            return
        p = self.ports[link]
        self.credits.setdefault(t + p.credit_delay, []).append((link, n))
        self._at(t + p.credit_delay)

    def cost(self, port, frame_len, route):
        """Credit a frame costs on ``port``: its length per egress copy its far node makes."""
        return frame_len * len(self.out(route, port.v)[1])

    def starve(self, port, on, t):
        """Credit: the port's head frame waits for credit from ``t`` (on) or no longer; counted as paused."""
        if port.credit is None:
            return
        if on and not port.paused:
            port.paused, port.paused_since = True, t
        elif not on and port.paused:
            port.paused = False
            port.paused_ps += t - port.paused_since

    def signal(self, link, resume, t):
        p = self.ports[link]
        if not resume and not p.paused:
            p.paused, p.paused_since = True, t
        elif resume and p.paused:
            p.paused = False
            p.paused_ps += t - p.paused_since

    def arrive(self, port, frame, t):
        if not port.datapath:
            self.log.append((port.idx, frame.msg, frame.frag, frame.start, frame.end, t,
                             {None: 0, "loss": 1, "corrupt": 2}[frame.fate], frame.hops))
        if frame.fate:
            self._drop(frame.fate, "link", port.idx)
            if not port.datapath:
                self.give_back(port.idx, frame.cost, t)
            return
        if not port.datapath:
            frame.hops += 1
            frame.inlink = port.idx
            if port.v in self.dp:
                self.offer(self.dp[port.v], frame, t)
                return
        node = port.v
        member, outs = self.out(frame.route, node)
        src, nfrags, _f, _l, dsts, tracked = self.msgs[frame.msg]
        member = member and node in dsts
        self.give_back(frame.inlink, frame.cost - frame.length * len(outs), t)
        if not member and not outs:
            self._drop("no_route", "node", node)
            return
        self.replicated += int(member) + len(outs) - 1
        if member:
            got = self.got.setdefault((frame.msg, node), set())
            if frame.frag in got:  # every destination keeps a received bitmap
                self._drop("duplicate", "node", node)
            else:
                got.add(frame.frag)
                self.delivered_frames += 1
                if len(got) == nfrags and (frame.msg, node) not in self.delivered:
                    self.delivered[(frame.msg, node)] = t
        for o in outs:
            copy = Frame(frame.msg, frame.frag, frame.length, frame.route, frame.hops)
            copy.inlink = frame.inlink
            self.offer(o, copy, t)

    def grant(self, port, t):
        """One frame from the arbiter, if the transmitter is free and a queue has one."""
        if not port.up or port.tx_end > t or (port.paused and port.credit is None):
            return
        has_t = bool(port.transit)
        has_l = bool(port.local) and port.local[0].ready <= t
        if not has_t and not has_l:
            self.starve(port, False, t)
            return
        if has_t and has_l:
            local = {"rr": not port.last_local, "transit-first": False, "local-first": True}[self.arbiter]
        else:
            local = has_l
        cost = 0
        if port.credit is not None:
            if local:
                s = port.local[0]
                src, nfrags, flen, llen, _d, _t = self.msgs[s.msg]
                frag = s.frags[s.pos]
                cost = self.cost(port, llen if frag == nfrags - 1 else flen, s.route)
            else:
                cost = self.cost(port, port.transit[0].length, port.transit[0].route)
            if cost and cost > port.credit:
                self.starve(port, True, t)  # the whole port waits; the arbiter's turn does not move
                return
            self.starve(port, False, t)
            port.credit -= cost
        port.last_local = local
        if local:
            s = port.local[0]
            src, nfrags, flen, llen, _d, _t = self.msgs[s.msg]
            frag = s.frags[s.pos]
            s.pos += 1
            frame = Frame(s.msg, frag, llen if frag == nfrags - 1 else flen, s.route, 0, True)
            self.offered += 1
            if s.pos == len(s.frags):
                port.local.pop(0)
                frame.last_of = s
        else:
            frame = port.transit.pop(0)
            if not port.datapath:
                self.hold(frame, -frame.length, t)
        if not port.datapath:
            frame.cost = cost
        frame.start = t
        frame.end = t + self.ser(port, frame.length)
        frame.arrival = frame.end + port.lat
        frame.fate = self.draw(port)
        port.tx_end = frame.end
        port.wire.append(frame)
        self._at(frame.end)
        self._at(frame.arrival)

    def apply(self, t, kind, args):
        port = self.ports[args[0]]
        if kind == "down":
            for f in port.wire:
                if not port.datapath:  # a transmission cut by the failure: recorded, dropped at t
                    self.log.append((port.idx, f.msg, f.frag, f.start, f.end, t, 3, f.hops))
                if f.last_of is not None and f.end > t:
                    self.sent.append((f.msg, port.idx, t))  # cut off: the stream is over
                    f.last_of = None
            self._drop("link_down", "link", port.idx, len(port.wire) + len(port.transit))
            if not port.datapath:
                self.give_back(port.idx, sum(f.cost for f in port.wire), t)
                self.starve(port, False, t)
            for f in port.transit:
                self.hold(f, -f.length, t)
            port.wire, port.transit = [], []
            port.up = False
            port.tx_end = min(port.tx_end, t)
        elif kind == "up":
            port.up = True
        elif kind == "rate":
            port.rate = args[1]
        elif kind == "loss":
            _link, loss, corrupt, drops = args
            port.loss, port.corrupt, port.drops, port.bad = loss, corrupt, set(drops), False

    def rehome(self, t, next_hop, trees):
        self.next_hop = next_hop
        for old, (new, tree, members) in trees.items():
            self.trees[new] = (tree, set(members))
        waiting = [(p, s) for p in self.ports[: self.nlinks] for s in p.local]
        done = set()
        for port, s in waiting:
            src = self.msgs[s.msg][0]
            if s.route in trees:
                if s.msg in done:
                    continue
                done.add(s.msg)
                mine = [(p, x) for p, x in waiting if x.msg == s.msg and x.route == s.route]
                pos = min(x.frags[x.pos] for _p, x in mine)
                ready = max([t] + [x.ready for _p, x in mine])
                new = trees[s.route][0]
                outs = self.out(new, src)[1]
                for p, x in mine:
                    p.local.remove(x)
                    if not outs:
                        self.offered += len(x.frags) - x.pos
                        self._drop("no_route", "node", src, len(x.frags) - x.pos)
                        self.sent.append((x.msg, p.idx, t))
                nfrags = self.msgs[s.msg][1]
                for o in outs:
                    self.seq += 1
                    self._queue_stream(o, Stream(s.msg, new, range(pos, nfrags), ready, self.seq))
            elif s.route < self.boards:
                outs = self.out(s.route, src)[1]
                if outs == [port]:
                    continue
                port.local.remove(s)
                if not outs:
                    self.offered += len(s.frags) - s.pos
                    self._drop("no_route", "node", src, len(s.frags) - s.pos)
                    self.sent.append((s.msg, port.idx, t))
                    continue
                self.seq += 1
                moved = Stream(s.msg, s.route, s.frags[s.pos :], max(t, s.ready), self.seq)
                # a prio stream asks for the class again at its new port
                (self._queue_prio if s.prio else self._queue_stream)(outs[0], moved)

    def run(self):
        last = None
        while self.times:
            t = heapq.heappop(self.times)
            if t == last:
                continue
            last = t
            for nh, trees in self.reroutes.pop(t, []):
                self.rehome(t, nh, trees)
            for port in self.ports:
                # transmissions over at t: the stream a frame closes is sent
                for f in port.wire:
                    if f.end == t and f.last_of is not None:
                        self.sent.append((f.msg, port.idx, t))
                        f.last_of = None
            for port in self.ports:
                while port.wire and port.wire[0].arrival == t:
                    self.arrive(port, port.wire.pop(0), t)
            for link, resume in sorted(self.signals.pop(t, [])):
                self.signal(link, resume, t)
            for link, n in self.credits.pop(t, []):
                self.ports[link].credit += n
            for kind, args in self.changes.pop(t, []):
                self.apply(t, kind, args)
            for port in self.ports:
                self.grant(port, t)
                # a stream not yet ready, or a port that came up, is looked at again later
                if port.local and port.local[0].ready > t:
                    self._at(port.local[0].ready)
            app = self.live.pop(t, [])
            for handover in app:
                handover()
            if app:  # what the application handed over at t: a further round of grants
                for port in self.ports:
                    self.grant(port, t)
        return self

    def dropped(self):
        return sum(self.drops.values())
