"""Enumerations of the trace's op columns, declared once.

The values of ``Stage``, ``Collective``, ``MsgOp``, ``ReduceOp`` and ``Dtype`` equal the
codec's (``emu.codec.enums``) so a replay can copy them into frame headers as they are;
tests/test_trace_format.py checks that they agree. We do not import the codec here: a
trace is data, and the workload must not pull in scapy.
"""

from __future__ import annotations

import enum


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


class Collective(enum.IntEnum):
    unicast = 0
    multicast = 1
    all_to_all = 2
    reduce = 3
    all_reduce = 4


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


class ReduceOp(enum.IntEnum):
    none = 0
    max = 1
    sum = 2
    merge = 3


class Dtype(enum.IntEnum):
    raw = 0
    int4 = 1
    int8 = 2
    fp16 = 3
    fp32 = 4


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
