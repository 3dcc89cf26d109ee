"""The Python API under bad values: every public function, every parameter.

docs/api.md promises that bad input raises ``ConfigError`` (or ``TraceError``) with the
one-line message the CLI prints. Two sweeps check it: an enumerated table of bad calls
(each value chosen to break one parameter of an otherwise good call), and hypothesis
drawing values of the wrong kind for one parameter at a time. A bad call passes when it
raises one of the documented errors with a one-line message; raising anything else, or
returning, fails it.

``python tests/test_api_fuzz.py`` prints the table's counts (documented error / other
exception / accepted) and the calls that misbehave, for any tree on PYTHONPATH.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import emu
from emu.errors import ConfigError, TraceError

DOCUMENTED = (ConfigError, TraceError)
TRACE_KW = dict(scheme="ring", nodes=4, seq=512, chunk=128)


class Material:
    """The good inputs a bad call is built around, in a folder of its own."""

    def __init__(self, base: Path):
        self._paths(base)
        self.trace = emu.trace(**TRACE_KW)
        emu.save_trace(self.trace, self.trace_file)
        self.folder.mkdir()
        self.text.write_text("not a trace\n")
        self.plain.write_text("")
        emu.replay(self.trace, out=self.results)

    def _paths(self, base: Path) -> None:
        self.base = base
        self.trace_file, self.folder, self.text = base / "t.json", base / "folder", base / "notes.txt"
        self.plain = base / "plain"  # a file where a folder's parent would go
        self.results = base / "res"

    def out(self, name: str) -> Path:
        return self.base / "out" / name


def bad_calls(m: Material) -> list[tuple[str, object, tuple, dict]]:
    """(id, function, args, kwargs): each breaks one parameter of a good call."""
    calls = []

    def _label(v) -> str:  # the same on every run: no addresses, no temporary folder names
        return "object()" if type(v) is object else f"{v!r:.40}".replace(str(m.base), "BASE")

    def add(fn, name, args, kwargs):
        calls.append((f"{fn.__name__}-{name}", fn, args, kwargs))

    junk = [None, True, 5, 1.5, b"x", ["x"], {"x": 1}, object()]  # wrong kinds, narrowed per parameter below

    def each(fn, args, base, param, values, skip=()):
        for v in values:
            if any(v is s or (type(v) is type(s) and v == s) for s in skip):
                continue
            add(fn, f"{param}={_label(v)}", args, {**base, param: v})

    # ---- emu.trace
    t = emu.trace
    each(t, (), TRACE_KW, "scheme", ["bogus", "", *junk])
    for p in ("seq", "nodes", "decode_tokens", "prefill_nodes"):
        base = {**TRACE_KW, "scheme": "pd"} if p == "prefill_nodes" else TRACE_KW
        vals = ["1e3", "512", -1, 512.0, 10**30, math.nan, *junk] + ([] if p == "decode_tokens" else [0])
        each(t, (), base, p, vals, skip=(None,) if p == "prefill_nodes" else (5,))
    each(t, (), TRACE_KW, "chunk", ["128", 0, -1, 128.0, "big", *junk])
    each(t, (), TRACE_KW, "alpha", ["1", -1, math.nan, math.inf, *junk], skip=(5, 1.5))
    each(t, (), TRACE_KW, "kv_budget", [-5, 0, "0x", "big", math.nan, *junk], skip=(None, 5))
    for p in ("model", "hw", "pd_mode", "topology"):
        each(t, (), TRACE_KW, p, ["nope", "", *junk], skip=(None,) if p == "topology" else ())
    each(t, (), TRACE_KW, "set", ["nokey", "hw.bogus=1", {"hw.link_rate": "fast"}, [1], [None], {1: 2},
                                  *junk], skip=(None,))

    # ---- emu.load_trace, emu.save_trace, emu.load
    for v in ["", "no_such_trace", str(m.folder), str(m.text), str(m.results), *junk]:
        add(emu.load_trace, f"ref={_label(v)}", (v,), {})
    for v in ["", str(m.folder), str(m.plain / "t.json"), "/proc/t.json", *junk]:
        add(emu.save_trace, f"path={_label(v)}", (m.trace, v), {})
    for v in [str(m.trace_file), "mars_16k", *junk]:
        add(emu.save_trace, f"trace={_label(v)}", (v, m.out("t.json")), {})
    # (what a folder holds is the results reader's to check)
    for v in [str(m.trace_file), str(m.text), str(m.base / "none"), "", *junk]:
        add(emu.load, f"path={_label(v)}", (v,), {})

    # ---- emu.replay
    r = emu.replay
    for v in ["", "no_such_trace", str(m.folder), str(m.text), str(m.results), *junk]:
        add(r, f"trace={_label(v)}", (v,), {})
    tr = (m.trace,)
    each(r, tr, {}, "topology", ["bogus", "", "torus:3x3", "ring:-1", *junk])
    each(r, tr, {}, "set", ["nokey", "hw.bogus=1", {"hw.link_rate": "fast"}, [1], [None], {1: 2}, *junk],
         skip=(None,))
    each(r, tr, {}, "loss", ["0.5", -0.1, 1.5, math.nan, math.inf, *junk])
    for p in ("fail", "degrade"):
        each(r, tr, {}, p, [b"link 0-1 down at 1ms", [None], [1], "", "garbage", ["link 0-1 down at 2ms up at 1ms"],
                            *junk], skip=(None,))
    each(r, tr, {}, "fail", ["link 0-1 down at 1ms up at 1ms"])
    each(r, tr, {}, "detect", [-1, "-1us", "fast", math.nan, 1.5, *junk], skip=(5,))
    each(r, tr, {}, "reliable", [[], "yes", 1, 0, 2, b"on", "ON?", *junk], skip=(None, True))
    each(r, tr, {}, "seed", ["7", -1, 2**64, 7.0, math.nan, *junk], skip=(5,))
    each(r, tr, {}, "capture", [b"x.pcap", "", "x.txt", "/nonexistent-dir/x.pcap", str(m.folder), *junk],
         skip=(None,))
    each(r, tr, {"capture": str(m.out("c.pcap"))}, "capture_filter", [[1], [None], ["bogus"], [b"x"], 5,
                                                                       {"link": "0-1"}, True, None])
    each(r, tr, {}, "snaplen", [10, 70000, "62", 62.0, -1, *junk])
    each(r, tr, {"capture": str(m.out("c2.pcap"))}, "snaplen", [10, 70000, "62", 62.0, -1])
    for p in ("out", "out_default"):  # out_default: an existing folder takes the next free suffix
        taken = [str(m.folder), str(m.results)] if p == "out" else []
        each(r, tr, {}, p, ["", *taken, str(m.plain / "r"), "/proc/emu-r", *junk], skip=(None,))
    for p in ("progress", "functional", "trains"):
        each(r, tr, {}, p, ["true", "false", 0, 1, 2, *junk], skip=(True,))
    each(r, tr, {}, "engine", ["fast", "", *junk])
    return calls


def outcome(fn, args, kwargs) -> str:
    """"documented", "other: <Type>: <message>", or "accepted"."""
    try:
        fn(*args, **kwargs)
    except DOCUMENTED as exc:
        if len(str(exc).strip().splitlines()) != 1:
            return f"other: {type(exc).__name__} over {len(str(exc).splitlines())} lines"
        return "documented"
    except Exception as exc:  # noqa: BLE001 - what is counted
        return f"other: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
    return "accepted"


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    return Material(tmp_path_factory.mktemp("apifuzz"))


def _ids():
    with tempfile.TemporaryDirectory() as d:
        return [c[0] for c in bad_calls(_IdMaterial(Path(d)))]


class _IdMaterial(Material):
    """Names only: the ids of the table without generating or replaying anything."""

    def __init__(self, base: Path):
        self._paths(base)
        self.trace = None


IDS = _ids()


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_bad_call_raises_the_documented_error(material, index):
    name, fn, args, kwargs = bad_calls(material)[index]
    assert outcome(fn, args, kwargs) == "documented", name
    assert not (material.base / "out").exists() or not any((material.base / "out").rglob("*")), name


# ---- hypothesis: values of the wrong kind for one parameter at a time
anything_but_text = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=6),
                              st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                   st.integers(), max_size=2))
not_a_number = st.one_of(st.text(max_size=6), st.binary(max_size=6), st.lists(st.floats(), max_size=2), st.none(),
                         st.booleans())
bad_count = st.one_of(st.integers(max_value=0), st.integers(min_value=2**63), st.floats(), not_a_number)
bad_seed = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63), st.floats(), not_a_number)
bad_probability = st.one_of(st.floats().filter(lambda x: not 0 <= x <= 1), st.integers(min_value=2),
                            st.integers(max_value=-1), not_a_number)
not_a_bool = st.one_of(st.integers(), st.floats(), st.text(max_size=6), st.none(), st.binary(max_size=4),
                       st.lists(st.booleans(), max_size=2))
no_such_name = st.text(max_size=8).map(lambda s: "no such " + s)
bad_text_list = st.one_of(st.lists(st.one_of(st.none(), st.integers(), st.binary(max_size=4), st.floats()),
                                   min_size=1, max_size=3), st.integers(), st.floats(), st.binary(max_size=6),
                          st.booleans())

REPLAY_PARAMS = {
    "topology": st.one_of(no_such_name, anything_but_text),
    "loss": bad_probability,
    "seed": bad_seed,
    "snaplen": st.one_of(st.integers(max_value=61), st.integers(min_value=65536), st.floats(), not_a_number),
    "detect": st.one_of(st.integers(max_value=-1), st.floats(), no_such_name, st.none(), st.binary(max_size=4),
                        st.booleans()),
    "reliable": st.one_of(st.integers(), st.floats(), no_such_name, st.binary(max_size=4),
                          st.lists(st.booleans(), max_size=2)),
    "fail": st.one_of(bad_text_list, no_such_name),
    "degrade": st.one_of(bad_text_list, no_such_name),
    "set": st.one_of(bad_text_list, no_such_name.map(lambda s: s.replace("=", ""))),
    "capture_filter": st.one_of(bad_text_list, no_such_name),
    "engine": st.one_of(no_such_name, anything_but_text),
    "functional": not_a_bool,
    "trains": not_a_bool,
    "progress": not_a_bool,
}
TRACE_PARAMS = {
    "scheme": st.one_of(no_such_name, anything_but_text),
    "seq": bad_count, "nodes": st.one_of(st.integers(max_value=1), st.floats(), not_a_number),
    "chunk": bad_count.filter(lambda v: v != "auto"),
    "decode_tokens": st.one_of(st.integers(max_value=-1), st.floats(), not_a_number.filter(lambda v: v is not None)),
    "alpha": st.one_of(st.floats().filter(lambda x: not (x >= 0 and math.isfinite(x))), not_a_number),
    "model": st.one_of(no_such_name, anything_but_text), "hw": st.one_of(no_such_name, anything_but_text),
    "set": st.one_of(bad_text_list, no_such_name.map(lambda s: s.replace("=", ""))),
}


not_a_path = st.one_of(anything_but_text, st.just(""), st.just("   "))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow],
          derandomize=True)
@given(data=st.data())
def test_generated_bad_values_raise_only_documented_errors(material, data):
    which = data.draw(st.sampled_from(["replay", "trace", "files"]), label="function")
    if which == "files":
        value = data.draw(st.one_of(not_a_path, no_such_name), label="value")
        calls = [(emu.load_trace, (value,)), (emu.load, (value,)), (emu.save_trace, (value, material.out("h.json")))]
        if not isinstance(value, str) or not value.strip():  # (a name is a good path to write)
            calls.append((emu.save_trace, (material.trace, value)))
        fn, args = data.draw(st.sampled_from(calls), label="call")
        got = outcome(fn, args, {})
        assert got == "documented", f"{fn.__name__}{args!r:.80}: {got}"
    elif which == "replay":
        param = data.draw(st.sampled_from(sorted(REPLAY_PARAMS)), label="param")
        value = data.draw(REPLAY_PARAMS[param], label="value")
        kwargs = {param: value}
        if param == "capture_filter":
            kwargs["capture"] = str(material.out("h.pcap"))
        got = outcome(emu.replay, (material.trace,), kwargs)
    else:
        param = data.draw(st.sampled_from(sorted(TRACE_PARAMS)), label="param")
        value = data.draw(TRACE_PARAMS[param], label="value")
        got = outcome(emu.trace, (), {**TRACE_KW, param: value})
    assert got == "documented", f"{param}={value!r}: {got}"


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        m = Material(Path(d))
        counts = {"documented": 0, "other": 0, "accepted": 0}
        wrong = []
        for name, fn, args, kwargs in bad_calls(m):
            got = outcome(fn, args, kwargs)
            counts[got.split(":")[0]] += 1
            if got != "documented":
                wrong.append(f"  {name}: {got}")
    print(json.dumps({"bad_calls": sum(counts.values()), **counts}))
    print("\n".join(wrong))
    return 0


if __name__ == "__main__":
    sys.exit(main())
