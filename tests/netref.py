"""A plain per-frame store-and-forward network, written for clarity, not speed.

It is the independent reference the engine is checked against: explicit
transmission-start/end events, Python lists as queues, one object per frame.
It shares no code with emu.net; only the rules are the same:

- a link serializes one frame at a time, FIFO, at ceil(wire_bytes*8e12/rate) ps,
  where wire bytes add preamble, FCS and inter-frame gap to the frame; the frame
  reaches the far node's parser latency_ps + nic_ps later;
- at equal times: transmission ends first, then arrivals, then packetizers, each
  in ascending link id;
- a packetizer pushes its frames while the egress queue (frames waiting, not the
  one on the wire) has room; once full it waits until the queue has drained (its
  last waiting frame starts); transit frames are dropped when the queue has no
  room unless the network is lossless;
- loss and corruption are drawn per link at transmission start from splitmix64
  streams seeded from (seed, link).
"""

from __future__ import annotations

import heapq
from collections import deque

M64 = 0xFFFFFFFFFFFFFFFF
OVER = 24
MIN_FRAME = 60


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
    def __init__(self, msg, frag, length, route):
        self.msg, self.frag, self.length, self.route = msg, frag, length, route
        self.fate = None


class RefLink:
    def __init__(self, idx, u, v, rate, lat, capf, capb, seed):
        self.idx, self.u, self.v, self.rate, self.lat = idx, u, v, rate, lat
        self.capf, self.capb = capf, capb
        self.queue = deque()
        self.busy = False
        self.streams = deque()
        self.blocked = False
        self.loss = None  # (p,) or (p, r, lg, lb)
        self.bad = False
        self.rng = [Stream64(mix((seed * 1_000_003 + idx) * 2 + j)) for j in range(2)]
        self.corrupt = 0.0
        self.drops = set()
        self.ntx = 0

    def qbytes(self):
        return sum(f.length for f in self.queue)


class RefNet:
    def __init__(self, links, nodes, next_hop, nic_ps, capacity, lossless=True, seed=0, nic_rate=0):
        """links: list of (u, v, rate_bps, latency_ps) sorted by (u, v); capacity: (frames, bytes).

        With ``nic_rate`` every node parses arriving frames one at a time at that rate: a
        FIFO server behind its ports (modelled here as one more link per node, v -> v).
        """
        lat_in = 0 if nic_rate else nic_ps
        self.links = [RefLink(i, u, v, r, lat + lat_in, capacity[0], capacity[1], seed)
                      for i, (u, v, r, lat) in enumerate(links)]
        self.nic = {}
        if nic_rate:
            for k, v in enumerate(range(nodes)):
                link = RefLink(len(self.links), v, v, nic_rate, nic_ps, 0, 0, seed)
                self.links.append(link)
                self.nic[v] = link
        self.by_uv = {(l.u, l.v): l for l in self.links}
        self.nodes = nodes
        self.next_hop = next_hop
        self.trees = {}
        self.lossless = lossless
        self.heap = []
        self.log = []          # (link, msg, frag, start, end, arrival, fate)
        self.delivered = {}    # (msg, node) -> time complete
        self.got = {}
        self.msgs = {}
        self.drops = {}

    def out(self, route, node):
        if route in self.trees:
            tree, members = self.trees[route]
            return node in members, [self.by_uv[(node, c)] for c in sorted(tree.get(node, ()))]
        if node == route:
            return True, []
        h = self.next_hop[node][route]
        return False, ([self.by_uv[(node, h)]] if h >= 0 else [])

    def send(self, mid, src, dsts, route, nfrags, flen, llen, at):
        self.msgs[mid] = (nfrags, flen, llen, set(dsts))
        for link in self.out(route, src)[1]:
            link.streams.append([mid, route, 0, nfrags, at])
            heapq.heappush(self.heap, (at, 2, link.idx, 0, None))

    def ser(self, link, length):
        return -(-(max(length, MIN_FRAME) + OVER) * 8 * 10**12 // link.rate)

    def draw(self, link):
        n = link.ntx
        link.ntx += 1
        if n in link.drops:
            return "loss"
        if link.loss is not None:
            if len(link.loss) == 1:
                if link.rng[0].uniform() < link.loss[0]:
                    return "loss"
            else:
                p, r, lg, lb = link.loss
                if not link.bad:
                    if link.rng[0].uniform() < p:
                        link.bad = True
                elif link.rng[0].uniform() < r:
                    link.bad = False
                if link.rng[0].uniform() < (lb if link.bad else lg):
                    return "loss"
        if link.corrupt > 0 and link.rng[1].uniform() < link.corrupt:
            return "corrupt"
        return None

    def start_tx(self, link, frame, t):
        link.busy = True
        frame.fate = self.draw(link)
        end = t + self.ser(link, frame.length)
        heapq.heappush(self.heap, (end, 0, link.idx, 0, (frame, t)))

    def enqueue(self, link, frame, t, transit):
        if transit and not self.lossless:
            if (link.capf and len(link.queue) + 1 > link.capf) or (link.capb and link.qbytes() + frame.length > link.capb):
                self.drops[("queue", link.idx)] = self.drops.get(("queue", link.idx), 0) + 1
                return
        if not link.busy:
            self.start_tx(link, frame, t)
        else:
            link.queue.append(frame)

    def run(self):
        while self.heap:
            t, kind, li, _, data = heapq.heappop(self.heap)
            link = self.links[li]
            if kind == 0:  # transmission end
                frame, start = data
                heapq.heappush(self.heap, (t + link.lat, 1, li, 0, (frame, start, t)))
                link.busy = False
                if link.queue:
                    self.start_tx(link, link.queue.popleft(), t)
                    if not link.queue and link.streams:
                        # Drained: a blocked packetizer refills the queue now.
                        heapq.heappush(self.heap, (t, 2, li, 0, None))
            elif kind == 1:  # arrival at the far node
                frame, start, end = data
                if link.u != link.v:
                    self.log.append((li, frame.msg, frame.frag, start, end, t, frame.fate))
                if frame.fate:
                    continue
                if link.u != link.v and link.v in self.nic:
                    self.enqueue(self.nic[link.v], frame, t, True)
                    continue
                local, outs = self.out(frame.route, link.v)
                if local and link.v in self.msgs[frame.msg][3]:
                    key = (frame.msg, link.v)
                    self.got.setdefault(key, set()).add(frame.frag)
                    if len(self.got[key]) == self.msgs[frame.msg][0] and key not in self.delivered:
                        self.delivered[key] = t
                for o in outs:
                    self.enqueue(o, Frame(frame.msg, frame.frag, frame.length, frame.route), t, True)
            else:  # packetizer
                while link.streams:
                    s = link.streams[0]
                    mid, route, pos, end, ready = s
                    if ready > t:
                        heapq.heappush(self.heap, (ready, 2, li, 0, None))
                        break
                    nfrags, flen, llen, _ = self.msgs[mid]
                    length = llen if pos == nfrags - 1 else flen
                    if link.queue and (link.blocked or (link.capf and len(link.queue) + 1 > link.capf)
                                       or (link.capb and link.qbytes() + length > link.capb)):
                        link.blocked = True
                        break  # woken again when the queue has drained
                    link.blocked = False
                    self.enqueue(link, Frame(mid, pos, length, route), t, False)
                    s[2] += 1
                    if s[2] == end:
                        link.streams.popleft()
        return self
