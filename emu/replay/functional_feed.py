"""Functional mode on the compiled loop: the payloads and the decode merges follow its tables.

Timing does not depend on payload values, so the compiled loop runs the timing replay
alone and ``feed`` then gives ``emu.replay.functional.Functional`` what the Python path
gives it while it runs (Replay._start_comm, _part_delivered, _reduced), from what the loop
left in its tables:

- every send handed to a NIC is a transfer row (TR): its payload is made at the hand-over
  (``Functional.payload``) and each board in its delivered set checks it
  (``Functional.delivered``); the loop carries lengths, not bytes, so what arrives is the
  handed-over copy, as the Python path's frames carry the send's one copy;
- a reduction folds at each board in the order the board's protocol took the contributions
  (``BoardProtocol.contribute``: arrival order), which the loop numbers in each member's
  group row (GP_FOLD_OWN: its own contribution; GP_FOLD_UP: its result at its parent); the
  merges run in that order (floating-point results depend on it), each member's own state
  made when it contributed (``Functional.contribution``), and the root's result is checked
  when the root completed (``Functional.reduced``);
- the KV layout a decode starts from is the directory's owners when the first contribution
  started, which the loop copied then (KB's KB_SNAP_* columns).

A reduction's own states need the query its holder received, so each reduction's query
op is fed first; the rest follows the transfers' order. The loop has finished every op by
then, so ``Functional.progress`` (when set) hears this phase's own count: reductions merged
and ops whose payloads were delivered, of both.
"""

from __future__ import annotations

import numpy as np

from ..codec import Dtype, ReduceOp
from ..nic import reduce as R
from ..workload.enums import Kind
from ..engine import boards
from ..engine import layout as L

FEED_STEP = 200  # reductions or ops fed between two progress reports


class _Owners:
    """The directory as Functional reads it: kv_id -> (owner, bytes)."""

    def __init__(self, owners: dict):
        self.owners = owners


def _snapshot(tables) -> _Owners:
    KB = tables.KB
    if not tables.RS[L.RS_SNAPPED]:
        return _Owners({})
    owned = np.flatnonzero(KB[:, L.KB_SNAP_OWNER] >= 0)
    return _Owners({int(tables.kv_ids[b]): (int(KB[b, L.KB_SNAP_OWNER]), int(KB[b, L.KB_SNAP_BYTES]))
                    for b in owned.tolist()})


def feed(fn, tables, trace) -> None:
    """Run ``fn`` (a Functional) over the compiled replay ``tables`` have just finished."""
    fn.directory = _snapshot(tables)
    TR = tables.TR[: tables.RS[L.RS_NTR]]
    w = int(tables.RS[L.RS_MASKW])
    dlv = L.TR_DMASK + L.TR_SET_DELIVERED * w

    def at(i: int, col: int) -> list[int]:
        return boards.members(TR[i, col: col + w])

    carried = np.isin(TR[:, L.TR_CB], (L.CB_SEND, L.CB_A2A)) & (TR[:, dlv: dlv + w] != 0).any(axis=1)
    rows = np.flatnonzero(carried)
    by_op: dict[int, list[int]] = {}
    for i in rows.tolist():
        by_op.setdefault(int(TR[i, L.TR_OP]), []).append(i)
    done: set[int] = set()

    def deliver(op: int) -> None:
        if op in done:
            return
        done.add(op)
        for i in by_op.get(op, ()):
            src, cb = int(TR[i, L.TR_SRC]), int(TR[i, L.TR_CB])
            dsts = at(i, dlv)
            block = at(i, L.TR_DMASK)[0] if cb == L.CB_A2A else -1
            data = fn.payload(op, src, block)
            for node in dsts:
                fn.delivered(op, src, block, node, data)

    ops = trace.ops
    GP = tables.state.table("GP")
    OP = tables.OP
    reductions = _reductions_in_fold_order(ops, OP, GP)
    total, step = len(reductions) + len(by_op), 0

    def stepped() -> None:  # one reduction merged or one op's payloads delivered: report every few
        nonlocal step
        step += 1
        if fn.progress is not None and (step % FEED_STEP == 0 or step == total):
            fn.progress(step, total)

    if fn.progress is not None:
        fn.progress(0, total)
    for op in reductions:
        q = fn.query_of.get((int(ops["chunk"][op]), int(ops["layer"][op])))
        if q is not None:
            deliver(q)
        _merge(fn, op, GP[OP[op, L.OPS_GRP]: OP[op + 1, L.OPS_GRP]], ops)
        stepped()
    for op in by_op:
        deliver(op)
        stepped()


def _reductions_in_fold_order(ops, OP, GP) -> list[int]:
    """The reductions that started, by their first fold."""
    first = []
    for op in np.flatnonzero(ops["kind"] == Kind.reduce).tolist():
        seqs = GP[OP[op, L.OPS_GRP]: OP[op + 1, L.OPS_GRP], L.GP_FOLD_OWN]
        if (seqs >= 0).any():
            first.append((int(seqs[seqs >= 0].min()), op))
    return [op for _, op in sorted(first)]


def _merge(fn, op: int, group: np.ndarray, ops) -> None:
    """Reduction ``op``'s folds at each member in the loop's order; the root's result to ``fn``."""
    dtype, rop = Dtype(int(ops["dtype"][op])), ReduceOp(int(ops["reduce_op"][op]))
    folds = []  # (number, board, contributor)
    for m, parent, _wait, own, up in group[:, : L.GP_NCOLS].tolist():
        if own >= 0:
            folds.append((own, m, m))
        if up >= 0:
            folds.append((up, parent, m))
    acc: dict[int, bytes] = {}
    for _n, node, src in sorted(folds):
        data = fn.contribution(op, node) if src == node else acc[src]
        acc[node] = data if node not in acc else R.combine(rop, acc[node], data, dtype=dtype, heads=fn.H,
                                                           head_dim=fn.d)
    root = [i for i, p in enumerate(group[:, L.GP_PARENT].tolist()) if p < 0][0]
    if group[root, L.GP_WAIT] == 0:  # every contribution is in at the root
        fn.reduced(op, acc[int(group[root, L.GP_MEMBER])])
