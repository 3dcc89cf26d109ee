"""Fixtures and helpers the dashboard tests share (results folders of real replays, a
two-sweep folder, the app on a free port, Playwright on Debian's chromium)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from waits import HANG_MS, HANG_S

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def emu(*args, cwd=None, timeout=HANG_S, env=None):
    p = subprocess.run([sys.executable, "-m", "emu", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       timeout=timeout, env=env)
    assert p.returncode == 0, f"emu {' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def dashboard_start(*args, cwd) -> tuple[str, str]:
    """`emu dashboard ARGS --port 0` run from ``cwd`` until it has built the app: (the first line it
    prints, once the app is built and before it serves; everything on its stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "emu", "dashboard", "--port", "0", *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    try:
        first = proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=HANG_S)
    return first, err


def write_sweep(folder: Path, name: str, axes: list[str], rows: list[dict]) -> Path:
    """A sweep output folder as `emu sweep` writes it (docs/sweeps.md): sweep.json and results.parquet."""
    folder.mkdir(parents=True)
    rows = [dict(sweep=name, index=i, point=f"{name}{i:04d}", status="ok", error=None, **r) for i, r in enumerate(rows)]
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {b"emu.sweep": json.dumps({"name": name, "description": f"sweep {name}", "axes": axes})})
    pq.write_table(table, folder / "results.parquet")
    (folder / "sweep.json").write_text(json.dumps({"name": name, "axes": axes}))
    return folder


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Results folders of real replays (4 boards, 1K tokens), a broken one, two sweeps in one folder."""
    d = tmp_path_factory.mktemp("dash")
    # frame indexes of every command the tests start go to a cache of their own, not the user's
    old_cache = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(d / "xdg-cache")

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
    # two sweeps in one folder: a quick grid (scheme x nodes x seq, chunk 256) and a chunk sweep of
    # MARS at 16K on 16 boards; the chunk-256 point of the second must never mix with the first
    quick = []
    for scheme in ("mars", "ring"):
        for nodes in (4, 8):
            for seq in (1024, 2048):
                ttft = seq / 1000 / nodes * (1.0 if scheme == "mars" else 1.6)
                quick.append(dict(scheme=scheme, nodes=nodes, seq=seq, chunk=256, topology="auto", link_rate=None,
                                  ttft_s=ttft, wire_bytes=seq * nodes * 1000, kv_bytes=seq * nodes * 800))
    quick.append(dict(quick[0], ttft_s=None))
    chunks = [dict(scheme="mars", nodes=16, seq=16384, chunk=c, topology="auto", link_rate=None, ttft_s=4.69 + c / 1000,
                   wire_bytes=2**30 + c * 10**6, kv_bytes=2**29 + c) for c in (256, 512, 1024, 2048)]
    sweeps = d / "sweeps"
    write_sweep(sweeps / "quick", "quick", ["scheme", "nodes", "seq"], quick)
    write_sweep(sweeps / "chunk_mars", "chunk_mars", ["chunk"], chunks)
    yield {"dir": d, "mars": mars, "ring": ring, "broken": broken, "trace": mars_trace, "sweeps": sweeps,
           "notres": d / "results"}
    if old_cache is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old_cache


@contextlib.contextmanager
def served(tmp_path, **cfg):
    """A dashboard of its own on a free loopback port, set up by ``cfg`` (dashboard.app.Config's
    fields; no results unless given): (its URL, the Dash app, its state)."""
    from dashboard.app import Config, create_app, make_server

    dash_app, state = create_app(Config(**{"results": [], "whatif_dir": str(tmp_path / "whatif"),
                                           "cache_dir": str(tmp_path / "cache"), **cfg}))
    server = make_server(dash_app, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", dash_app, state
    finally:
        server.shutdown()
        state.close()


@contextlib.contextmanager
def serve(results, tmp_path, traces=()):
    """A dashboard over ``results`` on a free loopback port: (its URL, its state)."""
    with served(tmp_path, results=list(results), traces=list(traces)) as (url, _app, state):
        yield url, state


@contextlib.contextmanager
def browser_page(browser, prepare=None, **context):
    """A page of its own browser context (1440x1000, more of new_context's arguments in
    ``context``), waiting under the hang guard; ``prepare(ctx)`` runs before the page opens."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000}, **context)
    try:
        if prepare is not None:
            prepare(ctx)
        pg = ctx.new_page()
        pg.set_default_timeout(HANG_MS)
        yield pg
    finally:
        ctx.close()


@contextlib.contextmanager
def served_page(browser, results, tmp_path):
    """A browser page on a dashboard of its own over ``results`` (``page.base`` is its URL)."""
    with serve(results, tmp_path) as (url, _state), browser_page(browser) as pg:
        pg.base = url
        yield pg


