"""emu.jsontext.parse_json_arrays: long integer arrays read by numpy give exactly what
json.loads gives (the same values, or the same one-line error), whatever the text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emu import jsontext
from emu.errors import TraceError
from emu.jsontext import parse_json, parse_json_arrays
from emu.workload.trace import _read_json, dumps, load_trace

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
I64 = np.iinfo(np.int64)
edge = st.sampled_from([0, -1, 1, 9, 10, -10, 99, 100, 10**15, 10**18, -(10**18), 2**53, 2**53 + 1,
                        I64.max, I64.min, I64.max - 1, I64.min + 1, 2**63, -(2**63) - 1, 10**19, 10**25])
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1) | edge | st.integers(-1000, 1000)
int_lists = st.lists(ints, max_size=40)


@pytest.fixture
def every_array(monkeypatch):
    """Every array, however short, takes the numpy path (the default skips short ones)."""
    monkeypatch.setattr(jsontext, "ARRAY_MIN_BYTES", 0)


def plain(x):
    """The document with every numpy array a list, as json.loads would give it."""
    if isinstance(x, np.ndarray):
        assert x.dtype == np.int64 and x.ndim == 1
        return x.tolist()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [plain(v) for v in x]
    return x


def outcome(parse, raw: bytes):
    try:
        return "doc", plain(parse(raw))
    except TraceError as exc:
        return "error", str(exc)


def fast(raw):
    return parse_json_arrays(raw, "t.json", TraceError, under="ops", columns={"c", "c0", "c1", "c2", "c3", "d"})


def slow(raw):
    return parse_json(raw, "t.json", TraceError)


@FUZZ
@given(meta=int_lists, cols=st.lists(int_lists, min_size=1, max_size=4), nested=int_lists)
def test_integer_arrays_under_the_member_come_back_as_int64_arrays_with_the_same_values(every_array, meta, cols, nested):
    doc = {"meta": {"c0": meta}, "ops": {**{f"c{i}": c for i, c in enumerate(cols)}, "d": {"values": nested}}}
    raw = json.dumps(doc, separators=(",", ":")).encode()
    got = fast(raw)
    assert plain(got) == doc
    assert isinstance(got["meta"]["c0"], list)  # outside "ops", even where named as a column: a list
    for i, c in enumerate(cols):
        fits = bool(c) and all(I64.min < v < I64.max for v in c)
        # in int64 range (its two ends excepted, which numpy would also give for clipped text): an array
        assert isinstance(got["ops"][f"c{i}"], np.ndarray) == fits


# text that is almost a canonical integer array: every way json.loads and numpy may disagree
ALPHABET = "0123456789-,[] +.e\"{}:x"


@FUZZ
@given(cols=st.lists(int_lists, min_size=1, max_size=3), data=st.data())
def test_any_edit_of_the_text_parses_as_json_loads_parses_it(every_array, cols, data):
    text = json.dumps({"meta": {}, "ops": {f"c{i}": c for i, c in enumerate(cols)}}, separators=(",", ":"))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        what = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = data.draw(st.sampled_from(ALPHABET))
        if what == "insert":
            text = text[:at] + ch + text[at:]
        elif what == "delete":
            text = text[:at] + text[at + 1:]
        else:
            text = text[:at] + ch + text[at + 1:]
    raw = text.encode()
    assert outcome(fast, raw) == outcome(slow, raw)


@pytest.mark.parametrize("body", [
    "007,1", "1,-0", "1, 2", "1,,2", ",1", "1,", "1-2,3", "--1", "+1,2", "1.0,2", "1e3,2", "9223372036854775808",
    "-9223372036854775809", "9223372036854775807", "-9223372036854775808", "99999999999999999999", "-", "1,-",
    "[1,2],[3]", "1\n,2",
])
def test_text_that_is_not_a_canonical_int64_array_is_left_to_json(every_array, body):
    for raw in (b'{"ops":{"c":[' + body.encode() + b']}}', b'{"ops":{"c":"x[' + body.encode() + b']y"}}'):
        assert outcome(fast, raw) == outcome(slow, raw)


def test_a_text_that_holds_the_placeholder_is_read_by_json_loads(every_array):
    raw = b'{"ops":{"c":[1,2,3],"s":"@int64-array:0"}}'
    assert fast(raw) == {"ops": {"c": [1, 2, 3], "s": "@int64-array:0"}}


def test_an_array_in_a_string_stays_text(every_array):
    raw = b'{"ops":{"note":"[1,2,3]","c":[4,5]}}'
    got = fast(raw)  # the skeleton does not parse: json.loads reads the whole text
    assert got == {"ops": {"note": "[1,2,3]", "c": [4, 5]}}


def test_a_trace_loads_the_same_by_either_path(tmp_path, monkeypatch):
    from emu.workload.generate import Params, generate

    tr = generate(Params(scheme="mars", seq=2048, nodes=8, chunk=512, overrides=["model.layers=2"]))
    path = tmp_path / "t.json"
    path.write_bytes(dumps(tr))
    monkeypatch.setattr(jsontext, "ARRAY_MIN_BYTES", 0)
    fast_doc = _read_json(str(path))  # the trace reader's own call: its columns
    assert any(isinstance(v, np.ndarray) or isinstance(v, dict) and any(isinstance(x, np.ndarray) for x in v.values())
               for v in fast_doc["ops"].values())
    a = load_trace(path)
    monkeypatch.setattr(jsontext, "ARRAY_MIN_BYTES", 1 << 40)
    b = load_trace(path)
    assert a.meta == b.meta and a.schedule == b.schedule
    for name in a.ops:
        assert a.ops[name].dtype == b.ops[name].dtype and np.array_equal(a.ops[name], b.ops[name]), name
    for name in ("dep_ptr", "dep_idx", "src_ptr", "src_idx", "dst_ptr", "dst_idx", "blk_ptr", "blk_idx"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("text", [
    b"[" * 400_000 + b"]",  # each "[" sees the one "]": a scan from each would be quadratic
    b'{"ops":{"c":' + b"[" * 2000 + b"1" * 5000 + b"]" * 2000 + b"}}",  # deep, with a long integer inside
    b'{"ops":{"c":' + b"[" * 3000 + b"]" * 3000 + b',"d":[' + b",".join(b"7" for _ in range(3000)) + b"]}}",
])
def test_deeply_nested_hostile_text_gets_jsons_answer(text):
    assert outcome(fast, text) == outcome(slow, text)


def test_only_a_column_or_a_columns_values_and_runs_become_arrays(every_array):
    """ops.n, a codec name, an unknown member or a field other than values and runs stay lists,
    as json.loads gives them: what a checker says of a value out of place is unchanged."""
    raw = (b'{"ops":{"n":[1,2],"c":{"codec":[3,4],"values":[5,6],"runs":[1,1]},"other":[7,8],'
           b'"d":[[9,10]]},"meta":{"c":[11]}}')
    got = fast(raw)
    for value, want in ((got["ops"]["n"], [1, 2]), (got["ops"]["c"]["codec"], [3, 4]), (got["ops"]["other"], [7, 8])):
        assert isinstance(value, list) and value == want
    assert got["ops"]["d"] == [[9, 10]] and isinstance(got["meta"]["c"], list) and got["meta"]["c"] == [11]
    assert isinstance(got["ops"]["c"]["values"], np.ndarray) and isinstance(got["ops"]["c"]["runs"], np.ndarray)


def test_a_trace_whose_n_is_a_long_array_gets_jsons_error(tmp_path, monkeypatch):
    monkeypatch.setattr(jsontext, "ARRAY_MIN_BYTES", 0)
    path = tmp_path / "t.json"
    path.write_text('{"meta":{},"schedule":{},"ops":{"n":[' + ",".join(["1"] * 50) + '],"kind":{"codec":[1,2],"values":[1]}}}')
    with pytest.raises(TraceError) as fast_err:
        load_trace(path)
    monkeypatch.setattr(jsontext, "ARRAY_MIN_BYTES", 1 << 40)
    with pytest.raises(TraceError) as slow_err:
        load_trace(path)
    assert str(fast_err.value) == str(slow_err.value) and "\n" not in str(fast_err.value)


def test_the_arrays_a_parse_made_and_its_document_does_not_keep_are_freed_when_it_returns():
    """A long integer array outside the columns comes back as a list; its parsed int64 array
    is gone when the parse returns, not left for the garbage collector (a trace loader's
    hundreds of MB at 128 boards)."""
    import gc
    import weakref

    made = []
    real = jsontext._int64_array

    def recording(text):
        a = real(text)
        if a is not None:
            made.append(weakref.ref(a))
        return a

    body = ",".join(str(i) for i in range(3000))
    raw = ('{"ops":{"c":[%s]},"other":[%s]}' % (body, body)).encode()
    collecting = gc.isenabled()
    gc.disable()
    try:
        jsontext._int64_array = recording
        doc = parse_json_arrays(raw, "t.json", TraceError, "ops", ("c",))
        assert isinstance(doc["other"], list) and isinstance(doc["ops"]["c"], np.ndarray)
        assert len(made) == 2
        alive = [r() is not None for r in made]
        assert alive.count(True) == 1 and made[alive.index(True)]() is doc["ops"]["c"]
    finally:
        jsontext._int64_array = real
        if collecting:
            gc.enable()
