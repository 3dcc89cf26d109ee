"""The dashboard (issue 7): aggregation, safety and the report without a browser; every page
in a real browser (Playwright driving Debian's /usr/bin/chromium, no browser download) over
results folders made here by real replays of small generated traces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = {"/": "Overview", "/links": "Links", "/memory": "Memory and replicas", "/timeline": "Timeline",
         "/frames": "Frames", "/sweep": "Sweep", "/whatif": "What-if"}


def emu(*args, cwd=None, timeout=300):
    p = subprocess.run([sys.executable, "-m", "emu", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       timeout=timeout)
    assert p.returncode == 0, f"emu {' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Results folders of real replays (4 boards, 1K tokens), a broken one, a sweep dataset."""
    d = tmp_path_factory.mktemp("dash")

    def make(scheme, capture):
        trace = d / f"{scheme}.json"
        emu("trace", scheme, "--seq", 1024, "--nodes", 4, "--chunk", 256, "--decode-tokens", 2, "-o", trace)
        out = d / "results" / scheme
        emu("replay", trace, "--out", out, *(["--capture", "cap.pcap"] if capture else []))
        return trace, out

    with ThreadPoolExecutor(2) as pool:
        (mars_trace, mars), (_, ring) = pool.map(lambda a: make(*a), [("mars", True), ("ring", False)])
    broken = d / "results" / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text((mars / "summary.json").read_text())
    (broken / "links.parquet").write_bytes(b"this is not parquet")
    for f in ("ops.parquet", "topology.json"):
        (broken / f).write_bytes((mars / f).read_bytes())
    pd.DataFrame({"t_s": [0.0]}).to_parquet(broken / "nodes.parquet")  # a column short
    # a sweep dataset as `emu sweep` writes it (docs/sweeps.md): one row per point
    rows = []
    for scheme in ("mars", "ring"):
        for nodes in (4, 8):
            for seq in (1024, 2048):
                ttft = seq / 1000 / nodes * (1.0 if scheme == "mars" else 1.6)
                rows.append(dict(sweep="t", status="ok", error=None, scheme=scheme, nodes=nodes, seq=seq, chunk=256,
                                 topology="auto", link_rate=None, ttft_s=ttft, wire_bytes=seq * nodes * 1000,
                                 kv_bytes=seq * nodes * 800))
    rows.append(dict(rows[0], status="failed", error="boom", ttft_s=None))
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {b"emu.sweep": json.dumps({"name": "t", "description": "a test sweep", "axes": ["scheme", "nodes", "seq"]})})
    sweep = d / "sweep"
    sweep.mkdir()
    pq.write_table(table, sweep / "results.parquet")
    return {"dir": d, "mars": mars, "ring": ring, "broken": broken, "trace": mars_trace, "sweep": sweep,
            "notres": d}


# ------------------------------------------------------------------------------ no browser


def test_link_matrix_downsamples_and_keeps_busy_time(runs):
    from dashboard import data as D

    df = pd.read_parquet(runs["mars"] / "links.parquet")
    m = D.link_matrix(df, max_cols=50)
    assert m.util.shape == (df["link"].nunique(), m.util.shape[1]) and m.util.shape[1] <= 50
    assert np.isclose(m.busy_s.sum(), df["busy_s"].sum())
    assert (m.util >= 0).all() and (m.util <= 1).all()
    assert m.t0[0] == df["t_start_s"].min() and np.isclose(m.t1[-1], df["t_end_s"].max())


def test_step_resample_keeps_the_peak(runs):
    from dashboard import data as D

    nodes = pd.read_parquet(runs["mars"] / "nodes.parquet")
    d = nodes[nodes["node"] == 0].sort_values("t_s")
    total = (d["owner_bytes"] + d["replica_bytes"] + d["transient_bytes"]).to_numpy()
    t, cols = D.node_memory(nodes, 0, 0.0, float(d["t_s"].max()), n=40)
    assert len(t) <= 40 and cols["total"].max() == total.max()
    assert np.allclose(cols["owner"] + cols["replica"] + cols["transient"], cols["total"])


def test_timeline_is_screen_sized(runs):
    from dashboard import data as D

    ops = pd.read_parquet(runs["mars"] / "ops.parquet")
    seg = D.timeline_segments(ops, 4, max_segments=500, exact_below=100)
    assert not seg.exact and 0 < seg.n_segments <= 500
    assert seg.n_ops == int(np.isfinite(ops["end_s"]).sum())
    lo = float(ops["start_s"].median())
    fine = D.timeline_segments(ops, 4, lo, lo + 1e-3)
    assert fine.exact and fine.n_segments == fine.n_ops > 0  # zoomed in: every op as it ran


