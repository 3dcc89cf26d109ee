"""Fuzzing the loaders' promise: only TraceError leaves ``load_trace``, only DecodeError the
capture readers, whatever the bytes (hypothesis; mutations of valid files and raw noise)."""

from __future__ import annotations

import copy
import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emu.codec import encode_frames, fragment
from emu.codec.pcap import CaptureWriter, read_capture
from emu.errors import DecodeError, TraceError
from emu.workload.trace import Trace, dumps, load_trace

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@pytest.fixture(scope="module")
def doc():
    from emu.workload.generate import Params, generate

    return json.loads(dumps(generate(Params(scheme="ring", seq=256, nodes=2, chunk=128,
                                            overrides=["model.layers=1"]))))


# JSON values a hostile file may hold where a number, list or object is expected
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats()
    | st.sampled_from([2**63, -(2**63) - 1, 257, 2**32, 10**15, 0, -1]) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)
big = st.sampled_from([2**62, 2**63 - 1, 10**15, 2**40]) | st.integers(min_value=-5, max_value=2**63 - 1)
codec_values = st.integers(1, 4).flatmap(lambda k: st.fixed_dictionaries({
    "codec": st.sampled_from(["rle", "delta", "delta_rle", "bogus"]),
    "values": st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1) | big, min_size=k, max_size=k),
    "runs": st.lists(big, min_size=k, max_size=k)}))


def _paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list) and doc:
        for i in {0, len(doc) - 1}:
            yield (*prefix, i)
            yield from _paths(doc[i], (*prefix, i))


def _promise(path) -> None:
    try:
        assert isinstance(load_trace(path), Trace)
    except TraceError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


@FUZZ
@given(data=st.data())
def test_load_trace_raises_only_trace_error_for_mutated_traces(doc, tmp_path, data):
    paths = sorted(_paths(doc), key=repr)
    columns = [("ops", k) for k in doc["ops"] if k != "n"]
    bad = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(columns) | st.sampled_from(paths))
        value = data.draw(codec_values if where[:1] == ("ops",) and len(where) == 2 else json_values)
        cur = bad
        try:
            for k in where[:-1]:
                cur = cur[k]
            cur[where[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    f = tmp_path / ("t.json.gz" if data.draw(st.booleans()) else "t.json")
    raw = json.dumps(bad).encode()
    f.write_bytes(gzip.compress(raw) if f.suffix == ".gz" else raw)
    _promise(f)


@FUZZ
@given(blob=st.binary(max_size=400), gz=st.booleans(), cut=st.integers(0, 400))
def test_load_trace_raises_only_trace_error_for_noise(tmp_path, blob, gz, cut):
    f = tmp_path / "n.json"
    f.write_bytes((gzip.compress(blob)[:cut or None]) if gz else blob)
    _promise(f)


@FUZZ
@given(data=st.data())
def test_load_trace_raises_only_trace_error_for_cut_and_flipped_text(doc, tmp_path, data):
    raw = bytearray(json.dumps(doc).encode())
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.sampled_from(b'{}[]",:0123456789-e. x\xff'))
    cut = data.draw(st.integers(0, len(raw)))
    f = tmp_path / "c.json"
    f.write_bytes(bytes(raw[:cut]))
    _promise(f)


# ------------------------------------------------------------------------ captures
def _capture(tmp_path, fmt: str) -> bytes:
    h, p = fragment(dict(op=1, src_node=0, dst_set=2, msg_id=3), data=bytes(range(256)) * 12)
    buf, off = encode_frames(h, p)
    path = tmp_path / f"ok.{fmt}"
    with CaptureWriter(path, format=fmt) as w:
        w.write(buf, off, np.arange(len(h)) * 1000)
    return path.read_bytes()


def _read_all(path) -> int:
    n = 0
    try:
        for batch in read_capture(path, batch_bytes=256):
            n += len(batch)
    except DecodeError as exc:
        assert "\n" not in str(exc)
    return n


@FUZZ
@given(fmt=st.sampled_from(["pcap", "pcapng"]), data=st.data())
def test_capture_readers_raise_only_decode_error(tmp_path, fmt, data):
    raw = bytearray(_capture(tmp_path, fmt))
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, len(raw) - 4))
        if data.draw(st.booleans()):  # a length-like word: 0, tiny, huge or off by a little
            word = data.draw(st.sampled_from([0, 1, 12, 16, 28, 31, 0xFFFF, 0xFFFFFFF0, 2**31]))
            raw[i:i + 4] = word.to_bytes(4, "little")
        else:
            raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    f = tmp_path / f"fz.{fmt}"
    f.write_bytes(bytes(raw[:cut]))
    _read_all(f)


@FUZZ
@given(blob=st.binary(max_size=300), magic=st.sampled_from([b"", b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1",
                                                             b"\x0a\x0d\x0d\x0a"]))
def test_capture_readers_raise_only_decode_error_for_noise(tmp_path, blob, magic):
    f = tmp_path / "noise.pcap"
    f.write_bytes(magic + blob)
    _read_all(f)


def test_the_fuzzers_reach_valid_files(tmp_path, doc):
    """The mutations start from files that load (so they probe the checks, not the parser)."""
    (tmp_path / "ok.json").write_text(json.dumps(doc))
    assert load_trace(tmp_path / "ok.json").n_ops > 0
    for fmt in ("pcap", "pcapng"):
        (tmp_path / f"v.{fmt}").write_bytes(_capture(tmp_path, fmt))
        assert _read_all(tmp_path / f"v.{fmt}") == 3
