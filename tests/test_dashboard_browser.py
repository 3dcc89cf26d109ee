"""The dashboard in a real browser (Playwright driving Debian's /usr/bin/chromium, no browser
download) over results folders made by real replays (4 boards, 1K tokens): every page, runs
compared with shared scales, the selection in the URL, two sweeps in one folder, the table
and its CSV, timeline hover and click, frame detail and hex panes, and the report's escaping."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from test_dashboard_common import (CLICK_AGAIN_MS, PAGES, served_page, WAIT_PAGE, FIGURES, app, browser, click_until, emu, goto, page,  # noqa: F401
                                   runs)
from waits import HANG_MS, HANG_S

FIND = """(type, run) => [...document.querySelectorAll('[id]')].find(e => { try { const o = JSON.parse(e.id);
  return o.type === type && (run === null || o.run === run); } catch (x) { return false; } })"""


def fig_of(pg, type_, run=None):
    """(data, layout) of a pattern-id graph or a plain-id graph, as plotly drew them."""
    js = f"""() => {{ const el = ({FIND})({json.dumps(type_)}, {json.dumps(run)}) || document.getElementById({json.dumps(type_)});
      const g = el.querySelector('.js-plotly-plot') || el; return {{data: g._fullData.map(t => ({{name: t.name, x: t.x,
      y: t.y, z: t.z ? Array.from(t.z).flatMap(r => Array.from(r)) : null, zmax: t.zmax, cmax: t.marker && t.marker.cmax, type: t.type,
      xaxis: t.xaxis}})), layout: {{x: g._fullLayout.xaxis.range, x2: g._fullLayout.xaxis2 && g._fullLayout.xaxis2.range}}}}; }}"""
    return pg.evaluate(js)


@pytest.mark.parametrize("path", list(PAGES))
def test_page_has_data(page, path):
    goto(page, path + ("?runs=mars" if path not in ("/", "/sweep", "/whatif") else ""))
    figs = page.evaluate(FIGURES)
    assert page.locator("#_pages_content .error:not(.card .error)").count() == 0
    expect = {"/": 2, "/links": 3, "/memory": 4, "/timeline": 1, "/frames": 1, "/sweep": 9, "/whatif": 0}[path]
    assert len(figs) == expect, figs
    for f in figs:
        assert f["traces"] > 0 and f["points"] > 0, f
    assert "Traceback" not in page.inner_text("body")
    assert not page.js_errors, page.js_errors


def test_links_compare_two_runs_with_shared_scales(page, runs):
    goto(page, "/links?runs=mars,ring&link=0-1")
    util = {}
    for k in ("mars", "ring"):
        df = pd.read_parquet(runs[k] / "links.parquet")
        end = json.loads((runs[k] / "summary.json").read_text())["sim_end_s"]
        util[k] = (df.groupby("link")["busy_s"].sum() / end).max()
    tops = [fig_of(page, "lk-topo", k) for k in ("mars", "ring")]
    cmax = [next(t["cmax"] for t in f["data"] if t["name"] == "links") for f in tops]
    assert cmax[0] == cmax[1] == pytest.approx(max(util.values()))  # one colour scale: the larger run's top
    heats = [fig_of(page, "lk-heat", k) for k in ("mars", "ring")]
    assert heats[0]["data"][0]["zmax"] == heats[1]["data"][0]["zmax"]
    assert heats[0]["layout"]["x"] == heats[1]["layout"]["x"]
    assert heats[0]["data"][0]["zmax"] == pytest.approx(max(max(h["data"][0]["z"]) for h in heats))
    detail = fig_of(page, "link-detail")
    assert {t["name"] for t in detail["data"] if t["type"] == "scatter"} >= {"mars", "ring"}
    assert "Link 0→1 in each run" in page.locator("#link-detail .gtitle").text_content()
    # clicking a lane of one run's topology picks that direction in both, and the URL says so
    target = page.evaluate(f"""() => {{ const el = ({FIND})('lk-topo', 'ring'); const g = el.querySelector('.js-plotly-plot');
      const L = g._fullLayout; const t = g.data.find(t => t.name === 'links');
      const k = t.customdata.findIndex((c, i) => !g.data.find(x => x.name === 'links').hovertext[i].includes('0→1'));
      el.scrollIntoView(); const r = g.querySelector('.nsewdrag').getBoundingClientRect();
      return {{label: t.hovertext[k].match(/link (\\d+→\\d+)/)[1], x: r.left + L.xaxis.l2p(t.x[k]),
               y: r.top + L.yaxis.l2p(t.y[k])}}; }}""")
    click_until(page, target["x"], target["y"],
                "(lab) => document.querySelector('#link-detail .gtitle').textContent.includes('Link ' + lab)", target["label"])
    u, v = target["label"].split("→")
    page.wait_for_function(f"() => window.location.search.includes('link={u}-{v}')")
    assert "runs=mars,ring" in page.evaluate("window.location.search")


def test_memory_compare_and_url(page, runs):
    goto(page, "/memory?runs=mars,ring&node=1")
    assert page.locator("#mem-node").inner_text().strip() == "node 1"
    total = {}
    for k in ("mars", "ring"):
        n = pd.read_parquet(runs[k] / "nodes.parquet")
        total[k] = float((n["owner_bytes"] + n["replica_bytes"] + n["transient_bytes"]).max()) / 2**20
    heats = [fig_of(page, "mem-heat", k) for k in ("mars", "ring")]
    assert heats[0]["data"][0]["zmax"] == heats[1]["data"][0]["zmax"] == pytest.approx(max(total.values()))
    assert heats[0]["layout"]["x"] == heats[1]["layout"]["x"]
    node = fig_of(page, "mem-node-fig")
    assert {t["name"] for t in node["data"]} == {"mars: held", "mars: owner-only", "ring: held", "ring: owner-only"}
    per = fig_of(page, "mem-per-node")
    oo = json.loads((runs["mars"] / "summary.json").read_text())["owner_only_node_kv_bytes"]
    owner = next(t for t in per["data"] if t["name"].startswith("owner-only"))
    assert np.allclose(owner["y"], np.array(oo) / 2**20)
    for k in ("mars", "ring"):  # bars: each node's peak in each run
        n = pd.read_parquet(runs[k] / "nodes.parquet")
        want = (n["owner_bytes"] + n["replica_bytes"] + n["transient_bytes"]).groupby(n["node"]).max() / 2**20
        got = next(t for t in per["data"] if t["name"] == f"{k}: peak")["y"]
        assert np.allclose(got, want.to_numpy())
    # another node: the URL follows, and a reload shows the same view
    page.click("#mem-node")
    page.click("[role=option]:has-text('node 3')")
    page.wait_for_function("() => window.location.search.includes('node=3')")
    page.reload()
    page.wait_for_function(WAIT_PAGE, arg="Memory and replicas")
    assert page.locator("#mem-node").inner_text().strip() == "node 3"
    assert "of node 3" in page.locator("#mem-node-fig .gtitle").text_content()


def test_timeline_compare_shares_one_time_axis(page, runs):
    goto(page, "/timeline?runs=mars,ring")
    f = fig_of(page, "timeline")
    assert f["layout"]["x"] == f["layout"]["x2"]  # one axis for both runs
    ends = [json.loads((runs[k] / "summary.json").read_text()) for k in ("mars", "ring")]
    ops_end = max(pd.read_parquet(runs[k] / "ops.parquet")["end_s"].max() for k in ("mars", "ring"))
    assert f["layout"]["x"][1] == pytest.approx(ops_end)
    assert {t["xaxis"] for t in f["data"]} == {"x", "x2"} and ends


def _long_op(runs):
    ops = pd.read_parquet(runs["mars"] / "ops.parquet")
    mlp = ops[(ops["kind"].astype(str) == "mlp") & np.isfinite(ops["end_s"])]
    op = mlp.loc[(mlp["end_s"] - mlp["start_s"]).idxmax()]
    return ops, op


def test_timeline_hover_middle_of_long_bar_names_it_and_click_details(page, runs):
    """Hovering the middle of a long bar named another lane's op."""
    ops, op = _long_op(runs)
    d = op["end_s"] - op["start_s"]
    goto(page, f"/timeline?runs=mars&from={op['start_s'] - 2 * d}&to={op['end_s'] + 2 * d}")
    assert "every op as it ran" in page.locator("#timeline .gtitle").text_content()
    lane = 2 * int(op["node"])
    pt = page.evaluate("""([x, y]) => { const g = document.querySelector('#timeline .js-plotly-plot'); const L = g._fullLayout;
      const r = g.querySelector('.nsewdrag').getBoundingClientRect();
      return {x: r.left + L.xaxis.l2p(x), y: r.top + L.yaxis.l2p(y)}; }""", [float((op["start_s"] + op["end_s"]) / 2), lane])
    page.mouse.move(pt["x"], pt["y"])
    page.wait_for_selector("#timeline .hovertext")
    hover = page.text_content("#timeline .hovertext")
    assert f"mlp op {int(op['op'])}" in hover and f"node {int(op['node'])} compute" in hover
    click_until(page, pt["x"], pt["y"], "(id) => { const e = document.getElementById('tl-op'); "
                "return e && e.dataset.op === id; }", str(int(op["op"])))
    text = page.inner_text("#tl-detail")
    for k in ("chunk", "layer", "bytes", "deps", "start_s", "end_s"):
        assert k in text
    assert f"{op['start_s']:.9f} s" in text and f"{int(op['bytes']):,} B" in text


