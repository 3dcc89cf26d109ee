"""The dashboard in a real browser: a bookmark naming a missing run says so, the link detail's
titles and legend do not overprint (Links page and emu report), a sweep's parameters that a
scheme does not read show as not applicable, not as `nan` varying."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from test_dashboard_common import (WAIT_PAGE, app, browser, emu, goto, page, runs, served_page,  # noqa: F401
                                   write_sweep)
from waits import HANG_MS

# the boxes of the link detail's title, subplot titles and legend, as the browser laid them out
BOXES = """(root) => { const g = (root ? document.querySelector(root) : document).querySelector('.js-plotly-plot');
  const box = e => { const r = e.getBoundingClientRect(); return {x0: r.left, x1: r.right, y0: r.top, y1: r.bottom}; };
  return {legend: box(g.querySelector('.legend')), title: box(g.querySelector('.gtitle')),
          subtitles: [...g.querySelectorAll('.annotation')].filter(a => a.textContent === 'utilization' ||
            a.textContent.startsWith('largest queue') || a.textContent.startsWith('frames lost'))
            .map(a => box(a.querySelector('.annotation-text') || a))}; }"""


def overlap(a, b) -> bool:
    return a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]


def assert_apart(boxes):
    assert len(boxes["subtitles"]) == 3, boxes
    for b in (boxes["title"], *boxes["subtitles"]):
        assert not overlap(boxes["legend"], b), boxes
    assert boxes["legend"]["x1"] > boxes["legend"]["x0"]


def test_a_bookmark_naming_a_missing_run_says_so(browser, runs, tmp_path):
    with served_page(browser, [runs["mars"], runs["ring"]], tmp_path) as pg:
        for url, page_name, gone, shown in (
                ("/links?runs=mars_renamed", "Links", "mars_renamed", "showing mars instead."),
                ("/memory?runs=ring,nope", "Memory and replicas", "nope", "showing ring."),
                ("/timeline?runs=gone1,gone2", "Timeline", "gone1, gone2", "showing mars instead."),
                ("/frames?runs=old", "Frames", "old", "showing mars instead.")):
            pg.goto(pg.base + url)
            pg.wait_for_function(WAIT_PAGE, arg=page_name, polling=100, timeout=HANG_MS)
            note = pg.locator("#missing-runs")
            assert note.count() == 1, url
            text = note.inner_text()
            assert gone in text and shown in text, (url, text)
        pg.goto(pg.base + "/links?runs=mars,ring")
        pg.wait_for_function(WAIT_PAGE, arg="Links", polling=100, timeout=HANG_MS)
        assert pg.locator("#missing-runs").count() == 0


@pytest.mark.parametrize("runs_q", ["mars", "mars,ring"])
def test_link_detail_legend_clear_of_titles(page, runs_q):
    goto(page, f"/links?runs={runs_q}&link=0-1")
    assert_apart(page.evaluate(BOXES, "#link-detail"))


def test_report_link_detail_legend_clear_of_titles(browser, runs, tmp_path):
    out = tmp_path / "r.html"
    emu("report", runs["mars"], "-o", out, "--frames", 0)
    ctx = browser.new_context(offline=True, viewport={"width": 1440, "height": 1000})
    pg = ctx.new_page()
    pg.goto(out.as_uri())
    pg.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].every(x => x.querySelector('.main-svg'))",
                         timeout=HANG_MS)
    i = pg.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].findIndex(g =>
      (g.querySelector('.gtitle') || {}).textContent?.startsWith('Busiest link'))""")
    assert i >= 0
    pg.evaluate("(i) => document.querySelectorAll('.js-plotly-plot')[i].parentElement.setAttribute('id', 'busiest')", i)
    assert_apart(pg.evaluate(BOXES, "#busiest"))
    ctx.close()


def _pd_sweep(folder):
    """MARS and PD at 4 and 8 boards; pd_mode and prefill_nodes are PD's alone (missing for MARS)."""
    rows = []
    for nodes in (4, 8):
        rows.append(dict(scheme="mars", nodes=nodes, seq=2048, chunk=256, pd_mode=None, prefill_nodes=None,
                         ttft_s=1.0 / nodes, wire_bytes=nodes * 10**6, kv_bytes=nodes * 10**5))
        for mode in ("bulk", "stream"):
            rows.append(dict(scheme="pd", nodes=nodes, seq=2048, chunk=256, pd_mode=mode, prefill_nodes=2,
                             ttft_s=(2.0 if mode == "bulk" else 1.5) / nodes, wire_bytes=nodes * 2 * 10**6,
                             kv_bytes=nodes * 2 * 10**5))
    return write_sweep(folder / "pdmix", "pdmix", ["scheme", "nodes", "pd_mode"], rows)


def test_sweep_shows_parameters_a_scheme_does_not_read_as_not_applicable(browser, tmp_path):
    sweep = _pd_sweep(tmp_path / "sweeps")
    with served_page(browser, [sweep], tmp_path) as pg:
        pg.goto(pg.base + "/sweep")
        pg.wait_for_function(WAIT_PAGE, arg="Sweep", polling=100, timeout=HANG_MS)
        names = pg.evaluate("""() => [...document.querySelectorAll('#sw-figs .js-plotly-plot')]
          .flatMap(g => g._fullData.map(t => t.name))""")
        assert set(names) == {"mars", "pd · pd_mode bulk", "pd · pd_mode stream"}, names
        body = pg.inner_text("#_pages_content")
        assert "nan" not in body.lower().split() and "prefill_nodes" not in body
        head = pg.eval_on_selector_all("#sw-table-el thead th", "els => els.map(e => e.textContent)")
        assert head[:2] == ["scheme", "pd_mode"], head
        rows = pg.eval_on_selector_all("#sw-table-el tbody tr",
                                       "trs => trs.map(r => [...r.children].map(c => c.textContent))")
        assert sorted(r[:2] for r in rows) == [["mars", "-"], ["pd", "bulk"], ["pd", "stream"]]
        with pg.expect_download() as dl:
            pg.click("#sw-csv-btn")
        path = tmp_path / "t.csv"
        dl.value.save_as(path)
        text = path.read_text()
        assert "nan" not in text.lower() and "None" not in text
        tab = pd.read_csv(path, keep_default_na=False)
        assert sorted(tab["pd_mode"].tolist()) == ["", "bulk", "stream"]  # blank: not applicable


def test_whatif_offers_the_shipped_traces_outside_a_checkout(tmp_path):
    """Started where there is no ./traces, the dashboard lists the traces the package installed."""
    import os

    from emu.shipped import traces
    from test_dashboard_common import dashboard_start

    shipped = traces()
    assert shipped
    first, _ = dashboard_start("--whatif-dir", tmp_path / "wi", cwd=tmp_path)
    assert f"{len(shipped)} traces for what-ifs" in first, first

    from dashboard.app import Config, create_app
    from dashboard.pages import whatif
    from emu.commands.dashboard import default_traces

    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        found = default_traces()
    finally:
        os.chdir(old)
    app, state = create_app(Config(results=[], traces=found, whatif_dir=str(tmp_path / "wi2")))
    try:
        with app.server.test_request_context():
            text = str(whatif.layout())
        assert "No traces to replay" not in text and "mars_16k" in text
    finally:
        state.close()
