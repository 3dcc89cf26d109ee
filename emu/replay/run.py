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
from ..progress import REPLAY_STEP_OPS
from ..sim import MS, US, Simulator
from ..topology import LinkDefaults, Routes, build
from ..workload.enums import COMM_KINDS, CONTROL_KINDS, KV_OPS, Kind, MsgOp, Residency
from ..workload.enums import Stage as TStage
from ..workload.profiles import DEFAULTS, apply_overrides
from .dag import Wiring
from .functional import Functional

HW_DEFAULTS = DEFAULTS["hw"]
MAX_BINS = 4096  # link time-series bins at most (then wider bins): memory follows the links, not the run
MAX_OP_PS = 10**18  # one op of at most ~11.6 days: sums of many stay far inside int64 picoseconds
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
    progress: str | None = None     # "bar" or "json" on stderr (emu.progress), None: none
    functional: bool = False        # real payload bytes and reductions (emu.replay.functional)
    engine: str = "auto"            # "compiled" (emu.replay.core), "python", or auto: compiled when it can
    trains: bool = True             # a stream's uninterrupted frames on a link as one event (same results)

ENGINES = ("auto", "compiled", "python")


class Replay:
    def __init__(self, trace, options: Options = Options()):
        self.trace, self.opt = trace, options
        meta = trace.meta
        prof = apply_overrides({"model": dict(meta["model"]), "hw": dict(meta["hw"])}, options.overrides)
        if options.overrides:  # what `emu trace` refuses, replay refuses too
            from ..workload.profiles import check

            where = f"--set {' '.join(options.overrides)}"
            prof = {sec: check(sec, prof[sec], where) for sec in ("model", "hw")}
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
                           seed=options.seed, trains=options.trains)
        reliable = options.reliable if options.reliable is not None else bool(options.loss or options.scenario)
        self.cluster = Cluster(self.net, self.routes, NicConfig(mtu=int(hw["mtu"]), reliable=reliable,
                                                                fifo_bytes=int(hw["comm_buffer"]),
                                                                rto_min_ps=int(hw["rto_min_ps"]),
                                                                rto_initial_ps=int(hw["rto_initial_ps"])))
        if options.loss:
            for l in range(len(self.net.links)):
                self.net.set_loss(l, Loss(p=options.loss))
        self.timeline = None
        if options.scenario:
            self.timeline = Timeline(parse_scenario(list(options.scenario)), detect_ps=options.detect_ps,
                                     base_loss={l: Loss(p=options.loss) for l in range(len(self.net.links))})
            self.timeline.on_reroute.append(self.cluster.reroute)
            self.timeline.install(self.net, self.routes)
        self.functional = (Functional(trace, self.model, options.seed, self.cluster.directory)
                           if options.functional else None)
        if self.functional is not None:
            self.functional.progress = self._checking
        self.engine = self._engine(options.engine)
        self.is_comm = np.isin(trace.ops["kind"], [int(k) for k in COMM_KINDS | CONTROL_KINDS])
        self.wiring = Wiring(trace) if self.engine == "python" else None
        self.durations = self._durations()
        est = max(1, int(np.bincount(np.maximum(trace.ops["node"], 0), weights=self.durations,
                                     minlength=self.nodes).max()))
        # About 500 bins over the compute estimate; a run that lasts far longer (loss and
        # back-off, slow links) widens them past MAX_BINS instead of growing the table. A
        # width the user gives is kept whatever the run's length.
        bin_ps = options.bin_ps or max(100 * US, (est // 500) // MS * MS or 100 * US)
        self.linkstats = LinkStats.of(self.net, bin_ps, 0 if options.bin_ps else MAX_BINS)  # binned in the frame loop

    def _engine(self, engine: str) -> str:
        """The engine this replay runs on: the compiled loop, which runs every replay
        (docs/engine.md), unless the Python reference path is asked for."""
        if engine not in ENGINES:
            raise ConfigError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
        return "python" if engine == "python" else "compiled"

    def _durations(self) -> np.ndarray:
        ops, hw = self.trace.ops, self.hw
        ps = 10**12
        t_flops = ops["flops"].astype(np.float64) * ps / float(hw["compute_flops"])
        t_mem = ops["mem_bytes"].astype(np.float64) * ps / float(hw["mem_bw"])
        worst = float(np.max(np.maximum(t_flops, t_mem), initial=0.0))
        if not worst <= MAX_OP_PS:  # also catches inf/nan; beyond int64 the event clock would wrap
            i = int(np.argmax(np.maximum(t_flops, t_mem)))
            raise ConfigError(f"{self.trace.path or 'trace'}: op {i} would take {worst / 1e12:.3g} s (flops {int(ops['flops'][i])}, mem_bytes "
                              f"{int(ops['mem_bytes'][i])} at hw.compute_flops {hw['compute_flops']}, hw.mem_bw "
                              f"{hw['mem_bw']}); at most {MAX_OP_PS / 1e12:.0f} s")
        dur = np.ceil(np.maximum(t_flops, t_mem)).astype(np.int64) + int(hw["op_overhead_ps"])
        dur[self.is_comm] = 0
        return dur

    # ---- running ---------------------------------------------------------------------

    def run(self) -> "Replay":
        from ..progress import Progress

        self._bar = Progress("replay", self.trace.n_ops, self.opt.progress) if self.opt.progress else None
        try:
            return self._run()
        except BaseException:
            if self._bar is not None:
                self._bar.stop()  # an error message starts on its own line
            raise

    def _run(self) -> "Replay":
        t0 = time.perf_counter()
        self.done_ops = 0
        if self.engine == "compiled":
            from . import core_run

            core_run.run(self)
            self.wall_s = time.perf_counter() - t0
            return self
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
        self.exchanges: dict[int, object] = {}  # all-to-all op -> its engine
        self.kv_bytes = 0
        self.done_ops = 0
        self._ops = {k: tr.ops[k].tolist() for k in ("kind", "node", "msg_op", "kv_id", "bytes", "residency",
                                                     "collective", "reduce_op", "dtype", "stage", "layer", "chunk")}
        self._progress()  # 0 %: the replay is under way
        for p in np.flatnonzero(self.need == 0).tolist():
            self._ready(p)
        self.net.run()
        self.wall_s = time.perf_counter() - t0
        self._progress(end=True)
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
            if key in self.readers and (op, x) not in self.wiring.orders_only:
                self.readers[key] -= 1
                if self.readers[key] == 0 and self._ops["residency"][x] == Residency.transient:
                    self.cluster.directory.free_transient(node, x, self.sim.now)

    def _op_done(self, op: int) -> None:
        self.done_ops += 1
        self._release(self.wiring.on_done.pop(op, ()))
        if self._bar is not None and self.done_ops % REPLAY_STEP_OPS == 0:
            self._progress()

    def _progress(self, end: bool = False) -> None:
        """Ops done, simulated and wall time; ``end``: the last report (100 % when every op completed)."""
        if self._bar is not None:
            self._bar.update(self.done_ops, self.sim.now, end=end)

    def _checking(self, done: int, total: int) -> None:
        """The functional checks that follow a compiled loop (every op has finished): their own count."""
        if self._bar is not None:
            self._bar.update(self.done_ops, self.sim.now, phase="functional checks", step=(done, total))

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
        fn = self.functional
        if kind == Kind.reduce:
            red = self.reductions.get(op)
            if red is None:
                red = self.reductions[op] = self.cluster.reduction(
                    self.trace.src(op).tolist(), dsts[0], ReduceOp(o["reduce_op"][op]), nbytes=o["bytes"][op],
                    dtype=common["dtype"], heads=int(self.model["heads"]), head_dim=int(self.model["head_dim"]),
                    functional=fn is not None, stage=common["stage"], layer=common["layer"],
                    on_complete=lambda r, t, op=op, root=dsts[0]: self._reduced(op, root, r))
            red.contribute(src, fn.contribution(op, src) if fn else None)
            self._consumed(op, src)
            return
        if kind in (Kind.drain, Kind.invalidate):
            self.cluster.replica_control(src, dsts, o["kv_id"][op], Op.drain if kind == Kind.drain else Op.invalidate,
                                         layer=common["layer"],
                                         on_delivered=lambda tr, node, t, op=op: self._delivered(op, node))
            return
        if kind == Kind.all_to_all:
            self._all_to_all(op, common).start(src)  # the NIC's engine sends src's blocks pairwise
            self._consumed(op, src)
            return
        self.stalled[src] += 1
        extra = {}
        if fn:
            # Real bytes: checked where they arrive, dropped once every destination has them.
            extra = dict(data=fn.payload(op, src), on_complete=lambda tr, t: setattr(tr, "data", None))
        self.cluster.send(src, dsts, o["bytes"][op], op=Op(o["msg_op"][op]),
                          collective=WireCollective(o["collective"][op]), **common,
                          on_accept=lambda tr, t, src=src: self._accepted(src),
                          on_delivered=lambda tr, node, t, op=op, src=src:
                              self._part_delivered(op, node, src, -1, tr.data), **extra)
        self._consumed(op, src)

    def _all_to_all(self, op: int, common: dict):
        """The op's exchange on the NIC's all-to-all engine, made when its first source is ready."""
        a2a = self.exchanges.get(op)
        if a2a is None:
            srcs, dsts = self.trace.src(op).tolist(), self.trace.dst(op).tolist()
            pairs = {(a, b): self._ops["bytes"][op] for a in srcs for b in dsts if a != b}
            fn = self.functional
            data = {(a, b): fn.payload(op, a, b) for a, b in pairs} if fn else None
            a2a = self.exchanges[op] = self.cluster.all_to_all(
                set(srcs) | set(dsts), pairs, data=data, op=Op(self._ops["msg_op"][op]), stage=common["stage"],
                autostart=False, layer=common["layer"], dtype=common["dtype"],
                on_delivered=lambda a, b, payload, t, op=op: self._part_delivered(op, b, a, b, payload))
        return a2a

    def _accepted(self, src: int) -> None:
        # The packetization buffer took the payload: the compute engine may go on.
        self.stalled[src] -= 1
        self._try_compute(src)

    def _reduced(self, op: int, root: int, red) -> None:
        if self.functional:
            self.functional.reduced(op, red.result)
        self._delivered(op, root)

    def _part_delivered(self, op: int, node: int, src: int = -1, block: int = -1, data=None) -> None:
        """One source's payload reached ``node``; the op is delivered there when every source's has."""
        if self.functional:
            self.functional.delivered(op, src, block, node, data)
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
        if o["kind"][op] == Kind.all_to_all:  # one block from every other source
            nbytes *= int(self.wiring.part_ptr[op + 1] - self.wiring.part_ptr[op]) - (node in self.trace.src(op))
        if o["msg_op"][op] in KV_OPS:
            self.kv_bytes += nbytes
        res = o["residency"][op]
        d = self.cluster.directory
        if res == Residency.transient:
            d.add_transient(node, op, nbytes, now)
            if self.readers.get((op, node), 0) == 0:
                d.free_transient(node, op, now)
        elif res == Residency.owner and o["kind"][op] == Kind.all_to_all:
            # a head shard: node owns block (chunk, node, layer), its own part included
            kv = (o["chunk"][op] * self.nodes + node) * int(self.model["layers"]) + o["layer"][op]
            d.add_owner(node, kv, o["bytes"][op] * len(self.trace.src(op)), now)
        elif res == Residency.owner and o["kv_id"][op] >= 0:
            blocks = self.trace.blocks(op).tolist()
            if blocks:  # a bulk handoff: each block moves with the size its owner holds
                for kv in blocks:
                    prev = d.owners.get(kv)
                    d.add_owner(node, kv, prev[1] if prev else nbytes // len(blocks), now)
            else:
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

    def deliveries(self) -> np.ndarray:
        """(op, node, time) of every delivery of a communication op, sorted."""
        if self.engine == "compiled":
            return self._deliveries
        rows = sorted((-key - 1, node, t) for key, at in self.delivered_at.items() if key < 0 for node, t in at.items())
        return np.array(rows, np.int64).reshape(-1, 3)
