"""Run a replay on the compiled loop and read its tables back into what summary.py reads.

``run(rp)`` builds the tables (emu.engine.tables), runs ``core.drive`` to the end,
answering its rare calls back (a timeline change, applied by the Network's and the
Timeline's own code to the loop's kernel tables; the transmission log to flush into the
link statistics; the progress bar), and then fills in the replay's
results: op start/end times, KV bytes, the simulated end, and read-only views of the
directory and the NICs with the attributes the Python path's objects have.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from ..codec import Op
from ..net import kernel as K
from ..nic.config import CONTROL_OPS
from ..nic.directory import NodeMemory, State, history_frame
from . import boards
from . import layout as L
from ..errors import ConfigError
from ..memory import return_large_frees
from ..net.network import Message, call
from ..net.state import placeholders, set_wiring
from ..topology import multicast_tree
from .loop import drive, schedule
from .tables import Tables
from ..replay.functional_feed import feed
from ..replay.wire_meta import WireMessages
from . import cache
from ..progress import REPLAY_STEP_OPS

if TYPE_CHECKING:  # pandas and the capture's codec load only where a replay uses them
    import pandas as pd


class DirectoryView:
    """The directory's end state and history, as emu.nic.directory.Directory presents them."""

    def __init__(self, tables: Tables):
        RS, NT, st = tables.RS, tables.NT, tables.state
        self.nodes = int(RS[L.RS_NODES])
        self.memory = [NodeMemory(int(o), int(r), int(t)) for o, r, t in
                       NT[:, [L.NT_OWNER, L.NT_REPLICA, L.NT_TRANSIENT]].tolist()]
        self._history = tables.history  # every row the loop handed over (the last at its end)
        err = st.table("ERR")[: RS[L.RS_NERR]].copy()
        err[:, 3] = tables.block_id(err[:, 3])  # t, code, node, kv, state
        self.errors = [_error_text(*row) for row in err.tolist()]
        self.blocks, self.live_replicas = int(RS[L.RS_NOWNERS]), int(RS[L.RS_LIVE_REP])
        KB = tables.KB
        owned = np.flatnonzero(KB[:, L.KB_OWNER] >= 0)
        # kv_id -> (node, bytes), in block order
        self.owners = {int(tables.kv_ids[b]): (int(KB[b, L.KB_OWNER]), int(KB[b, L.KB_BYTES])) for b in owned}

    def owner_only(self) -> bool:
        return all(m.replica == 0 and m.transient == 0 for m in self.memory)

    def replica_factor(self) -> float:
        return (self.blocks + self.live_replicas) / self.blocks if self.blocks else 1.0

    def history(self) -> pd.DataFrame:
        return history_frame(self.history_columns())

    def history_columns(self) -> dict[str, np.ndarray]:
        """emu.engine.layout.HISTORY_COLUMNS, in order: every row the loop handed over, read-only
        (emu.engine.history)."""
        return self._history.columns()

    def history_peaks(self) -> tuple[int, int, int]:
        """emu.nic.directory.history_peaks of the history, folded as the loop handed it over."""
        return self._history.peaks()


def _error_text(t, code, node, kv, state) -> str:
    if code == L.DERR_READ:
        return f"t={t}ps: node {node} read block {kv} in state {State(state).name}"
    if code == L.DERR_DRAIN:
        return f"t={t}ps: drain of block {kv} at node {node}, which holds no valid replica"
    return f"t={t}ps: invalidate of block {kv} at node {node}, which holds no replica"