def test_registry_finds_only_its_own_keys(runs):
    from dashboard.data import Registry

    reg = Registry()
    added = reg.add_tree(runs["mars"].parent)
    assert {r.key for r in added} == {"mars", "ring", "broken"}
    assert reg.get("mars").summary["scheme"] == "mars"
    for crafted in ("../mars", str(runs["mars"]), "/etc/passwd", None, ["mars"], "mars/../ring"):
        assert reg.get(crafted) is None
    assert reg.add(runs["notres"]).error.endswith("not a results folder (no summary.json)")


def test_malformed_folder_gives_a_message(runs):
    from dashboard.data import Registry, ResultsError

    run = Registry().add(runs["broken"])
    with pytest.raises(ResultsError, match="links.parquet is not a readable Parquet file"):
        run.links()
    with pytest.raises(ResultsError, match="nodes.parquet lacks the columns node, owner_bytes"):
        run.nodes()


def test_frame_index_filters_and_bad_captures(runs, tmp_path):
    from dashboard.frames import CaptureIndex, FrameFilter

    ix = CaptureIndex(runs["mars"] / "cap.pcap", tmp_path)
    ix.wait()
    assert ix.state == "ready" and ix.n_frames > 0
    total, rows, hist = ix.query(FrameFilter(), 0, 10)
    assert total == ix.n_frames == sum(int(c.sum()) for c in hist[1].values()) and len(rows) == 10
    n, rows, _ = ix.query(FrameFilter(ops=(1,), src=1), 0, 50)  # kv_replica from board 1
    assert 0 < n < total and all(r["op"] == "kv_replica" and r["src_node"] == 1 for r in rows)
    n2, rows, _ = ix.query(FrameFilter(dst=2, hop=0, t_from=0.0, t_to=1e9), 0, 50)
    assert all(int(r["dst_set"], 16) >> 2 & 1 and r["hop from"] == 0 for r in rows)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes((runs["mars"] / "cap.pcap").read_bytes()[:5000])  # cut inside a record
    ix = CaptureIndex(bad, tmp_path)
    ix.wait()
    assert ix.state == "error" and "bad.pcap" in ix.error and "truncated" in ix.error


def test_whatif_form_values_are_checked():
    from dashboard.whatif import WhatIfError, build_args

    args, desc = build_args(Path("t.json"), {"topology": "torus", "shape": "2x2", "rate": "10Gbps", "latency": "2us",
                                             "loss": "0.01", "failure": "link 0-1 down at 0.5s"})
    assert args == ["--topology=torus:2x2", "--set=hw.link_rate=10Gbps", "--set=hw.link_latency_ps=2us", "--loss=0.01",
                    "--fail=link 0-1 down at 0.5s"]
    assert "10Gbps" in desc
    for bad in ({"topology": "/etc/passwd"}, {"topology": "ring", "shape": "4; rm -rf"}, {"rate": "--out=/tmp/x"},
                {"latency": "$(id)"}, {"loss": "2"}, {"failure": "link 0-1 down; --out /x"}, {"shape": "4x4"}):
        with pytest.raises(WhatIfError):
            build_args(Path("t.json"), bad)


def test_report_is_one_offline_file(runs, tmp_path):
    out = tmp_path / "report.html"
    text = emu("report", runs["mars"], runs["ring"], "-o", out, "--frames", 20)
    assert "figures" in text
    html = out.read_text()
    assert "<script src=" not in html and "<link " not in html  # plotly.js inline: nothing is fetched
    assert html.count('class="plotly-graph-div"') >= 12
    assert "kv_replica" in html  # the frames table of the capture


def test_sweep_page_without_dataset_says_so():
    from dashboard.app import AppState, Config, page_sweep

    text = json.dumps(page_sweep(AppState(Config(results=[]))), default=lambda c: c.to_plotly_json())
    assert "No sweep dataset given" in text and "--sweep PATH" in text


def test_sweep_dataset_drops_failed_points(runs):
    from dashboard.sweep import axes_of, load_sweep, sweep_axes

    df, meta = load_sweep(runs["sweep"])
    assert len(df) == 8 and meta["points_total"] == 9 and meta["name"] == "t"
    assert [x for x, _ in sweep_axes(df, axes_of(df, meta))] == ["nodes", "seq"]


