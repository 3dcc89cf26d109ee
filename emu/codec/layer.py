"""The MCF header as a scapy layer: the single declaration of the wire format.

Everything else (the numpy dtype, the Lua dissector, the docs tables) is
derived from ``MCF.fields_desc`` and the enums, so a field changes in one place.
"""

from __future__ import annotations

import struct

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    ShortField,
    XLongField,
)
from scapy.config import conf
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from .enums import ETHERTYPE, VERSION, Collective, Dtype, Flags, Op, ReduceOp, Stage
from .mac import ETH_LEN, GROUP_MAC_PREFIX, MAC_PREFIX


def _names(enum_cls) -> dict[int, str]:
    return {int(m): m.name for m in enum_cls}


# what each field means; the Lua dissector and docs/wire-format.md use the same words
FIELD_DOCS: dict[str, str] = {
    "version": "header version, 1",
    "flags": "ACK_REQ=0x01 receiver acknowledges, RETX=0x02 retransmission, SYNTH=0x04 payload not carried",
    "stage": "execution stage",
    "op": "operation the NIC performs",
    "collective": "collective pattern",
    "reduce_op": "reduction operator",
    "dtype": "payload element type",
    "ttl": "hop limit, decremented per forwarding hop",
    "src_node": "sending board id",
    "route_id": "0 = none, else a route / multicast group installed in the NIC",
    "dst_set": "destination bitmask, bit i = board i",
    "kv_id": "KV block id",
    "layer": "transformer layer",
    "frag_idx": "fragment index, 0-based",
    "frag_cnt": "fragments in the message, >= 1",
    "msg_id": "message id, unique per source",
    "seq": "sequence number for reliable delivery",
    "offset": "byte offset of this fragment's payload in the message",
    "msg_len": "total message bytes",
    "pay_len": "payload bytes in this frame",
}


class MCF(Packet):
    """Meta header of one MCF frame; the payload follows as Raw."""

    name = "MCF"
    fields_desc = [
        ByteField("version", VERSION),
        FlagsField("flags", 0, 8, [f.name for f in Flags]),
        ByteEnumField("stage", Stage.prefill, _names(Stage)),
        ByteEnumField("op", Op.kv_replica, _names(Op)),
        ByteEnumField("collective", Collective.unicast, _names(Collective)),
        ByteEnumField("reduce_op", ReduceOp.none, _names(ReduceOp)),
        ByteEnumField("dtype", Dtype.raw, _names(Dtype)),
        ByteField("ttl", 16),
        ShortField("src_node", 0),
        ShortField("route_id", 0),
        XLongField("dst_set", 0),
        IntField("kv_id", 0),
        ShortField("layer", 0),
        ShortField("frag_idx", 0),
        ShortField("frag_cnt", 1),
        IntField("msg_id", 0),
        IntField("seq", 0),
        IntField("offset", 0),
        IntField("msg_len", None),  # None: offset + pay_len (a one-frame message)
        ShortField("pay_len", None),  # None: length of the payload layer
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        pay_len = len(pay) if self.pay_len is None else self.pay_len
        if self.pay_len is None:
            pkt = pkt[: _OFF["pay_len"]] + struct.pack("!H", pay_len) + pkt[_OFF["pay_len"] + 2 :]
        if self.msg_len is None:
            msg_len = (self.offset or 0) + pay_len
            pkt = pkt[: _OFF["msg_len"]] + struct.pack("!I", msg_len) + pkt[_OFF["msg_len"] + 4 :]
        return pkt + pay

    def extract_padding(self, s: bytes):
        # bytes past pay_len are Ethernet padding, not payload
        n = len(s) if self.pay_len is None else self.pay_len
        return s[:n], s[n:]

    def mysummary(self) -> str:
        return summary_line(self)


def field_layout() -> list[tuple[str, int, int]]:
    """(name, byte offset, byte size) of every header field, in wire order."""
    out, off = [], 0
    for f in MCF.fields_desc:
        size = int(f.sz)  # FlagsField reports bits/8 as a float
        assert size == f.sz, f"{f.name} is not a whole number of bytes"
        out.append((f.name, off, size))
        off += size
    return out


_OFF = {name: off for name, off, _ in field_layout()}
HEADER_LEN = sum(size for _, _, size in field_layout())
FRAME_HEADER_LEN = ETH_LEN + HEADER_LEN
# byte offset of each MCF header field in a whole frame (past the Ethernet header)
FRAME_OFFSETS = {name: ETH_LEN + off for name, off, _ in field_layout()}
FIELD_SIZES = {name: size for name, _, size in field_layout()}  # bytes of each field


def _fmt_mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def node_mac(board: int) -> str:
    """Ethernet address of board ``board`` (0..65535)."""
    return _fmt_mac(MAC_PREFIX + struct.pack("!H", board))


def group_mac(route_id: int = 0) -> str:
    """Ethernet group address of frames for a destination set or route ``route_id``."""
    return _fmt_mac(GROUP_MAC_PREFIX + struct.pack("!H", route_id))


def dst_mac(dst_set: int, route_id: int) -> str:
    """A single destination board gets its own MAC; a set or a route gets the group MAC."""
    if route_id == 0 and dst_set and dst_set & (dst_set - 1) == 0:
        return node_mac(dst_set.bit_length() - 1)
    return group_mac(route_id)


def mcf_frame(payload: bytes = b"", *, eth_src: int | None = None, **fields) -> Packet:
    """``Ether/MCF/Raw`` with the MACs the batch encoder would put there."""
    hdr = MCF(**fields)
    src = hdr.src_node if eth_src is None else eth_src
    pkt = Ether(dst=dst_mac(hdr.dst_set, hdr.route_id), src=node_mac(src), type=ETHERTYPE) / hdr
    return pkt / Raw(payload) if payload else pkt


def dst_boards(dst_set: int) -> list[int]:
    return [i for i in range(64) if dst_set >> i & 1]


def summary_line(h) -> str:
    """``MCF kv_replica n3->{0,5} kv=17 L2 frag 1/4`` (fragment number shown 1-based).

    ``h``: an MCF layer or a header row (numpy record or mapping).
    """
    v = (lambda f: int(getattr(h, f))) if isinstance(h, Packet) else (lambda f: int(h[f]))
    op = Op(v("op")).name if v("op") in Op._value2member_map_ else f"op{v('op')}"
    route = v("route_id")
    dst = f"route{route}" if route else "{" + ",".join(map(str, dst_boards(v("dst_set")))) + "}"
    text = f"MCF {op} n{v('src_node')}->{dst} kv={v('kv_id')} L{v('layer')} frag {v('frag_idx') + 1}/{v('frag_cnt')}"
    flags = v("flags")
    if flags:
        text += " " + "|".join(f.name for f in Flags if flags & f)
    return text


bind_layers(Ether, MCF, type=ETHERTYPE)
# lets ``Ether()/MCF(dst_set=...)`` pick the right destination MAC without a warning
conf.neighbor.register_l3(Ether, MCF, lambda l2, l3: dst_mac(l3.dst_set, l3.route_id))