class ClusterView:
    """What the NICs counted, as the Python reference (tests/pycluster.py) presents it."""

    def __init__(self, tables: Tables, nics):
        RS, TR = tables.RS, tables.TR
        self.config, self.routes = nics.config, nics.routes
        self.board_tree = nics.board_tree  # the reduction trees the run used
        self.multicasts = list(tables.trees)  # (source, destinations) of every multicast tree built
        self.directory = DirectoryView(tables)
        self._block_id = tables.block_id
        self.control_frames_by_op = dict.fromkeys(CONTROL_OPS, 0)
        self.control_frames_by_op["drain"] = int(RS[L.RS_CTRL_DRAIN])
        self.control_frames_by_op["invalidate"] = int(RS[L.RS_CTRL_INV])
        self.control_frames_by_op["ack"] = int(RS[L.RS_CTRL_ACK])
        self.control_frames_by_op["nack"] = int(RS[L.RS_CTRL_NACK])
        self.control_frames_by_op["probe"] = int(RS[L.RS_CTRL_PROBE])
        self.control_frames_by_op["signal"] = int(RS[L.RS_CTRL_SIG])
        self.retransmitted_frames = int(RS[L.RS_RETX])
        self._tr = TR[: RS[L.RS_NTR]]
        self._w = int(RS[L.RS_MASKW])

    def _cols(self, which: int) -> slice:
        """The columns of set ``which`` (L.TR_SET_DESTS, TR_SET_DELIVERED, TR_SET_FAILED) in the transfer table."""
        first = L.TR_DMASK + which * self._w
        return slice(first, first + self._w)

    def _set(self, i: int, which: int) -> list[int]:
        """The boards of send ``i``'s set ``which``."""
        return boards.members(self._tr[i, self._cols(which)])

    def _failed(self, i: int) -> str | None:
        """Cluster's Transfer.failed: send ``i`` had no route, or reliable delivery gave up on it."""
        tr = self._tr
        if not tr[i, L.TR_FAIL_RETRIES]:
            return None
        if tr[i, L.TR_FAIL_RETRIES] < 0:
            return f"no route from node {int(tr[i, L.TR_SRC])} to {self._set(i, L.TR_SET_FAILED)}"
        return f"no acknowledgement from {self._set(i, L.TR_SET_FAILED)} after {int(tr[i, L.TR_FAIL_RETRIES]) - 1} retries"

    @property
    def control_frames(self) -> int:
        return sum(self.control_frames_by_op.values())

    def incomplete(self, *, failed: bool = False) -> list[str]:
        """Cluster.incomplete: the sends not delivered everywhere (``failed``: only those
        reliable delivery gave up on or had no route for)."""
        tr = self._tr
        out = []
        short = (tr[:, self._cols(L.TR_SET_DELIVERED)] != tr[:, self._cols(L.TR_SET_DESTS)]).any(axis=1)
        if failed:
            short &= tr[:, L.TR_FAIL_RETRIES] != 0
        rows = np.flatnonzero(short)
        for i in rows[np.argsort(tr[rows, L.TR_SEQ], kind="stable")].tolist():  # in the order sends were made
            got = set(self._set(i, L.TR_SET_DELIVERED))
            missing = [d for d in self._set(i, L.TR_SET_DESTS) if d not in got]
            why = self._failed(i) or ("still waiting for the packetizer" if tr[i, L.TR_ACCEPTED] < 0
                                      else "frames lost")
            out.append(f"send {int(tr[i, L.TR_SEQ])} (op {Op(int(tr[i, L.TR_MSGOP])).name}, kv {int(self._block_id(tr[i, L.TR_KV]))}) from node "
                       f"{int(tr[i, L.TR_SRC])} never reached {missing}: {why}")
        return out


class _LoopSim:
    """The simulator a Network sees while Python applies a timeline change for the compiled
    loop: the loop's clock, and the events the network schedules (its wake-up, a hand-over
    of upcalls, a change) go into the loop's heap in the order they are asked for."""

    def __init__(self, tables: Tables, net):
        self.st, self.RS, self.net = tables.state, tables.RS, net

    @property
    def now(self) -> int:
        return int(self.RS[L.RS_NOW])

    def at(self, time: int, fn, *args):
        net, RS = self.net, self.RS
        if fn == net._wake:
            RS[L.RS_WAKE_AT] = time
            RS[L.RS_WAKE_SEQ] = schedule(self.st, int(time), L.E_WAKE)
            return _Wake(RS)
        if fn == net._upcalls_due:
            RS[L.RS_UPCALL_EV] = 1
            schedule(self.st, int(time), L.E_UPCALLS)
            return True
        if fn == net._changes_due:
            schedule(self.st, int(time), L.E_CHANGE)
            return True
        raise RuntimeError(f"compiled replay: the network scheduled {fn!r} during a change")


class _Wake:
    """The loop's pending network wake-up, as Network._rearm handles its Event."""

    def __init__(self, RS):
        self.RS = RS

    def cancel(self) -> None:
        self.RS[L.RS_WAKE_SEQ] = -1