def test_dashboard_does_not_import_the_engine():
    code = ("import sys, dashboard.app, dashboard.report, dashboard.frames; dashboard.frames.enum_names(); "
            "bad = [m for m in sys.modules if m.startswith(('emu.net', 'emu.nic', 'emu.replay', 'emu.workload'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_serves_until_interrupted(runs):
    p = subprocess.Popen([sys.executable, "-m", "emu", "dashboard", str(runs["mars"]), "--port", "0",
                          "--whatif-dir", str(runs["dir"] / "cli-whatif")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        url = None
        deadline = time.time() + 60
        while time.time() < deadline and url is None:
            line = p.stdout.readline()
            if "http://127.0.0.1:" in line:
                url = line.split()[1]
        assert url, "no URL printed"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and b"mcf-emu dashboard" in r.read()
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped" in out


def test_cli_refuses_missing_folder(tmp_path):
    p = subprocess.run([sys.executable, "-m", "emu", "dashboard", str(tmp_path / "nope")], capture_output=True, text=True)
    assert p.returncode == 2 and "no such results folder" in p.stderr


# ------------------------------------------------------------------------------ browser


@pytest.fixture(scope="module")
def app(runs):
    from dashboard.app import Config, create_app, make_server

    dash_app, state = create_app(Config(results=[runs["mars"].parent], sweep=str(runs["sweep"]), traces=[runs["trace"]],
                                        whatif_dir=str(runs["dir"] / "whatif")))
    server = make_server(dash_app, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}", state
    server.shutdown()
    state.close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium package (scripts/test does) to run the browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, app, request, tmp_path):
    """A page on the app; a screenshot of it goes under tmp_path when the test fails."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(30000)
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.base, pg.app_state = app
    pg.js_errors = errors
    failed = request.session.testsfailed
    yield pg
    if request.session.testsfailed > failed:
        shot = tmp_path / f"{request.node.name.replace('/', '_')}.png"
        try:
            pg.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        except Exception as exc:  # the page may be gone
            print(f"no screenshot: {exc}")
    ctx.close()


WAIT_PAGE = """(name) => { const p = document.getElementById('page'); if (!p) return false;
  const h = p.querySelector('h2'); if (!h || h.textContent !== name) return false;
  if (p.querySelector('.error')) return true;
  if (name === 'Frames' && !p.querySelector('div.frames table, .note')) return false;
  const g = [...p.querySelectorAll('.js-plotly-plot')];
  return g.every(x => x.data && x.querySelector('.main-svg')); }"""

FIGURES = """() => { const n = a => a ? Array.from(a).filter(v => v !== null && v !== undefined).length : 0;
  return [...document.querySelectorAll('#page .js-plotly-plot')].map(g => ({
    id: g.parentElement.closest('[id]').id, traces: g._fullData.length,
    points: g._fullData.reduce((k, t) => k + n(t.z) + n(t.x), 0)})); }"""


def pick_run(pg, key):
    pg.click("#run")
    pg.click(f"[role=option]:has(input[value='{key}'])")
    pg.wait_for_function("(k) => document.querySelector('#run').textContent.startsWith(k + ':')", arg=key)


def open_page(pg, path):
    t0 = time.perf_counter()
    pg.click(f".nav a[href='{path}']")
    pg.wait_for_function(WAIT_PAGE, arg=PAGES[path], polling=50, timeout=60000)
    return time.perf_counter() - t0


def click_until(pg, x, y, condition, arg=None, tries=4):
    """Click at (x, y) until ``condition`` holds: a graph drawn a moment ago may not listen yet."""
    for i in range(tries):
        pg.mouse.move(x, y)
        pg.mouse.click(x, y)
        try:
            pg.wait_for_function(condition, arg=arg, timeout=5000 if i < tries - 1 else 30000)
            return
        except Exception:
            if i == tries - 1:
                raise


def start(pg, run="mars"):
    pg.goto(pg.base + "/")
    pg.wait_for_selector("#cards")
    if run:
        pick_run(pg, run)


@pytest.mark.parametrize("path", list(PAGES))
def test_page_has_data(page, path):
    start(page)
    dt = open_page(page, path)
    figs = page.evaluate(FIGURES)
    assert page.locator("#page .error").count() == 0, page.inner_text("#page .error")
    expect = {"/": 2, "/links": 3, "/memory": 3, "/timeline": 1, "/frames": 1, "/sweep": 6, "/whatif": 0}[path]
    assert len(figs) == expect, figs
    for f in figs:
        assert f["traces"] > 0 and f["points"] > 0, f
    if path == "/frames":
        assert page.locator("div.frames table tbody tr").count() > 0
    if path == "/whatif":
        assert page.locator("#wi-trace").count() == 1
    assert "Traceback" not in page.inner_text("body")
    assert not page.js_errors, page.js_errors
    print(f"{path}: {dt:.2f} s")


def test_switch_runs(page):
    start(page, "mars")
    open_page(page, "/memory")
    mars = page.inner_text("#page .lede")
    pick_run(page, "ring")  # the page redraws for the other run
    page.wait_for_function("(old) => { const l = document.querySelector('#page .lede'); return l && l.textContent !== old; }",
                           arg=mars)
    page.wait_for_function(WAIT_PAGE, arg="Memory and replicas")
    ring = page.inner_text("#page .lede")
    s = json.loads((Path(page.app_state.registry.get("ring").path) / "summary.json").read_text())
    from dashboard.data import fmt_bytes

    assert fmt_bytes(s["peak_node_kv_bytes"]) in ring and ring != mars
    assert all(f["points"] > 0 for f in page.evaluate(FIGURES))
    # the overview's cards switch runs too
    open_page(page, "/")
    page.click("#cards .card:has(h3:text-is('mars')) button")
    page.wait_for_function("() => document.querySelector('#run').textContent.startsWith('mars:')")


def test_click_a_link_shows_its_detail(page):
    start(page, "mars")
    open_page(page, "/links")
    before = page.locator("#link-detail .gtitle").text_content()
    # the clickable markers are the trace named "links": click one that is not the selected link
    target = page.evaluate("""() => {
      const g = document.querySelector('#topo .js-plotly-plot'); const L = g._fullLayout;
      const i = g.data.findIndex(t => t.name === 'links'); const t = g.data[i];
      const sel = parseInt(document.querySelector('#link-detail .gtitle').textContent.match(/id (\\d+)/)[1]);
      const k = t.customdata.findIndex(c => c !== sel);
      const r = g.querySelector('.nsewdrag').getBoundingClientRect();
      return {id: t.customdata[k], x: r.left + L.xaxis.l2p(t.x[k]), y: r.top + L.yaxis.l2p(t.y[k])}; }""")
    click_until(page, target["x"], target["y"],
                "(id) => document.querySelector('#link-detail .gtitle').textContent.includes('(id ' + id + ')')", target["id"])
    assert page.locator("#link-detail .gtitle").text_content() != before
    assert all(f["points"] > 0 for f in page.evaluate(FIGURES))
    # a heatmap cell picks its link direction as well
    cell = page.evaluate("""() => {
      const g = document.querySelector('#link-heat .js-plotly-plot'); const L = g._fullLayout; const t = g._fullData[0];
      g.scrollIntoView();
      const r = g.querySelector('.nsewdrag').getBoundingClientRect(); const row = 2, col = Math.floor(t.x.length / 2);
      return {label: t.y[row], x: r.left + L.xaxis.l2p(t.x[col]), y: r.top + L.yaxis.l2p(L.yaxis.d2l(t.y[row]))}; }""")
    click_until(page, cell["x"], cell["y"],
                "(lab) => document.querySelector('#link-detail .gtitle').textContent.startsWith('Link ' + lab)", cell["label"])


def test_timeline_zooms_to_single_ops(page):
    start(page, "mars")
    open_page(page, "/timeline")
    assert "kept the lane busiest" in page.locator("#timeline .gtitle").text_content()
    # drag a zoom box over the middle of the plot, as a user would
    box = page.evaluate("""() => { const r = document.querySelector('#timeline .nsewdrag').getBoundingClientRect();
      return {x: r.left, y: r.top, w: r.width, h: r.height}; }""")
    for _ in range(5):  # the graph may not listen yet right after it is drawn: drag again
        page.mouse.move(box["x"] + box["w"] * 0.45, box["y"] + box["h"] * 0.5)
        page.mouse.down()
        page.mouse.move(box["x"] + box["w"] * 0.47, box["y"] + box["h"] * 0.52, steps=6)
        page.mouse.up()
        try:
            page.wait_for_function("() => document.querySelector('#timeline .gtitle').textContent.includes('every op as it ran')",
                                   timeout=5000)
            break
        except Exception:
            page.dblclick(f"#timeline .nsewdrag")
    assert "every op as it ran" in page.locator("#timeline .gtitle").text_content()
    assert all(f["points"] > 0 for f in page.evaluate(FIGURES))


def test_memory_heatmap_click_picks_the_node(page):
    start(page, "mars")
    open_page(page, "/memory")
    cell = page.evaluate("""() => {
      const g = document.querySelector('#mem-heat .js-plotly-plot'); const L = g._fullLayout; const t = g._fullData[0];
      g.scrollIntoView();
      const r = g.querySelector('.nsewdrag').getBoundingClientRect(); const row = 1;
      return {label: t.y[row], x: r.left + L.xaxis.l2p(t.x[Math.floor(t.x.length / 2)]),
              y: r.top + L.yaxis.l2p(L.yaxis.d2l(t.y[row]))}; }""")
    click_until(page, cell["x"], cell["y"],
                "(lab) => document.querySelector('#mem-node-fig .gtitle').textContent.includes('of ' + lab + ':')", cell["label"])


def test_frames_filter(page):
    start(page, "mars")
    open_page(page, "/frames")
    total = page.inner_text("#fr-status")
    page.click("#fr-op")
    page.click("[role=option]:has-text('kv_replica')")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.querySelector('#fr-status').textContent.includes('match')")
    status = page.inner_text("#fr-status")
    assert status != total
    ops = page.evaluate("""() => { const i = [...document.querySelectorAll('div.frames thead th')].findIndex(h => h.textContent === 'op');
      return [...document.querySelectorAll('div.frames tbody tr')].map(r => r.children[i].textContent); }""")
    assert ops and set(ops) == {"kv_replica"}
    page.fill("#fr-from", "999")
    page.press("#fr-from", "Enter")
    page.wait_for_function("() => document.querySelector('#fr-table').textContent.includes('no frames match')")


def test_malformed_run_shows_a_message(page):
    start(page, "broken")
    open_page(page, "/links")
    text = page.inner_text("#page .error")
    assert "links.parquet is not a readable Parquet file" in text
    open_page(page, "/memory")
    assert "nodes.parquet lacks the columns" in page.inner_text("#page .error")
    assert "Traceback" not in page.inner_text("body")


def test_crafted_run_key_reads_nothing(app):
    base, _ = app
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": "/links"},
                       {"id": "run", "property": "value", "value": "../../../../etc/passwd"}],
            "changedPropIds": ["run.value"], "state": []}
    req = urllib.request.Request(base + "/_dash-update-component", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    assert "Pick a run" in text and "root:" not in text


def test_whatif_runs_and_joins_the_others(page, app):
    start(page, None)
    open_page(page, "/whatif")
    page.fill("#wi-rate", "10Gbps")
    page.fill("#wi-lat", "2us")
    page.click("#wi-run")
    page.wait_for_function("() => document.querySelector('#wi-status').textContent.includes('running')", timeout=30000)
    page.wait_for_function("() => /what-if \\d+ (done|failed)/.test(document.querySelector('#wi-status').textContent)",
                           timeout=120000, polling=250)
    status = page.inner_text("#wi-status")
    assert "done" in status, status + "\n" + page.inner_text("#wi-jobs")
    key = status.split("listed as run ")[1].strip()
    assert (Path(app[1].whatif_dir) / key / "summary.json").is_file()
    page.wait_for_function("(k) => document.querySelector('#wi-jobs').textContent.includes(k)", arg=key)
    # it appears beside the others: in the run list and on the overview
    page.click("#run")
    page.wait_for_selector(f"[role=option]:has(input[value='{key}'])")
    page.keyboard.press("Escape")
    open_page(page, "/")
    assert page.locator(f"#cards .card:has(h3:text-is('{key}'))").count() == 1
    pick_run(page, key)
    open_page(page, "/links")
    assert all(f["points"] > 0 for f in page.evaluate(FIGURES))


def test_report_renders_offline(browser, runs, tmp_path):
    out = tmp_path / "r.html"
    emu("report", runs["mars"], "-o", out, "--frames", 10)
    ctx = browser.new_context(offline=True)
    pg = ctx.new_page()
    pg.goto(out.as_uri())
    pg.wait_for_function("() => { const g = [...document.querySelectorAll('.js-plotly-plot')]; "
                         "return g.length > 0 && g.every(x => x.data && x.querySelector('.main-svg')); }", timeout=60000)
    n = pg.evaluate("document.querySelectorAll('.js-plotly-plot').length")
    ctx.close()
    assert n >= 8


if os.environ.get("DASHBOARD_TEST_KEEP"):  # pragma: no cover - debugging aid
    print("keeping test folders")
