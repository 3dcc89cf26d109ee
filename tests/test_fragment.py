"""Fragmentation under an MTU and reassembly with loss, duplication and reordering."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.codec import (
    Flags,
    FrameError,
    Reassembler,
    decode_frames,
    encode_frames,
    fragment,
    max_payload,
    new_headers,
)
from emu.codec.errors import EncodeError

SETTINGS = settings(max_examples=200, deadline=None)
META = {"src_node": 3, "dst_set": 0b1010, "msg_id": 77, "kv_id": 9, "layer": 4, "op": 1, "seq": 100}


def test_sizes_under_mtu():
    h, pay = fragment(META, data=bytes(3000), mtu=1500)
    assert max_payload(1500) == 1452
    assert h["pay_len"].tolist() == [1452, 1452, 96]
    assert h["offset"].tolist() == [0, 1452, 2904]
    assert h["frag_idx"].tolist() == [0, 1, 2] and set(h["frag_cnt"].tolist()) == {3}
    assert set(h["msg_len"].tolist()) == {3000}
    assert h["seq"].tolist() == [100, 101, 102]
    assert all(h[k].tolist() == [v] * 3 for k, v in META.items() if k != "seq")
    buf, offsets = encode_frames(h, pay)
    assert np.diff(offsets).max() == 1500 + 14  # an MTU-sized Ethernet payload plus the Ethernet header


def test_exact_multiple_and_empty_messages():
    h, _ = fragment(META, data=bytes(2 * 1452))
    assert h["pay_len"].tolist() == [1452, 1452]
    h, pay = fragment(META, data=b"")
    assert h["pay_len"].tolist() == [0] and h["frag_cnt"].tolist() == [1] and len(pay) == 0


def test_timing_mode_sets_synth_and_real_mode_clears_it():
    h, pay = fragment({**META, "flags": Flags.ACK_REQ}, 10_000, mtu=9000)
    assert pay is None
    assert h["pay_len"].tolist() == [8952, 1048]
    assert set(h["flags"].tolist()) == {Flags.ACK_REQ | Flags.SYNTH}
    h, _ = fragment({**META, "flags": Flags.SYNTH}, data=b"x")
    assert h["flags"].tolist() == [0]


def test_many_messages_at_once():
    rows = new_headers(3, dst_set=1, msg_id=[1, 2, 3], seq=[0, 10, 20])
    h, _ = fragment(rows, [0, 4000, 1452])
    assert h["msg_id"].tolist() == [1, 2, 2, 2, 3]
    assert h["frag_idx"].tolist() == [0, 0, 1, 2, 0]
    assert h["seq"].tolist() == [0, 10, 11, 12, 20]
    data = bytes(range(100)) * 30
    h, pay = fragment(rows, [1000, 0, 2000], data=data, mtu=1048)
    assert h["pay_len"].tolist() == [1000, 0, 1000, 1000]
    assert pay.tobytes() == data


def test_limits():
    with pytest.raises(EncodeError, match="mtu: 48"):
        fragment(META, 10, mtu=48)
    with pytest.raises(EncodeError, match="message 0: msg_len: 4294967295 bytes need 2957967 fragments "
                                          "at mtu 1500, at most 65535"):
        fragment(META, 2**32 - 1, mtu=1500)
    with pytest.raises(EncodeError, match="data: 3 bytes given, the messages total 4"):
        fragment(new_headers(2, dst_set=1), [2, 2], data=b"abc")
    h, _ = fragment(META, 65535 * 1452)
    assert len(h) == 65535


def frames_of(msg_id, data, mtu=200, src=3):
    h, pay = fragment({**META, "msg_id": msg_id, "src_node": src}, data=data, mtu=mtu)
    buf, offsets = encode_frames(h, pay)
    return decode_frames(buf, offsets)


def test_reassembly_in_order():
    data = bytes(range(256)) * 3
    f = frames_of(1, data)
    r = Reassembler()
    done = [r.add(f.headers[i], f.payload(i)) for i in range(len(f))]
    assert done[:-1] == [None] * (len(f) - 1)
    msg = done[-1]
    assert msg.data == data and msg.msg_len == len(data) and msg.frag_cnt == len(f)
    assert (msg.src_node, msg.msg_id, msg.duplicates, msg.out_of_order) == (3, 1, 0, 0)
    assert int(msg.header["kv_id"]) == 9 and r.pending() == [] and r.completed == 1


def test_missing_duplicate_out_of_order():
    data = bytes(range(190)) * 4
    f = frames_of(1, data)  # 5 fragments of 152 bytes
    r = Reassembler()
    for i in [3, 0, 0, 4, 1]:
        assert r.add(f.headers[i], f.payload(i)) is None
    (p,) = r.pending()
    assert (p.src_node, p.msg_id, p.frag_cnt, p.missing) == (3, 1, 5, [2])
    assert r.duplicates == 1 and r.out_of_order == 2
    msg = r.add(f.headers[2], f.payload(2))
    assert msg.data == data and msg.duplicates == 1 and msg.out_of_order == 3
    assert r.add(f.headers[2], f.payload(2)) is None and r.duplicates == 2  # late duplicate: counted, not restarted
    assert r.pending() == []


def test_messages_are_keyed_by_source_and_id():
    a, b = frames_of(5, b"a" * 300, src=1), frames_of(5, b"b" * 300, src=2)
    r = Reassembler()
    out = r.add_frames(a) + r.add_frames(b)
    assert [(m.src_node, m.data) for m in out] == [(1, b"a" * 300), (2, b"b" * 300)]


def test_mismatched_totals_and_ranges():
    f = frames_of(1, bytes(500))
    r = Reassembler()
    r.add(f.headers[0], f.payload(0))
    h = f.headers[1].copy()
    h["frag_cnt"] = 9
    with pytest.raises(FrameError, match="message n3#1 fragment 1: frag_cnt: 9 disagrees with 4") as exc:
        r.add(h, f.payload(1))
    assert exc.value.field == "frag_cnt"
    h = f.headers[1].copy()
    h["msg_len"] = 600
    with pytest.raises(FrameError, match="msg_len: 600 disagrees with 500"):
        r.add(h, f.payload(1))
    with pytest.raises(FrameError, match="duplicate differs from the first copy"):
        r.add(f.headers[0], b"\1" * 152)
    with pytest.raises(FrameError, match="pay_len: 152 but 3 payload bytes given"):
        r.add(f.headers[1], b"abc")


def test_fragments_must_tile_the_message():
    f = frames_of(1, bytes(300))  # 152 + 148
    r = Reassembler()
    r.add(f.headers[0], f.payload(0))
    h = f.headers[1].copy()
    h["offset"] = 150
    with pytest.raises(FrameError, match="offset: fragment 1 starts at byte 150, expected 152"):
        r.add(h, f.payload(1))


def test_timing_mode_completion_record():
    h, _ = fragment(META, 5000)
    r = Reassembler()
    done = [r.add(row) for row in h[::-1]]
    assert done[-1].data is None and done[-1].msg_len == 5000 and done[-1].out_of_order == 3


@SETTINGS
@given(st.binary(max_size=2000), st.integers(49, 600), st.randoms(use_true_random=False), st.integers(0, 3))
def test_any_arrival_order_with_duplicates_reassembles(data, mtu, rnd, extra):
    f = frames_of(7, data, mtu=mtu)
    order = list(range(len(f))) + [rnd.randrange(len(f)) for _ in range(extra)]
    rnd.shuffle(order)
    r = Reassembler()
    done = [m for i in order if (m := r.add(f.headers[i], f.payload(i)))]
    assert len(done) == 1 and done[0].data == data
    assert r.duplicates == extra and r.pending() == []