def test_timeline_perfetto_button_hidden_without_the_export(page, monkeypatch):
    from dashboard.pages import timeline

    monkeypatch.setattr(timeline, "PERFETTO", "emu.export.no_such_module")  # as on a tree without the export
    assert not timeline.perfetto_available()
    goto(page, "/timeline?runs=mars")
    assert page.locator("#tl-perfetto").count() == 0 and page.locator("#timeline").count() == 1


def test_two_sweeps_draw_their_own_curves(page, runs):
    goto(page, "/sweep")
    raw = pd.read_parquet(runs["sweeps"] / "chunk_mars" / "results.parquet")
    f = fig_of(page, "sw-ttft-s-chunk")
    assert len(f["data"]) == 1 and "chunk_mars" in f["data"][0]["name"]
    assert f["data"][0]["x"] == raw["chunk"].tolist() and f["data"][0]["y"] == raw["ttft_s"].tolist()
    quick = pd.read_parquet(runs["sweeps"] / "quick" / "results.parquet").dropna(subset=["ttft_s"])
    f = fig_of(page, "sw-wire-bytes-nodes")
    assert len(f["data"]) == 4
    for t in f["data"]:
        seq = int(t["name"].split("seq ")[1].split(",")[0])
        want = quick[(quick["scheme"] == t["name"].split(" · ")[0]) & (quick["seq"] == seq)].sort_values("nodes")
        assert np.allclose(t["y"], want["wire_bytes"] / 2**30)


