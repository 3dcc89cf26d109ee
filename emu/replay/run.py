"""Replay a trace on the emulated cluster: compute engines, NICs, links; measure what it costs.

Compute ops run one at a time per node for max(flops / compute_flops,
mem_bytes / mem_bw) + op_overhead (the hardware profile, after ``--set``
overrides). Communication ops become real messages through the NICs: frames
on links, multicast trees, in-network reductions. The replica directory
changes only as frames arrive, so KV memory and replica counts are measured,
not copied from the trace.
"""

from __future__ import annotations

import heapq
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..codec import Collective as WireCollective
from ..codec import Dtype, Op, ReduceOp, Stage
from ..errors import ConfigError
from ..net import Loss, Network
from ..net.linkstats import LinkStats
from ..net.timeline import Timeline, parse as parse_scenario
from ..nic import Cluster, NicConfig
from ..sim import MS, US, Simulator
from ..topology import LinkDefaults, Routes, build
from ..units import apply_overrides
from ..workload.enums import Kind, MsgOp, Residency
from ..workload.profiles import DEFAULTS
from ..workload.enums import Stage as TStage
from .dag import Wiring

HW_DEFAULTS = DEFAULTS["hw"]
KV_OPS = {int(MsgOp.kv_replica), int(MsgOp.kv_fetch_resp), int(MsgOp.kv_transfer)}
PRODUCES_KV = {int(Kind.qkv), int(Kind.decode_qkv)}


@dataclass
class Options:
    topology: str = "auto"
    overrides: tuple = ()
    scenario: tuple = ()            # timeline clauses (failures, degrades, loss changes)
    loss: float = 0.0               # Bernoulli loss on every link from the start
    seed: int = 0
    reliable: bool | None = None    # None: on when frames can be lost (loss or failures)
    detect_ps: int = 100 * US       # failure detection delay before re-routing
    bin_ps: int | None = None       # link time-series bin; default from the trace's size
    progress: bool = False


