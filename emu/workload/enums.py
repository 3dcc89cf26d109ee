"""Enumerations of the trace's op columns, declared once.

``Collective``, ``ReduceOp`` and ``Dtype`` are the codec's own (``emu.codec.enums``, which
loads no scapy); ``MsgOp`` is made from the codec's ``Op`` (the ops a trace can name, at the
wire's values, and ``none`` for compute ops), and ``Stage`` keeps the codec's values for what a
trace can name, so a replay copies them into frame headers as they are
(tests/test_trace_format.py checks that they agree).
"""

from __future__ import annotations

import enum

# The wire's own enumerations: a trace names collectives, reductions and payload types
# exactly as frames do (emu.codec.enums imports nothing heavy).
from ..codec.enums import Collective, Dtype, Op, ReduceOp  # noqa: F401


class Kind(enum.IntEnum):
    # compute (run on a node's compute engine, one at a time per node)
    qkv = 0
    attn = 1
    mlp = 2
    lm_head = 3
    decode_qkv = 4
    decode_attn = 5
    decode_mlp = 6
    decode_lm_head = 7
    # communication (run in the NICs and links)
    send = 8
    reduce = 9
    all_to_all = 10
    # control (frames from a block's owner to its replica holders)
    drain = 11
    invalidate = 12


COMPUTE_KINDS = frozenset(k for k in Kind if k <= Kind.decode_lm_head)
COMM_KINDS = frozenset({Kind.send, Kind.reduce, Kind.all_to_all})
CONTROL_KINDS = frozenset({Kind.drain, Kind.invalidate})


class Stage(enum.IntEnum):
    prefill = 0
    decode = 1


# A trace's msg_op: the wire's ops at the wire's values (emu.codec.enums.Op), but not the NIC's
# own ack, nack and signal, which no trace sends; none (0) for compute ops.
MsgOp = enum.IntEnum("MsgOp", [("none", 0)] + [(op.name, op.value) for op in Op
                                                if op not in (Op.ack, Op.nack, Op.signal)],
                     module=__name__, qualname="MsgOp")

# The ops whose payload is KV (a replica push, a fetched block, a ring pass or PD handoff): as a
# tuple for numpy, and as a bit mask (bit op) for the compiled loop.
KV_OPS = (int(MsgOp.kv_replica), int(MsgOp.kv_fetch_resp), int(MsgOp.kv_transfer))
KV_OPS_MASK = sum(1 << op for op in KV_OPS)


class Residency(enum.IntEnum):
    none = 0  # compute ops, control frames, decode queries/states (consumed by the NIC or op)
    replica = 1  # VALID in the receiver's directory until an invalidate names it
    transient = 2  # freed once every op at the receiver that depends on this delivery finished
    owner = 3  # becomes owned by the receiver (PD handoff, a decode token's KV)


# column name -> enum, for validation and docs
ENUM_COLUMNS: dict[str, type[enum.IntEnum]] = {
    "kind": Kind,
    "stage": Stage,
    "collective": Collective,
    "msg_op": MsgOp,
    "reduce_op": ReduceOp,
    "dtype": Dtype,
    "residency": Residency,
}
