"""The Perfetto export checked by the rules Perfetto's trace processor applies when it imports
trace-event JSON (its json_trace_parser: what it drops, what it counts as an error), and for
the tracks docs/api.md promises: KV memory stacked per board, link tracks named once, sends
packed as async slices, every flow bound at both ends."""

import json
from collections import defaultdict

import pytest

import emu
from emu.export.perfetto import perfetto_trace, write_perfetto


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rules") / "mars"
    emu.replay(emu.trace("mars", nodes=4, seq=1024, chunk=256, decode_tokens=2), out=out)
    return out


def ts_ns(v) -> int:
    """The importer's timestamp: microseconds as a JSON number, kept in nanoseconds."""
    assert isinstance(v, (int, float)) and not isinstance(v, bool), v
    return round(v * 1000)


def import_errors(doc: dict) -> tuple[list[str], dict]:
    """What Perfetto's JSON importer would drop or count as an error, in its processing order
    (events sorted by time, ties in file order); and the tracks it would make."""
    errors: list[str] = []
    tracks = {"thread": defaultdict(set), "async": defaultdict(set), "counter": defaultdict(set)}
    events = doc["traceEvents"]
    for e in events:
        if not isinstance(e.get("ph"), str):
            errors.append(f"no phase: {e}")
        if e.get("ph") != "M" and "ts" not in e:
            errors.append(f"no ts: {e}")
        if not isinstance(e.get("pid"), int):
            errors.append(f"pid not an int: {e}")
        if e.get("ph") in ("X", "B", "E") and not isinstance(e.get("tid"), int):
            errors.append(f"slice without a tid: {e}")
        if not isinstance(e.get("name", ""), str):
            errors.append(f"name not a string: {e}")
    order = sorted((e for e in events if e.get("ph") != "M"), key=lambda e: ts_ns(e["ts"]))
    open_thread = defaultdict(list)   # (pid, tid) -> stack of (end ns, slice)
    open_async = defaultdict(list)    # (pid, cat, id) -> stack of (name, cat)
    top = {}                          # track -> its topmost open slice, as the flow tracker binds
    flow_out = {}
    flows = []
    for n, e in enumerate(order):
        ph, t = e["ph"], ts_ns(e["ts"])
        if ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                errors.append(f"X without a duration: {e}")
                continue
            key = (e["pid"], e["tid"])
            stack = open_thread[key]
            while stack and stack[-1][0] <= t:  # ended: a sibling, not a parent
                stack.pop()
            end = t + ts_ns(e["dur"])
            if stack and end > stack[-1][0]:
                errors.append(f"slice overlaps its enclosing slice without nesting: {e}")
            stack.append((end, n))
            top[("thread", key)] = n
            tracks["thread"][e["pid"]].add(e["tid"])
            track = ("thread", key)
        elif ph in "be":
            if "id" not in e and "id2" not in e:
                errors.append(f"async event without an id: {e}")
                continue
            key = (e["pid"], e.get("cat"), str(e["id"]))
            track = ("async", key)
            if ph == "b":
                open_async[key].append((e.get("name"), e.get("cat")))
                top[track] = n
                tracks["async"][e["pid"]].add(e.get("name"))
            else:
                if not open_async[key]:
                    errors.append(f"async end without a begin: {e}")
                elif open_async[key].pop() != (e.get("name"), e.get("cat")):
                    errors.append(f"async end whose name or category is not its begin's: {e}")
        elif ph == "C":
            if not isinstance(e.get("args"), dict) or not e["args"]:
                errors.append(f"counter without args: {e}")
                continue
            for k, v in e["args"].items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    errors.append(f"counter value not a number: {e}")
                tracks["counter"][e["pid"]].add(f"{e['name']} {k}")
            continue
        elif ph in "sf":  # flow v1: bound to the topmost slice open on its thread track
            key = (e["pid"], e.get("tid"))
            fid = (e.get("id"), e.get("cat"), e.get("name"))
            if not open_thread[key]:
                errors.append(f"flow event with no slice to bind on its thread: {e}")
            elif ph == "s":
                flow_out[fid] = n
            elif fid not in flow_out:
                errors.append(f"flow end before (or without) its start: {e}")
            else:
                flows.append((order[flow_out[fid]], e))
            continue
        else:
            errors.append(f"phase {ph!r} not used by this export: {e}")
            continue
        if "bind_id" in e:
            out, inn = e.get("flow_out") is True, e.get("flow_in") is True
            if out == inn:
                errors.append(f"bind_id without one direction: {e}")
            elif out:
                if e["bind_id"] in flow_out:
                    errors.append(f"flow id bound twice: {e}")
                flow_out[e["bind_id"]] = n
            elif e["bind_id"] not in flow_out:
                errors.append(f"flow end before (or without) its start: {e}")
            else:
                flows.append((order[flow_out[e["bind_id"]]], e))
    for key, stack in open_async.items():
        if stack:
            errors.append(f"async slice never ended: {key}")
    return errors, dict(tracks, flows=flows)


