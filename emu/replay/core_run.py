"""Run a replay on the compiled loop and read its tables back into what results.py reads.

``run(rp)`` builds the tables (emu.replay.core_tables), runs ``core.drive`` to the end,
answering its rare calls back (the transmission log to flush into the link
statistics, the progress bar), and then fills in the replay's
results: op start/end times, KV bytes, the simulated end, and read-only views of the
directory and the NICs with the attributes the Python path's objects have.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pandas as pd

from ..codec import Op
from ..net import kernel as K
from ..nic.cluster import CONTROL_OPS
from ..nic.directory import NodeMemory, State
from . import core_layout as L
from .core import drive
from .core_tables import Tables

PROGRESS_OPS = 2000


class DirectoryView:
    """The directory's end state and history, as emu.nic.directory.Directory presents them."""

    def __init__(self, tables: Tables):
        RS, NT, st = tables.RS, tables.NT, tables.state
        self.nodes = int(RS[L.R_NODES])
        self.memory = [NodeMemory(int(o), int(r), int(t)) for o, r, t in
                       NT[:, [L.N_OWNER, L.N_REPLICA, L.N_TRANSIENT]].tolist()]
        self._hist = st.table("HIST")[: RS[L.R_NHIST]].copy()
        self.errors = [_error_text(*row) for row in st.table("ERR")[: RS[L.R_NERR]].tolist()]
        self.blocks, self.live_replicas = int(RS[L.R_NOWNERS]), int(RS[L.R_LIVE_REP])
        KB, lo = tables.KB, int(RS[L.R_KVMIN])
        owned = np.flatnonzero(KB[:, L.K_OWNER] >= 0)
        # kv_id -> (node, bytes), in block order
        self.owners = {int(b) + lo: (int(KB[b, L.K_OWNER]), int(KB[b, L.K_BYTES])) for b in owned}

    def owner_only(self) -> bool:
        return all(m.replica == 0 and m.transient == 0 for m in self.memory)

    def replica_factor(self) -> float:
        return (self.blocks + self.live_replicas) / self.blocks if self.blocks else 1.0

    def history(self) -> pd.DataFrame:
        cols = ["t_ps", "node", "owner_bytes", "replica_bytes", "transient_bytes", "blocks", "replicas"]
        df = pd.DataFrame(self._hist, columns=cols).astype({c: np.int64 for c in cols})
        df["replica_factor"] = np.where(df.blocks > 0, (df.blocks + df.replicas) / df.blocks.clip(lower=1), 1.0)
        return df


def _error_text(t, code, node, kv, state) -> str:
    if code == L.ERR_READ:
        return f"t={t}ps: node {node} read block {kv} in state {State(state).name}"
    if code == L.ERR_DRAIN:
        return f"t={t}ps: drain of block {kv} at node {node}, which holds no valid replica"
    return f"t={t}ps: invalidate of block {kv} at node {node}, which holds no replica"


class ClusterView:
    """What the NICs counted, as emu.nic.cluster.Cluster presents it (a lossless run: no resends)."""

    retransmitted_frames = 0

    def __init__(self, tables: Tables, nics):
        RS, TR = tables.RS, tables.TR
        self.config, self.routes = nics.config, nics.routes
        self.board_tree = nics.board_tree  # the reduction trees the run used
        self.directory = DirectoryView(tables)
        self.control_frames_by_op = dict.fromkeys(CONTROL_OPS, 0)
        self.control_frames_by_op["drain"] = int(RS[L.R_CTRL_DRAIN])
        self.control_frames_by_op["invalidate"] = int(RS[L.R_CTRL_INV])
        self._tr = TR[: RS[L.R_NTR]]

    @property
    def control_frames(self) -> int:
        return sum(self.control_frames_by_op.values())

    def incomplete(self) -> list[str]:
        tr = self._tr
        out = []
        for i in np.flatnonzero(tr[:, L.T_DLV] != tr[:, L.T_DMASK]).tolist():
            want, got = int(tr[i, L.T_DMASK]) & (2**64 - 1), int(tr[i, L.T_DLV]) & (2**64 - 1)
            missing = [d for d in range(64) if (want >> d) & 1 and not (got >> d) & 1]
            why = "still waiting for the packetizer" if tr[i, L.T_ACCEPTED] < 0 else "frames lost"
            out.append(f"send {i} (op {Op(int(tr[i, L.T_MSGOP])).name}, kv {int(tr[i, L.T_KV])}) from node "
                       f"{int(tr[i, L.T_SRC])} never reached {missing}: {why}")
        return out


def run(rp) -> None:
    """Run ``rp`` (an emu.replay.run.Replay) on the compiled loop and fill in its results."""
    # Python's cycle collector off while the loop runs: the first run compiles it, and numba's
    # compiler makes millions of objects, so the collector kept re-scanning them (a seventh
    # of the compile time, more for the kernel's large inlined loop). The loop itself makes
    # no Python objects; what the run leaves is freed by reference counting as before.
    collecting = gc.isenabled()
    gc.disable()
    try:
        _run(rp)
    finally:
        if collecting:
            gc.enable()


def _run(rp) -> None:
    tables = Tables(rp)
    st, RS, net = tables.state, tables.RS, rp.net
    if rp.opt.progress:
        RS[L.R_PROGRESS] = RS[L.R_PROG_NEXT] = PROGRESS_OPS
    while True:
        status = drive(st, tables.start_parts)
        if status == L.D_DONE:
            break
        if status == L.D_PROGRESS:
            rp.done_ops = int(RS[L.R_DONE_OPS])
            rp.sim.now = int(RS[L.R_NOW])
            rp._progress()
        elif status == K.ST_NEED_LOG:
            net.flush_log()  # the log table is the network's own; the loop never replaces it
        else:
            raise RuntimeError(f"compiled replay: unexpected status {status}")
    # The kernel's buffers the loop grew, back into the network (its counters read them).
    for name in ("FP", "FREE", "UP", "HP", "LB"):
        setattr(net, name, st.table(name))
    net.flush_log()
    OP, OW = tables.OP, tables.OW
    rp.start = OW[:, L.OW_START].copy()
    rp.end = OW[:, L.OW_END].copy()
    rp.kv_bytes = int(RS[L.R_KV_BYTES])
    rp.done_ops = int(RS[L.R_DONE_OPS])
    rp.sim.now = int(RS[L.R_NOW])
    rp.cluster = ClusterView(tables, rp.cluster)
    SLOT = tables.SLOT
    got = np.flatnonzero(SLOT[:, L.S_TIME] >= 0)
    slot_op = np.repeat(np.arange(rp.trace.n_ops), OP[:, L.O_DSTEND] - OP[:, L.O_DST])
    rp._deliveries = np.stack([slot_op[got], SLOT[got, L.S_NODE], SLOT[got, L.S_TIME]], axis=1)
    if rp.opt.progress:
        print(file=sys.stderr)