class _Messages:
    """Network.messages for Network.rehome: each message's facts from the kernel's MS row."""

    def __init__(self, st):
        self.MS = st.table("MS")

    def __getitem__(self, mid: int) -> Message:
        m = self.MS[mid]
        return Message(mid, int(m[K.M_SRC]), (), -1, int(m[K.M_NFRAGS]), int(m[K.M_FLEN]), int(m[K.M_LLEN]))


def _apply_change(rp, tables: Tables) -> None:
    """Network._changes_due for one change, which the loop has brought to its point of the
    instant: it runs on the Network's own code over the loop's kernel tables (what it
    replaces, it replaces in the loop's State)."""
    import heapq

    st, RS, net = tables.state, tables.RS, rp.net
    net.adopt(st)
    sim, msgs = net.sim, net.messages
    net.sim, net.messages = _LoopSim(tables, net), _Messages(st)
    net._wake_ev = _Wake(RS) if RS[L.RS_WAKE_SEQ] >= 0 else None
    net._wake_at = int(RS[L.RS_WAKE_AT]) if RS[L.RS_WAKE_SEQ] >= 0 else None
    net._upcall_ev = True if RS[L.RS_UPCALL_EV] else None
    _t, key, _seq, fn = heapq.heappop(net._changes)
    net._in_change, net._change_key = True, key
    try:
        fn()
    finally:
        net._in_change, net._change_key = False, K.KEY_ALL
        net.sim, net.messages = sim, msgs
    RS[L.RS_CHG_T], RS[L.RS_CHG_KEY] = net._changes[0][:2] if net._changes else (K.INF, K.KEY_ALL)


def _reroute(rp, tables: Tables):
    """Cluster.reroute for the compiled loop: the multicasts still in a packetizer get new
    trees (Network.rehome moves them), every other (source, destinations) a tree on the new
    routes as Cluster._route would build it at its next send, and reductions not yet started
    a board tree on the new routes (Cluster.board_tree when their first contribution comes)."""
    net, cluster = rp.net, rp.cluster
    PT, OW, GP, TR = tables.state.table("PT"), tables.OW, tables.state.table("GP"), tables.TR

    def reroute(routes):
        cluster.routes = routes
        active = net.active_routes()
        moved = {}
        for (src, dsts), route in list(tables.trees.items()):
            try:
                # over the members reachable now (Cluster._route); reliable delivery reaches the
                # others after a repair
                reach = [d for d in dsts if d != src and routes.next_hop[src, d] >= 0]
                tree = multicast_tree(net.topology, routes, src, reach) if reach else {src: []}
                if route in active:
                    new = net.replace_tree(route, tree, dsts)
                else:
                    new = net.add_tree(tree, dsts)
            except ConfigError as e:
                new = -1  # no tree on these routes: a send on it stops the run (the Python path raises)
                tables.unroutable.append(e)
            tables.trees[(src, dsts)] = new
            moved[route] = new
        # Sends still to start, and those waiting for their packetizer (Cluster._launch picks
        # the route when the packetizer takes the send), go on the new trees.
        for col, table in ((L.PT_ROUTE, PT), (L.TR_ROUTE, TR)):
            r = table[:, col]
            hit = np.flatnonzero(np.isin(r, list(moved)))
            r[hit] = [moved[int(x)] for x in r[hit]]
        for op, root, group, g in tables.reductions:
            if OW[op, L.OW_START] < 0:  # its first contribution is still to come
                try:
                    parent = cluster.board_tree(root, group)
                except ConfigError as e:  # no tree now: starting it stops the run (the Python path raises)
                    GP[g, L.GP_WAIT] = -1
                    tables.unroutable.append(e)
                    continue
                for j, m in enumerate(group):
                    GP[g + j, : L.GP_FOLD_OWN] = (m, parent.get(m, -1), 1 + sum(1 for c in group if parent.get(c) == m))

    return reroute


