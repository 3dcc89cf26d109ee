"""Accumulates ops row by row and hands them over as trace columns.

Generators add ops in an order the replay can use as its tie-break (per node, the next
compute op by index) and only ever depend on ops already added, so every generated trace
is in topological order.
"""

from __future__ import annotations

from array import array

import numpy as np

from .enums import Collective, Dtype, Kind, MsgOp, ReduceOp, Residency, Stage  # noqa: F401
from .trace import SCALAR_COLUMNS

_NONE = -1
# plain ints: numpy converts a list of IntEnum members far more slowly
_K = {k: int(k) for k in Kind}
_LAYER, _KV = list(SCALAR_COLUMNS).index("layer"), list(SCALAR_COLUMNS).index("kv_id")


class OpBuilder:
    # Rows and lists are packed int64 arrays (array("q")), not Python lists of ints: a list
    # keeps an object per value, about 30 bytes more than the value itself. A 64-board 16K
    # trace (3.8M ops) took 3.2 GB while it was built; the columns are 0.2 GB.
    def __init__(self):
        self._rows = array("q")  # SCALAR_COLUMNS values per op, op after op
        self._dep_ptr, self._dep = array("q", [0]), array("q")
        self._src_ptr, self._src = array("q", [0]), array("q")
        self._dst_ptr, self._dst = array("q", [0]), array("q")
        self._blk_ptr, self._blk = array("q", [0]), array("q")

    def __len__(self) -> int:
        return len(self._dep_ptr) - 1  # a pointer per op, after the leading 0

    def _add(self, row: tuple, deps, src, dst, blocks=()) -> int:
        i = len(self)
        if deps:
            if max(deps) >= i or min(deps) < 0:
                raise AssertionError(f"op {i} depends on op {max(deps)} or {min(deps)}, not an earlier one")
            self._dep.extend(deps)
        self._dep_ptr.append(len(self._dep))
        self._src.extend(src)
        self._src_ptr.append(len(self._src))
        self._dst.extend(dst)
        self._dst_ptr.append(len(self._dst))
        self._blk.extend(blocks)
        self._blk_ptr.append(len(self._blk))
        self._rows.extend(row)
        return i

    def compute(self, kind: Kind, stage: Stage, node: int, chunk: int, layer: int, step: int,
                work: tuple[int, int], deps=(), *, produces: tuple[int, int] | None = None) -> int:
        """A compute op; ``produces`` = (kv_id, bytes) of the KV block a QKV op creates at its node."""
        flops, mem = work
        kv, nbytes, res = (produces[0], produces[1], int(Residency.owner)) if produces else (_NONE, 0, 0)
        return self._add((int(kind), int(stage), node, chunk, layer, step, flops, mem, _NONE, 0, 0, kv, nbytes, 0, res),
                         deps, (), ())

    def send(self, stage: Stage, msg_op: MsgOp, src: int, dst, nbytes: int, *, chunk=_NONE, layer=_NONE,
             step=_NONE, kv_id=_NONE, dtype: Dtype = Dtype.raw, residency: Residency = Residency.none, deps=(),
             blocks=()) -> int:
        """A unicast or multicast; ``blocks`` lists every KV block an owner handoff carries."""
        dst = sorted(dst)
        coll = Collective.unicast if len(dst) == 1 else Collective.multicast
        return self._add((_K[Kind.send], int(stage), _NONE, chunk, layer, step, 0, 0, int(coll), int(msg_op), 0,
                          kv_id, nbytes, int(dtype), int(residency)), deps, (src,), dst, blocks)

    def reduce(self, stage: Stage, msg_op: MsgOp, reduce_op: ReduceOp, srcs, dst: int, nbytes: int, *,
               chunk=_NONE, layer=_NONE, step=_NONE, dtype: Dtype = Dtype.fp32, deps=()) -> int:
        return self._add((_K[Kind.reduce], int(stage), _NONE, chunk, layer, step, 0, 0, int(Collective.reduce),
                          int(msg_op), int(reduce_op), _NONE, nbytes, int(dtype), 0), deps, sorted(srcs), (dst,))

    def all_to_all(self, stage: Stage, msg_op: MsgOp, srcs, dsts, nbytes: int, *, chunk=_NONE, layer=_NONE,
                   dtype: Dtype = Dtype.raw, residency: Residency = Residency.none, deps=()) -> int:
        """A personalized exchange: every source sends its own ``nbytes`` block to every
        destination other than itself (the NIC's all-to-all engine, pairwise schedule)."""
        return self._add((_K[Kind.all_to_all], int(stage), _NONE, chunk, layer, _NONE, 0, 0, int(Collective.all_to_all),
                          int(msg_op), 0, _NONE, nbytes, int(dtype), int(residency)), deps, sorted(srcs), sorted(dsts))

    def control(self, kind: Kind, owner: int, holders, kv_id: int, *, chunk: int, layer: int, deps=()) -> int:
        holders = sorted(holders)
        coll = Collective.unicast if len(holders) == 1 else Collective.multicast
        msg = MsgOp.drain if kind == Kind.drain else MsgOp.invalidate
        return self._add((int(kind), int(Stage.prefill), owner, chunk, layer, _NONE, 0, 0, int(coll), int(msg), 0,
                          kv_id, 0, 0, 0), deps, (owner,), holders)

    def repeat_layers(self, start: int, copies: int, segments: np.ndarray, steps: np.ndarray) -> None:
        """Append ``copies`` copies of the ops from ``start`` on (one layer's ops), copy i one
        layer further: its layer and KV block ids (those set) plus i, each dependency moved
        i layers on in its own segment. Segments are runs of ops laid out layer after layer
        (a chunk): ``segments`` their first op ids in ascending order, ``steps`` their ops per
        layer; the copied layer's dependencies must all lie in its own layer of their segment
        or the layer before in its own segment, which every layer's ops then repeat. Ids come
        out as if each layer had been added op by op (the generators' order): a model whose
        layers cost the same makes the same ops per layer, so one layer built op by op and
        stamped is the whole chunk, for the Python cost of one."""
        n, k = len(self), len(self) - start
        if copies <= 0 or k <= 0:
            return
        ncol = len(SCALAR_COLUMNS)
        i = np.arange(1, copies + 1, dtype=np.int64)
        # numpy views of the packed arrays pin their buffers: the new bytes are made first,
        # the views dropped, and only then are the arrays extended
        rows = np.frombuffer(self._rows, dtype=np.int64).reshape(-1, ncol)[start:]
        new = np.repeat(rows[None], copies, axis=0)
        new[:, :, _LAYER] += i[:, None]
        new[:, :, _KV] += np.where(rows[:, _KV] >= 0, 1, 0)[None, :] * i[:, None]
        out = {"_rows": new.tobytes()}
        del rows, new
        for name in ("dep", "src", "dst", "blk"):
            ptr = np.frombuffer(getattr(self, f"_{name}_ptr"), dtype=np.int64)[start:]
            idx = np.frombuffer(getattr(self, f"_{name}"), dtype=np.int64)[ptr[0]:]
            block = np.repeat(idx[None], copies, axis=0)
            if name == "dep" and idx.size:
                seg = np.searchsorted(segments, idx, side="right") - 1
                step = steps[seg]
                own = segments[seg] + step  # the copied layer's first op in each dependency's segment
                if seg.min() < 0 or not ((idx >= own - step) & (idx < own + step)).all():
                    raise AssertionError(f"ops {start}-{n - 1} depend on ops outside their own or the previous layer")
                # moved by whole layers, a dependency still points before its op: the order holds
                block += i[:, None] * step[None, :]
            out[f"_{name}"] = block.tobytes()
            out[f"_{name}_ptr"] = (ptr[1:][None] + ((ptr[-1] - ptr[0]) * i)[:, None]).tobytes()
            del ptr, idx, block
        for name, data in out.items():
            getattr(self, name).frombytes(data)

    def columns(self) -> dict[str, np.ndarray]:
        """The trace's columns, each in its file dtype; hands the ops over (the builder is
        empty after), so the rows and the columns are never held twice."""
        table = np.frombuffer(self._rows, dtype=np.int64).reshape(-1, len(SCALAR_COLUMNS))
        cols = {name: np.ascontiguousarray(table[:, j], dtype=dt) for j, (name, dt) in enumerate(SCALAR_COLUMNS.items())}
        del table
        self._rows = array("q")  # the rows are columns now: not held twice
        for name in ("dep", "src", "dst", "blk"):
            # views, not copies: each keeps its packed array alive, and the builder lets go below
            cols[f"{name}_ptr"] = np.frombuffer(getattr(self, f"_{name}_ptr"), dtype=np.int64)
            cols[f"{name}_idx"] = np.frombuffer(getattr(self, f"_{name}"), dtype=np.int64)
        self.__init__()
        return cols