def test_the_export_passes_the_importers_rules(run):
    doc = perfetto_trace(run)
    errors, tracks = import_errors(doc)
    assert not errors, errors[:5]
    # one flow per delivery of a drawn send, from the send's slice to the receive slice
    sends = [e for e in doc["traceEvents"] if e["ph"] == "b" and e["cat"] == "send"]
    receives = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "receive"]
    assert len(tracks["flows"]) == len(receives) > 0
    for s, r in tracks["flows"]:
        assert s["args"]["op"] == r["args"]["op"] and s["ts"] <= r["ts"]
    assert {s["args"]["op"] for s, _ in tracks["flows"]} == {s["args"]["op"] for s in sends if "bind_id" in s}


def test_tracks_as_documented(run):
    doc = perfetto_trace(run)
    _, tracks = import_errors(doc)
    summary = json.loads((run / "summary.json").read_text())
    boards = range(1, summary["nodes"] + 1)
    # link counters named once: "link 0->1 utilization"
    links = tracks["counter"][summary["nodes"] + 1]
    assert links and all(n.startswith("link ") and n.endswith("->" + n.split("->")[1]) for n in links)
    assert all(n.count("utilization") == 1 for n in links), sorted(links)[:3]
    # KV memory: three stacked counters per board, each including the ones before
    for b in boards:
        assert tracks["counter"][b] == {"KV owner bytes", "KV owner+replica bytes", "KV total bytes"}
    series = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e["name"].startswith("KV "):
            series[(e["pid"], e["name"])].append((e["ts"], e["args"]["bytes"]))

    def at(pid, name, t):
        return [v for s, v in series[(pid, name)] if s <= t][-1]
    for b in boards:
        for t, total in series[(b, "KV total")]:
            assert at(b, "KV owner", t) <= at(b, "KV owner+replica", t) <= total
    assert [series[(b, "KV total")][-1][1] for b in boards] == summary["final_node_kv_bytes"]
    assert max(v for b in boards for _, v in series[(b, "KV total")]) == summary["peak_node_kv_bytes"]
    # lanes: a compute and a receive thread per board; sends packed into one async track per kind
    for b in boards:
        assert tracks["thread"][b] <= {1, 1000}
        assert tracks["async"][b] <= {"send", "all_to_all", "drain", "invalidate", "reduce"}


def test_a_window_passes_the_rules_too(run, tmp_path):
    lo, hi = 500 * 10**9, 600 * 10**9
    doc = perfetto_trace(run, start_ps=lo, end_ps=hi, nodes=[0, 2])
    errors, tracks = import_errors(doc)
    assert not errors, errors[:5]
    for e in doc["traceEvents"]:
        if e["ph"] != "M":
            assert lo / 1e6 <= e["ts"] <= hi / 1e6 and e["ts"] + e.get("dur", 0) <= hi / 1e6 + 1e-9
    # the file written is the document
    write_perfetto(run, tmp_path / "w.json", start_ps=lo, end_ps=hi, nodes=[0, 2])
    assert json.loads((tmp_path / "w.json").read_text()) == doc
