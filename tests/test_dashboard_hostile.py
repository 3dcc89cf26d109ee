"""What a file or a request holds is data: a capture whose interface names carry Markdown
images and links, a sweep whose names are spreadsheet formulas, crafted client state sent to
every callback, and failure clauses the replay refuses."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import shutil
import subprocess
import sys
import urllib.request

import numpy as np
import pyarrow.parquet as pq
import pytest

from test_dashboard_common import (WAIT_PAGE, browser, browser_page, dashboard_start, post, runs, served,  # noqa: F401
                                   whatif_body, write_sweep)
from waits import HANG_S

OUTSIDE = "198.51.100.7"  # TEST-NET-2; the browser's requests to it are aborted, never sent
NAMES = [f"![pixel](http://{OUTSIDE}/pixel.png)", f"[click me](http://{OUTSIDE}/phish)",
         f"<img src=http://{OUTSIDE}/raw.png>", f"0->1 ![y](//{OUTSIDE}/y.png) **bold** `code`"]


@contextlib.contextmanager
def watched_page(browser, base):  # noqa: F811
    """A page whose every request is recorded; any for another host than ``base`` is aborted."""
    seen: list[str] = []

    def watch(ctx):
        ctx.on("request", lambda r: seen.append(r.url))
        ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base + "/") else route.abort())

    with browser_page(browser, watch, accept_downloads=True) as pg:
        pg.seen = seen
        yield pg


# ------------------------------------------------------------------ a capture's text is data

@pytest.fixture(scope="module")
def crafted_capture(runs, tmp_path_factory):  # noqa: F811
    """The mars run with its frames in a pcapng whose interface names are Markdown and HTML."""
    from emu.codec import read_capture
    from emu.codec.pcap import CaptureWriter

    run = tmp_path_factory.mktemp("hostile") / "res" / "crafted"
    run.mkdir(parents=True)
    for f in runs["mars"].iterdir():
        if f.is_file() and f.suffix != ".pcap":
            shutil.copy(f, run / f.name)
    with CaptureWriter(run / "cap.pcapng", format="pcapng", interfaces=NAMES) as w:
        for b in read_capture(runs["mars"] / "cap.pcap"):
            w.write(b.buf, b.offsets, b.ts_ns, wirelen=b.wirelen,
                    iface=(b.first_record + np.arange(len(b))) % len(NAMES))
    return run


def test_frames_page_shows_interface_names_as_text(browser, crafted_capture, tmp_path):  # noqa: F811
    with served(tmp_path, results=[crafted_capture.parent]) as (base, _, _), watched_page(browser, base) as pg:
        pg.goto(base + "/frames?runs=crafted")
        pg.wait_for_function(WAIT_PAGE, arg="Frames", polling=100)
        pg.wait_for_selector("div.frames table tbody tr")
        cols = pg.eval_on_selector_all("div.frames thead th", "els => els.map(e => e.textContent)")
        li = cols.index("link")
        rows = pg.eval_on_selector_all("div.frames tbody tr", "trs => trs.map(r => [...r.children].map(c => c.textContent))")
        assert [r[li] for r in rows] == [NAMES[i % len(NAMES)] for i in range(len(rows))]  # literally, in order
        assert pg.locator("#fr-table img").count() == 0
        hrefs = pg.eval_on_selector_all("#fr-table a", "as => as.map(a => a.getAttribute('href'))")
        assert hrefs and all(h.startswith("#frame-") for h in hrefs)
        # a frame's detail names its link as text too
        pg.click("div.frames tbody tr:nth-child(1) td:first-child a")
        pg.wait_for_function("(n) => document.querySelector('#fr-tree').textContent.includes(n)", arg=NAMES[0])
        assert pg.locator("#_pages_content img").count() == 0
        pg.click("#fr-link")  # the link filter lists the names as text too
        pg.wait_for_selector("[role=option]")
        options = pg.eval_on_selector_all("[role=option]", "os => os.map(o => o.textContent.trim())")
        assert set(NAMES) <= set(options) and pg.locator("img").count() == 0, options
        pg.reload()
        pg.wait_for_selector("div.frames table tbody tr")
        outside = [u for u in pg.seen if not u.startswith(base + "/")]
        assert not outside, outside


# ---------------------------------------------------------- a sweep's text is not a formula

FORMULAS = ['=HYPERLINK("http://198.51.100.7/x","click")', "=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(1,1)",
            "\tmars"]


def test_sweep_csv_download_writes_formulas_as_text(browser, tmp_path):  # noqa: F811
    rows = [dict(scheme=s, nodes=n, seq=1024, chunk=256, topology="auto", link_rate=None, ttft_s=-0.5 + i + n / 100,
                 wire_bytes=(i + 1) * n * 2**20, kv_bytes=n * 2**19)
            for i, s in enumerate(FORMULAS) for n in (4, 8)]
    sweep = write_sweep(tmp_path / "sweeps" / "evil", "=evil()", ["scheme", "nodes"], rows)
    with served(tmp_path, sweep=str(sweep / "results.parquet")) as (base, _, _), watched_page(browser, base) as pg:
        pg.goto(base + "/sweep")
        pg.wait_for_selector("#sw-table-el tbody tr")
        with pg.expect_download() as dl:
            pg.click("#sw-csv-btn")
        path = tmp_path / "t.csv"
        dl.value.save_as(path)
    got = list(csv.reader(io.StringIO(path.read_text(), newline="")))
    head, body = got[0], got[1:]
    assert len(body) == len(FORMULAS)
    si = head.index("scheme")
    assert sorted(r[si] for r in body) == sorted("'" + s for s in FORMULAS)
    for row in body:
        for c, cell in zip(head, row):
            if c != "scheme":
                float(cell)  # numbers stay numbers (a negative TTFT keeps its minus sign)
    assert any(r[head.index("TTFT (s) @ nodes 4")].startswith("-") for r in body)


# --------------------------------------------------------- every callback checks its input

HOSTILE = [["a", "b"], [1e308, float("inf")], 5, {"x": 1}, "x" * 5000, -1, True, [[1]], 1e308, 10**30, "",
           {"points": "x"}, {"points": [{"customdata": [1e308, 10**30, "a", None], "y": "9" * 5000, "x": "a"}]},
           {"range": {"x": [1e308, 10**400]}}, {"xaxis.range[0]": "a", "xaxis.range[1]": 1e308}, "frames",
           "/frames?runs=mars", "?runs=mars&frame=1e400&node=99999999999999999999&from=1e300&to=1e301&link=9-99"]
GOOD = {"runs.value": "mars", "fr-sel.value": 3, "_pages_location.pathname": "/timeline",
        "_pages_location.search": "?runs=mars"}
PATTERN = {"sw-filter": {"col": "scheme"}, "lk-topo": {"run": "mars"}, "lk-heat": {"run": "mars"},
           "mem-heat": {"run": "mars"}}


def _dep(d, value):
    """One Input or State of a request: a pattern (ALL) is a list of its matches."""
    i = d["id"]
    if i.startswith("{"):
        pid = json.loads(i)
        one = dict(pid, **PATTERN[pid["type"]])
        return [{"id": one, "property": d["property"], "value": value}]
    return {"id": i, "property": d["property"], "value": value}


def _body(key, cb, name, value):
    deps = cb["inputs"] + cb["state"]
    names = [f"{d['id']}.{d['property']}" for d in deps]
    vals = [value if n == name else GOOD.get(n, 1 if d["property"] in ("n_clicks", "n_intervals") else None)
            for n, d in zip(names, deps)]
    outs = [o.rsplit(".", 1) for o in (key.strip(".").split("...") if key.startswith("..") else [key])]
    outputs = [{"id": i, "property": p} for i, p in outs]
    n_in = len(cb["inputs"])
    changed = name if name in names[:n_in] else names[0]
    return {"output": key, "outputs": outputs if key.startswith("..") else outputs[0],
            "inputs": [_dep(d, v) for d, v in zip(deps[:n_in], vals[:n_in])],
            "state": [_dep(d, v) for d, v in zip(deps[n_in:], vals[n_in:])], "changedPropIds": [changed]}


@pytest.fixture(scope="module")
def fuzz_app(runs, tmp_path_factory):  # noqa: F811
    """The mars and ring runs (a capture indexed) and the sweeps; no traces, so no what-if can start."""
    tmp = tmp_path_factory.mktemp("fuzz")
    with served(tmp, results=[runs["mars"], runs["ring"], runs["sweeps"]]) as s:
        s[2].captures.get("mars", runs["mars"] / "cap.pcap").wait()
        urllib.request.urlopen(s[0] + "/", timeout=HANG_S).read()  # Dash adds its page-routing callback now
        yield s


def test_every_callback_answers_crafted_state_without_a_server_error(fuzz_app, caplog):
    base, app, _ = fuzz_app
    server_side = {k: cb for k, cb in app.callback_map.items() if "callback" in cb}
    assert len(server_side) >= 21 and any("_pages_content" in k for k in server_side)
    failed = []
    with caplog.at_level(logging.ERROR):
        for key, cb in server_side.items():
            for d in cb["inputs"] + cb["state"]:
                name = f"{d['id']}.{d['property']}"
                for v in HOSTILE:
                    code, text = post(base, _body(key, cb, name, v))
                    if code not in (200, 204, 400) or code == 400 and "\n" in text.strip():
                        failed.append((key, name, repr(v)[:60], code, text[:200]))
    assert not failed, failed[:10]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[:2000]


@pytest.mark.parametrize("body", [[], "x", {"output": 5}, {"output": "fr-sel.value", "inputs": 5},
                                  {"output": "fr-sel.value", "inputs": [5]}, {"output": "no-such.children", "inputs": []},
                                  {"output": "fr-sel.value", "inputs": [{"id": "fr-loc", "property": "hash", "value": "#frame-1"}],
                                   "changedPropIds": "fr-loc.hash"}])
def test_a_malformed_callback_request_is_a_bad_request(fuzz_app, body, caplog):
    with caplog.at_level(logging.ERROR):
        code, text = post(fuzz_app[0], body)
    assert code == 400 and text.count("\n") == 1, (code, text[:300])
    assert not caplog.records, caplog.text[:2000]


@pytest.mark.parametrize("rng", [["a", "b"], [1e308, float("inf")], 5, {"x": 1}, [2, 1], [1, 2, 3]])
def test_perfetto_download_refuses_a_malformed_window(fuzz_app, rng, caplog):
    base, app, _ = fuzz_app
    key = "..tl-dl.data...tl-dl-msg.children.."
    with caplog.at_level(logging.ERROR):
        code, text = post(base, _body(key, app.callback_map[key], "tl-range.data", rng))
    assert code == 400 and text.startswith("tl-range.data: a time window") and text.count("\n") == 1, (code, text)
    assert not caplog.records, caplog.text


def test_perfetto_download_of_a_window(fuzz_app):
    base, app, _ = fuzz_app
    key = "..tl-dl.data...tl-dl-msg.children.."
    code, text = post(base, _body(key, app.callback_map[key], "tl-range.data", [0.0, 1e-4]))
    assert code == 200 and "traceEvents" in text


# ------------------------------------------- the what-if form checks clauses like the replay

REFUSED = ["node 99999999999999999999 down at 1s", "link 0-1 down at 1s up at 0.5s", "link 0-1 up at 0.5s down at 1s"]


def _replay_says(trace, clause) -> str:
    p = subprocess.run([sys.executable, "-m", "emu", "replay", str(trace), "--no-results", "--fail", clause],
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("emu replay: error: ")
    return line.removeprefix("emu replay: error: ")


def test_whatif_form_refuses_what_the_replay_refuses_and_leaves_nothing(runs, tmp_path):  # noqa: F811
    with served(tmp_path, traces=[runs["trace"]]) as (base, _, st):
        for clause in REFUSED[:2]:
            code, text = post(base, whatif_body(fail=clause))
            assert code == 200 and "started" not in text
            assert _replay_says(runs["trace"], clause) in json.loads(text)["response"]["wi-msg"]["children"]["props"][
                "children"][1]
        assert st.whatifs.jobs == []
        assert [p.name for p in st.whatif_dir.iterdir()] == []  # no .whatif-N-*.log, no folder


def test_whatif_refused_clause_is_no_job(runs, tmp_path):  # noqa: F811
    from dashboard.data import Registry
    from dashboard.whatif import WhatIfError, WhatIfs, trace_list

    w = WhatIfs(tmp_path / "wi", trace_list([runs["trace"]]), Registry())
    try:
        with pytest.raises(WhatIfError) as exc:
            w.submit("mars.json", {"failure": REFUSED[2]})
        assert str(exc.value) == _replay_says(runs["trace"], REFUSED[2])
        assert w.jobs == [] and list((tmp_path / "wi").iterdir()) == []
    finally:
        w.close()


def _store(layout, id_):
    stack = [layout]
    while stack:
        c = stack.pop()
        if getattr(c, "id", None) == id_:
            return c
        kids = getattr(c, "children", None)
        stack += kids if isinstance(kids, list) else [kids] if kids is not None else []
    raise AssertionError(f"no {id_}")


def test_timeline_url_window_is_the_one_callbacks_accept(fuzz_app):
    """A shared URL's from/to becomes the page's own tl-range only as a window the callbacks take."""
    from dashboard.pages import timeline

    _, app, _ = fuzz_app
    with app.server.test_request_context():
        assert _store(timeline.layout(runs="mars", **{"from": "0.001", "to": "0.002"}), "tl-range").data == [0.001, 0.002]
        for lo, hi in (("1e300", "1e301"), ("2", "1"), ("nan", "1"), ("0", "inf")):
            assert _store(timeline.layout(runs="mars", **{"from": lo, "to": hi}), "tl-range").data is None


# ---------------------------------------------- JSON nested past the recursion limit is data
def test_dashboard_starts_over_json_nested_200000_deep(tmp_path):
    """`emu dashboard` reads every JSON text it is given with emu.jsontext (a summary.json, a
    what-if's note, a sweep's metadata): one nested 200,000 levels deep (200,000 `[`) is an
    unreadable run or an absent note, never a RecursionError traceback."""
    deep = "[" * 200_000
    (tmp_path / "results" / "run1").mkdir(parents=True)
    (tmp_path / "results" / "run1" / "summary.json").write_text(deep)
    sweep = write_sweep(tmp_path / "results" / "sw", "s", ["nodes"], [{"nodes": 4, "ttft_s": 1.0}])
    table = pq.read_table(sweep / "results.parquet")
    pq.write_table(table.replace_schema_metadata({b"emu.sweep": deep}), sweep / "results.parquet")
    (tmp_path / "wi" / "whatif-1-x").mkdir(parents=True)
    (tmp_path / "wi" / "whatif-1-x" / "summary.json").write_text(deep)
    (tmp_path / "wi" / ".whatif-1-x.json").write_text(deep)  # the app's note beside a what-if
    first, err = dashboard_start(tmp_path / "results", "--whatif-dir", tmp_path / "wi", cwd=tmp_path)
    assert first.startswith("dashboard: 2 runs (2 unreadable), sweeps "), (first, err)
    assert "Traceback" not in err and "RecursionError" not in err, err