def test_sweep_table_and_csv(page, runs, tmp_path):
    goto(page, "/sweep")
    page.click("[id='{\"col\":\"sweep\",\"type\":\"sw-filter\"}']")
    page.click("[role=option]:has-text('quick')")
    page.wait_for_function("() => document.querySelectorAll('#sw-table-el tbody tr').length === 4")
    head = page.eval_on_selector_all("#sw-table-el thead th", "els => els.map(e => e.textContent)")
    assert "TTFT (s) @ nodes 4" in head and "wire GiB @ nodes 8" in head
    with page.expect_download() as dl:
        page.click("#sw-csv-btn")
    path = tmp_path / "t.csv"
    dl.value.save_as(path)
    tab = pd.read_csv(path)
    raw = pd.read_parquet(runs["sweeps"] / "quick" / "results.parquet").dropna(subset=["ttft_s"])
    assert len(tab) == 4
    for _, row in tab.iterrows():
        for n in (4, 8):
            want = raw[(raw["scheme"] == row["scheme"]) & (raw["seq"] == row["seq"]) & (raw["nodes"] == n)]
            assert row[f"TTFT (s) @ nodes {n}"] == pytest.approx(want["ttft_s"].iloc[0])
            assert row[f"wire GiB @ nodes {n}"] == pytest.approx(want["wire_bytes"].iloc[0] / 2**30)


