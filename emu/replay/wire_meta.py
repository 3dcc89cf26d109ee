"""The Meta of each message the compiled loop sent, for its capture.

The compiled loop keeps what decides timing (a message's kernel row, its transfer, what a
control frame is about) and not the header fields a capture shows. They follow from those
rows by the rules the Python reference NICs (tests/pycluster.py) apply when it hands a send to the network:

- a data message of transfer ``tr`` (a communication op's part, a drain or invalidate, a
  reduction's partial result, one pair of an all-to-all) carries the op's Meta: the wire op
  the trace names, its stage (``control`` for drains and invalidates), its collective
  (``reduce`` for partial results, ``all_to_all`` for a pair, the trace's for a part,
  unicast or multicast by destination count for a drain), kv_id, layer, reduce_op and
  dtype as the Python path passes them, the destination set (dst_set holds boards 0-63; a
  message to a board beyond them also names its route, route_id = route + 1, the unicast
  route to board b being b: docs/wire-format.md), and per source board a
  message id and a sequence number counted in the order the source sent its messages;
- a signal (a dependency released across boards, Cluster.signal) is a data message of
  its own transfer: op ``signal``, stage ``control``, unicast, the kv_id and layer of the
  op whose event it reports, dtype raw;
- an ack, probe (an ack with ACK_REQ) or nack carries the id and sequence number of the
  message it is about (``emu.nic.control.control_meta``).

``tests/test_capture_compiled.py`` holds the captures of both engines byte for byte equal.
"""

from __future__ import annotations

import numpy as np

from ..codec import Collective, Dtype, Flags, Op, ReduceOp, Stage, new_headers
from ..codec.layer import FRAME_HEADER_LEN
from ..net import kernel as K
from ..nic.control import TTL
from ..workload.enums import Stage as TStage
from ..engine import boards
from ..engine import layout as L


