"""The trace file: round trip, compact columns, validation errors (one line naming the
JSON path), the JSON Schema, and the `emu trace` command's failure behaviour."""

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emu.cli import main
from emu.errors import TraceError
from emu.workload import columns
from emu.workload.enums import ENUM_COLUMNS, Collective, Dtype, Kind, MsgOp, ReduceOp
from emu.workload.generate import Params, generate
from emu.workload.trace import load_trace, save_trace

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(seq=512, nodes=4, chunk=128, decode_tokens=1, overrides=["model.layers=2"])


@pytest.fixture(scope="module")
def mars_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "mars.json"
    save_trace(generate(Params(scheme="mars", **SMALL)), path)
    return path


def doc_of(path):
    return json.loads(Path(path).read_text())


def write(tmp_path, doc, name="bad.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_round_trip_json_and_gzip(tmp_path, mars_file):
    t = load_trace(mars_file)
    gz = tmp_path / "m.json.gz"
    save_trace(t, gz)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    u = load_trace(gz)
    assert u.meta == t.meta and u.schedule == t.schedule
    for name in t.ops:
        assert np.array_equal(u.ops[name], t.ops[name])
    for name in ("dep_ptr", "dep_idx", "src_ptr", "src_idx", "dst_ptr", "dst_idx"):
        assert np.array_equal(getattr(u, name), getattr(t, name))
    # same content -> same bytes, gzip header included (no name, no time stamp)
    gz2 = tmp_path / "again.json.gz"
    save_trace(u, gz2)
    assert gz2.read_bytes() == gz.read_bytes()
    assert gzip.decompress(gz.read_bytes()) == mars_file.read_bytes()


def test_loaded_trace_api(mars_file):
    t = load_trace(mars_file)
    assert t.ops["kind"].dtype == np.int8 and t.ops["flops"].dtype == np.int64
    assert t.n_ops == len(t.ops["kind"]) == len(t.dep_ptr) - 1
    i = int(np.flatnonzero(t.ops["collective"] == Collective.multicast)[0])
    mask = t.mask("dst")
    assert int(mask[i]) == sum(1 << int(b) for b in t.dst(i))
    df = t.frame()
    assert len(df) == t.n_ops and df["kind"].iloc[0] == "qkv"


def test_enum_values_match_the_codec():
    codec = pytest.importorskip("emu.codec.enums")
    for ours, theirs in ((Collective, codec.Collective), (ReduceOp, codec.ReduceOp), (Dtype, codec.Dtype)):
        assert {e.name: int(e) for e in ours} == {e.name: int(e) for e in theirs}
    nic_own = ("ack", "nack", "signal")  # the NIC makes these; no trace sends one
    assert {e.name: int(e) for e in MsgOp if e} == {e.name: int(e) for e in codec.Op if e.name not in nic_own}
    assert {e.name: int(e) for e in ENUM_COLUMNS["stage"]}.items() <= {e.name: int(e) for e in codec.Stage}.items()


# a definition at the start of a line: NAME = value (a class member, a module constant)
ONCE = {"op values": r"kv_replica *= *\d", "Ethernet header length": r"ETH_(LEN|HEADER) *= *\d",
        "MAC prefix": r"\w*MAC_PREFIX *= *b", "ops that carry KV": r"_?KV_(OPS|MSGS)(_MASK)? *= *[(\[{]"}


@pytest.mark.parametrize("what", sorted(ONCE))
def test_wire_constants_are_defined_once(what):
    """The op values, the Ethernet header length, the MAC prefixes and the ops whose payload is KV
    are each written in one module of the package; the others import them (MsgOp is made from Op)."""
    import re

    root = Path(__file__).resolve().parents[1] / "emu"
    pattern = re.compile(r"^\s*" + ONCE[what], re.M)
    where = sorted(str(f.relative_to(root)) for f in root.rglob("*.py") for _ in pattern.finditer(f.read_text()))
    assert where == {"op values": ["codec/enums.py"], "Ethernet header length": ["codec/mac.py"],
                     "MAC prefix": ["codec/mac.py", "codec/mac.py"],
                     "ops that carry KV": ["workload/enums.py"]}[what], where


def test_message_ops_are_the_wire_ops_a_trace_names():
    from emu.codec.enums import Op
    from emu.engine import loop
    from emu.workload.enums import KV_OPS, KV_OPS_MASK

    nic_own = (Op.ack, Op.nack, Op.signal)  # the NIC makes these; no trace sends one
    assert MsgOp.none == 0 and [m.name for m in MsgOp][1:] == [o.name for o in Op if o not in nic_own]
    assert all(MsgOp[o.name] == o for o in Op if o not in nic_own)
    assert KV_OPS == (Op.kv_replica, Op.kv_fetch_resp, Op.kv_transfer) and KV_OPS_MASK == 0b11010
    assert loop.KV_OPS_MASK == KV_OPS_MASK  # the compiled loop reads this one


@pytest.mark.parametrize("arr", [
    np.arange(1000), np.zeros(300, dtype=np.int64), np.repeat([3, -1, 7], 100), np.array([5, -3, 10**12, 2]),
    np.random.RandomState(0).randint(-10**9, 10**9, 500), np.array([], dtype=np.int64), np.array([7]),
])
def test_column_codecs_round_trip_and_never_grow(arr):
    enc = columns.encode(arr)
    assert np.array_equal(columns.decode(json.loads(json.dumps(enc)), "x"), arr)
    assert len(json.dumps(enc, separators=(",", ":"))) <= len(json.dumps(arr.tolist(), separators=(",", ":")))


@pytest.mark.parametrize("chunk", [3, 1 << 20])
@pytest.mark.parametrize("arr", [
    np.arange(1000), np.repeat([3, -1, 7], 100), np.array([5, -3, 10**12, 2]), np.array([], dtype=np.int64),
    np.array([7]), np.random.RandomState(1).randint(-10**9, 10**9, 501), np.arange(0, 60, 3).repeat(5),
    np.random.RandomState(2).randint(0, 9, 400).cumsum(),
])
def test_a_columns_text_is_the_json_of_its_encoding(arr, chunk, monkeypatch):
    """The trace writer's text (written a chunk at a time, no Python int per entry) is what
    json.dumps makes of encode's lists, across chunk boundaries, for every codec."""
    monkeypatch.setattr(columns, "_CHUNK", chunk)
    assert columns.encode_text(arr) == json.dumps(columns.encode(arr), separators=(",", ":"), sort_keys=True)


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_the_measured_length_of_a_column_is_its_json_length(chunk, monkeypatch):
    """What the codec choice compares: the length of the plain JSON text, every power of ten
    up to int64's largest entries, negatives, across chunk boundaries."""
    monkeypatch.setattr(columns, "_CHUNK", chunk)
    tens = 10 ** np.arange(19, dtype=np.int64)
    for arr in (np.r_[tens, tens - 1, -tens, 2**63 - 1, -(2**63 - 1), 0], np.arange(-1200, 1200), np.zeros(0, np.int64)):
        assert columns._text_len(arr) == len(json.dumps(arr.tolist(), separators=(",", ":")))


def test_regular_columns_compress():
    assert columns.encode(np.arange(100000))["codec"] == "delta_rle"
    assert columns.encode(np.repeat([0, 1], 5000))["codec"] == "rle"


def mutate(doc, path, value):
    d = copy.deepcopy(doc)
    node = d
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return d


def plain(doc, col):
    return columns.decode(doc["ops"][col], col).tolist()


def cases(doc):
    n = doc["ops"]["n"]
    kinds = plain(doc, "kind")
    dep = plain(doc, "dep_idx")
    comp = kinds.index(Kind.mlp)
    send = kinds.index(Kind.send)
    node = plain(doc, "node")
    dep_cycle = list(dep)
    dep_cycle[0] = n - 1  # op 1's first dependency now points at the last op, which depends on it
    return [
        (mutate(doc, ["meta", "version"], 1), "meta.version: trace format version 1, this emu reads version 2: regenerate it"),
        (mutate(doc, ["meta", "nodes"], KeyError), "meta.nodes: missing field"),
        (mutate(doc, ["meta", "seq"], "16k"), "meta.seq: expected an integer"),
        (mutate(doc, ["meta", "scheme", "name"], "magic"), "meta.scheme.name: unknown scheme 'magic'"),
        (mutate(doc, ["meta", "hw", "link_rate"], "fast"), "meta.hw: hw.link_rate: cannot read 'fast'"),
        (mutate(doc, ["ops", "flops"], KeyError), "ops.flops: missing field"),
        (mutate(doc, ["ops", "kind"], kinds[:5] + [1.5] + kinds[6:]), "ops.kind[5]: expected an integer, got 1.5"),
        (mutate(doc, ["ops", "kind"], kinds[:7] + [42] + kinds[8:]), "ops.kind[7]: unknown kind 42"),
        (mutate(doc, ["ops", "kind"], kinds[:-1]), f"ops.kind: has {n - 1} entries, expected {n}"),
        (mutate(doc, ["ops", "node"], node[:comp] + [99] + node[comp + 1:]), f"ops.node[{comp}]: mlp op needs a node in 0..3, got 99"),
        (mutate(doc, ["ops", "node"], node[:send] + [1] + node[send + 1:]), f"ops.node[{send}]: communication op must have node -1"),
        (mutate(doc, ["ops", "dep_idx"], dep[:3] + [99999] + dep[4:]), "ops.dep_idx[3]: dependency on missing op 99999"),
        (mutate(doc, ["ops", "dep_idx"], dep_cycle), "ops.dep_idx: dependency cycle through ops"),
        # past int32: named as the file has it, not as the int32 it would wrap to (a valid op)
        (mutate(doc, ["ops", "dep_idx"], dep[:3] + [2 ** 32 + dep[3]] + dep[4:]),
         f"ops.dep_idx[3]: dependency on missing op {2 ** 32 + dep[3]}"),
        (mutate(doc, ["ops", "dst_idx"], [2 ** 32 + 1] + plain(doc, "dst_idx")[1:]), f"ops.dst_idx[0]: no board {2 ** 32 + 1}"),
        (mutate(doc, ["ops", "dst_idx"], {"codec": "zip", "values": []}), "ops.dst_idx.codec: unknown codec 'zip'"),
        (mutate(doc, ["ops", "src_idx"], {"codec": "rle", "values": [1], "runs": [0]}), "ops.src_idx.runs[0]: run length must be >= 1"),
        (mutate(doc, ["ops", "extra"], []), "ops.extra: unknown column"),
        (mutate(doc, ["schedule"], []), "schedule: expected an object, got list"),
        (mutate(doc, ["meta", "version"], 3), "meta.version: trace format version 3, this emu reads version 2: this emu is older"),
        (mutate(doc, ["ops", "blk_ptr"], KeyError), "ops.blk_ptr: missing field"),
        (mutate(doc, ["ops", "blk_idx"], [5]), "ops.blk_ptr[" + str(n) + "]: last offset 0 != blk_idx length 1"),
        (mutate(mutate(doc, ["ops", "blk_idx"], [5]), ["ops", "blk_ptr"], [0] * comp + [0] + [1] * (n - comp)),
         f"ops.blk_ptr[{comp}]: op {comp} lists blocks but is not a message with residency owner"),
    ]


def test_malformed_traces_name_path_and_problem(tmp_path, mars_file):
    doc = doc_of(mars_file)
    for i, (bad, expected) in enumerate(cases(doc)):
        p = write(tmp_path, bad, f"bad{i}.json")
        with pytest.raises(TraceError) as exc:
            load_trace(p)
        msg = str(exc.value)
        assert msg.startswith(f"{p}: ") and expected in msg, msg
        assert "\n" not in msg


def test_a_trace_holds_its_lists_int32_loaded_or_generated(mars_file):
    from emu.workload.fileformat import CSR_COLUMNS
    for trace in (load_trace(mars_file), generate(Params(scheme="mars", **SMALL))):
        for c in CSR_COLUMNS:
            for p in ("ptr", "idx"):
                assert getattr(trace, f"{c}_{p}").dtype == np.int32, (c, p)


def test_the_loader_narrows_each_list_as_it_decodes_it(mars_file):
    # so the load never holds every list at int64 (their int64 form was half the trace's memory)
    from emu.workload.trace import _read_json
    from emu.workload.validate import validate_document
    _meta, _schedule, cols = validate_document(_read_json(str(mars_file)), str(mars_file))
    assert {cols[name].dtype for name in cols if name.endswith(("_ptr", "_idx"))} == {np.dtype(np.int32)}


@pytest.mark.parametrize("value, dtype", [(2 ** 31 - 1, np.int32), (2 ** 31, np.int64), (-2 ** 31, np.int32),
                                          (-2 ** 31 - 1, np.int64)])
def test_a_list_is_int32_exactly_when_every_value_fits(value, dtype):
    from emu.workload.fileformat import csr_width
    a = csr_width(np.array([0, value, 7], np.int64))
    assert a.dtype == dtype and a.tolist() == [0, value, 7]


def test_not_json_or_not_a_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"meta": ')
    with pytest.raises(TraceError, match=r"x.json: not valid JSON: line 1"):
        load_trace(p)
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "missing.json")
    g = tmp_path / "y.json.gz"
    g.write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(TraceError, match="corrupt gzip"):
        load_trace(g)


