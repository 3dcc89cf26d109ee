"""The Meta of each message the compiled loop sent, for its capture.

The compiled loop keeps what decides timing (a message's kernel row, its transfer, what a
control frame is about) and not the header fields a capture shows. They follow from those
rows by the rules ``emu.nic.cluster.Cluster`` applies when it hands a send to the network:

- a data message of transfer ``tr`` (a communication op's part, a drain or invalidate, a
  reduction's partial result, one pair of an all-to-all) carries the op's Meta: the wire op
  the trace names, its stage (``control`` for drains and invalidates), its collective
  (``reduce`` for partial results, ``all_to_all`` for a pair, the trace's for a part,
  unicast or multicast by destination count for a drain), kv_id, layer, reduce_op and
  dtype as the Python path passes them, the destination set, and per source board a
  message id and a sequence number counted in the order the source sent its messages;
- an ack, probe (an ack with ACK_REQ) or nack carries the id and sequence number of the
  message it is about (``emu.nic.control.control_meta``).

``tests/test_capture_compiled.py`` holds the captures of both engines byte for byte equal.
"""

from __future__ import annotations

import numpy as np

from ..codec import Collective, Dtype, Flags, Op, ReduceOp, Stage
from ..codec.layer import FRAME_HEADER_LEN
from ..net import kernel as K
from ..nic.control import control_meta
from ..workload.enums import Stage as TStage
from . import core_layout as L

_CTRL_OP = {L.CTRL_ACK: Op.ack, L.CTRL_PROBE: Op.ack, L.CTRL_NACK: Op.nack}


class _Sent:
    """What a capture reads of a message: its Meta and fragment count (as Network.Message)."""

    __slots__ = ("meta", "nfrags")

    def __init__(self, meta: dict, nfrags: int):
        self.meta, self.nfrags = meta, nfrags


class WireMessages:
    """``messages[mid]`` for the compiled loop's kernel message rows, while it runs and after."""

    def __init__(self, st, trace, reliable: bool):
        self.st, self.reliable = st, reliable
        ops = trace.ops
        self.ops = {k: ops[k] for k in ("msg_op", "stage", "collective", "reduce_op", "dtype", "layer")}
        self.msg_id = np.zeros(0, np.int64)  # per data message: its source's message counter
        self.seq = np.zeros(0, np.int64)     # ... and sequence number (fragments sent before it)
        self._next = {}                      # source -> (next message id, next sequence number)
        self._numbered = 0

    def _number(self, upto: int) -> None:
        """Count the sources' messages in the order they were sent, up to kernel row ``upto``."""
        if upto <= self._numbered:
            return
        MS, MX = self.st.table("MS"), self.st.table("MX")
        if upto > len(self.msg_id):
            grow = max(upto, 2 * len(self.msg_id))
            self.msg_id = np.concatenate([self.msg_id, np.zeros(grow - len(self.msg_id), np.int64)])
            self.seq = np.concatenate([self.seq, np.zeros(grow - len(self.seq), np.int64)])
        for m in range(self._numbered, upto):
            if self.reliable and MX[m, L.X_CTRL] != L.CTRL_DATA:
                continue  # a control frame takes no number of its own
            src = int(MS[m, K.M_SRC])
            mid, seq = self._next.get(src, (0, 0))
            self.msg_id[m], self.seq[m] = mid, seq
            self._next[src] = ((mid + 1) & 0xFFFFFFFF, (seq + int(MS[m, K.M_NFRAGS])) & 0xFFFFFFFF)
        self._numbered = upto

    def __getitem__(self, m: int) -> _Sent:
        self._number(m + 1)
        MS, MD, MX, TR = (self.st.table(n) for n in ("MS", "MD", "MX", "TR"))
        row = MS[m]
        nfrags = int(row[K.M_NFRAGS])
        msg_len = (nfrags - 1) * (int(row[K.M_FLEN]) - FRAME_HEADER_LEN) + int(row[K.M_LLEN]) - FRAME_HEADER_LEN
        src = int(row[K.M_SRC])
        if self.reliable and MX[m, L.X_CTRL] != L.CTRL_DATA:
            kind, about = int(MX[m, L.X_CTRL]), int(MX[m, L.X_ABOUT])
            dst = int(MD[row[K.M_DPTR], K.D_NODE])
            meta = dict(control_meta(src, dst, _CTRL_OP[kind], msg_id=int(self.msg_id[about]),
                                     seq=int(self.seq[about]), probe=kind == L.CTRL_PROBE), msg_len=msg_len)
            return _Sent(meta, nfrags)
        tr = TR[MX[m, L.X_TR]]
        cb, op, dmask = int(tr[L.T_CB]), int(tr[L.T_OP]), int(tr[L.T_DMASK])
        o = self.ops
        stage = Stage.decode if o["stage"][op] == TStage.decode else Stage.prefill
        layer, dtype, reduce_op = max(int(o["layer"][op]), 0), int(Dtype(o["dtype"][op])), int(ReduceOp.none)
        if cb == L.CB_CTRL:  # Cluster.replica_control
            stage, dtype = Stage.control, int(Dtype.raw)
            collective = Collective.unicast if dmask & (dmask - 1) == 0 else Collective.multicast
        elif cb == L.CB_RED:  # Reduction._forward
            collective, reduce_op = Collective.reduce, int(ReduceOp(o["reduce_op"][op]))
        elif cb == L.CB_A2A:  # AllToAll._step
            collective = Collective.all_to_all
        else:
            collective = Collective(o["collective"][op])
        meta = dict(op=int(tr[L.T_MSGOP]), stage=int(stage), collective=int(collective), kv_id=int(tr[L.T_KV]),
                    layer=layer, reduce_op=reduce_op, dtype=dtype, src_node=src,
                    dst_set=dmask & 0xFFFFFFFFFFFFFFFF, msg_id=int(self.msg_id[m]), seq=int(self.seq[m]),
                    msg_len=msg_len, flags=int(Flags.ACK_REQ) if self.reliable else 0)
        return _Sent(meta, nfrags)
