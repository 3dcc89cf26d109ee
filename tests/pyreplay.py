"""The Python reference replay path: the replay of emu.replay.run, event by event in Python.

``PythonReplay`` runs the trace's DAG over the Python reference NICs (tests/pycluster.py),
the frame kernel's Python face (emu.net.Network) and emu.sim's event heap: compute ops one
at a time per node, communication ops as messages through the NICs, the replica directory
following the frames. The compiled loop (emu.engine.loop) is its compiled twin, and the
exactness tests (test_replay_compiled.py, test_capture_compiled.py,
test_replay_functional.py) hold the two identical, every result and every capture byte.

Importing this module registers it as ``Replay.reference``, so ``engine="python"`` (the API,
``Options`` and the CLI's hidden ``--engine``) makes one in the test suite (conftest.py
imports it); the product has no Python path.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from emu.codec import Collective as WireCollective
from emu.codec import Dtype, Op, ReduceOp, Stage
from emu.progress import REPLAY_STEP_OPS
from emu.replay.run import Replay
from emu.workload.enums import KV_OPS, Kind, MsgOp, Residency
from emu.workload.enums import Stage as TStage
from pycluster import Cluster
from pydag import Wiring

PRODUCES_KV = {int(Kind.qkv), int(Kind.decode_qkv)}


class PythonReplay(Replay):
    """The replay of ``emu.replay.run.Replay``, run by Python over the reference NICs."""

    def __init__(self, trace, options):
        super().__init__(trace, options)
        self.wiring = Wiring(trace, free_signals=self.hw["signals"] == "free")
        if self.functional is not None:  # it reads the directory as the run changes it
            self.functional.directory = self.cluster.directory
        if self.timeline is not None:
            self.timeline.on_reroute.append(self.cluster.reroute)

    def _engine(self, engine: str) -> str:
        return "python"

    def _nics(self, config):
        return Cluster(self.net, self.routes, config)

    def _run(self) -> "Replay":
        t0 = time.perf_counter()
        self.done_ops = 0
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
        if not self.wiring.is_comm[op]:
            self._signal(op, self._ops["node"][op])
        self._release(self.wiring.on_done.pop(op, ()))
        if self._bar is not None and self.done_ops % REPLAY_STEP_OPS == 0:
            self._progress()

    def _signal(self, op: int, src: int) -> None:
        """``op``'s event at ``src``: a signal to each board whose parts wait for it there."""
        o = self._ops
        for node, parts in self.wiring.on_signal.get(op, ()):
            self.cluster.signal(src, node, kv_id=max(o["kv_id"][op], 0), layer=max(o["layer"][op], 0),
                                on_delivered=lambda tr, at, t, parts=parts: self._release(parts))

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
        self._signal(op, node)
        self._release(self.wiring.on_at.pop((op, node), ()))
        done = self.delivered_at.setdefault(-op - 1, {})
        done[node] = now
        if len(done) == len(self.wiring.dsts[op]):
            self.end[op] = now
            self._op_done(op)

    # ---- outcome ------------------------------------------------------------------------

    def deliveries(self) -> np.ndarray:
        """(op, node, time) of every delivery of a communication op, sorted."""
        rows = sorted((-key - 1, node, t) for key, at in self.delivered_at.items() if key < 0 for node, t in at.items())
        return np.array(rows, np.int64).reshape(-1, 3)


Replay.reference = PythonReplay
