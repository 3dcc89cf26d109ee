"""Enumerations of the trace's op columns, declared once.

``Collective``, ``ReduceOp`` and ``Dtype`` are the codec's own (``emu.codec.enums``, which
loads no scapy); ``Stage`` and ``MsgOp`` keep the codec's values for what a trace can
name, so a replay copies them into frame headers as they are (tests/test_trace_format.py
checks that they agree).
"""

from __future__ import annotations

import enum

# The wire's own enumerations: a trace names collectives, reductions and payload types
# exactly as frames do (emu.codec.enums imports nothing heavy).
from ..codec.enums import Collective, Dtype, ReduceOp  # noqa: F401


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


class MsgOp(enum.IntEnum):
    none = 0  # compute ops
    kv_replica = 1
    kv_fetch_req = 2
    kv_fetch_resp = 3
    kv_transfer = 4
    drain = 5
    invalidate = 6
    query = 7
    partial_state = 8
    reduce_result = 9


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
