"""Batch codec: byte-identical to scapy both ways, and strict about malformed frames."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.l2 import Ether

from emu.codec import (
    ENUM_FIELDS,
    FRAME_HEADER_LEN,
    HEADER_DTYPE,
    MCF,
    REASONS,
    Flags,
    FrameError,
    decode_frames,
    encode_frames,
    frame_wirelen,
    mcf_frame,
    new_headers,
    scan_frames,
)
from emu.codec.errors import EncodeError
from emu.errors import DecodeError
from emu.codec.segments import copy_segments

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U16, U32, U64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


@st.composite
def header_rows(draw):
    """One valid header over the whole range of every field."""
    enums = {f: draw(st.sampled_from([int(m) for m in e])) for f, e in ENUM_FIELDS.items()}
    frag_cnt = draw(st.integers(1, U16))
    pay_len = draw(st.one_of(st.integers(0, 64), st.integers(0, U16)))
    offset = draw(st.integers(0, U32 - pay_len))
    route_id = draw(st.one_of(st.just(0), st.integers(0, U16)))
    dst_set = draw(st.integers(1 if route_id == 0 else 0, U64))
    return dict(
        version=1, flags=draw(st.integers(0, 7)), ttl=draw(st.integers(0, 255)), **enums,
        src_node=draw(st.integers(0, U16)), route_id=route_id, dst_set=dst_set, kv_id=draw(st.integers(0, U32)),
        layer=draw(st.integers(0, U16)), frag_idx=draw(st.integers(0, frag_cnt - 1)), frag_cnt=frag_cnt,
        msg_id=draw(st.integers(0, U32)), seq=draw(st.integers(0, U32)), offset=offset,
        msg_len=draw(st.integers(offset + pay_len, U32)), pay_len=pay_len,
    )


def to_array(rows):
    h = np.zeros(len(rows), dtype=HEADER_DTYPE)
    for i, r in enumerate(rows):
        for k, v in r.items():
            h[k][i] = v
    return h


def payloads_for(rows, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, r["pay_len"], dtype=np.uint8).tobytes() for r in rows]


@SETTINGS
@given(st.lists(header_rows(), min_size=1, max_size=4), st.integers(0, 2**32), st.data())
def test_batch_matches_scapy_both_ways(rows, seed, data):
    pays = payloads_for(rows, seed)
    eth_src = [data.draw(st.integers(0, U16)) for _ in rows]
    ref = [bytes(mcf_frame(p, eth_src=s, **r)) for r, p, s in zip(rows, pays, eth_src)]
    h = to_array(rows)

    buf, offsets = encode_frames(h, b"".join(pays), eth_src=eth_src)
    assert buf.tobytes() == b"".join(ref)
    assert offsets.tolist() == np.cumsum([0] + [len(f) for f in ref]).tolist()

    frames = decode_frames(b"".join(ref), offsets)
    assert frames.headers.tobytes() == h.tobytes()
    assert [bytes(p) for p in frames.payloads()] == pays
    for i, f in enumerate(ref):
        pkt = Ether(f)
        assert pkt[MCF].fields == rows[i]
        assert frames.eth_dst[i].tobytes() == f[:6] and frames.eth_src[i].tobytes() == f[6:12]


@SETTINGS
@given(st.lists(header_rows(), min_size=1, max_size=4), st.integers(FRAME_HEADER_LEN, 200))
def test_timing_mode_and_snaplen(rows, snaplen):
    for r in rows:
        r["flags"] |= Flags.SYNTH
    h = to_array(rows)
    buf, offsets = encode_frames(h, snaplen=snaplen)
    wire = frame_wirelen(h)
    assert np.diff(offsets).tolist() == np.minimum(wire, snaplen).tolist()
    frames = decode_frames(buf, offsets, wirelen=wire)
    assert frames.headers.tobytes() == h.tobytes()
    assert all(not p.any() for p in frames.payloads())  # zero-filled payload area
    full = [bytes(mcf_frame(b"\0" * r["pay_len"], **r))[:snaplen] for r in rows]
    assert buf.tobytes() == b"".join(full)


def one_frame(**fields):
    r = dict(dst_set=1, msg_len=4, pay_len=4, **fields)
    return bytearray(bytes(mcf_frame(b"abcd", **r)))


def put(frame, field, value):
    off = FRAME_HEADER_LEN - 48 + HEADER_DTYPE.fields[field][1]
    size = HEADER_DTYPE[field].itemsize
    frame[off : off + size] = value.to_bytes(size, "big")
    return frame


BAD = {
    "truncated": lambda: one_frame()[:61],
    "ethertype": lambda: one_frame()[:12] + b"\x08\x00" + one_frame()[14:],
    "version": lambda: put(one_frame(), "version", 2),
    "flags": lambda: put(one_frame(), "flags", 0x10),
    "stage": lambda: put(one_frame(), "stage", 3),
    "op": lambda: put(one_frame(), "op", 0),
    "collective": lambda: put(one_frame(), "collective", 5),
    "reduce_op": lambda: put(one_frame(), "reduce_op", 4),
    "dtype": lambda: put(one_frame(), "dtype", 5),
    "pay_len": lambda: put(one_frame(), "pay_len", 5),
    "frag_cnt": lambda: put(put(one_frame(), "frag_cnt", 0), "frag_idx", 0),
    "frag_idx": lambda: put(put(one_frame(), "frag_cnt", 3), "frag_idx", 3),
    "offset": lambda: put(one_frame(), "offset", 1),
    "dst_set": lambda: put(one_frame(), "dst_set", 0),
}


def test_every_check_has_a_case():
    assert set(BAD) | {"ok", "caplen"} == set(REASONS)


@pytest.mark.parametrize("reason", sorted(BAD))
def test_malformed_frame_names_field_and_index(reason):
    good = bytes(one_frame())
    bad = bytes(BAD[reason]())
    buf = good + good + bad + good
    offsets = np.cumsum([0, len(good), len(good), len(bad), len(good)])
    with pytest.raises(FrameError) as exc:
        decode_frames(buf, offsets)
    assert exc.value.field == reason and exc.value.index == 2
    assert str(exc.value).startswith(f"frame 2: {reason}: ")
    assert isinstance(exc.value, DecodeError)
    _, codes, _, _ = scan_frames(buf, offsets)
    assert [REASONS[c] for c in codes] == ["ok", "ok", reason, "ok"]


def test_messages_are_specific():
    def msg(reason):
        frame = bytes(BAD[reason]())
        with pytest.raises(FrameError) as exc:
            decode_frames(frame, [0, len(frame)])
        return str(exc.value)

    assert msg("op") == "frame 0: op: unknown value 0"
    assert msg("ethertype") == "frame 0: ethertype: 0x0800, expected 0x88b5"
    assert msg("pay_len") == "frame 0: pay_len: 5 but 4 payload bytes present"
    assert msg("truncated") == "frame 0: truncated: 61 bytes, the Ethernet and MCF headers need 62"
    assert msg("frag_idx") == "frame 0: frag_idx: 3 not below frag_cnt 3"
    assert msg("offset") == "frame 0: offset: offset 1 + pay_len 4 exceeds msg_len 4"


def test_wirelen_allows_a_snaplen_cut_only():
    frame = bytes(one_frame())
    cut = frame[:62]
    assert decode_frames(cut, [0, 62], wirelen=[len(frame)]).payload_size.tolist() == [0]
    with pytest.raises(FrameError, match="pay_len: 4 but the frame is 67 bytes on the wire .5 of payload."):
        decode_frames(cut, [0, 62], wirelen=[67])
    with pytest.raises(FrameError, match="frame 0: caplen"):
        decode_frames(frame, [0, len(frame)], wirelen=[62])
    with pytest.raises(FrameError, match="pay_len"):
        decode_frames(cut, [0, 62])  # without wirelen the frame must be whole


def test_encode_refuses_what_decode_would_reject():
    with pytest.raises(FrameError, match="frame 1: frag_idx"):
        encode_frames(new_headers(2, dst_set=1, frag_idx=[0, 1]), b"")
    with pytest.raises(FrameError, match="frame 0: flags: payload bytes not given but SYNTH not set"):
        encode_frames(new_headers(1, dst_set=1))
    with pytest.raises(EncodeError, match="payload: 3 bytes given, the headers' pay_len sum to 4"):
        encode_frames(new_headers(1, dst_set=1, pay_len=4, msg_len=4), b"abc")
    with pytest.raises(EncodeError, match="snaplen"):
        encode_frames(new_headers(1, dst_set=1, flags=Flags.SYNTH), snaplen=61)


def test_new_headers_uses_the_layer_defaults():
    h = new_headers(2, dst_set=[1, 2])
    assert h["dst_set"].tolist() == [1, 2]
    defaults = {f.name: int(f.default) for f in MCF.fields_desc if f.default is not None and f.name != "dst_set"}
    assert defaults["op"] == 1 and defaults["frag_cnt"] == 1 and defaults["version"] == 1
    assert all(h[name].tolist() == [value, value] for name, value in defaults.items())
    with pytest.raises(TypeError, match="no header field 'src'"):
        new_headers(1, src=1)


def test_empty_batch():
    buf, offsets = encode_frames(new_headers(0))
    assert len(buf) == 0 and offsets.tolist() == [0]
    assert len(decode_frames(buf, offsets)) == 0


def test_offsets_outside_the_buffer():
    frame = bytes(one_frame())
    with pytest.raises(FrameError, match="frame 0: offsets: outside the 66-byte buffer"):
        decode_frames(frame, [0, len(frame) + 1])
    with pytest.raises(FrameError, match="frame 1: offsets: frame ends at 3 before it starts at 66"):
        decode_frames(frame, [0, 66, 3])


# ---------------------------------------------------------------- fuzz

def decode_or_decode_error(buf, offsets, wirelen=None):
    try:
        decode_frames(buf, offsets, wirelen=wirelen)
    except DecodeError:
        pass


@SETTINGS
@given(st.binary(max_size=600), st.lists(st.integers(0, 700), max_size=8), st.booleans(), st.data())
def test_fuzz_random_bytes(blob, cuts, use_wirelen, data):
    offsets = sorted(cuts)
    if not offsets:
        offsets = [0]
    wirelen = None
    if use_wirelen:
        wirelen = data.draw(st.lists(st.integers(-5, 70000), min_size=len(offsets) - 1, max_size=len(offsets) - 1))
    decode_or_decode_error(blob, offsets, wirelen)


@SETTINGS
@given(st.lists(header_rows(), min_size=1, max_size=3), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                                   max_size=6), st.integers(-3, 3))
def test_fuzz_mutated_frames(rows, flips, trim):
    for r in rows:
        r["pay_len"] = min(r["pay_len"], 300)
        r["msg_len"] = max(r["msg_len"], r["offset"] + r["pay_len"])
    pays = payloads_for(rows, 0)
    buf, offsets = encode_frames(to_array(rows), b"".join(pays))
    buf = buf.copy()
    for pos, val in flips:
        buf[pos % len(buf)] = val
    offsets = offsets.copy()
    offsets[1:] = np.maximum.accumulate(np.clip(offsets[1:] + trim, 0, len(buf)))
    decode_or_decode_error(buf, offsets)
    decode_or_decode_error(buf, offsets, wirelen=np.diff(offsets) + trim)


# ---------------------------------------------------------------- segment copies

@SETTINGS
@given(st.lists(st.integers(0, 40), max_size=300), st.lists(st.integers(0, 4), max_size=300), st.integers(0, 3))
def test_copy_segments(lengths, gaps, dgap):
    n = len(lengths)
    lengths = np.array(lengths, dtype=np.int64)
    gaps = np.resize(np.array(gaps or [0], dtype=np.int64), n)
    src_starts = np.cumsum(lengths + gaps) - lengths - gaps
    dst_starts = np.cumsum(lengths + dgap) - lengths - dgap
    src = np.random.default_rng(n).integers(0, 256, int((lengths + gaps).sum()), dtype=np.uint8)
    dst = np.zeros(int((lengths + dgap).sum()), dtype=np.uint8)
    ref = dst.copy()
    for a, b, k in zip(dst_starts, src_starts, lengths):
        ref[a : a + k] = src[b : b + k]
    copy_segments(dst, dst_starts, src, src_starts, lengths)
    assert np.array_equal(dst, ref)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 16), st.integers(0, 5)), max_size=300), st.integers(1, 16))
def test_scatter_and_gather_rows(rows_spec, width):
    from emu.codec.segments import gather_rows, scatter_rows

    lengths = np.array([min(k, width) for k, _ in rows_spec], dtype=np.int64)
    gaps = np.array([g for _, g in rows_spec], dtype=np.int64)
    starts = np.cumsum(lengths + gaps) - lengths - gaps
    rows = np.random.default_rng(len(rows_spec)).integers(0, 256, (len(lengths), width), dtype=np.uint8)
    buf = np.full(int((lengths + gaps).sum()), 7, dtype=np.uint8)
    ref = buf.copy()
    for s, r, k in zip(starts, rows, lengths):
        ref[s : s + k] = r[:k]
    scatter_rows(buf, starts, rows, lengths)
    assert np.array_equal(buf, ref)
    back = gather_rows(buf, starts, lengths, width)
    assert np.array_equal(back, np.where(np.arange(width) < lengths[:, None], rows, 0))


def test_enum_checks_accept_exactly_the_members():
    from emu.codec.batch import _not_member

    h = np.zeros(256, dtype=HEADER_DTYPE)
    for field, enum_cls in ENUM_FIELDS.items():
        h[field] = np.arange(256)
        assert np.flatnonzero(~_not_member(h, field)).tolist() == sorted(int(m) for m in enum_cls)