def test_cli_reports_a_bad_trace_in_one_line_with_status_2(tmp_path, mars_file):
    doc = doc_of(mars_file)
    p = write(tmp_path, cases(doc)[11][0])
    r = subprocess.run([sys.executable, "-m", "emu", "trace", "show", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "dependency on missing op 99999" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_generates_and_shows(tmp_path, capsys):
    out = tmp_path / "sub" / "ring.json.gz"
    assert main(["trace", "ring", "--seq", "512", "--nodes", "4", "--chunk", "128", "--set", "model.layers=2",
                 "--decode-tokens", "1", "-o", str(out)]) == 0
    assert load_trace(out).meta["scheme"]["name"] == "ring"
    assert main(["trace", "show", str(out)]) == 0
    assert "kv_transfer" in capsys.readouterr().out


@pytest.mark.parametrize("args,needle", [
    (["--set", "hw.link_rate=fast"], "hw.link_rate"),
    (["--set", "hw.nope=1"], "hw.nope"),
    (["--kv-budget", "0.1x"], "kv budget"),
    (["--model", "gpt-9"], "gpt-9"),
    (["--hw", str(ROOT / "no" / "such.toml")], "such.toml"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "x.json"
    rc = main(["trace", "mars", "--seq", "512", "--nodes", "4", "--chunk", "128", "-o", str(out)] + args)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_an_invalid_trace_and_leaves_no_file(tmp_path, mars_file):
    t = load_trace(mars_file)
    t.dep_idx[0] = t.n_ops + 5
    out = tmp_path / "x.json"
    with pytest.raises(TraceError):
        save_trace(t, out)
    assert list(tmp_path.iterdir()) == []


def test_schema_copy_in_docs_is_the_packaged_one():
    assert (ROOT / "docs" / "trace.schema.json").read_text() == (ROOT / "emu" / "workload" / "trace.schema.json").read_text()


def test_generated_trace_satisfies_the_json_schema(mars_file):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "emu" / "workload" / "trace.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    doc = doc_of(mars_file)
    v.validate(doc)
    assert not v.is_valid(mutate(doc, ["ops", "flops"], KeyError))
    assert not v.is_valid(mutate(doc, ["meta", "version"], 1))
    assert not v.is_valid(mutate(doc, ["ops", "blk_idx"], KeyError))


def _csr_rows(ptr, idx, order):
    """CSR rows of ``idx`` taken in ``order``: (ptr, idx)."""
    rows = [idx[ptr[i]:ptr[i + 1]] for i in order]
    new_ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=new_ptr[1:])
    return new_ptr, np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)


def test_ops_in_any_acyclic_order_load_and_a_cycle_among_them_is_named(tmp_path):
    """The loader tests order per op (each after what it depends on) and searches the graph
    only when that fails: a trace listed backwards is still acyclic and loads as written."""
    from emu.workload.trace import Trace, dumps

    tr = generate(Params(scheme="mars", **SMALL))
    n = tr.n_ops
    order = np.arange(n)[::-1]  # backwards: every dependency on a later op
    new_of = np.empty(n, np.int64)
    new_of[order] = np.arange(n)
    dep_ptr, dep_idx = _csr_rows(tr.dep_ptr, new_of[tr.dep_idx], order)
    csr = {f"{c}_{p}": v for c in ("src", "dst", "blk")
           for p, v in zip(("ptr", "idx"), _csr_rows(getattr(tr, f"{c}_ptr"), getattr(tr, f"{c}_idx"), order))}
    back = Trace(meta=tr.meta, schedule=tr.schedule, ops={k: v[order] for k, v in tr.ops.items()},
                 dep_ptr=dep_ptr, dep_idx=dep_idx, **csr)
    path = tmp_path / "backwards.json"
    path.write_bytes(dumps(back))
    got = load_trace(path)
    assert np.array_equal(got.dep_idx, dep_idx) and np.array_equal(got.ops["kind"], back.ops["kind"])
    assert (got.dep_idx > np.repeat(np.arange(n), np.diff(got.dep_ptr))).any()
    # op 0 depends on a later op d; d depending on op 0 as well closes a cycle
    d = int(back.deps(0)[0])
    rows = [back.deps(i).tolist() for i in range(n)]
    rows[d] = rows[d] + [0]
    doc = json.loads(dumps(back))
    doc["ops"]["dep_ptr"] = np.cumsum([0] + [len(r) for r in rows]).tolist()
    doc["ops"]["dep_idx"] = [x for r in rows for x in r]
    with pytest.raises(TraceError, match=rf"ops.dep_idx: dependency cycle through ops .*\b{d}\b"):
        load_trace(write(tmp_path, doc, "cycle.json"))


def test_a_cycle_through_a_later_op_is_named_where_every_op_also_depends_on_an_earlier_one(tmp_path, mars_file):
    doc = doc_of(mars_file)
    ptr, dep = plain(doc, "dep_ptr"), plain(doc, "dep_idx")
    rows = [dep[ptr[i]:ptr[i + 1]] for i in range(len(ptr) - 1)]
    b = next(b for b in range(len(rows)) if any(rows[a] for a in rows[b]))
    a = next(a for a in rows[b] if rows[a])  # b depends on a, and a on something earlier
    rows[a] = rows[a] + [b]  # now a depends on b too: a -> b -> a
    bad = mutate(mutate(doc, ["ops", "dep_ptr"], np.cumsum([0] + [len(r) for r in rows]).tolist()),
                 ["ops", "dep_idx"], [x for r in rows for x in r])
    with pytest.raises(TraceError, match=rf"ops.dep_idx: dependency cycle through ops ({a} -> {b} -> {a}|{b} -> {a} -> {b})$"):
        load_trace(write(tmp_path, bad, "cycle.json"))


def test_an_op_that_depends_on_itself_is_a_cycle(tmp_path, mars_file):
    doc = doc_of(mars_file)
    ptr, dep = plain(doc, "dep_ptr"), plain(doc, "dep_idx")
    i = next(i for i in range(len(ptr) - 1) if ptr[i + 1] - ptr[i] == 1)
    bad = mutate(doc, ["ops", "dep_idx"], dep[:ptr[i]] + [i] + dep[ptr[i] + 1:])
    with pytest.raises(TraceError, match=rf"ops.dep_idx: dependency cycle through ops {i} -> {i}$"):
        load_trace(write(tmp_path, bad, "self.json"))


@pytest.mark.parametrize("which", ["dst", "src"])
def test_a_board_listed_twice_in_a_set_is_named_in_order_or_not(tmp_path, mars_file, which):
    doc = doc_of(mars_file)
    ptr = plain(doc, f"{which}_ptr")
    idx = plain(doc, f"{which}_idx")
    i = next(i for i in range(len(ptr) - 1) if ptr[i + 1] - ptr[i] >= 2)
    a, b = ptr[i], ptr[i + 1]
    row = idx[a:b]
    # out of order, no board twice: loads, in the order written
    shuffled = mutate(doc, ["ops", f"{which}_idx"], idx[:a] + row[::-1] + idx[b:])
    got = load_trace(write(tmp_path, shuffled, "shuffled.json"))
    assert getattr(got, f"{which}_idx")[a:b].tolist() == row[::-1]
    for twice, board in (([row[0]] * 2 + row[2:], row[0]), (row[1:] + [row[1]], row[1])):  # in order, and not
        bad = mutate(doc, ["ops", f"{which}_idx"], idx[:a] + twice + idx[b:])
        with pytest.raises(TraceError, match=rf"ops.{which}_idx: op {i} lists board {board} twice in its {which} set"):
            load_trace(write(tmp_path, bad, "twice.json"))