class Replay:
    def __init__(self, trace, options: Options = Options()):
        self.trace, self.opt = trace, options
        meta = trace.meta
        prof = apply_overrides({"model": dict(meta["model"]), "hw": dict(meta["hw"])}, options.overrides)
        # A trace made before a hardware field existed gets that field's default.
        self.model, self.hw = prof["model"], {**HW_DEFAULTS, **prof["hw"]}
        hw = self.hw
        self.nodes = int(meta["nodes"])
        link = LinkDefaults(rate_bps=int(hw["link_rate"]), latency_ps=int(hw["link_latency_ps"]), mtu=int(hw["mtu"]))
        self.G = build(options.topology, self.nodes, link, ports=int(hw["ports"]))
        if self.G.graph["boards"] != self.nodes:
            raise ConfigError(f"topology {options.topology!r} has {self.G.graph['boards']} boards, the trace {self.nodes}")
        self.routes = Routes(self.G)
        self.sim = Simulator()
        # Boards forward through the compute-NIC datapath, switches through their own
        # (latency and rate from the hardware profile; docs/engine.md).
        board = [n for n, k in self.G.nodes(data="kind", default="board") if k != "switch"]
        latency = {n: int(hw["switch_latency_ps"]) for n in self.G.nodes}
        rate = {n: int(hw["switch_rate"]) for n in self.G.nodes}
        for n in board:
            latency[n], rate[n] = int(hw["nic_latency_ps"]), int(hw.get("nic_rate", 0))
        self.net = Network(self.sim, self.G, self.routes.next_hop, boards=self.nodes,
                           nic_latency_ps=latency, nic_rate_bps=rate, arbiter=hw["port_arbiter"],
                           seed=options.seed)
        reliable = options.reliable if options.reliable is not None else bool(options.loss or options.scenario)
        self.cluster = Cluster(self.net, self.routes, NicConfig(mtu=int(hw["mtu"]), reliable=reliable,
                                                                fifo_bytes=max(int(hw["comm_buffer"]), 1 << 20)))
        if options.loss:
            for l in range(len(self.net.links)):
                self.net.set_loss(l, Loss(p=options.loss))
        self.timeline = None
        if options.scenario:
            self.timeline = Timeline(parse_scenario(list(options.scenario)), detect_ps=options.detect_ps,
                                     base_loss={l: Loss(p=options.loss) for l in range(len(self.net.links))})
            self.timeline.on_reroute.append(self.cluster.reroute)
            self.timeline.install(self.net, self.routes)
        self.wiring = Wiring(trace)
        self.durations = self._durations()
        est = max(1, int(np.bincount(np.maximum(trace.ops["node"], 0), weights=self.durations,
                                     minlength=self.nodes).max()))
        self.bin_ps = options.bin_ps or max(100 * US, (est // 500) // MS * MS or 100 * US)
        self.linkstats = LinkStats(len(self.net.links), self.bin_ps)
        self.net.log_sinks.append(self.linkstats)

    def _durations(self) -> np.ndarray:
        ops, hw = self.trace.ops, self.hw
        ps = 10**12
        t_flops = ops["flops"].astype(np.float64) * ps / float(hw["compute_flops"])
        t_mem = ops["mem_bytes"].astype(np.float64) * ps / float(hw["mem_bw"])
        dur = np.ceil(np.maximum(t_flops, t_mem)).astype(np.int64) + int(hw["op_overhead_ps"])
        dur[self.wiring.is_comm] = 0
        return dur

    # ---- running ---------------------------------------------------------------------

    def run(self) -> "Replay":
        t0 = time.perf_counter()
        tr, w = self.trace, self.wiring
        n = tr.n_ops
        self.need = w.need.copy()
        self.start = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.delivered_at: dict[int, dict[int, int]] = {}
        self.ready = [[] for _ in range(self.nodes)]
        self.busy = [False] * self.nodes
        self.stalled = [0] * self.nodes
        self.readers = dict(w.readers)
        self.reductions: dict[int, object] = {}
        self.kv_bytes = 0
        self.done_ops = 0
        self._next_progress = 0.0
        self._ops = {k: tr.ops[k].tolist() for k in ("kind", "node", "msg_op", "kv_id", "bytes", "residency",
                                                     "collective", "reduce_op", "dtype", "stage", "layer")}
        for p in np.flatnonzero(self.need == 0).tolist():
            self._ready(p)
        self.net.run()
        self.wall_s = time.perf_counter() - t0
        if self.opt.progress:
            print(file=sys.stderr)
        return self

    def _release(self, parts) -> None:
        need = self.need
        for p in parts:
            need[p] -= 1
            if need[p] == 0:
                self._ready(p)

    def _ready(self, p: int) -> None:
        op = int(self.wiring.part_op[p])
        if self.wiring.is_comm[op]:
            self._start_comm(op, p)
        else:
            node = self._ops["node"][op]
            heapq.heappush(self.ready[node], op)
            self._try_compute(node)

    def _try_compute(self, node: int) -> None:
        if self.busy[node] or self.stalled[node] or not self.ready[node]:
            return
        op = heapq.heappop(self.ready[node])
        self.busy[node] = True
        now = self.sim.now
        self.start[op] = now
        self._check_reads(op, node, now)
        self.sim.at(now + int(self.durations[op]), self._finish_compute, op, node)

    def _check_reads(self, op: int, node: int, now: int) -> None:
        o = self._ops
        for x in self.trace.deps(op).tolist():
            if o["msg_op"][x] == MsgOp.kv_replica and self.wiring.is_comm[x] and node in self.wiring.dsts[x]:
                self.cluster.directory.read(node, o["kv_id"][x], now, new_read=False)

    def _finish_compute(self, op: int, node: int) -> None:
        now = self.sim.now
        self.end[op] = now
        self.busy[node] = False
        o = self._ops
        if o["kind"][op] in PRODUCES_KV and o["kv_id"][op] >= 0 and o["bytes"][op] > 0:
            self.cluster.directory.add_owner(node, o["kv_id"][op], o["bytes"][op], now)
        self._consumed(op, node)
        self._op_done(op)
        self._try_compute(node)

    def _consumed(self, op: int, node: int) -> None:
        """A reader of transient copies at ``node`` is done with them."""
        for x in self.trace.deps(op).tolist():
            key = (x, node)
            if key in self.readers:
                self.readers[key] -= 1
                if self.readers[key] == 0 and self._ops["residency"][x] == Residency.transient:
                    self.cluster.directory.free_transient(node, x, self.sim.now)

    def _op_done(self, op: int) -> None:
        self.done_ops += 1
        self._release(self.wiring.on_done.pop(op, ()))
        if self.opt.progress and self.done_ops % 2000 == 0:
            self._progress()

    def _progress(self) -> None:
        frac = self.done_ops / self.trace.n_ops
        bar = "#" * int(30 * frac)
        print(f"\r  replay [{bar:<30}] {frac:6.1%}  simulated {self.sim.now / 1e12:9.4f} s", end="", file=sys.stderr)

    # ---- communication ------------------------------------------------------------------

    def _start_comm(self, op: int, p: int) -> None:
        o = self._ops
        src = int(self.wiring.part_node[p])
        now = self.sim.now
        if self.start[op] < 0:
            self.start[op] = now
        kind = o["kind"][op]
        dsts = sorted(self.wiring.dsts[op])
        common = dict(stage=Stage.decode if o["stage"][op] == TStage.decode else Stage.prefill,
                      kv_id=max(o["kv_id"][op], 0), layer=max(o["layer"][op], 0), dtype=Dtype(o["dtype"][op]))
        if kind == Kind.reduce:
            red = self.reductions.get(op)
            if red is None:
                red = self.reductions[op] = self.cluster.reduction(
                    self.trace.src(op).tolist(), dsts[0], ReduceOp(o["reduce_op"][op]), nbytes=o["bytes"][op],
                    dtype=common["dtype"], functional=False, stage=common["stage"], layer=common["layer"],
                    on_complete=lambda r, t, op=op, root=dsts[0]: self._delivered(op, root))
            red.contribute(src)
            self._consumed(op, src)
            return
        if kind in (Kind.drain, Kind.invalidate):
            self.cluster.replica_control(src, dsts, o["kv_id"][op], Op.drain if kind == Kind.drain else Op.invalidate,
                                         layer=common["layer"],
                                         on_delivered=lambda tr, node, t, op=op: self._delivered(op, node))
            return
        targets = [d for d in dsts if d != src] if kind == Kind.all_to_all else dsts
        if kind == Kind.all_to_all:
            sends = [[d] for d in targets]  # personalized: one block per member
        else:
            sends = [targets]
        self.stalled[src] += len(sends)
        for group in sends:
            self.cluster.send(src, group, o["bytes"][op], op=Op(o["msg_op"][op]),
                              collective=WireCollective(o["collective"][op]), **common,
                              on_accept=lambda tr, t, src=src: self._accepted(src),
                              on_delivered=lambda tr, node, t, op=op: self._part_delivered(op, node))
        self._consumed(op, src)

    def _accepted(self, src: int) -> None:
        # The packetization buffer took the payload: the compute engine may go on.
        self.stalled[src] -= 1
        self._try_compute(src)

    def _part_delivered(self, op: int, node: int) -> None:
        """One source's payload reached ``node``; the op is delivered there when every source's has."""
        got = self.delivered_at.setdefault(op, {})
        got[node] = got.get(node, 0) + 1
        nsrc = int(self.wiring.part_ptr[op + 1] - self.wiring.part_ptr[op])
        if self._ops["kind"][op] == Kind.all_to_all:
            nsrc -= 1 if node in set(self.trace.src(op).tolist()) else 0
        if got[node] == nsrc:
            self._delivered(op, node)

    def _delivered(self, op: int, node: int) -> None:
        o = self._ops
        now = self.sim.now
        nbytes = o["bytes"][op]
        if o["msg_op"][op] in KV_OPS:
            self.kv_bytes += nbytes
        res = o["residency"][op]
        d = self.cluster.directory
        if res == Residency.transient:
            d.add_transient(node, op, nbytes, now)
            if self.readers.get((op, node), 0) == 0:
                d.free_transient(node, op, now)
        elif res == Residency.owner and o["kv_id"][op] >= 0:
            d.add_owner(node, o["kv_id"][op], nbytes, now)
        self._release(self.wiring.on_at.pop((op, node), ()))
        done = self.delivered_at.setdefault(-op - 1, {})
        done[node] = now
        if len(done) == len(self.wiring.dsts[op]):
            self.end[op] = now
            self._op_done(op)

    # ---- outcome ------------------------------------------------------------------------

    def incomplete(self) -> list[int]:
        return np.flatnonzero(self.end < 0).tolist()
