"""The dashboard without a browser: aggregation, registry, sweeps (two datasets kept apart,
the table view), the frame index (user cache, link interfaces, one frame's bytes), what-if
and Host checks, the report and the CLI. Browser tests: test_dashboard_browser.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_dashboard_common import app, emu, post, runs, whatif_body  # noqa: F401 - fixtures
from waits import HANG_S, guarded


def test_link_matrix_downsamples_and_keeps_busy_time(runs):
    from dashboard import data as D

    df = pd.read_parquet(runs["mars"] / "links.parquet")
    m = D.link_matrix(df, max_cols=50)
    assert m.util.shape == (df["link"].nunique(), m.util.shape[1]) and m.util.shape[1] <= 50
    assert np.isclose(m.busy_s.sum(), df["busy_s"].sum())
    assert (m.util >= 0).all() and (m.util <= 1).all()


def test_step_resample_keeps_the_peak(runs):
    from dashboard import data as D

    nodes = pd.read_parquet(runs["mars"] / "nodes.parquet")
    d = nodes[nodes["node"] == 0].sort_values("t_s")
    total = (d["owner_bytes"] + d["replica_bytes"] + d["transient_bytes"]).to_numpy()
    t, cols = D.node_memory(nodes, 0, 0.0, float(d["t_s"].max()), n=40)
    assert len(t) <= 40 and cols["total"].max() == total.max()


def test_timeline_shows_every_kind_at_full_view(runs):
    """At full view qkv and the LM head never appeared (a pixel column shows the
    busiest kind only); every kind that ran must be drawn, as a bar or a strip."""
    from dashboard import data as D

    ops = pd.read_parquet(runs["mars"] / "ops.parquet")
    seg = D.timeline_segments(ops, 4, max_segments=3000, exact_below=100)
    assert not seg.exact
    drawn = {c for c, b in seg.bars if b["base"]} | {c for c, b in seg.strips if b["base"]}
    ran = set(D.categorize(ops[np.isfinite(ops["end_s"])])[0].tolist())
    assert {"qkv", "lm head"} <= ran and drawn == ran
    # a strip of a kind lies where that kind ran in that lane
    cat, lane_node, comm = D.categorize(ops)
    for c, b in seg.strips:
        for base, length, lane in list(zip(b["base"], b["length"], b["lane"]))[:20]:
            m = (cat == c) & (lane_node * 2 + comm == lane) & (ops["end_s"].to_numpy() >= base) & \
                (ops["start_s"].to_numpy() <= base + length)
            assert m.any(), (c, base, lane)
    # zoomed in: each op is one bar at its own times, in its own lane
    mlp = ops[ops["kind"].astype(str) == "mlp"].sort_values("start_s").iloc[3]
    fine = D.timeline_segments(ops, 4, mlp["start_s"] - 1e-4, mlp["end_s"] + 1e-4)
    assert fine.exact
    bars = dict(fine.bars)["mlp"]
    i = bars["op"].index(int(mlp["op"]))
    assert bars["lane"][i] == 2 * int(mlp["node"]) and bars["base"][i] == pytest.approx(mlp["start_s"])
    assert bars["base"][i] + bars["length"][i] == pytest.approx(mlp["end_s"])


def test_registry_finds_only_its_own_keys_and_sweep_folders(runs):
    from dashboard.data import Registry

    reg = Registry()
    sweeps = []
    added = reg.add_tree(runs["mars"].parent, sweeps=sweeps)
    assert {r.key for r in added} == {"mars", "ring", "broken"}
    for crafted in ("../mars", str(runs["mars"]), "/etc/passwd", None, ["mars"], "mars/../ring"):
        assert reg.get(crafted) is None
    # `emu dashboard results/*`: a sweep folder, or a folder of them, is a sweep, not an unreadable run
    assert reg.add_tree(runs["sweeps"] / "quick", sweeps=sweeps) == []
    assert reg.add_tree(runs["sweeps"], sweeps=sweeps) == []
    assert [p.name for p in sweeps] == ["quick", "chunk_mars", "quick"]
    assert all(not r.error for r in added if r.key != "broken")


def test_summary_with_strings_for_numbers_is_unreadable(tmp_path, runs):
    from dashboard.data import Registry

    d = tmp_path / "crafted"
    d.mkdir()
    s = json.loads((runs["mars"] / "summary.json").read_text())
    (d / "summary.json").write_text(json.dumps(dict(s, nodes="<img src=x onerror=alert(1)>")))
    assert "nodes is not an integer" in Registry().add(d).error


def test_malformed_folder_gives_a_message(runs):
    from dashboard.data import Registry, ResultsError

    run = Registry().add(runs["broken"])
    with pytest.raises(ResultsError, match="links.parquet is not a readable Parquet file"):
        run.links()


def _line(fig, name_part):
    return [t for t in fig.data if name_part in t.name]


def test_two_sweeps_in_one_folder_stay_apart(runs):
    """The MARS chunk-256 point of a chunk sweep became the median of unrelated points
    of another sweep. Each line holds points equal in every other parameter, values as stored."""
    from dashboard.sweep import load_sweeps, sweep_axes, sweep_figure

    df, meta = load_sweeps([runs["sweeps"] / "quick", runs["sweeps"] / "chunk_mars"])
    assert set(meta["sweeps"]) == {"quick", "chunk_mars"} and len(df) == 12
    assert [x for x, _ in sweep_axes(df)] == ["nodes", "seq", "chunk"]
    raw = pd.read_parquet(runs["sweeps"] / "chunk_mars" / "results.parquet")
    fig = sweep_figure(df, "ttft_s", "chunk")
    assert len(fig.data) == 1 and "chunk_mars" in fig.data[0].name
    assert list(fig.data[0].x) == raw["chunk"].tolist() and list(fig.data[0].y) == raw["ttft_s"].tolist()
    quick = pd.read_parquet(runs["sweeps"] / "quick" / "results.parquet").dropna(subset=["ttft_s"])
    fig = sweep_figure(df, "ttft_s", "nodes")
    assert len(fig.data) == 4  # scheme x seq of the quick sweep; the chunk sweep has one nodes value
    for t in fig.data:
        scheme = t.name.split(" · ")[0]
        seq = int(t.name.split("seq ")[1].split(",")[0])
        want = quick[(quick["scheme"] == scheme) & (quick["seq"] == seq)].sort_values("nodes")
        assert list(t.x) == want["nodes"].tolist() and list(t.y) == want["ttft_s"].tolist()


def test_sweep_table_is_scheme_by_nodes(runs):
    from dashboard.sweep import load_sweeps, sweep_table

    df, _ = load_sweeps([runs["sweeps"]/ "quick"])
    tab = sweep_table(df, "nodes", ("ttft_s", "wire_bytes"))
    raw = pd.read_parquet(runs["sweeps"] / "quick" / "results.parquet").dropna(subset=["ttft_s"])
    assert len(tab) == 4  # scheme x seq
    for _, row in tab.iterrows():
        for n in (4, 8):
            want = raw[(raw["scheme"] == row["scheme"]) & (raw["seq"] == int(row["seq"])) & (raw["nodes"] == n)]
            assert row[f"TTFT (s) @ nodes {n}"] == want["ttft_s"].iloc[0]
            assert row[f"wire GiB @ nodes {n}"] == want["wire_bytes"].iloc[0] / 2**30


def _pcapng_with_links(path: Path, names: list[str], frames: list[tuple]) -> None:
    """A pcapng file with one interface per name and (interface, frame bytes, ts_ns[, wire length]) records."""
    def block(t, body):
        n = (12 + len(body)).to_bytes(4, "little")
        return t.to_bytes(4, "little") + n + body + n

    def opt(code, v):
        return code.to_bytes(2, "little") + len(v).to_bytes(2, "little") + v + b"\0" * (-len(v) % 4)

    out = block(0x0A0D0D0A, (0x1A2B3C4D).to_bytes(4, "little") + b"\1\0\0\0" + (-1).to_bytes(8, "little", signed=True))
    for n in names:
        out += block(1, (1).to_bytes(2, "little") + b"\0\0" + (65535).to_bytes(4, "little") + opt(2, n.encode())
                     + opt(9, bytes([9])) + opt(0, b""))
    for iface, data, ts, *wire in frames:
        body = iface.to_bytes(4, "little") + (ts >> 32).to_bytes(4, "little") + (ts & 0xFFFFFFFF).to_bytes(4, "little") \
            + len(data).to_bytes(4, "little") + (wire[0] if wire else len(data)).to_bytes(4, "little") + data \
            + b"\0" * (-len(data) % 4)
        out += block(6, body)
    path.write_bytes(out)


def test_frame_index_links_cache_and_bytes(tmp_path):
    """A capture with one interface per link direction: the link column names each hop's
    direction (a multicast frame's copies are distinct rows), the index is in the cache named
    by the content, reused by a new app, and a frame's bytes are the capture's."""
    from emu.codec import encode_frames, new_headers
    from dashboard.frames import CaptureIndex, FrameFilter, hexdump

    h = new_headers(3, op=1, src_node=0, dst_set=0b110, msg_id=7, frag_cnt=1, pay_len=16, msg_len=16)
    buf, offs = encode_frames(h, np.zeros(48, np.uint8), eth_src=np.zeros(3, np.int64))
    data = [bytes(buf[offs[i]:offs[i + 1]]) for i in range(3)]
    cap = tmp_path / "cap.pcapng"
    # one multicast frame copied onto 0->1 and 0->2, then another frame on 0->1
    _pcapng_with_links(cap, ["0->1", "0->2"], [(0, data[0], 1000), (1, data[0], 1000), (0, data[2], 5000)])
    cache = tmp_path / "cache"
    ix = CaptureIndex(cap, cache)
    ix.wait()
    assert ix.state == "ready", ix.error
    assert ix.links == ["0->1", "0->2"] and "link" in ix.columns()
    total, rows, _ = ix.query(FrameFilter(), 0, 10)
    assert total == 3 and [r["link"] for r in rows] == ["0→1", "0→2", "0→1"]
    n, rows, _ = ix.query(FrameFilter(link=1), 0, 10)
    assert n == 1 and rows[0]["#"] == 1
    row, raw = ix.frame(2)
    assert raw == data[2] and hexdump(raw).splitlines()[0].startswith("0000  " + " ".join(f"{b:02x}" for b in raw[:8]))
    files = list(cache.glob("frames-*.parquet"))
    assert len(files) == 1 and not list(cache.glob(".*part*"))
    again = CaptureIndex(cap, cache)  # a restart: the same index, not rebuilt
    again.wait()
    assert again.state == "ready" and again.build_s is None and list(cache.glob("frames-*.parquet")) == files
    cap.write_bytes(cap.read_bytes())  # same content, new mtime: still the same index
    third = CaptureIndex(cap, cache)
    third.wait()
    assert third.build_s is None


def test_frame_index_of_a_replay_filters_and_follows_a_message(runs, tmp_path):
    from dashboard.frames import CaptureIndex, FrameFilter

    ix = CaptureIndex(runs["mars"] / "cap.pcap", tmp_path)
    ix.wait()
    assert ix.state == "ready" and ix.n_frames > 0 and ix.links == [] and "link" not in ix.columns()
    total, rows, hist = ix.query(FrameFilter(), 0, 10)
    assert total == ix.n_frames == sum(int(c.sum()) for c in hist[1].values())
    n, rows, _ = ix.query(FrameFilter(ops=(1,), src=1), 0, 50)
    assert 0 < n < total and all(r["op"] == "kv_replica" and r["src_node"] == 1 for r in rows)
    src, msg = ix.message_of(rows[0]["#"])
    n, frags, _ = ix.query(FrameFilter(msg=(src, msg)), 0, 1000)
    assert n >= rows[0]["frag_cnt"] and {(r["src_node"], r["msg_id"]) for r in frags} == {(src, msg)}
    assert {r["frag_idx"] for r in frags} == set(range(rows[0]["frag_cnt"]))


def test_whatif_form_values_are_checked():
    from dashboard.whatif import FormTypeError, WhatIfError, build_args

    args, desc = build_args(Path("t.json"), {"topology": "torus", "shape": "2x2", "rate": "10Gbps", "latency": "2us",
                                             "loss": "0.01", "failure": "link 0-1 down at 0.5s"})
    assert args == ["--topology=torus:2x2", "--set=hw.link_rate=10Gbps", "--set=hw.link_latency_ps=2us", "--loss=0.01",
                    "--fail=link 0-1 down at 0.5s"]
    for bad in ({"topology": "/etc/passwd"}, {"topology": "ring", "shape": "4; rm -rf"}, {"rate": "--out=/tmp/x"},
                {"latency": "$(id)"}, {"loss": "2"}, {"failure": "link 0-1 down; --out /x"}, {"shape": "4x4"},
                {"topology": "torus", "shape": "9999x9999"}, {"topology": "ring", "shape": "4097"},
                {"topology": "fattree", "shape": "32"}, {"topology": "mesh", "shape": "0x4"}):
        with pytest.raises(WhatIfError):
            build_args(Path("t.json"), bad)
    # more than 64 boards replay on the compiled loop: a 128-board fat tree is a shape to try
    assert build_args(Path("t.json"), {"topology": "fattree", "shape": "8"})[0] == ["--topology=fattree:8"]
    with pytest.raises(FormTypeError):
        build_args(Path("t.json"), {"rate": ["10Gbps"]})


def test_whatif_non_string_values_are_a_bad_request(app):
    base, st = app
    n = len(st.whatifs.jobs)
    code, text = post(base, whatif_body({"a": 1}))
    assert code == 400, text
    code, _ = post(base, whatif_body(["10Gbps"]))
    assert code == 400 and len(st.whatifs.jobs) == n


def test_host_header_must_name_the_bound_address(app):
    base, _ = app
    port = base.rsplit(":", 1)[1]
    code, text = post(base, whatif_body("10Gbps"), host=f"evil.example:{port}")
    assert code == 403 and "not this dashboard" in text
    req = urllib.request.Request(base + "/", headers={"Host": f"localhost:{port}"})
    with urllib.request.urlopen(req, timeout=HANG_S) as r:
        assert r.status == 200


def test_whatif_runs_from_a_neutral_folder(runs, tmp_path):
    """An emu/__main__.py planted in the what-if folder must not run."""
    from dashboard.data import Registry
    from dashboard.whatif import WhatIfs, trace_list

    out = tmp_path / "wi"
    (out / "emu").mkdir(parents=True)
    (out / "emu" / "__init__.py").write_text("")
    (out / "emu" / "__main__.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w').write('ran')\n")
    w = WhatIfs(out, trace_list([runs["trace"]]), Registry())
    try:
        job = w.submit("mars.json", {"rate": "10Gbps"})
        # the job's thread ends once the replay has ended and the job's state is final
        for t in threading.enumerate():
            if t.name == f"whatif-{job.id}":
                t.join(HANG_S)
        assert job.state == "done", job.message
        # followed through the replay's JSON progress: it began, and its last line is the run's end
        summary = json.loads((job.out / "summary.json").read_text())
        assert job.began and job.sim_s == pytest.approx(summary["sim_end_s"]) and not any(ln.startswith("{") for ln in job.tail)
        assert not (tmp_path / "pwned").exists()
        assert "-P" in job.argv and Path(w.cwd) != out
    finally:
        w.close()
    assert not Path(w.cwd).exists()


def test_report_is_one_offline_file_with_sweeps(runs, tmp_path):
    out = tmp_path / "report.html"
    text = emu("report", runs["mars"], runs["ring"], runs["sweeps"], "-o", out, "--frames", 20)
    assert "figures" in text
    html = out.read_text()
    assert "<script src=" not in html and "<link " not in html
    assert "kv_replica" in html and "Sweeps" in html and "TTFT (s) @ nodes 4" in html
    assert "chunk_mars" in html


def test_dashboard_does_not_import_the_engine():
    code = ("import sys, dashboard.app, dashboard.report, dashboard.frames; dashboard.frames.enum_names(); "
            "bad = [m for m in sys.modules if m.startswith(('emu.net', 'emu.nic', 'emu.replay', 'emu.workload'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_serves_until_sigterm_and_finds_sweeps(runs, tmp_path):
    env = dict(__import__("os").environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    p = subprocess.Popen([sys.executable, "-m", "emu", "dashboard", str(runs["mars"]), str(runs["sweeps"]), "--port", "0",
                          "--whatif-dir", str(tmp_path / "wi")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        url, first = None, ""
        with guarded(p):  # the server prints its URL when it listens
            while url is None and (line := p.stdout.readline()):
                first += line
                if "http://127.0.0.1:" in line:
                    url = line.split()[1]
        assert url, "no URL printed"
        assert "sweeps" in first and "quick" in first and "unreadable" not in first
        with urllib.request.urlopen(url, timeout=HANG_S) as r:
            assert r.status == 200 and b"mcf-emu dashboard" in r.read()
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=HANG_S)
    assert p.returncode == 0, err
    assert "stopped" in out


def test_cli_refuses_missing_folder(tmp_path):
    p = subprocess.run([sys.executable, "-m", "emu", "dashboard", str(tmp_path / "nope")], capture_output=True, text=True)
    assert p.returncode == 2 and "no such results folder" in p.stderr


def test_compare_names_differing_parameters_and_diffs_a_whatif(runs, tmp_path):
    """Cards show the parameters that differ (link rate, topology, loss, chunk ...);
    a what-if is diffed against its base run."""
    import shutil

    from dashboard import compare as C
    from dashboard.data import Registry

    wi = tmp_path / "whatif-1-mars"
    shutil.copytree(runs["mars"], wi)
    topo = json.loads((wi / "topology.json").read_text())
    for lk in topo["links"]:
        lk["rate_bps"] = 10_000_000_000
    (wi / "topology.json").write_text(json.dumps(topo))
    s = json.loads((wi / "summary.json").read_text())
    base_ttft = s["ttft_s"]
    s["ttft_s"] = base_ttft * 0.75
    (wi / "summary.json").write_text(json.dumps(s))
    reg = Registry()
    mars, ring = reg.add(runs["mars"]), reg.add(runs["ring"])
    w = reg.add(wi, origin="what-if", note="10Gbps")
    assert C.params(w)["link rate"] == "10 Gbps" and C.params(mars)["link rate"] == "1 Gbps"
    assert C.differing([mars, w]) == {"link rate"}
    assert {"scheme", "trace"} <= C.differing([mars, ring])
    assert C.base_of(w, reg.runs()) is mars and C.base_of(mars, reg.runs()) is None
    from emu.compare import diff, judgement

    rows, same = diff(mars.summary, w.summary)
    assert [r["key"] for r in rows] == ["ttft_s"]
    assert rows[0]["base"] == base_ttft and rows[0]["pct"] == pytest.approx(-0.25)
    assert "bytes on the wire" in same
    assert judgement("ttft_s", rows[0]["delta"]) == "better" and judgement("decode_tokens_per_s", -1.0) == "worse"
    assert C.fmt_pct(-0.25) == "-25.0%" and C.fmt_pct(-0.0001) == "-0.010%"


def test_stopped_index_build_leaves_nothing(runs, tmp_path):
    """Ctrl-C and SIGTERM stop the app through the same close(): an unfinished index is removed."""
    from dashboard.frames import CaptureIndex

    cache = tmp_path / "cache"
    ix = CaptureIndex(runs["mars"] / "cap.pcap", cache)
    ix._cancel = True  # as close() does while the build runs: stop at the next batch
    ix.wait()
    ix.cancel()
    assert ix.state == "error" and "cancelled" in ix.error
    assert list(cache.iterdir()) == []


def test_pages_read_ops_without_the_dependency_lists_and_the_detail_pane_still_shows_them(runs, monkeypatch):
    """The views read ops.parquet's documented columns only (the per-op deps lists took most of
    the time of a first Timeline or Memory page); the op's detail pane reads them."""
    from dashboard import data as D
    from dashboard.pages import timeline

    from emu import reader

    run = D.Registry().add(runs["mars"])
    monkeypatch.setattr(D, "_COLUMNS", D.LRU(64))  # nothing read yet by an earlier test
    read = []
    table = reader.ResultsFolder.table
    monkeypatch.setattr(reader.ResultsFolder, "table", lambda self, name, columns=None: read.append(columns) or
                        table(self, name, columns))
    assert list(run.ops(D.SPAN_COLUMNS).columns) == list(D.SPAN_COLUMNS)
    assert list(run.ops().columns) == list(D.OPS_COLUMNS) and "deps" not in run.ops().columns
    assert read == [list(D.SPAN_COLUMNS), [c for c in D.OPS_COLUMNS if c not in D.SPAN_COLUMNS]]  # each column once
    whole = pd.read_parquet(runs["mars"] / "ops.parquet")
    op = int(np.flatnonzero(whole["deps"].map(len) > 1)[0])  # an op with two dependencies or more
    rows = {r.children[0].children: r.children[1].children for r in timeline.detail(run, op).children[1].children[0].children}
    assert rows["deps"] == ", ".join(str(d) for d in whole["deps"][op])


def test_op_details_show_dependencies_when_recorded(runs):
    """ops.parquet records each op's dependencies (a deps list per op); the timeline's detail
    pane shows them, and says so when an older folder has none."""
    from dashboard import data as D

    ops = pd.read_parquet(runs["mars"] / "ops.parquet")
    d = D.op_details(ops, 5)
    assert d["op"] == 5 and d["kind"] == ops.loc[ops["op"] == 5, "kind"].iloc[0]
    assert list(d["deps"]) == list(ops.deps[5])
    assert D.op_details(ops.drop(columns="deps"), 5)["deps"] is None
    with_deps = ops.assign(deps=[[i - 1] if i else [] for i in range(len(ops))])
    assert D.op_details(with_deps, 5)["deps"] == [4] and D.op_details(with_deps, 0)["deps"] == []
    assert D.op_details(ops, 10**9) is None