def test_frame_detail_and_hex_panes(page, runs):
    from emu.codec import read_capture

    goto(page, "/frames?runs=mars")
    page.wait_for_selector("div.frames table tbody tr")
    page.click("div.frames tbody tr:nth-child(6) td:first-child a")
    page.wait_for_function("() => document.querySelector('#fr-hex').textContent.length > 0")
    batch = next(iter(read_capture(runs["mars"] / "cap.pcap")))
    raw = bytes(batch.buf[batch.offsets[5]:batch.offsets[6]])
    hexpane = page.inner_text("#fr-hex").splitlines()
    assert hexpane[0].split("  ")[1].split() == [f"{b:02x}" for b in raw[:8]]
    assert len(hexpane) == (len(raw) + 15) // 16
    tree = page.inner_text("#fr-tree")
    from emu.codec import scan_frames

    h = scan_frames(batch.buf, batch.offsets[:7], wirelen=batch.wirelen[:6])[0][5]
    assert "MCF header" in tree and "Ethernet II" in tree
    assert f"src_node: {int(h['src_node']):,}" in tree and f"msg_id: {int(h['msg_id']):,}" in tree
    # follow its message: every fragment of it on every hop
    page.click("#fr-follow")
    page.wait_for_selector("#fr-following")
    page.wait_for_function("() => document.querySelector('#fr-status').textContent.includes('match')")
    cols = page.eval_on_selector_all("div.frames thead th", "els => els.map(e => e.textContent)")
    rows = page.eval_on_selector_all("div.frames tbody tr", "trs => trs.map(r => [...r.children].map(c => c.textContent))")
    mi, si = cols.index("msg_id"), cols.index("src_node")
    assert rows and {(r[si], r[mi]) for r in rows} == {(str(int(h["src_node"])), str(int(h["msg_id"])))}


def test_frames_histogram_brush_filters_time(page):
    goto(page, "/frames?runs=mars")
    page.wait_for_selector("div.frames table tbody tr")
    box = page.evaluate("""() => { const r = document.querySelector('#fr-hist .nsewdrag').getBoundingClientRect();
      return {x: r.left, y: r.top, w: r.width, h: r.height}; }""")
    for _ in range(4):
        page.mouse.move(box["x"] + box["w"] * 0.3, box["y"] + box["h"] * 0.5)
        page.mouse.down()
        page.mouse.move(box["x"] + box["w"] * 0.4, box["y"] + box["h"] * 0.5, steps=8)
        page.mouse.up()
        try:
            page.wait_for_function("() => document.querySelector('#fr-from').value !== ''", timeout=CLICK_AGAIN_MS)
            break
        except Exception:
            pass
    lo, hi = float(page.input_value("#fr-from")), float(page.input_value("#fr-to"))
    page.wait_for_function("() => document.querySelector('#fr-status').textContent.includes('match')")
    cols = page.eval_on_selector_all("div.frames thead th", "els => els.map(e => e.textContent)")
    ti = cols.index("time s")
    times = page.eval_on_selector_all("div.frames tbody tr", f"trs => trs.map(r => parseFloat(r.children[{ti}].textContent))")
    assert times and all(lo <= t <= hi for t in times)


def test_malformed_run_shows_a_message(page):
    goto(page, "/links?runs=broken")
    assert "links.parquet is not a readable Parquet file" in page.inner_text("#_pages_content .error")
    assert "Traceback" not in page.inner_text("body")


