"""The dependency wiring of a trace, built once before the run.

Every op has one *part* per place it runs: a compute or control op one (its
node), a communication op one per source board. A part starts when its
dependencies are satisfied, by these rules (docs/trace-format.md):

- a dependency on a compute or control op is satisfied when that op finishes;
- a dependency on a communication op X, seen from a part at node n, is
  satisfied when X has been delivered at n if n is one of X's destinations,
  otherwise when X has been delivered everywhere;
- a communication op's part at source s waits only for its dependencies that
  concern s: compute ops on s, or deliveries at s; a compute dependency on a
  node outside the op's sources gates every part.

No release crosses boards for free: where the event happens on one board and the
waiting part runs on another, a signal frame carries it (docs/nic.md, "Signals"):

- a compute op finished at node a releases its waiters at a at once, and each
  other node b with waiters gets one signal from a, which releases them all;
- "delivered everywhere" is known to no single board: each destination d of X,
  when X is delivered at d, signals each node b waiting for X everywhere (b is
  never a destination), and a part there waits for one signal per destination.

The result is flat arrays: the number of unmet dependencies per part (a signal
counts one), and for each event the parts it releases. Events are "done" (a
compute op finished: its parts at its node), "at n" (delivered at node n) and
signals: ``on_signal[x]`` lists (node b, parts at b), ascending b, sent when compute
op x finishes, or from each destination when communication op x is delivered there.

A transient copy delivered at n is held until its *readers* there are done: the
compute ops at n that depend on the delivery, and the KV sends from n that
forward it (same kv_id). Other ops that wait on the delivery only order after it
(a replica multicast that waits until a push has arrived, a control op): they do
not read its data and do not keep it resident.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from emu.workload.enums import COMM_KINDS, CONTROL_KINDS, KV_OPS


class Wiring:
    def __init__(self, trace, free_signals: bool = False):
        """``free_signals``: the idealisation hw.signals=free, every release at once, no signal."""
        ops = trace.ops
        n = trace.n_ops
        kind = ops["kind"]
        node = ops["node"]
        is_comm = np.isin(kind, [int(k) for k in COMM_KINDS | CONTROL_KINDS])
        self.is_comm = is_comm
        # Sources of each op: its node for compute ops, its source set for communication.
        src_ptr, src_idx = trace.src_ptr, trace.src_idx
        dst_ptr, dst_idx = trace.dst_ptr, trace.dst_idx
        nsrc = np.where(is_comm, np.diff(src_ptr), 1)
        self.part_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(nsrc, out=self.part_ptr[1:])
        nparts = int(self.part_ptr[-1])
        self.part_node = np.empty(nparts, np.int64)
        comm_rows = np.flatnonzero(is_comm)
        comp_rows = np.flatnonzero(~is_comm)
        self.part_node[self.part_ptr[comp_rows]] = node[comp_rows]
        for i in comm_rows.tolist():
            self.part_node[self.part_ptr[i]:self.part_ptr[i + 1]] = src_idx[src_ptr[i]:src_ptr[i + 1]]
        self.part_op = np.repeat(np.arange(n), nsrc)
        self.need = np.zeros(nparts, np.int64)
        self.on_done: dict[int, list[int]] = defaultdict(list)
        self.on_at: dict[tuple[int, int], list[int]] = defaultdict(list)
        # Who reads each delivery at each node: transient copies are freed after their last reader.
        self.readers: dict[tuple[int, int], int] = defaultdict(int)
        # (y, x): y waits for x's delivery at its node without reading the copy
        self.orders_only: set[tuple[int, int]] = set()
        waiting: dict[int, dict[int, list[int]]] = defaultdict(dict)  # x -> node -> parts released by a signal

        dsts = [None] * n
        for i in comm_rows.tolist():
            dsts[i] = frozenset(dst_idx[dst_ptr[i]:dst_ptr[i + 1]].tolist())
        dep_ptr, dep_idx = trace.dep_ptr, trace.dep_idx
        part_ptr, part_node = self.part_ptr.tolist(), self.part_node.tolist()
        node_l, comm_l = node.tolist(), is_comm.tolist()
        kv_l = ops["kv_id"].tolist()
        kv_msg = np.isin(ops["msg_op"], KV_OPS).tolist()
        for y in range(n):
            d0, d1 = dep_ptr[y], dep_ptr[y + 1]
            if d0 == d1:
                continue
            parts = range(part_ptr[y], part_ptr[y + 1])
            srcs = {part_node[p] for p in parts}
            for x in dep_idx[d0:d1].tolist():
                for p in parts:
                    at = part_node[p]
                    if comm_l[x]:
                        if at in dsts[x]:
                            self.on_at[(x, at)].append(p)
                            if not comm_l[y] or (kv_msg[y] and kv_l[y] == kv_l[x]):
                                self.readers[(x, at)] += 1
                            else:
                                self.orders_only.add((y, x))
                            self.need[p] += 1
                        elif dsts[x] and not free_signals:
                            waiting[x].setdefault(at, []).append(p)  # one signal from each destination
                            self.need[p] += len(dsts[x])
                        else:
                            self.on_done[x].append(p)  # no destination: never delivered everywhere
                            self.need[p] += 1
                    else:
                        if comm_l[y] and node_l[x] in srcs and node_l[x] != at:
                            continue  # a compute op on another source gates only that source's part
                        if at == node_l[x] or free_signals:
                            self.on_done[x].append(p)
                        else:
                            waiting[x].setdefault(at, []).append(p)  # a signal from x's node
                        self.need[p] += 1
        self.dsts = dsts
        self.on_signal: dict[int, list[tuple[int, list[int]]]] = {x: sorted(w.items()) for x, w in waiting.items()}
