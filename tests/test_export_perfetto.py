"""`emu export perfetto`: the trace-event JSON of a real replay is well formed and says what the run did."""

import json
import subprocess
import sys
from collections import defaultdict

import pandas as pd
import pytest

import emu
from emu.cli import main
from emu.export.perfetto import perfetto_trace, write_perfetto

PHASES = {"X", "b", "e", "C", "M"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("perfetto") / "mars"
    emu.replay(emu.trace("mars", nodes=4, seq=1024, chunk=256, decode_tokens=2), out=out)
    return out


def check_format(doc: dict) -> dict:
    """The trace-event format's rules that viewers rely on; returns the events by phase."""
    assert set(doc) >= {"traceEvents"} and isinstance(doc["traceEvents"], list)
    by = defaultdict(list)
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES, e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int), e
        by[e["ph"]].append(e)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index") and e["args"]
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["dur"] >= 0 and isinstance(e["args"], dict), e
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        if e["ph"] in "be":
            assert "id" in e and e["cat"] in ("send", "reduce")
    # slices on one thread nest: here they never overlap at all (concurrent sends are async slices)
    lanes = defaultdict(list)
    for e in by["X"]:
        lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in lanes.values():
        spans.sort()
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-9, (a0, a1, b0)
    # every flow starts at one send slice (its op as bind_id) and ends at receive slices of that op
    starts = {}
    for e in by["b"]:
        if "bind_id" in e:
            assert e["flow_out"] is True and e["bind_id"] not in starts
            starts[e["bind_id"]] = e
    ends = [e for e in by["X"] if "bind_id" in e]
    for f in ends:
        assert f["flow_in"] is True and f["cat"] == "receive" and f["bind_id"] in starts
        assert starts[f["bind_id"]]["ts"] <= f["ts"]
    assert {f["bind_id"] for f in ends} == set(starts)
    by["flows"] = ends
    # async slices: a begin and an end each, with the begin's name
    began = {(e["pid"], e["cat"], e["id"]): e for e in by["b"]}
    assert len(began) == len(by["b"]) == len(by["e"])
    for e in by["e"]:
        b = began[(e["pid"], e["cat"], e["id"])]
        assert b["name"] == e["name"] and b["ts"] <= e["ts"]
    # counters: per track, time stamps never go back
    last = {}
    for e in by["C"]:
        key = (e["pid"], e["name"])
        assert e["ts"] >= last.get(key, -1.0), key
        last[key] = e["ts"]
    # each thread and process that has events is named
    named = {(e["pid"], e["tid"]) for e in by["M"] if e["name"] == "thread_name"}
    assert set(lanes) <= named
    return by


def test_trace_event_json_of_a_replay(run):
    doc = json.loads(json.dumps(perfetto_trace(run)))
    by = check_format(doc)
    ops = pd.read_parquet(run / "ops.parquet")
    summary = json.loads((run / "summary.json").read_text())
    # one compute slice per compute op that ran, on its board, as long as the op took
    comm = ops.kind.isin(["send", "all_to_all", "drain", "invalidate", "reduce"])
    compute = ops[~comm & ops.start_s.notna()]
    sl = {e["args"]["op"]: e for e in by["X"] if e["cat"] == "compute"}
    assert set(sl) == set(compute.op)
    for r in compute.itertuples():
        e = sl[r.op]
        assert e["pid"] == r.node + 1 and e["name"] == r.kind
        assert e["args"]["chunk"] == r.chunk and e["args"]["layer"] == r.layer and e["args"]["bytes"] == r.bytes
        assert abs(e["dur"] - (r.end_s - r.start_s) * 1e6) <= 1e-3 + 1e-9
    # a flow from each message's send to each destination: as many as the ops table's destinations
    sends = ops[ops.kind.isin(["send", "drain", "invalidate"])]
    assert len(by["flows"]) == int(sends.dsts.sum()) > 0
    # KV memory counters: the last value per board is the summary's final memory, the largest its peak
    kv = defaultdict(list)
    for e in by["C"]:
        if e["name"] == "KV total":
            kv[e["pid"] - 1].append(e["args"]["bytes"])
    assert [kv[b][-1] for b in range(4)] == summary["final_node_kv_bytes"]
    assert max(max(v) for v in kv.values()) == summary["peak_node_kv_bytes"]
    # link utilization counters, weighted by bin length, give the busiest link's utilization over the run
    b = summary["busiest_link"]
    track = sorted((e["ts"], e["args"]["utilization"]) for e in by["C"]
                   if e["name"] == f"link {b['src']}->{b['dst']}")
    busy_us = sum(u * (t1 - t0) for (t0, u), (t1, _) in zip(track, track[1:]))
    assert busy_us / (summary["sim_end_s"] * 1e6) == pytest.approx(b["utilization"], rel=1e-4)