def test_report_escapes_values_from_files(browser, runs, tmp_path):
    """A crafted summary.json ran script in the report."""
    bad = "<img src=x onerror=\"window.__pwned=1\">"
    crafted = tmp_path / "crafted"
    crafted.mkdir()
    for f in ("ops.parquet", "links.parquet", "nodes.parquet", "topology.json", "schedule.json"):
        (crafted / f).write_bytes((runs["mars"] / f).read_bytes())
    s = json.loads((runs["mars"] / "summary.json").read_text())
    (crafted / "summary.json").write_text(json.dumps(dict(s, scheme=bad, topology=bad, trace=bad, model=bad, hw=bad)))
    typed = tmp_path / "typed"  # numbers given as strings: refused with one line, as by every command
    typed.mkdir()
    (typed / "summary.json").write_text(json.dumps(dict(s, seq=bad, nodes=bad)))
    out = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-m", "emu", "report", crafted, typed, "-o", out], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "typed: summary.json: nodes is not an integer" in p.stderr
    assert not out.exists()
    emu("report", crafted, "-o", out, "--frames", 0)
    ctx = browser.new_context(offline=True)
    pg = ctx.new_page()
    pg.goto(out.as_uri())
    pg.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].every(x => x.querySelector('.main-svg'))",
                         timeout=HANG_MS)
    pg.mouse.move(400, 400)
    assert pg.evaluate("window.__pwned") is None
    assert pg.evaluate("document.querySelectorAll('img[src=x]').length") == 0
    assert bad in pg.inner_text("body")  # shown as text
    ctx.close()


def test_whatif_runs_and_joins_the_others(page, app, runs):
    from dashboard import compare as C

    goto(page, "/whatif")
    page.fill("#wi-rate", "10Gbps")
    page.click("#wi-run")
    page.wait_for_function("() => /what-if \\d+ (done|failed)/.test(document.querySelector('#wi-status').textContent)",
                           timeout=HANG_MS, polling=250)
    status = page.inner_text("#wi-status")
    assert "done" in status, status
    key = status.split("listed as run ")[1].strip()
    goto(page, "/")
    card = page.locator(f"#cards .card[data-run='{key}']")
    assert card.count() == 1
    # the cards name what differs: the link rate, highlighted
    assert "10 Gbps" in card.locator(".changed").all_inner_texts()
    assert "1 Gbps" in page.locator("#cards .card[data-run='mars'] .changed").all_inner_texts()
    assert "loss" not in page.inner_text(".lede")  # not recorded by the base: not a difference
    # and the what-if against its base run (mars, the same trace): the metrics that changed, by how much
    base = json.loads((runs["mars"] / "summary.json").read_text())
    new = json.loads((app[1].whatif_dir / key / "summary.json").read_text())
    rows = page.eval_on_selector_all(f"#diff-{key} tbody tr", "trs => trs.map(r => [...r.children].map(c => c.textContent))")
    assert rows
    got = {r[0]: r for r in rows}
    from emu.compare import METRICS, metric

    for k, label, unit in METRICS:
        a, b = metric(base, k), metric(new, k)
        if a is not None and b is not None and a != b:
            assert got[label][1] == C.fmt_metric(a, unit) and got[label][2] == C.fmt_metric(b, unit)
            if a:
                assert got[label][4] == C.fmt_pct((b - a) / abs(a))
        else:
            assert label not in got


