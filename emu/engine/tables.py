"""The compiled replay's tables, built with numpy before the run (no per-op Python objects).

From the trace's columnar arrays: the op and part tables, the dependency wiring (the
rules of the Python reference's wiring (tests/pydag.py), vectorised: unmet dependencies per part, and what each
completion and each delivery releases as flat lists), the delivery slots, the
reduction and all-to-all groups, and the routes every send will use: unicast routes
are the network's, multicast trees are installed in its forwarding table now, one per
(source, destination set) the trace uses. The kernel's message tables are sized for
the whole run; its stream pool for what the packetizers can hold at once. Everything
goes into one ``State`` (emu.engine.state) the compiled functions take.
"""

from __future__ import annotations

import numpy as np

from ..codec import FRAME_HEADER_LEN, max_payload
from ..codec.fragment import MAX_FRAGS
from ..net import kernel as K
from ..nic.protocol import OD_NCOLS, OUT_NCOLS
from ..nic.rto import rto_table
from ..topology import multicast_tree
from ..workload.enums import COMM_KINDS, CONTROL_KINDS, Kind, MsgOp
from ..workload.enums import KV_OPS as _KV_MSGS
from ..memory import drop_resident
from ..workload.fileformat import fits_int32
from . import boards, history
from . import layout as L
from .history import History
from .state import KERNEL, State


def block_ids(rp) -> np.ndarray:
    """The KV block ids the replay can name, sorted: the trace's (its ops' kv_id, the blocks
    its handoffs list) and every id from the lowest up to the last head shard's (an
    all-to-all's block (chunk, node, layer) is numbered in the loop, emu.engine.loop).

    The loop keeps block x as ``lo + position of x`` (lo the first id): x itself for every
    id up to the first gap, so the head shards' numbering holds, and ids spread wide (a
    hand-written trace's) still give tables as long as the blocks are many."""
    tr, ops = rp.trace, rp.trace.ops
    kv = ops["kv_id"].astype(np.int64)
    lo = min(0, int(kv.min(initial=0)), int(tr.blk_idx.min(initial=0)))
    top = 0
    a2a = ops["kind"] == Kind.all_to_all
    if a2a.any():  # head shards own block (chunk, node, layer)
        layers = int(rp.model["layers"])
        top = int(((ops["chunk"][a2a].max() + 1) * rp.nodes) * layers + ops["layer"][a2a].max()) + 1
    return np.unique(np.concatenate([np.arange(lo, max(top, 1), dtype=np.int64), kv, tr.blk_idx.astype(np.int64)]))


