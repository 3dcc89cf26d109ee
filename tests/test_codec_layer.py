"""The scapy layer: the header's single declaration."""

import struct

import pytest
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emu.codec import ETHERTYPE, HEADER_DTYPE, HEADER_LEN, MCF, Flags, Op, Stage, group_mac, mcf_frame, node_mac
from emu.codec.layer import dst_mac, field_layout

# the table fixed by the team: offset, struct code, name
WIRE_TABLE = [
    (0, "B", "version"), (1, "B", "flags"), (2, "B", "stage"), (3, "B", "op"), (4, "B", "collective"),
    (5, "B", "reduce_op"), (6, "B", "dtype"), (7, "B", "ttl"), (8, "H", "src_node"), (10, "H", "route_id"),
    (12, "Q", "dst_set"), (20, "I", "kv_id"), (24, "H", "layer"), (26, "H", "frag_idx"), (28, "H", "frag_cnt"),
    (30, "I", "msg_id"), (34, "I", "seq"), (38, "I", "offset"), (42, "I", "msg_len"), (46, "H", "pay_len"),
]


def test_layout_matches_the_team_table():
    assert HEADER_LEN == 48 == HEADER_DTYPE.itemsize
    assert [(off, name) for name, off, _ in field_layout()] == [(off, name) for off, _, name in WIRE_TABLE]
    assert [size for _, _, size in field_layout()] == [struct.calcsize(code) for _, code, _ in WIRE_TABLE]
    assert [(name, HEADER_DTYPE.fields[name][1]) for _, _, name in WIRE_TABLE] == [(n, o) for o, _, n in WIRE_TABLE]


def test_known_bytes():
    values = dict(version=1, flags=0x05, stage=1, op=8, collective=3, reduce_op=2, dtype=3, ttl=7, src_node=0x0102,
                  route_id=0x0304, dst_set=0x0506070809101112, kv_id=0x13141516, layer=0x1718, frag_idx=2,
                  frag_cnt=4, msg_id=0x191A1B1C, seq=0x1D1E1F20, offset=100, msg_len=1000, pay_len=3)
    expected = struct.pack("!" + "".join(code for _, code, _ in WIRE_TABLE), *(values[n] for _, _, n in WIRE_TABLE))
    assert bytes(MCF(**values)) == expected
    assert MCF(expected + b"abc").fields == values


def test_attribute_shortcut_reaches_the_mcf_layer():
    pkt = Ether(bytes(mcf_frame(b"xyz", src_node=3, dst_set=0b100001, kv_id=17, layer=2, offset=9, seq=5,
                                ttl=4, msg_len=12, flags="ACK_REQ+RETX")))
    assert (pkt.src_node, pkt.dst_set, pkt.kv_id, pkt.layer, pkt.offset, pkt.seq, pkt.ttl) == (3, 33, 17, 2, 9, 5, 4)
    assert pkt.pay_len == 3 and pkt.msg_len == 12
    assert pkt.src == node_mac(3) and pkt.dst == group_mac(0)  # Ether's own src/dst stay Ether's
    assert pkt[Raw].load == b"xyz"
    assert pkt.flags == Flags.ACK_REQ | Flags.RETX


def test_defaults_fill_lengths():
    h = Ether(bytes(Ether(dst=node_mac(1)) / MCF(dst_set=2, offset=1000) / b"12345"))[MCF]
    assert h.pay_len == 5 and h.msg_len == 1005 and h.version == 1 and h.frag_cnt == 1


def test_summary_and_show_read_well():
    pkt = mcf_frame(b"\0" * 4, src_node=3, dst_set=(1 << 0) | (1 << 5), kv_id=17, layer=2, frag_idx=0, frag_cnt=4,
                    msg_len=100)
    assert pkt[MCF].mysummary() == "MCF kv_replica n3->{0,5} kv=17 L2 frag 1/4"
    routed = mcf_frame(op=Op.partial_state, src_node=1, route_id=7, flags=Flags.SYNTH, msg_len=0)
    assert routed[MCF].mysummary() == "MCF partial_state n1->route7 kv=0 L0 frag 1/1 SYNTH"
    assert pkt.summary() == "Ether / MCF kv_replica n3->{0,5} kv=17 L2 frag 1/4 / Raw"
    shown = pkt.show(dump=True)
    assert "stage     = prefill" in shown and "op        = kv_replica" in shown and "dst_set   = 0x21" in shown
    assert MCF(stage=Stage.decode).show(dump=True).count("decode") == 1


def test_ethernet_padding_is_not_payload():
    raw = bytes(mcf_frame(b"ab", dst_set=1)) + b"\0\0\0\0"
    pkt = Ether(raw)
    assert pkt[Raw].load == b"ab" and len(pkt[MCF].payload.payload) == 4


def test_macs():
    assert node_mac(0) == "02:4d:43:46:00:00" and node_mac(0x1234) == "02:4d:43:46:12:34"
    assert group_mac(7) == "03:4d:43:46:00:07"
    assert dst_mac(1 << 63, 0) == node_mac(63)
    assert dst_mac(0b11, 0) == group_mac(0) and dst_mac(1, 5) == group_mac(5)
    assert Ether(bytes(Ether() / MCF(dst_set=1 << 9))).dst == node_mac(9)  # neighbour resolver, no broadcast


def test_binding():
    assert Ether(bytes(mcf_frame(dst_set=1))).type == ETHERTYPE == 0x88B5
    assert isinstance(Ether(bytes(mcf_frame(dst_set=1))).payload, MCF)


@pytest.mark.parametrize("field", ["stage", "op", "collective", "reduce_op", "dtype"])
def test_enum_names_show(field):
    assert MCF().get_field(field).i2repr(MCF(), 1) != "1"


def test_docs_list_every_field_and_enum_value():
    from pathlib import Path

    from emu.codec import ENUM_FIELDS

    doc = (Path(__file__).resolve().parents[1] / "docs" / "wire-format.md").read_text()
    for name, off, size in field_layout():
        kind = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}[size]
        assert f"| {off} | {kind} | `{name}` |" in doc, name
    for enum_cls in ENUM_FIELDS.values():
        for m in enum_cls:
            assert f"| {int(m)} | `{m.name}` |" in doc, (enum_cls.__name__, m.name)
    for f in Flags:
        assert f"| 0x{int(f):02x} | `{f.name}` |" in doc


def test_public_names_resolve_and_enums_stay_light():
    import subprocess
    import sys

    import emu.codec

    assert all(getattr(emu.codec, name) is not None for name in emu.codec.__all__)
    code = ("import sys, emu.codec.enums, emu.codec.pcap, emu.codec.fragment\n"
            "from emu.codec import Op, fragment, read_capture\n"
            "print('scapy' in sys.modules, callable(fragment))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]  # the engine and workloads can use these without scapy
    # the submodule does not shadow the function, whatever was imported first
    code = "from emu.codec.fragment import MAX_FRAGS\nfrom emu.codec import fragment\nprint(callable(fragment))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