class WireMessages:
    """The header rows of the compiled loop's messages (by kernel row), while it runs and after."""

    def __init__(self, st, trace, reliable: bool, block_id):
        self.st, self.reliable, self.block_id = st, reliable, block_id  # block_id: Tables.block_id
        ops = trace.ops
        self.ops = {k: np.asarray(ops[k]).astype(np.int64) for k in ("stage", "collective", "reduce_op", "dtype", "layer")}
        self.msg_id = np.zeros(0, np.int64)  # per data message: its source's message counter
        self.seq = np.zeros(0, np.int64)     # ... and sequence number (fragments sent before it)
        self.next_id = np.zeros(1 << 16, np.int64)   # per source board: the next message id ...
        self.next_seq = np.zeros(1 << 16, np.int64)  # ... and sequence number
        self.numbered = 0

    def _control(self, MX, m: np.ndarray) -> np.ndarray:
        return (MX[m, L.MX_CTRL] != L.CTRL_DATA) if self.reliable else np.zeros(len(m), bool)

    def _number(self, upto: int, MS, MX) -> None:
        """Count each source's data messages in the order it sent them, up to kernel row ``upto``
        (Cluster._send_part: one id per message, the sequence number advancing by its fragments)."""
        a = self.numbered
        if upto <= a:
            return
        if upto > len(self.msg_id):
            grow = max(upto, 2 * len(self.msg_id))
            self.msg_id = np.concatenate([self.msg_id, np.zeros(grow - len(self.msg_id), np.int64)])
            self.seq = np.concatenate([self.seq, np.zeros(grow - len(self.seq), np.int64)])
        m = np.arange(a, upto)
        m = m[~self._control(MX, m)]  # a control frame takes no number of its own
        src, nfr = MS[m, K.M_SRC], MS[m, K.M_NFRAGS]
        order = np.argsort(src, kind="stable")  # by source, in send order within one
        s_src, s_nfr = src[order], nfr[order]
        first = np.flatnonzero(np.r_[True, s_src[1:] != s_src[:-1]])
        group = np.repeat(first, np.diff(np.r_[first, len(order)]))
        rank = np.arange(len(order)) - group
        before = np.cumsum(s_nfr) - s_nfr
        before -= before[group]
        ids, seqs = np.empty(len(m), np.int64), np.empty(len(m), np.int64)
        ids[order] = self.next_id[s_src] + rank
        seqs[order] = self.next_seq[s_src] + before
        self.msg_id[m], self.seq[m] = ids & 0xFFFFFFFF, seqs & 0xFFFFFFFF
        total = np.bincount(src, minlength=len(self.next_id))
        frags = np.bincount(src, weights=nfr, minlength=len(self.next_id)).astype(np.int64)
        self.next_id += total
        self.next_seq += frags
        self.numbered = upto

    def headers(self, mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Header rows (fragment fields left to the caller) and fragment counts of ``mids``."""
        MS, MD, MX, TR = (self.st.table(n) for n in ("MS", "MD", "MX", "TR"))
        mids = np.asarray(mids, np.int64)
        self._number(int(mids.max(initial=-1)) + 1, MS, MX)
        n = len(mids)
        row = MS[mids]
        nfrags = row[:, K.M_NFRAGS]
        msg_len = (nfrags - 1) * (row[:, K.M_FLEN] - FRAME_HEADER_LEN) + row[:, K.M_LLEN] - FRAME_HEADER_LEN
        src = row[:, K.M_SRC]
        h = new_headers(n, src_node=src, msg_len=msg_len, ttl=TTL)
        ctrl = self._control(MX, mids)

        d = ~ctrl  # data messages: their transfer's Meta (Cluster.send and its callers)
        dm = mids[d]
        tr = TR[MX[dm, L.MX_TR]]
        cb, op = tr[:, L.TR_CB], tr[:, L.TR_OP]
        dsets = tr[:, L.TR_DMASK: L.TR_DMASK + self.st.table("RS")[L.RS_MASKW]]
        o = {k: v[op] for k, v in self.ops.items()}
        is_ctrl = (cb == L.CB_CTRL) | (cb == L.CB_SIG)  # drains, invalidates and signals: Stage control
        is_red, is_a2a = cb == L.CB_RED, cb == L.CB_A2A
        stage = np.where(o["stage"] == int(TStage.decode), int(Stage.decode), int(Stage.prefill))
        single = boards.count(dsets) == 1
        collective = np.select([is_ctrl, is_red, is_a2a],
                               [np.where(single, int(Collective.unicast), int(Collective.multicast)),
                                int(Collective.reduce), int(Collective.all_to_all)], o["collective"])
        h["op"][d] = tr[:, L.TR_MSGOP]
        h["stage"][d] = np.where(is_ctrl, int(Stage.control), stage)  # Cluster.replica_control
        h["collective"][d] = collective
        h["kv_id"][d] = self.block_id(tr[:, L.TR_KV])
        h["layer"][d] = np.maximum(o["layer"], 0)
        h["reduce_op"][d] = np.where(is_red, o["reduce_op"], int(ReduceOp.none))  # Reduction._forward
        h["dtype"][d] = np.where(is_ctrl, int(Dtype.raw), o["dtype"])
        h["dst_set"][d] = dsets[:, 0].astype(np.uint64)  # boards 0-63; beyond them the route_id
        h["route_id"][d] = np.where((dsets[:, 1:] != 0).any(axis=1), tr[:, L.TR_ROUTE] + 1, 0)
        h["msg_id"][d], h["seq"][d] = self.msg_id[dm], self.seq[dm]
        flags = int(Flags.ACK_REQ) if self.reliable else 0

        c = ctrl  # acks, probes (acks with ACK_REQ), nacks: emu.nic.control.control_meta
        if c.any():
            cm = mids[c]
            kind, about = MX[cm, L.MX_CTRL], MX[cm, L.MX_ABOUT]
            dst = MD[MS[cm, K.M_DPTR], K.D_NODE]
            h["op"][c] = np.where(kind == L.CTRL_NACK, int(Op.nack), int(Op.ack))
            h["stage"][c] = int(Stage.control)
            h["collective"][c] = int(Collective.unicast)
            h["dst_set"][c] = np.where(dst < 64, np.left_shift(np.uint64(1), np.minimum(dst, 63).astype(np.uint64)),
                                       np.uint64(0))
            h["route_id"][c] = np.where(dst < 64, 0, dst + 1)  # the unicast route to board b is b
            h["msg_id"][c], h["seq"][c] = self.msg_id[about], self.seq[about]
        h["flags"] = np.where(c, np.where(MX[mids, L.MX_CTRL] == L.CTRL_PROBE, int(Flags.ACK_REQ), 0) if self.reliable
                              else 0, flags) | int(Flags.SYNTH)
        return h, nfrags