def _member(keys_sorted: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Position of each query key in the sorted key array, -1 where absent."""
    pos = np.searchsorted(keys_sorted, q)
    ok = pos < keys_sorted.size
    ok[ok] = keys_sorted[pos[ok]] == q[ok]
    return np.where(ok, pos, -1)


def _pair_key(ops: np.ndarray, boards: np.ndarray, N: int) -> np.ndarray:
    """The key of each (op, board) pair, ``op * N + board``, made in int64: the trace's lists
    are int32, and op * N passes 2**31 from 16.8M ops on 128 boards."""
    return np.asarray(ops, np.int64) * N + boards


def _table(rows: int, ncols: int, cols: dict) -> np.ndarray:
    """A table of ``ncols`` columns filled from ``cols`` (column -> values), int32 when every
    value fits (ids, counts and positions in IDX: any run that fits in memory), else int64;
    the compiled loop is compiled for either.

    Values read from OP (and from the int32 parts and index pool, PT and IDX) that the loop
    passes on to a compiled function are made int64 first (``loop.ready``), since numba
    compiles a function once more for every argument type it is called with.

    A column given as (base, values) is ``base + values``, added in the table: a position
    in IDX is a block's start plus a CSR pointer, and a temporary array of each such column
    (7 of them, 50 MB each for 7M ops) made the build's peak. A column shorter than the
    table fills its first rows and leaves the rest 0 (OP's last row, the sentinel, holds
    only where the lists end)."""
    pairs = {col: v if isinstance(v, tuple) else (0, v) for col, v in cols.items()}
    wide = not all(fits_int32(np.asarray(v), base) for base, v in pairs.values())
    # Inputs in a file (a paged-out trace's columns) are read once more, a block at a time:
    # the pages read so far (the check's included) go after each block, not all at the end.
    inputs = [v for _, v in pairs.values() if np.ndim(v)]
    t = np.zeros((rows, ncols), np.int64 if wide else np.int32)
    # Filled a block of rows at a time, every column: the block stays in the cache while its
    # columns are written (column by column over the whole table, each column's pass
    # fetched every row's cache lines again: 2.5 s at 7M ops, 1.55 s this way).
    for r0 in range(0, rows, _FILL_ROWS):
        r1 = min(rows, r0 + _FILL_ROWS)
        block = t[r0:r1]
        for col, (base, values) in pairs.items():
            v = values[r0:r1] if np.ndim(values) else values
            to = block[:len(v), col] if np.ndim(v) else block[:, col]  # a column shorter than the table: its rows
            if base:
                np.add(v, base, out=to, dtype=np.int64, casting="unsafe")  # int32 lists: no wrap
            else:
                to[:] = v
        drop_resident(inputs)
    return t


def _index_pool(blocks) -> np.ndarray:
    """IDX: the blocks one after another, int32. Every value is an op, part, board, KV block
    offset or a count of them, and positions in IDX are OP's int32 columns already, so a
    run whose values do not fit has more ops than fit in memory; the narrow pool halves the
    replay's largest table (93M entries for MARS 16K on 128 boards) and the cache lines its
    dependency and release walks read."""
    size = sum(b.size for b in blocks)
    if size >= 2 ** 31:  # positions in IDX are int32 too (OP's and SLOT's columns)
        raise ValueError(f"compiled replay: {size} index entries: more than the int32 tables number (2**31)")
    IDX = np.empty(size, np.int32)
    at = 0
    for b in blocks:
        if not fits_int32(b):
            raise ValueError(f"compiled replay: an index value ({int(b.max())}) does not fit the int32 index pool")
        IDX[at:at + b.size] = b
        at += b.size
    return IDX


_FILL_ROWS = 16384  # rows per block of _table's fill (16K rows x 16 int32 columns: 1 MiB)


def _run_sizes(OP, OW, PT, sends, per, chunk, reliable) -> tuple[int, int, int, int, int]:
    """What the run's transfers need at most, from the built op, wide and part tables:
    (transfers, messages, destination rows, received-bitmap bytes, messages of the largest
    send). Summed over blocks of ops: a dozen per-op temporaries of 7M ops (53 MB each) made
    the end of the build its peak. ``sends``: which parts send; ``per``, ``chunk``: payload
    bytes of a frame and of a message."""
    totals = np.zeros(4, np.int64)
    max_msgs = 1
    n = OP.shape[0] - 1  # the last row is the sentinel (the ends of the last op's lists)
    for o0 in range(0, n, _SIZE_OPS):
        o1 = min(n, o0 + _SIZE_OPS)
        op, nxt = OP[o0:o1], OP[o0 + 1:o1 + 1]  # an op's lists end where the next op's begin
        kind = op[:, L.OPS_KIND]
        nbytes = OW[o0:o1, L.OW_BYTES]
        msgs_of = -(-np.maximum(nbytes, 1) // chunk)
        frags_of = -(-np.maximum(nbytes, 1) // per)
        nd_of = nxt[:, L.OPS_DST].astype(np.int64) - op[:, L.OPS_DST]  # destinations (distinct: the trace's check)
        p0, p1 = int(op[0, L.OPS_PART]), int(nxt[-1, L.OPS_PART])
        send_parts = np.bincount(PT[p0:p1, L.PT_OP][sends[p0:p1]] - o0, minlength=o1 - o0)
        gsize = nxt[:, L.OPS_GRP].astype(np.int64) - op[:, L.OPS_GRP]
        nsrc = nxt[:, L.OPS_SRC].astype(np.int64) - op[:, L.OPS_SRC]
        a2a_pairs = np.where(kind == Kind.all_to_all, nsrc * nd_of, 0)  # an upper bound of its pairs (a, b), a != b
        transfers = send_parts + np.where(kind == Kind.reduce, np.maximum(gsize - 1, 0), 0) + a2a_pairs
        bitmap = frags_of // 8 + msgs_of
        if reliable:  # every message is tracked: a bitmap at each destination
            bits = ((send_parts * nd_of + transfers - send_parts) * bitmap).sum()
        else:  # multicast messages only
            bits = (send_parts * nd_of * bitmap)[nd_of > 1].sum()
        totals += (transfers.sum(), (transfers * msgs_of).sum(),
                   (send_parts * msgs_of * nd_of).sum() + ((transfers - send_parts) * msgs_of).sum(), bits)
        max_msgs = max(max_msgs, int(msgs_of[transfers > 0].max(initial=1)))
    return (*(int(v) for v in totals), max_msgs)


_SIZE_OPS = 1 << 20  # ops per block of _run_sizes


def _fits_positions(size: int) -> None:
    """A list whose positions are int32 (as IDX's, where it goes) has fewer than 2**31 entries."""
    if size >= 2 ** 31 - 1:
        raise ValueError(f"compiled replay: a list of {size} entries: more than the tables number (2**31)")


def _csr(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Group ``values`` by ``keys`` (0..n-1), keeping their order within a key."""
    _fits_positions(values.size)
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, np.int32)  # positions in a list of fewer than 2**31 (IDX's bound)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, values[order]


def _signal_groups(sig: list, n, boards):
    """The signal groups of the releases that cross boards: one group per (event op x, node b),
    laid out in IDX as [b, count, parts...] (parts in wiring order), the groups of an op
    together in ascending b (every b < ``boards``). ``per_group``: signals each group receives
    (1 for a compute op, its destination count for a communication op). Returns (per-op
    pointers into the flat list, the flat list, how many signals the run sends). ``sig`` is
    the list [x, b, p, per_group], emptied here: the arrays are freed as their sorted copies
    replace them."""
    x, b, p, per_group = sig
    sig.clear()
    # By (x, b), stable: parts keep their wiring order within a group (one key sorts faster
    # than numpy's lexsort over two).
    order = np.argsort(x.astype(np.int64) * boards + b, kind="stable")
    # one column at a time, each copy replacing its column (at 128 boards 30M edges a column)
    x = x[order]
    b = b[order]
    p = p[order]
    per_group = per_group[order]
    del order
    new = np.r_[True, (x[1:] != x[:-1]) | (b[1:] != b[:-1])] if x.size else np.zeros(0, bool)
    heads = np.flatnonzero(new)
    del new
    # Only the groups' heads are read from here on, and the parts: the edges' other columns
    # go before the flat list is made (three arrays of 30M edges at 128 boards).
    count = np.diff(np.r_[heads, x.size])
    x_of, b_of, signals = x[heads], b[heads], int(per_group[heads].sum())
    del x, b, per_group, heads
    size = 2 + count
    g_off = np.cumsum(size) - size
    _fits_positions(int(size.sum()))
    flat = np.zeros(int(size.sum()), np.int32)  # as IDX, where it goes
    flat[g_off] = b_of
    flat[g_off + 1] = count
    # The parts fill the rest in order: a mask, not a position per edge (an int64 array each).
    parts = np.ones(flat.size, bool)
    parts[g_off] = False
    parts[g_off + 1] = False
    flat[parts] = p
    del parts
    ptr = np.zeros(n + 1, np.int32)  # positions in the flat list, int32 as IDX where it goes
    np.cumsum(np.bincount(x_of, weights=size, minlength=n).astype(np.int64), out=ptr[1:])
    return ptr, flat, signals


def _dependents(dep_ptr: np.ndarray, a: int, b: int) -> np.ndarray:
    """The dependent op of each dependency a..b-1 (CSR ``dep_ptr``): the ops whose lists the
    range covers, repeated by their counts and cut to the range. One array for every
    dependency at once was 246 MB at 128 boards, alive at the build's peak."""
    o0 = int(np.searchsorted(dep_ptr, a, side="right")) - 1 if b > a else 0
    o1 = int(np.searchsorted(dep_ptr, b, side="left"))
    return np.repeat(np.arange(o0, o1), np.diff(dep_ptr[o0:o1 + 1]))[a - dep_ptr[o0]:b - dep_ptr[o0]]


_WIRING_STEP = 1 << 20  # dependencies, and edges, wired at a time: the edges' temporaries stay small


def _wiring_slices(dep_ptr: np.ndarray, npart: np.ndarray):
    """The dependencies in slices (a, b, dependent op of each), in order, each of at most
    ``_WIRING_STEP`` dependencies and, past its first dependency, ``_WIRING_STEP`` edges (a
    dependency has an edge per part of its dependent op). Bounded by dependencies alone, one
    slice of MARS 16K on 128 boards held 30M edges (its decode ops' parts), and its per-edge
    temporaries (235 MB each) made the build's peak. One slice at least: a trace with no
    dependencies still runs the wiring once."""
    size, a = int(dep_ptr[-1]), 0
    while True:
        b = min(a + _WIRING_STEP, size)
        y = _dependents(dep_ptr, a, b)
        edges = np.cumsum(npart[y])
        if edges.size and edges[-1] > _WIRING_STEP:
            cut = max(1, int(np.searchsorted(edges, _WIRING_STEP, side="right")))
            b, y = a + cut, y[:cut]
        yield a, b, y
        a = b
        if a >= size:
            return


class _Wiring:
    """The dependency wiring (tests/pydag.py's rules), built a slice of dependencies at a time
    so that the per-edge temporaries of a large trace never exist all at once: every
    (dependent op y, dependency x, part p of y) edge is released by a delivery at p's board
    (``at``), by x's own event there (``done``) or by signals from other boards (``sig``).
    The lists keep the trace's dependency order, so the result does not depend on the slicing."""

    def __init__(self, N, node, is_comm, ndst, npart, part_ptr, part_node, dkeys, skeys, free_signals):
        self.N, self.node, self.is_comm, self.ndst = N, node, is_comm, ndst
        self.npart, self.part_ptr, self.part_node = npart, part_ptr, part_node
        self.dkeys, self.skeys, self.free_signals = dkeys, skeys, free_signals
        self._at, self._done, self._sig, self._read = [], [], [], []

    def add(self, y_of_dep, x_of_dep, reads_dep):
        N, node, is_comm = self.N, self.node, self.is_comm
        reps = self.npart[y_of_dep]
        if (reps == 1).all():  # one part per dependent op (most slices): an edge per dependency
            y, x, p, reads = y_of_dep, x_of_dep, self.part_ptr[y_of_dep], reads_dep
        else:
            e_dep = np.repeat(np.arange(x_of_dep.size), reps)
            first = np.repeat(np.cumsum(reps) - reps, reps)
            y = y_of_dep[e_dep]
            x = x_of_dep[e_dep]
            p = self.part_ptr[y] + (np.arange(e_dep.size) - first)
            reads = reads_dep[e_dep]
            del first, e_dep
        at = self.part_node[p]
        xc = is_comm[x]
        nx = node[x]
        # The two lookups (binary searches into keys of every op) only where their answer counts.
        slot = np.full(x.size, -1, np.int64)
        k = np.flatnonzero(xc)
        slot[k] = _member(self.dkeys, _pair_key(x[k], at[k], N))
        to_at = slot >= 0
        # A compute op on another source gates only that source's part.
        gates_other = ~xc & is_comm[y] & (nx != at)
        k = np.flatnonzero(gates_other)
        gates_other[k] = _member(self.skeys, _pair_key(y[k], nx[k], N)) >= 0
        del k
        # No release crosses boards for free (docs/nic.md, "Signals"): a compute op's waiters on
        # other boards hear of it by a signal from its node; waiters of a communication op's
        # "delivered everywhere" (never one of its destinations) by a signal from each destination.
        nd_x = self.ndst[x]
        to_sig = (xc & ~to_at & (nd_x > 0)) | (~xc & ~gates_other & (nx != at))
        to_done = (xc & ~to_at & (nd_x == 0)) | (~xc & ~gates_other & (nx == at))
        if self.free_signals:  # the idealisation (hw.signals=free): released at once, no frame
            to_done |= to_sig
            to_sig[:] = False
        # Kept int32 (ops, parts, slots, boards and counts all fit: Tables checks the counts):
        # at 128 boards these lists hold 32M edges until they are joined, the build's peak.
        i32 = np.int32
        self._at.append((slot[to_at].astype(i32), p[to_at].astype(i32)))
        self._read.append(slot[to_at & reads].astype(i32))
        self._done.append((x[to_done].astype(i32), p[to_done].astype(i32)))
        # per signal-released edge: x, the board it waits at, its part, the signals it counts
        self._sig.append((x[to_sig].astype(i32), at[to_sig].astype(i32), p[to_sig].astype(i32),
                          np.where(xc, nd_x, 1)[to_sig].astype(i32)))

    @staticmethod
    def _joined(chunks: list) -> list:
        """The chunks' columns joined; the chunks are let go (at 128 boards each list is
        hundreds of MB, and a copy of it while the chunks lived was the build's peak)."""
        joined = [np.concatenate(c) for c in zip(*chunks)]
        chunks.clear()
        return joined

    def at(self):
        """(slot, part) of every edge a delivery releases (once: its chunks are let go)."""
        return self._joined(self._at)

    def done(self):
        """(op, part) of every edge the op's own event releases (once)."""
        return self._joined(self._done)

    def signals(self):
        """[op, board, part, signals counted] of every edge signals release (once)."""
        return self._joined(self._sig)

    def need(self, nparts, sp, sc):
        """Per part: the releases it waits for; ``sp``, ``sc``: the part and signal count of each
        signal-released edge (``signals``)."""
        gated = np.concatenate([p for _s, p in self._at] + [p for _x, p in self._done])
        return (np.bincount(gated, minlength=nparts)
                + np.bincount(sp, weights=sc, minlength=nparts)).astype(np.int64)

    def readers(self, nslots):
        """Per delivery slot: the edges that read what was delivered there."""
        return np.bincount(np.concatenate(self._read), minlength=nslots).astype(np.int64)


class Tables:
    """Everything the compiled loop reads and writes, and what Python needs to read it back."""

    def __init__(self, rp):
        self.rp = rp
        tr, ops, net = rp.trace, rp.trace.ops, rp.net
        n, N, V = tr.n_ops, rp.nodes, net.nodes
        # OP, PT and IDX are int32, and so are the wiring's edge lists: ops, parts and slots
        # number fewer than 2**31 (a larger run would not fit in memory anyway)
        big = max(n + tr.src_idx.size, tr.dst_idx.size)  # bounds of the parts and the slots
        if big >= 2 ** 31 - 1:
            raise ValueError(f"compiled replay: {big} ops, parts or delivery slots: more than the tables number (2**31)")
        # The trace's own columns (int8 and int32), not int64 copies: each lives until OP is
        # made (three 53 MB arrays at 128 boards, under every peak of the build)
        kind, node = ops["kind"], ops["node"]
        # KV block ids as the loop keeps them (block_ids): the trace's own up to its first gap
        self.kv_ids = block_ids(rp)
        kv_lo = int(self.kv_ids[0])
        kvid = kv_lo + np.searchsorted(self.kv_ids, ops["kv_id"].astype(np.int64))
        blk = np.searchsorted(self.kv_ids, tr.blk_idx.astype(np.int64))  # in IDX: offsets from kv_lo
        msgop = ops["msg_op"]
        is_comm = np.isin(kind, [int(k) for k in COMM_KINDS | CONTROL_KINDS])

        # Destinations sorted per op: slot = position in this list (the first block of IDX).
        ndst = np.diff(tr.dst_ptr)
        drow = np.repeat(np.arange(n), ndst)
        dorder = np.lexsort((tr.dst_idx, drow))
        dst = tr.dst_idx[dorder].astype(np.int64)
        dkeys = _pair_key(drow, dst, N)
        nslots = dst.size

        # Parts: a compute op at its node, a communication op at each source (trace order).
        nsrc = np.diff(tr.src_ptr)
        npart = np.where(is_comm, nsrc, 1)
        part_ptr = np.zeros(n + 1, np.int32)  # positions, int32 as OP where they go (each lives until OP is made)
        np.cumsum(npart, out=part_ptr[1:])
        nparts = int(part_ptr[-1])
        part_op = np.repeat(np.arange(n), npart)
        within = np.arange(nparts) - part_ptr[part_op]
        si = tr.src_ptr[part_op] + within
        src_of = tr.src_idx[np.minimum(si, max(tr.src_idx.size - 1, 0))] if tr.src_idx.size else np.zeros(nparts, np.int64)
        part_node = np.where(is_comm[part_op], src_of, node[part_op]).astype(np.int64)
        del within, si, src_of
        srow = np.repeat(np.arange(n), nsrc)
        skeys = np.sort(_pair_key(srow, tr.src_idx, N))

        # The wiring (tests/pydag.py's rules): every (dependent op y, dependency x, part p of y).
        kv_msg = np.isin(msgop, _KV_MSGS)
        x_of_dep = tr.dep_idx  # read only, int32 as loaded: no copy of the largest column
        reads_dep = np.zeros(x_of_dep.size, bool)
        w = _Wiring(N, node, is_comm, ndst, npart, part_ptr, part_node, dkeys, skeys, rp.hw["signals"] == "free")
        for a, b, y in _wiring_slices(tr.dep_ptr, npart):
            x = x_of_dep[a:b]
            reads_dep[a:b] = is_comm[x] & (~is_comm[y] | (kv_msg[y] & (kvid[y] == kvid[x])))
            w.add(y, x, reads_dep[a:b])
        del y, x
        tr.drop_pages()  # a paged-out trace (Trace.page_out): what the wiring read goes again
        sig = w.signals()
        need, readers = w.need(nparts, sig[2], sig[3]), w.readers(nslots)
        sig_ptr, sig_idx, n_signals = _signal_groups(sig, n, N)  # empties sig
        done_ptr, done_idx = _csr(*w.done(), n)
        at_ptr, at_idx = _csr(*w.at(), nslots)
        # each op's destination boards as a set (n x W words), for the routes only: made after
        # the wiring, whose peak it was under (106 MiB at 128 boards)
        W = boards.words(N)
        dmask = boards.pack(drow, dst, n, W)
        del w, ndst, drow, dorder, dkeys, srow, skeys, kv_msg  # what the wiring needed (7M ops: 50 MB each)

        # Routes: unicast towards one board, a multicast tree per (source, destination set).
        sends = np.isin(kind[part_op], [int(Kind.send), int(Kind.drain), int(Kind.invalidate)])
        part_route = self._routes(np.flatnonzero(sends), part_op, part_node, dmask, nparts)
        del dmask

        # Groups: a reduction's members with parent and contributions awaited; an exchange's members.
        # grp_ptr: each op's GP rows up to the next op's (empty for an op of neither kind)
        gp_rows, grp_ptr = [], np.zeros(n + 1, np.int32)
        self.reductions: list[tuple] = []  # (op, root, group, first GP row): a re-route rebuilds unstarted ones
        trees: dict[tuple, tuple] = {}
        g = 0
        for op in np.flatnonzero((kind == Kind.reduce) | (kind == Kind.all_to_all)).tolist():
            srcs = sorted(set(tr.src(op).tolist()))
            dsts = dst[tr.dst_ptr[op]:tr.dst_ptr[op + 1]].tolist()
            if kind[op] == Kind.reduce:
                root = dsts[0]
                group = tuple(sorted(set(srcs) | {root}))
                key = (root, group)
                if key not in trees:
                    parent = rp.cluster.board_tree(root, group)
                    trees[key] = tuple((m, parent.get(m, -1), 1 + sum(1 for c in group if parent.get(c) == m), -1, -1)
                                       for m in group)
                rows = trees[key]
                self.reductions.append((op, root, group, g))
            else:
                rows = tuple((m, -1, 0, -1, -1) for m in sorted(set(srcs) | set(dsts)))
            gp_rows.extend(rows)
            grp_ptr[op + 1] = len(rows)
            g += len(rows)
        GP = np.array(gp_rows, np.int64).reshape(-1, L.GP_NCOLS)
        np.cumsum(grp_ptr, out=grp_ptr)  # groups were numbered in op order: these are their starts

        # IDX: destinations (slots) | dependencies | sources | blocks | done lists | at lists | signal groups.
        b_dep = nslots
        b_src = b_dep + x_of_dep.size
        b_blk = b_src + tr.src_idx.size
        b_done = b_blk + tr.blk_idx.size
        b_at = b_done + done_idx.size
        b_sig = b_at + at_idx.size
        IDX = _index_pool((dst, x_of_dep, tr.src_idx, blk, done_idx, at_idx, sig_idx))
        del done_idx, at_idx, sig_idx, blk  # in IDX now (a large trace's tables are built within their own size)
        DF = np.zeros(IDX.size, np.int8)
        # Flags set through boolean masks, the op's wire op read at the trace's int8: one
        # expression in int64 made four 8-byte arrays a dependency (1 GB at 128 boards, the
        # build's peak).
        flags = DF[b_dep:b_src]
        flags[reads_dep] |= L.DF_READS
        replica = is_comm[x_of_dep]
        replica &= msgop[x_of_dep] == int(MsgOp.kv_replica)
        flags[replica] |= L.DF_REPLICA
        del x_of_dep, reads_dep, replica, flags
        tr.drop_pages()

        OW = np.zeros((n, L.OW_NCOLS), np.int64)
        OW[:, L.OW_KV] = kvid
        OW[:, L.OW_BYTES] = ops["bytes"]
        OW[:, L.OW_DUR] = rp.durations
        OW[:, L.OW_START] = -1
        OW[:, L.OW_END] = -1

        del kvid  # in OW now
        # The part and slot tables before OP: their per-part and per-slot columns are let go
        # before OP's are made (each 53 MB at 7M ops, and OP's fill was the build's peak).
        PT = np.zeros((nparts, L.PT_NCOLS), np.int32)  # ops, boards, counts, routes: int32 (as IDX)
        PT[:, L.PT_OP] = part_op
        PT[:, L.PT_NODE] = part_node
        PT[:, L.PT_NEED] = need
        del need
        PT[:, L.PT_ROUTE] = part_route
        del part_op, part_node, part_route

        # int32 as PT (boards, positions in IDX, counts); a slot's time and bytes in SW
        SLOT = np.zeros((nslots, L.SLOT_NCOLS), np.int32)
        SLOT[:, L.SLOT_NODE] = dst
        SLOT[:, L.SLOT_AT] = b_at + at_ptr[:-1]
        SLOT[:, L.SLOT_ATEND] = b_at + at_ptr[1:]
        SLOT[:, L.SLOT_READERS] = readers
        del readers, at_ptr, dst
        SW = np.zeros((nslots, L.SW_NCOLS), np.int64)
        SW[:, L.SW_TIME] = -1

        # n + 1 rows: the last, the sentinel, holds where the last op's lists end (layout.OPS)
        cols = {L.OPS_KIND: kind, L.OPS_NODE: node, L.OPS_MSGOP: msgop, L.OPS_RES: ops["residency"],
                L.OPS_PART: part_ptr, L.OPS_DEP: (b_dep, tr.dep_ptr), L.OPS_DST: tr.dst_ptr,
                L.OPS_SRC: (b_src, tr.src_ptr), L.OPS_BLK: (b_blk, tr.blk_ptr), L.OPS_DONE: (b_done, done_ptr),
                L.OPS_SIG: (b_sig, sig_ptr), L.OPS_GRP: grp_ptr, L.OPS_CHUNK: ops["chunk"], L.OPS_LAYER: ops["layer"],
                L.OPS_COMM: is_comm}
        OP = _table(n + 1, L.OPS_NCOLS, cols)
        del cols, part_ptr, done_ptr, sig_ptr, msgop
        tr.drop_pages()

        # Compute engines: a ready queue per node with room for all its compute ops.
        comp = ~is_comm
        per_node = np.bincount(node[comp], minlength=N)
        NT = np.zeros((N, L.NT_NCOLS), np.int64)
        NT[:, L.NT_QHEAD] = -1
        NT[:, L.NT_QTAIL] = -1
        NT[1:, L.NT_RQ] = np.cumsum(per_node)[:-1]
        RQ = np.zeros((max(int(comp.sum()), 1), 2), np.int64)  # ready queues: rows op, 0 (emu.heap)
        del comp, kind, node, grp_ptr, is_comm  # in OP now

        # Sizes: transfers, messages, destination rows and bitmap bytes of the whole run.
        cfg = rp.cluster.config
        per = max_payload(cfg.mtu)
        chunk = per * MAX_FRAGS
        n_tr, n_msg, n_md, n_bits, max_msgs = _run_sizes(OP, OW, PT, sends, per, chunk, cfg.reliable)
        del sends
        n_tr += n_signals + 1  # a signal is a one-message, one-destination transfer of its own
        n_msg += n_signals + 1
        n_md += n_signals + 1
        n_bits += 1

        TR = np.zeros((n_tr, L.TR_DMASK + L.TR_SETS * W), np.int64)
        MX = np.zeros((n_msg, L.MX_NCOLS), np.int64)
        nkv = len(self.kv_ids)
        KB = np.zeros((nkv, L.KB_NCOLS if rp.opt.functional else L.KB_SNAP_OWNER), np.int64)
        KB[:, L.KB_OWNER] = -1
        KR = np.zeros((N * nkv, L.KR_NCOLS), np.int64)

        # The kernel: message tables for the whole run; a stream pool for what the packetizers
        # can hold at once (entries x messages per send x first hops); buffers with room for
        # every stream a burst of sends can add between two calls of advance().
        sp_cap = N * cfg.fifo_entries * max_msgs * max(net.max_out, 1) + 64
        margin = net.margin + sp_cap
        net.MS = np.zeros((n_msg, K.M_NCOLS), np.int64)
        net.MD = np.zeros((n_md, K.D_NCOLS), np.int64)
        net.BITS = np.zeros(n_bits, np.uint8)
        net.SP = np.zeros((sp_cap, K.S_NCOLS), np.int64)
        net.SFREE = np.arange(sp_cap - 1, -1, -1, dtype=np.int64)
        net.SC[K.SC_SFREE] = sp_cap
        if net.HP.shape[0] < K.HEAP_LO + 4 * margin:  # the event queue's calendar rows, then its heap's
            HP = np.zeros((K.HEAP_LO + 4 * margin, 2), np.int64)
            HP[: net.HP.shape[0]] = net.HP
            net.HP = HP
        if net.UP.shape[0] < 2 * margin:
            net.UP = np.zeros((2 * margin, K.U_NCOLS), np.int64)
        if net.SC[K.SC_LOGGING] and net.LG.shape[0] < 2 * margin:
            net.flush_log()
            net.LG = np.zeros((2 * margin, K.G_NCOLS), np.int64)

        # RS's columns, then the heads of the free lists of message and MD ranges (emu.engine.rows)
        RS = np.zeros(L.RS_NCOLS + (max_msgs + 1) + (N + 1), np.int64)
        RS[L.RS_WAKE_SEQ] = -1
        RS[L.RS_FL_TR] = -1
        RS[L.RS_FL_MSG] = L.RS_NCOLS
        RS[L.RS_FL_MD] = L.RS_NCOLS + max_msgs + 1
        RS[L.RS_NCOLS:] = -1
        # Recycling where nothing names a finished transfer's rows again (emu.engine.rows).
        RS[L.RS_RECYCLE] = int(not cfg.reliable and rp.timeline is None and not net._changes and not net.SC[K.SC_LOGGING]
                               and not rp.opt.functional)
        RS[L.RS_NODES] = N
        RS[L.RS_MASKW] = W
        RS[L.RS_V] = V
        RS[L.RS_MARGIN] = margin
        RS[L.RS_PER] = per
        RS[L.RS_HDR] = FRAME_HEADER_LEN
        RS[L.RS_CHUNK] = chunk
        RS[L.RS_FIFO_B] = cfg.fifo_bytes
        RS[L.RS_FIFO_E] = cfg.fifo_entries
        RS[L.RS_LAYERS] = int(rp.model["layers"])
        RS[L.RS_KVMIN] = kv_lo
        RS[L.RS_NKV] = nkv
        RS[L.RS_RELIABLE] = int(cfg.reliable)
        RS[L.RS_MAX_RETRIES] = cfg.max_retries
        RS[L.RS_RTO_MIN] = cfg.rto_min_ps
        RS[L.RS_RTO_MAX] = cfg.rto_max_ps
        # The protocol's sender tables (emu.nic.protocol): a row per message and per message
        # destination (rows as MS and MD), an RTO table per board.
        rel_rows = (n_msg, n_md) if cfg.reliable else (1, 1)
        OUT = np.zeros((rel_rows[0], OUT_NCOLS), np.int64)
        OD = np.zeros((rel_rows[1], OD_NCOLS), np.int64)
        RT = np.stack([rto_table(N, cfg.rto_min_ps, cfg.rto_initial_ps, cfg.rto_max_ps) for _ in range(N)])

        # Events already in the Python simulator: a timeline's changes (Network.schedule_change),
        # with their sequence numbers; a sorted array is a heap.
        SIM = np.zeros((max(256, 2 * len(rp.sim._heap)), L.SIM_NCOLS), np.int64)
        pending = sorted((t, q) for t, q, ev in rp.sim._heap if not ev.cancelled)
        if any(ev.fn != net._changes_due for _t, _q, ev in rp.sim._heap):
            raise ValueError("compiled replay: the simulator holds events other than timeline changes")
        for i, (t, q) in enumerate(pending):
            SIM[i, [L.SIM_TIME, L.SIM_SEQ, L.SIM_KIND]] = (t, q, L.E_CHANGE)
        RS[L.RS_NSIM] = len(pending)
        RS[L.RS_SEQ] = rp.sim._seq
        RS[L.RS_CHG_T], RS[L.RS_CHG_KEY] = net._changes[0][:2] if net._changes else (K.INF, K.KEY_ALL)

        # The directory's history: 1.0-1.3 rows an op in the shipped traces, 1.7 for MARS on 64
        # boards. The loop hands it to Python every history.BLOCK rows (emu.engine.history), so
        # it needs room for a block and what one event adds past it; rows never written cost
        # no memory (np.zeros maps a large table's pages at their first write).
        self.history = History()
        RS[L.RS_HIST_AT] = history.BLOCK
        hist_rows = max(1024, min(3 * n, 2 * history.BLOCK))
        self.state = State(
            **{name: getattr(net, name) for name in KERNEL},
            RS=RS, OP=OP, OW=OW, PT=PT, SLOT=SLOT, SW=SW, NT=NT, RQ=RQ, TR=TR, MX=MX, KB=KB, KR=KR, IDX=IDX, DF=DF, GP=GP,
            SIM=SIM, WORK=np.zeros((1024, L.WORK_NCOLS), np.int64),
            HIST=np.zeros((hist_rows, L.HIST_NCOLS), np.int64), HN=np.zeros((hist_rows, L.HN_NCOLS), np.int32),
            ERR=np.zeros((16, L.ERR_NCOLS), np.int64),
            OUT=OUT, OD=OD, RT=RT, NKB=np.zeros(1024, np.uint8))
        # Python's own references, read back after the run
        self.RS, self.OP, self.OW, self.SLOT, self.SW, self.NT, self.TR, self.KB = RS, OP, OW, SLOT, SW, NT, TR, KB
        self.start_parts = np.flatnonzero(PT[:, L.PT_NEED] == 0).astype(np.int64)

    def _routes(self, pm, part_op, part_node, dmask, nparts) -> np.ndarray:
        """The route of each part (-1 where it sends nothing); ``pm`` the parts that send:
        unicast towards one board, a multicast tree per (source, destination set). A method
        of its own: its temporaries (a board set per sending part) are gone before the large
        tables are built."""
        rp, net, W = self.rp, self.rp.net, dmask.shape[1]
        self.trees: dict[tuple, int] = {}  # (source, remote destinations) -> route (Cluster._trees)
        part_route = np.full(nparts, -1, np.int64)
        remote = dmask[part_op[pm]] & ~boards.pack(np.arange(pm.size), part_node[pm], pm.size, W)
        cnt = boards.count(remote)
        one = np.flatnonzero(cnt == 1)
        word = np.argmax(remote[one] != 0, axis=1)
        part_route[pm[one]] = 64 * word + np.log2(remote[one, word].astype(np.float64)).round().astype(np.int64)
        many = cnt > 1
        if many.any():
            pairs = np.column_stack([part_node[pm[many]].astype(np.uint64), remote[many]])
            uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
            route_of = np.empty(len(uniq), np.int64)
            for i, row in enumerate(uniq.tolist()):
                s, members = row[0], boards.members(row[1:])
                tree = multicast_tree(rp.G, rp.routes, s, members)
                route_of[i] = net.add_tree(tree, members)
                self.trees[(int(s), tuple(members))] = int(route_of[i])
            part_route[pm[many]] = route_of[inv.ravel()]
        return part_route

    def block_id(self, kept):
        """The trace's KV block id of what the loop keeps as ``kept`` (a value or an array)."""
        return self.kv_ids[np.asarray(kept, np.int64) - self.kv_ids[0]]