def test_a_window_and_a_node_set_keep_only_those(run):
    full = perfetto_trace(run)
    lo, hi = 500 * 10**9, 600 * 10**9  # 0.5 s .. 0.6 s of a 2 s run
    doc = perfetto_trace(run, start_ps=lo, end_ps=hi, nodes=[0, 2])
    by = check_format(doc)
    assert len(doc["traceEvents"]) < len(full["traceEvents"])
    for e in by["X"] + by["C"] + by["b"] + by["e"]:
        assert lo / 1e6 <= e["ts"] <= hi / 1e6 and e["ts"] + e.get("dur", 0) <= hi / 1e6 + 1e-9
    pids = {e["pid"] for e in doc["traceEvents"]}
    assert pids == {1, 3, 5}  # boards 0 and 2, and the links process
    for e in by["C"]:
        if e["name"].startswith("link "):
            u, v = map(int, e["name"].split()[1].split("->"))
            assert u in (0, 2) or v in (0, 2)
    # the KV counter starts with the value each board had at the window's start
    nodes = pd.read_parquet(run / "nodes.parquet")
    for b in (0, 2):
        g = nodes[(nodes.node == b) & (nodes.t_s * 1e12 <= lo)]
        first = next(e for e in by["C"] if e["name"] == "KV total" and e["pid"] == b + 1)
        assert len(g)
        want = g.iloc[-1][["owner_bytes", "replica_bytes", "transient_bytes"]].sum()
        assert first["ts"] == lo / 1e6 and first["args"]["bytes"] == want


def test_cli_writes_atomically_and_prints_the_size(run, tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["export", "perfetto", str(run), "-o", str(out), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["bytes"] == out.stat().st_size == write_perfetto(run, tmp_path / "again.json")
    assert out.read_bytes() == (tmp_path / "again.json").read_bytes()  # deterministic
    assert main(["export", "perfetto", str(run), "-o", str(tmp_path / "w.json"), "--from", "1ms", "--nodes", "0-1"]) == 0
    assert "MiB" in capsys.readouterr().out
    for args, needle in [(["--nodes", "9"], "node 9"), (["--from", "2ms", "--to", "1ms"], "empty"),
                         (["--nodes", "x"], "--nodes")]:
        p = subprocess.run([sys.executable, "-m", "emu", "export", "perfetto", str(run), "-o", str(tmp_path / "bad.json"),
                            *args], capture_output=True, text=True)
        assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / "bad.json").exists()
    p = subprocess.run([sys.executable, "-m", "emu", "export", "perfetto", str(tmp_path / "nope"), "-o", "x.json"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "no such results folder" in p.stderr


def test_export_imports_nothing_of_the_engine():
    code = ("import sys, emu.export.perfetto; bad = [m for m in sys.modules if m.startswith(('emu.net', 'emu.nic', "
            "'emu.replay', 'emu.workload', 'emu.topology', 'emu.codec'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_folder_without_deliveries_still_exports(run, tmp_path):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(run, old)
    (old / "deliveries.parquet").unlink()
    by = check_format(perfetto_trace(old))
    assert not by["flows"] and {e["cat"] for e in by["X"]} == {"compute"} and {e["cat"] for e in by["b"]} == {"send"}
    full = check_format(perfetto_trace(run))
    assert [e for e in by["X"] if e["cat"] == "compute"] == [e for e in full["X"] if e["cat"] == "compute"]


def test_board_set_checks_every_board_before_expanding():
    """docs/api.md, Results: every board ``nodes`` names is one of the run's, a range at both
    ends whichever way it runs, and a spec range that runs backwards is refused (one line)."""
    from emu.errors import ConfigError
    from emu.export.perfetto import board_set

    assert board_set("0-1,3", 4) == [0, 1, 3] and board_set(range(3, -1, -1), 4) == [0, 1, 2, 3]
    assert board_set([3, 1, 1], 4) == [1, 3] and board_set(range(2, 0, -1), 4) == [1, 2]
    for nodes, past in (([0, 4], 4), ([-1], -1), (range(5, -1, -1), 5), (range(3, -2, -1), -1),
                        (range(10**9, 0, -1), 10**9)):
        with pytest.raises(ConfigError, match=rf"^nodes .*: node {past} is not in the run \(boards 0\.\.3\)$"):
            board_set(nodes, 4)
    with pytest.raises(ConfigError, match=r"^nodes '0,3-1': range 3-1 runs backwards$"):
        board_set("0,3-1", 4)