def test_perfetto_button_downloads_the_window(page, runs, tmp_path):
    """The button asks emu.export.perfetto (another part of mcf-emu) for the first run in the
    window shown. Where that module is not installed, one with its signature stands in for it
    (found on emu's package path for this test only)."""
    import importlib
    import importlib.util
    import sys

    import emu
    from dashboard.pages import timeline

    stand_in = not timeline.perfetto_available()
    if stand_in:
        pkg = tmp_path / "export"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "perfetto.py").write_text(
            "def perfetto_trace(results_dir, *, start_ps=None, end_ps=None, nodes=None):\n"
            "    return {'traceEvents': [], 'asked': [str(results_dir), start_ps, end_ps, nodes]}\n")
        emu.__path__.append(str(tmp_path))
        importlib.invalidate_caches()
    try:
        _, op = _long_op(runs)
        lo, hi = float(op["start_s"]), float(op["end_s"])
        goto(page, f"/timeline?runs=mars&from={lo}&to={hi}")
        assert page.locator("#tl-perfetto").count() == 1
        with page.expect_download() as dl:
            page.click("#tl-perfetto")
        path = tmp_path / "t.json"
        dl.value.save_as(path)
        assert dl.value.suggested_filename == "mars.perfetto.json"
        want = importlib.import_module(timeline.PERFETTO).perfetto_trace(
            runs["mars"].resolve(), start_ps=round(lo * 1e12), end_ps=round(hi * 1e12))
        assert json.loads(path.read_text()) == json.loads(json.dumps(want))
        if not stand_in:  # the real export: a slice of the long MLP the window was cut around
            ops = [e.get("args", {}).get("op") for e in want["traceEvents"] if e.get("ph") == "X"]
            assert int(op["op"]) in ops
    finally:
        if stand_in:
            emu.__path__.remove(str(tmp_path))
            for m in ("emu.export.perfetto", "emu.export"):
                sys.modules.pop(m, None)
            importlib.invalidate_caches()


def test_pages_show_crafted_values_as_text(browser, runs, tmp_path):
    """The pages: values from a crafted summary.json are text, never markup."""

    bad = "<img src=x onerror=\"window.__pwned=1\">"
    crafted = tmp_path / "res" / "crafted"
    crafted.mkdir(parents=True)
    for f in ("ops.parquet", "links.parquet", "nodes.parquet", "topology.json", "schedule.json"):
        (crafted / f).write_bytes((runs["mars"] / f).read_bytes())
    s = json.loads((runs["mars"] / "summary.json").read_text())
    (crafted / "summary.json").write_text(json.dumps(dict(s, scheme=bad, topology=bad, trace=bad, model=bad, hw=bad)))
    with served_page(browser, [tmp_path / "res"], tmp_path) as pg:
        for path in ("/", "/links?runs=crafted", "/memory?runs=crafted", "/timeline?runs=crafted"):
            goto(pg, path)
            pg.mouse.move(700, 500)
            assert pg.evaluate("window.__pwned") is None, path
            assert pg.evaluate("document.querySelectorAll('img[src=x]').length") == 0, path
        goto(pg, "/")
        assert bad in pg.inner_text("#cards")


def test_timeline_wheel_zooms(page):
    goto(page, "/timeline?runs=mars")
    before = page.text_content("#timeline .gtitle")
    box = page.evaluate("""() => { const r = document.querySelector('#timeline .nsewdrag').getBoundingClientRect();
      return {x: r.left + r.width / 2, y: r.top + r.height / 2}; }""")
    for _ in range(4):
        page.mouse.move(box["x"], box["y"])
        page.mouse.wheel(0, -600)
        try:
            page.wait_for_function("(t) => document.querySelector('#timeline .gtitle').textContent !== t", arg=before,
                                   timeout=CLICK_AGAIN_MS)
            break
        except Exception:
            pass
    page.wait_for_function("() => window.location.search.includes('from=')")
    q = dict(x.split("=") for x in page.evaluate("window.location.search")[1:].split("&"))
    lo, hi = float(q["from"]), float(q["to"])
    assert 0 <= lo < hi and f"{lo:.4f}–{hi:.4f} s" in page.text_content("#timeline .gtitle")


