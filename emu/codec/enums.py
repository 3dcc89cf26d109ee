"""The enumerations of the MCF header, declared once.

The scapy layer, the batch codec's validation, the Lua dissector and the docs
all read these classes; nothing else spells out a value.
"""

from __future__ import annotations

import enum

ETHERTYPE = 0x88B5  # IEEE 802 "local experimental EtherType 1"
VERSION = 1


class Flags(enum.IntFlag):
    ACK_REQ = 0x01  # receiver acknowledges
    RETX = 0x02  # a retransmission
    SYNTH = 0x04  # timing-mode frame: payload bytes not carried (zero-filled or cut by snaplen)


class Stage(enum.IntEnum):
    prefill = 0
    decode = 1
    control = 2


class Op(enum.IntEnum):
    kv_replica = 1
    kv_fetch_req = 2
    kv_fetch_resp = 3
    kv_transfer = 4  # ring pass / prefill-to-decode handoff
    drain = 5
    invalidate = 6
    query = 7
    partial_state = 8
    reduce_result = 9
    ack = 10
    nack = 11
    signal = 12  # a dependency released across boards: an event at the source lets parts at the destination start


# Ops whose frames answer a message their destination sent: msg_id and seq are that message's,
# so a frame of theirs is named by its dst_set too (two boards' messages 3 get acks alike else).
REPLY_OPS = (Op.ack, Op.nack)


class Collective(enum.IntEnum):
    unicast = 0
    multicast = 1
    all_to_all = 2
    reduce = 3
    all_reduce = 4


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


# header field -> its enumeration; validation and dissectors iterate this
ENUM_FIELDS: dict[str, type[enum.IntEnum]] = {
    "stage": Stage,
    "op": Op,
    "collective": Collective,
    "reduce_op": ReduceOp,
    "dtype": Dtype,
}