def run(rp) -> None:
    """Run ``rp`` (an emu.replay.run.Replay) on the compiled loop and fill in its results."""
    # Python's cycle collector off while the loop runs: the first run compiles it, and numba's
    # compiler makes millions of objects, so the collector kept re-scanning them (a seventh
    # of the compile time, more for the kernel's large inlined loop). The loop itself makes
    # no Python objects; what the run leaves is freed by reference counting as before.
    return_large_frees()  # the tables' build temporaries leave no heap behind (emu.memory)
    collecting = gc.isenabled()
    gc.disable()
    cold = not cache.warming and not cache.compiled()
    if cold:  # after a plain `pip install` (no warm step) or a change to the engine's sources
        print(cache.NOTICE, file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        _compile_shared()
    try:
        _run(rp)
    finally:
        if collecting:
            gc.enable()
    if cold:
        print(f"mcf-emu: replay engine compiled and cached ({time.perf_counter() - t0:.0f} s, "
              "replay included)", file=sys.stderr, flush=True)


def _compile_shared() -> None:
    """Compile the engine as install does, in two processes at once where there are two CPUs
    (emu.engine.compile_share); this replay then loads it. If that fails, the replay compiles it."""
    from . import compile_share

    if compile_share.processes() > 1:
        try:
            compile_share.compile_engine()
        except (OSError, RuntimeError) as e:
            print(f"mcf-emu: {e}; compiling here instead", file=sys.stderr, flush=True)


def _run(rp) -> None:
    rp.net._logging()  # a record per transmission while a sink other than the bins reads them (a capture)
    if rp.page_out_trace:  # the build reads the trace once, the loop not at all: out of the heap
        rp.trace.page_out()
    tables = Tables(rp)
    rp.durations = tables.OW[:, L.OW_DUR]  # the same values, where the loop reads them (53 MiB at 128 boards)
    st, RS, net = tables.state, tables.RS, rp.net
    if rp.opt.progress:
        RS[L.RS_PROGRESS] = RS[L.RS_PROG_NEXT] = REPLAY_STEP_OPS
    rp._progress()  # 0 %: the replay is under way (what a reader of the stream waits for)
    if rp.timeline is not None:
        rp.timeline.on_reroute[:] = [_reroute(rp, tables)]
    for sink in net.log_sinks:  # a capture names each frame's message by the loop's rows
        from ..replay.capture import Capture

        if isinstance(sink, Capture):
            sink.messages = WireMessages(st, rp.trace, bool(RS[L.RS_RELIABLE]), tables.block_id)
    # The first drive() starts the replay (the parts with no dependencies, the network's
    # first wake-up); a later call, after a change or a log flush, goes on where it stopped.
    tables.unroutable = []  # why a re-route could not build a tree, in the order it failed
    while True:
        try:
            status = call(drive, st, tables.start_parts)
        except ValueError:
            if tables.unroutable:  # a send on such a tree stopped the loop: the Python path's error
                raise tables.unroutable[0] from None
            raise
        if status == L.DRIVE_DONE:
            tables.history.take(st)  # the rows since the last block
            break
        if status == L.DRIVE_CHANGE:
            _apply_change(rp, tables)
        elif status == L.DRIVE_PROGRESS:
            rp.done_ops = int(RS[L.RS_DONE_OPS])
            rp.sim.now = int(RS[L.RS_NOW])
            rp._progress()
        elif status == L.DRIVE_HISTORY:
            tables.history.take(st)
        elif status == K.ST_NEED_LOG:
            net.flush_log()  # the log table is the network's own; the loop never replaces it
        else:
            raise RuntimeError(f"compiled replay: unexpected status {status}")
    # The wiring is read by nothing after the run: it goes before the results are read out
    # (MARS 16K on 128 boards: 550 MiB, the run's peak was reading them beside it).
    empty = placeholders()
    set_wiring(st, empty["PT"], empty["IDX"], empty["DF"])
    # The kernel's buffers the loop grew, back into the network (its counters read them).
    net.adopt(st)
    net.flush_log()
    OP, OW = tables.OP, tables.OW
    rp.start = OW[:, L.OW_START].copy()
    rp.end = OW[:, L.OW_END].copy()
    rp.kv_bytes = int(RS[L.RS_KV_BYTES])
    rp.done_ops = int(RS[L.RS_DONE_OPS])
    rp.sim.now = int(RS[L.RS_NOW])
    rp.cluster = ClusterView(tables, rp.cluster)
    SLOT, SW = tables.SLOT, tables.SW
    got = np.flatnonzero(SW[:, L.SW_TIME] >= 0)
    slot_op = np.repeat(np.arange(rp.trace.n_ops), np.diff(OP[:, L.OPS_DST]))  # n + 1 rows: the last ends the list
    rp._deliveries = np.stack([slot_op[got], SLOT[got, L.SLOT_NODE], SW[got, L.SW_TIME]], axis=1)
    if rp.functional is not None:  # the payloads and merges, after the timing they do not change
        feed(rp.functional, tables, rp.trace)
    rp._progress(end=True)