def test_frames_link_column_from_capture_interfaces(browser, runs, tmp_path):
    """A replay's pcapng capture has one interface per link direction (`U->V`): the Frames page
    shows the link column and filter, each row on the link tshark reads for that record, and a
    multicast frame's copies are rows on distinct links."""
    import shutil
    import subprocess

    if not shutil.which("tshark"):
        pytest.skip("tshark not installed (apt-get install tshark)")
    run = tmp_path / "res" / "linked"
    emu("replay", runs["mars"].parent.parent / "mars.json", "--out", run, "--capture", "cap.pcapng")
    read = subprocess.run(["tshark", "-r", str(run / "cap.pcapng"), "-T", "fields", "-e", "frame.interface_name"],
                          capture_output=True, text=True, check=True, timeout=HANG_S)
    on_link = read.stdout.split()
    names = sorted(set(on_link))
    assert all("->" in n for n in names)
    with served_page(browser, [tmp_path / "res"], tmp_path) as pg:
        goto(pg, "/frames?runs=linked")
        pg.wait_for_selector("div.frames table tbody tr")
        cols = pg.eval_on_selector_all("div.frames thead th", "els => els.map(e => e.textContent)")
        assert "link" in cols and pg.is_visible("#fr-link")
        rows = pg.eval_on_selector_all("div.frames tbody tr", "trs => trs.map(r => [...r.children].map(c => c.textContent))")
        li, ki = cols.index("link"), cols.index("kv_id")
        assert rows and [r[li] for r in rows] == [n.replace("->", "→") for n in on_link[:len(rows)]]
        # the copies of one multicast frame leave at once on distinct links
        groups = {}
        for r in rows:
            groups.setdefault((r[1], r[ki]), []).append(r[li])
        assert any(len(g) > 1 and len(set(g)) == len(g) for g in groups.values())
        assert {r[cols.index("status")] for r in rows} == {"ok"}
        pg.click("#fr-link")
        pg.click(f"[role=option]:has-text('{names[1].replace('->', '→')}')")
        pg.wait_for_function("() => document.querySelector('#fr-status').textContent.includes('match')")
        rows = pg.eval_on_selector_all("div.frames tbody tr", f"trs => trs.map(r => r.children[{li}].textContent)")
        assert rows and set(rows) == {names[1].replace("->", "→")}


def test_frames_follows_the_run_picker(page):
    goto(page, "/frames?runs=mars")
    page.wait_for_selector("div.frames table tbody tr")
    page.click("#runs")
    page.click("[role=option]:has-text('ring:')")
    page.wait_for_function("() => document.querySelector('#fr-body').textContent.includes('ring has no capture')")
    page.wait_for_function("() => window.location.search.includes('runs=ring')")


def test_timeline_click_on_merged_segment_zooms_in(page):
    goto(page, "/timeline?runs=mars")
    assert "kept the lane busiest" in page.text_content("#timeline .gtitle")
    pt = page.evaluate("""() => { const g = document.querySelector('#timeline .js-plotly-plot'); const L = g._fullLayout;
      const t = g._fullData.find(t => t.type === 'bar' && t.base && t.base.length > 3 && t.name === 'mlp');
      let k = 0; for (let i = 1; i < t.x.length; i++) if (t.x[i] > t.x[k]) k = i;   // the longest merged bar
      const r = g.querySelector('.nsewdrag').getBoundingClientRect();
      return {x: r.left + L.xaxis.l2p(t.base[k] + t.x[k] / 2), y: r.top + L.yaxis.l2p(t.y[k]),
              lo: t.base[k], hi: t.base[k] + t.x[k]}; }""")
    click_until(page, pt["x"], pt["y"], "() => window.location.search.includes('from=')")
    q = dict(x.split("=") for x in page.evaluate("window.location.search")[1:].split("&"))
    assert float(q["from"]) == pytest.approx(pt["lo"]) and float(q["to"]) == pytest.approx(pt["hi"])
    page.wait_for_function("(lo) => document.querySelector('#timeline .gtitle').textContent.includes(lo)",
                           arg=f"{pt['lo']:.4f}–")


def test_adding_a_run_in_the_picker_compares(page):
    goto(page, "/memory?runs=mars&node=2")
    page.click("#runs")
    page.click("[role=option]:has-text('ring:')")
    page.keyboard.press("Escape")
    page.wait_for_function("() => window.location.search.includes('runs=mars,ring')")
    page.wait_for_function("""() => { const g = document.querySelector('#mem-node-fig .js-plotly-plot');
      return g && g._fullData.some(t => t.name === 'ring: held'); }""")
    names = page.evaluate("document.querySelector('#mem-node-fig .js-plotly-plot')._fullData.map(t => t.name)")
    assert {"mars: held", "ring: held"} <= set(names)
    assert "of node 2" in page.text_content("#mem-node-fig .gtitle")