def post(base, body, host=None):
    """``body`` sent as a browser's callback request (json.dumps: Infinity and 10**400 as a browser
    could never send them), ``host`` as its Host header: the status and the answer's text."""
    req = urllib.request.Request(base + "/_dash-update-component", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **({"Host": host} if host else {})})
    try:
        with urllib.request.urlopen(req, timeout=HANG_S) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def whatif_body(rate=None, fail=None):
    """A click on the what-if form's Run with mars.json, ``rate`` and ``fail`` as its fields' values."""
    states = [{"id": i, "property": "value", "value": v} for i, v in
              (("wi-trace", "mars.json"), ("wi-topo", "auto"), ("wi-shape", None), ("wi-rate", rate), ("wi-lat", None),
               ("wi-loss", None), ("wi-fail", fail))]
    return {"output": "wi-msg.children", "outputs": {"id": "wi-msg", "property": "children"},
            "inputs": [{"id": "wi-run", "property": "n_clicks", "value": 1},
                       {"id": "wi-cancel", "property": "n_clicks", "value": None}],
            "changedPropIds": ["wi-run.n_clicks"], "state": states}


@pytest.fixture(scope="session")
def app(runs, tmp_path_factory):
    with serve([runs["mars"].parent, runs["sweeps"]], tmp_path_factory.mktemp("app"), traces=[runs["trace"]]) as served:
        yield served


_BROWSER: dict = {"users": 0}  # one Playwright per process: every module importing the fixture shares it


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium package (scripts/test does) to run the browser tests")
    from playwright.sync_api import sync_playwright

    if not _BROWSER["users"]:
        _BROWSER["pw"] = sync_playwright().start()
        _BROWSER["b"] = _BROWSER["pw"].chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                           timeout=HANG_MS)
    _BROWSER["users"] += 1
    try:
        yield _BROWSER["b"]
    finally:
        _BROWSER["users"] -= 1
        if not _BROWSER["users"]:
            _BROWSER.pop("b").close()
            _BROWSER.pop("pw").stop()


@pytest.fixture
def page(browser, app, request, tmp_path):
    """A page on the app; a screenshot of it goes under tmp_path when the test fails."""
    with browser_page(browser, accept_downloads=True) as pg:
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
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


WAIT_PAGE = """(name) => { const p = document.getElementById('_pages_content'); if (!p) return false;
  const h = p.querySelector('h2'); if (!h || h.textContent !== name) return false;
  if ([...p.querySelectorAll('.error')].some(e => !e.closest('.card'))) return true;
  if (name === 'Frames' && !p.querySelector('div.frames table, .note')) return false;
  if (name === 'Overview' && !p.querySelector('#cards')) return false;
  const g = [...p.querySelectorAll('.dash-graph')];
  return g.every(x => { const q = x.querySelector('.js-plotly-plot'); return q && q.data && q.querySelector('.main-svg'); }); }"""

FIGURES = """() => { const n = a => a ? Array.from(a).filter(v => v !== null && v !== undefined).length : 0;
  return [...document.querySelectorAll('#_pages_content .js-plotly-plot')].map(g => ({
    id: JSON.stringify(g.parentElement.closest('[id]').id), traces: g._fullData.length,
    points: g._fullData.reduce((k, t) => k + n(t.z) + n(t.x), 0)})); }"""

PAGES = {"/": "Overview", "/links": "Links", "/memory": "Memory and replicas", "/timeline": "Timeline",
         "/frames": "Frames", "/sweep": "Sweep", "/whatif": "What-if"}


def goto(pg, path, name=None):
    pg.goto(pg.base + path)
    pg.wait_for_function(WAIT_PAGE, arg=name or PAGES[path.split("?")[0]], polling=100, timeout=HANG_MS)


def graph_js(selector):
    return f"document.querySelector({json.dumps(selector)}).querySelector('.js-plotly-plot')"


CLICK_AGAIN_MS = 5000  # how long a click is given before the next: a retry pace, not a limit


def click_until(pg, x, y, condition, arg=None):
    """Click at (x, y) until ``condition`` holds: a graph drawn a moment ago may not listen yet
    (the clicks used are idempotent, so a slow answer clicked again is the same answer); gives
    up at the hang guard."""
    tries = max(2, int(HANG_MS // CLICK_AGAIN_MS))
    for i in range(tries):
        pg.mouse.move(x, y)
        pg.mouse.click(x, y)
        try:
            pg.wait_for_function(condition, arg=arg, timeout=CLICK_AGAIN_MS)
            return
        except Exception:
            if i == tries - 1:
                raise
