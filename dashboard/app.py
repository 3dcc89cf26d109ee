"""The Dash app: pages over the registered results folders, a sweep dataset and what-if runs.

``create_app(...)`` builds the app; ``serve(...)`` runs it on a werkzeug server (threaded,
127.0.0.1 by default). Requests name runs by registry key only; no request value is ever
used as a path. Errors in a results folder appear as a message on the page.
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

from . import data as D
from . import figures as F
from .frames import COLUMNS as FRAME_COLUMNS
from .frames import CaptureIndexes, FrameFilter, enum_names
from .sweep import (SweepError, apply_filters, axes_of, filter_label, filter_values, load_sweep, summary_line,
                    sweep_axes, sweep_figure)
from .whatif import TOPOLOGIES, WhatIfError, WhatIfs, note_of, trace_list

log = logging.getLogger("dashboard")

PAGES = [("/", "Overview"), ("/links", "Links"), ("/memory", "Memory and replicas"), ("/timeline", "Timeline"),
         ("/frames", "Frames"), ("/sweep", "Sweep"), ("/whatif", "What-if")]
RUN_PAGES = {"/links", "/memory", "/timeline", "/frames"}
FRAMES_PAGE_SIZE = 100

CSS = """
* { box-sizing: border-box; }
body { margin: 0; font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif; color: #1b2a41; background: #f4f6f9; }
.top { display: flex; align-items: center; gap: 18px; padding: 10px 20px; background: #1b2a41; color: #fff;
       position: sticky; top: 0; z-index: 10; flex-wrap: wrap; }
.brand { font-weight: 700; font-size: 17px; letter-spacing: .2px; margin-right: 6px; }
.brand small { font-weight: 400; opacity: .7; margin-left: 6px; }
.nav { display: flex; gap: 4px; flex-wrap: wrap; }
.nav a { color: #cfd8e3; text-decoration: none; padding: 6px 10px; border-radius: 6px; font-size: 14px; }
.nav a:hover { background: #2c3e5a; color: #fff; }
.nav a.active { background: #fff; color: #1b2a41; font-weight: 600; }
.runpick { margin-left: auto; display: flex; align-items: center; gap: 8px; font-size: 13px; min-width: 360px; }
.runpick .dash-dropdown, .runpick > div { flex: 1; color: #1b2a41; }
.page { padding: 18px 22px 40px; max-width: 1680px; margin: 0 auto; }
.page h2 { margin: 4px 0 4px; font-size: 21px; }
.lede { color: #4a5a70; margin: 0 0 14px; font-size: 14px; max-width: 1100px; line-height: 1.45; }
.panel { background: #fff; border-radius: 10px; box-shadow: 0 1px 3px rgba(20,30,50,.08); padding: 10px 12px; margin-bottom: 16px; }
.row { display: flex; gap: 16px; flex-wrap: wrap; }
.row > .panel { flex: 1 1 520px; min-width: 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(290px, 1fr)); gap: 14px; margin-bottom: 16px; }
.card { background: #fff; border-radius: 10px; box-shadow: 0 1px 3px rgba(20,30,50,.08); padding: 12px 14px;
        border-top: 4px solid #8d99ae; }
.card h3 { margin: 0 0 2px; font-size: 15px; word-break: break-all; }
.card .sub { color: #5b6b80; font-size: 12.5px; margin-bottom: 8px; }
.card table { width: 100%; border-collapse: collapse; font-size: 13px; }
.card td { padding: 2px 0; }
.card td.v { text-align: right; font-variant-numeric: tabular-nums; font-weight: 600; }
.card .tag { display: inline-block; font-size: 11px; padding: 1px 7px; border-radius: 9px; background: #eef2f7; margin-right: 4px; }
.card .tag.warn { background: #fde2e4; color: #9d0208; }
.card .tag.ok { background: #e3f4ea; color: #1b6b3a; }
.card button { margin-top: 8px; }
button, .btn { background: #30638e; color: #fff; border: 0; border-radius: 6px; padding: 7px 14px; font-size: 13px; cursor: pointer; }
button:hover { background: #254d70; }
button:disabled { background: #9aa8b8; cursor: default; }
button.secondary { background: #e8edf3; color: #1b2a41; }
.error { background: #fff1f0; border: 1px solid #f3b7b3; color: #8a1c14; padding: 12px 14px; border-radius: 8px; margin: 8px 0 14px; font-size: 14px; }
.note { background: #f0f6fb; border: 1px solid #c9ddef; color: #1d3f5e; padding: 12px 14px; border-radius: 8px; margin: 8px 0 14px; font-size: 14px; }
.note code, .error code { background: rgba(0,0,0,.06); padding: 1px 5px; border-radius: 4px; }
.filters { display: flex; gap: 12px; flex-wrap: wrap; align-items: end; margin-bottom: 8px; }
.filters label { display: flex; flex-direction: column; font-size: 12px; color: #4a5a70; gap: 3px; min-width: 120px; }
.filters input { padding: 6px 8px; border: 1px solid #c6ced8; border-radius: 6px; font-size: 13px; width: 130px; }
.form { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 12px 16px; align-items: end; }
.form label { display: flex; flex-direction: column; font-size: 12.5px; color: #4a5a70; gap: 4px; }
.form input { padding: 7px 9px; border: 1px solid #c6ced8; border-radius: 6px; font-size: 13px; }
div.frames table { border-collapse: collapse; font-size: 12px; width: 100%; font-variant-numeric: tabular-nums; }
div.frames th { position: sticky; top: 0; background: #eef2f7; text-align: right; padding: 4px 6px; white-space: nowrap; }
div.frames td { text-align: right; padding: 2px 6px; border-bottom: 1px solid #eef0f3; white-space: nowrap; }
div.frames tr:hover td { background: #fafbe6; }
.tablewrap { overflow: auto; max-height: 560px; }
.pager { display: flex; gap: 10px; align-items: center; margin: 6px 0; font-size: 13px; }
.bar { height: 14px; background: #e8edf3; border-radius: 7px; overflow: hidden; margin: 8px 0; }
.bar > div { height: 100%; background: linear-gradient(90deg,#30638e,#00798c); transition: width .4s; }
table.jobs { border-collapse: collapse; font-size: 13px; width: 100%; }
table.jobs th, table.jobs td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #eef0f3; }
.muted { color: #6b7a8f; font-size: 12.5px; }
.kpi { font-size: 13px; color: #4a5a70; margin: 2px 0 8px; }
"""

INDEX = """<!DOCTYPE html>
<html>
<head>{%metas%}<title>mcf-emu dashboard</title>{%favicon%}{%css%}<style>""" + CSS + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body>
</html>"""


@dataclass
class Config:
    results: list
    sweep: str | None = None
    traces: list | None = None
    whatif_dir: str | None = None
    cache_dir: str | None = None


class AppState:
    """Everything the callbacks share, held on the server."""

    def __init__(self, cfg: Config):
        self.registry = D.Registry()
        for p in cfg.results:
            self.registry.add_tree(p)
        self.whatif_dir = Path(cfg.whatif_dir) if cfg.whatif_dir else Path(tempfile.mkdtemp(prefix="mcf-whatif-"))
        self.whatif_dir.mkdir(parents=True, exist_ok=True)
        for p in sorted(self.whatif_dir.iterdir()):
            if p.is_dir() and not p.name.startswith(".") and (p / "summary.json").is_file():
                self.registry.add(p, origin="what-if", note=note_of(self.whatif_dir, p))
        self._own_cache = not cfg.cache_dir
        self.cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else Path(tempfile.mkdtemp(prefix="mcf-dash-cache-"))
        self.captures = CaptureIndexes(self.cache_dir)
        self.sweep_path = cfg.sweep
        self.sweep_df = None
        self.sweep_meta: dict = {}
        self.sweep_error = None
        if cfg.sweep:
            try:
                self.sweep_df, self.sweep_meta = load_sweep(cfg.sweep)
            except SweepError as exc:
                self.sweep_error = str(exc)
        self.traces = trace_list(cfg.traces or [])
        self.whatifs = WhatIfs(self.whatif_dir, self.traces, self.registry)
        self.figs = D.LRU(96)
        self.timings: dict[str, float] = {}

    def close(self) -> None:
        """Stop running what-ifs and remove the frame-index cache this app made."""
        for j in self.whatifs.jobs:
            self.whatifs.cancel(j.id)
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)


# ------------------------------------------------------------------------------ helpers


def error_box(msg: str):
    return html.Div([html.B("Cannot show this: "), msg], className="error")


def note_box(*children):
    return html.Div(list(children), className="note")


def graph(id_, fig, **kw):
    return dcc.Graph(id=id_, figure=fig, config={"displaylogo": False, "responsive": True}, **kw)


def guarded(fn):
    """Run a page builder ``fn(path, ...)``; a results problem becomes a message under the
    page's title, anything else a short one (the traceback goes to the server log, never to
    the page)."""
    def wrap(path, *a, **kw):
        title = html.H2(dict(PAGES).get(path, "Error"))
        try:
            return fn(path, *a, **kw)
        except D.ResultsError as exc:
            return [title, error_box(str(exc))]
        except Exception as exc:  # noqa: BLE001 - the page must say something, not fail blank
            log.error("page failed: %s", traceback.format_exc())
            return [title, error_box(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)]
    return wrap


def fig_guard(fn):
    def wrap(*a, **kw):
        try:
            return fn(*a, **kw)
        except D.ResultsError as exc:
            return F.message_figure(str(exc))
        except Exception as exc:  # noqa: BLE001
            log.error("figure failed: %s", traceback.format_exc())
            return F.message_figure(f"{type(exc).__name__}: {exc}")
    return wrap


def _span(run: D.Run) -> tuple[float, float]:
    s = run.summary
    end = s.get("sim_end_s") or s.get("ttft_s") or 1.0
    return 0.0, float(end)


# ------------------------------------------------------------------------------ pages


def run_card(run: D.Run):
    s = run.summary
    if run.error:
        return html.Div([html.H3(run.key), html.Div(str(run.path.name), className="sub"), error_box(run.error)],
                        className="card", style={"borderTopColor": "#d1495b"})
    rows = [
        ("scheme", s.get("scheme")), ("nodes", s.get("nodes")), ("prompt", f"{s.get('seq'):,} tokens" if isinstance(s.get("seq"), int) else s.get("seq")),
        ("chunk", s.get("chunk")), ("topology", s.get("topology")),
        ("TTFT", D.fmt_s(s.get("ttft_s"))),
        ("decode", f"{s['decode_tokens_per_s']:.2f} tokens/s" if s.get("decode_tokens_per_s") else "-"),
        ("on the wire", D.fmt_bytes(s.get("wire_bytes"))), ("KV payload", D.fmt_bytes(s.get("kv_bytes"))),
        ("peak KV / node", D.fmt_bytes(s.get("peak_node_kv_bytes"))),
        ("dropped frames", f"{s.get('dropped_frames', 0):,}"),
    ]
    tags = [html.Span(run.origin, className="tag")]
    if s.get("final_layout_owner_only"):
        tags.append(html.Span("owner-only at end", className="tag ok"))
    elif "final_layout_owner_only" in s:
        tags.append(html.Span("replicas left", className="tag warn"))
    if s.get("incomplete_ops"):
        tags.append(html.Span(f"{s['incomplete_ops']} ops incomplete", className="tag warn"))
    return html.Div([
        html.H3(run.key), html.Div([f"{s.get('trace') or ''} · {s.get('model') or ''} on {s.get('hw') or ''}"], className="sub"),
        html.Div(f"what-if: {run.note}", className="sub") if run.note else None,
        html.Div(tags),
        html.Table([html.Tr([html.Td(k), html.Td(str(v) if v is not None else "-", className="v")]) for k, v in rows]),
        html.Button("Show this run", id={"type": "pick-run", "key": run.key}, className="secondary"),
    ], className="card", style={"borderTopColor": F.scheme_color(s.get("scheme"))})


def page_overview(st: AppState):
    runs = st.registry.runs()
    if not runs:
        return [html.H2("Overview"), note_box("No results folders yet. Start with ", html.Code("emu dashboard RESULTS_DIR ..."),
                                               " or make one on the What-if page.")]
    f1, f2 = F.overview_figures(runs)
    ok = [r for r in runs if not r.error]
    return [
        html.H2("Overview"),
        html.P(f"{len(runs)} run{'s' if len(runs) != 1 else ''}: one card each. TTFT is when the LM head of the last prompt "
               "token finished; wire bytes count every hop with Ethernet overhead, KV payload counts each delivery once.",
               className="lede"),
        html.Div([run_card(r) for r in runs], className="cards", id="cards"),
        html.Div([html.Div(graph("ov-ttft", f1), className="panel"), html.Div(graph("ov-bytes", f2), className="panel")],
                 className="row") if ok else None,
    ]


def _links_data(st: AppState, run: D.Run):
    def make():
        df = run.links()
        lo, hi = _span(run)
        totals = D.link_totals(df, span_s=max(hi - lo, 1e-12))
        return totals, D.link_matrix(df)
    return st.figs.get((run.key, "links-data"), make)


def _default_link(run: D.Run, totals) -> int | None:
    if not len(totals):
        return None
    b = run.summary.get("busiest_link") or {}
    m = totals[(totals["src"] == b.get("src")) & (totals["dst"] == b.get("dst"))]
    if len(m):
        return int(m["link"].iloc[0])
    return int(totals.sort_values("busy_s", ascending=False)["link"].iloc[0])


def topo_fig(st: AppState, run: D.Run, link: int | None):
    totals, _ = _links_data(st, run)
    return st.figs.get((run.key, "topo", link), lambda: F.topology_figure(
        run.topology(), totals, selected=link,
        title=f"{run.summary.get('topology') or 'topology'}: average utilization per link direction (click a link)"))


def detail_fig(st: AppState, run: D.Run, link: int | None):
    if link is None:
        return F.message_figure("no links in this run")

    def make():
        df = run.links()
        ser = D.link_series(df, link)
        if not len(ser):
            return F.message_figure(f"link {link} is not in this run")
        src, dst = int(ser["src"].iloc[0]), int(ser["dst"].iloc[0])
        rev_id = df[(df["src"] == dst) & (df["dst"] == src)]["link"]
        rev = D.link_series(df, int(rev_id.iloc[0])) if len(rev_id) else None
        return F.link_detail(ser, src, dst, rev, title=f"Link {src}→{dst} (id {link}) over time")
    return st.figs.get((run.key, "detail", link), make)


def page_links(st: AppState, run: D.Run):
    totals, m = _links_data(st, run)
    link = _default_link(run, totals)
    heat = st.figs.get((run.key, "heat"), lambda: F.link_heatmap(m))
    s = run.summary
    b = s.get("busiest_link") or {}
    return [
        html.H2("Links"),
        html.P(["Each link direction is its own lane (traffic drives on the right), coloured by its average utilization over "
                "the run. Click a lane or a heatmap cell to see that direction's utilization, queue depth and drops over time. ",
                f"Busiest: {b.get('src')}→{b.get('dst')} at {b.get('utilization', 0):.1%}; "
                f"{s.get('dropped_frames', 0):,} frames dropped in all."], className="lede"),
        dcc.Store(id="sel-link", data=link),
        html.Div([html.Div(graph("topo", topo_fig(st, run, link)), className="panel"),
                  html.Div(graph("link-detail", detail_fig(st, run, link)), className="panel")], className="row"),
        html.Div(graph("link-heat", heat), className="panel"),
        html.P(["Per-bin drops in links.parquet are the frames lost or corrupted on the wire; queue-full and link-down "
                "drops are only totals in summary.json: ",
                ", ".join(f"{k} {v:,}" for k, v in (s.get("dropped_by_cause") or {}).items()) or "none", "."],
               className="muted"),
    ]


def mem_node_fig(st: AppState, run: D.Run, node: int):
    def make():
        nodes = run.nodes()
        lo, hi = _span(run)
        t, cols = D.node_memory(nodes, node, lo, hi)
        s = run.summary
        oo = s.get("owner_only_node_kv_bytes")
        owner_only = oo[node] if isinstance(oo, list) and 0 <= node < len(oo) else None
        sched = run.schedule() or {}
        budget = sched.get("kv_budget_bytes") if isinstance(sched.get("kv_budget_bytes"), (int, float)) else None
        return F.memory_node_figure(t, cols, node, owner_only, budget, s.get("ttft_s"),
                                    title=f"KV memory of node {node}: owner, replica and transient bytes")
    return st.figs.get((run.key, "memnode", node), make)


def page_memory(st: AppState, run: D.Run):
    nodes = run.nodes()
    n = int(run.summary.get("nodes") or (nodes["node"].max() + 1 if len(nodes) else 0))
    lo, hi = _span(run)

    def heat():
        x, z = D.memory_matrix(nodes, n, lo, hi)
        return F.memory_heatmap(x, z)

    def replica():
        mid, mean, mx = D.replica_factor_series(nodes, lo, run.summary.get("ttft_s") or hi)
        spans = D.chunk_spans(run.ops())
        d = nodes.sort_values("t_s", kind="stable")
        meas = None
        if len(spans) and len(d):
            at = D.value_at(d["t_s"].to_numpy(float), d["replica_factor"].to_numpy(float), spans["end_s"].to_numpy(float))
            meas = (spans["chunk"].to_numpy(), at)
        return F.replica_figure(mid, mean, mx, spans, run.summary.get("ttft_s"), run.schedule(), meas)

    # the node that reached the peak
    if len(nodes):
        tot = nodes["owner_bytes"] + nodes["replica_bytes"] + nodes["transient_bytes"]
        peak_node = int(nodes["node"].iloc[int(np.argmax(tot.to_numpy()))])
    else:
        peak_node = 0
    s = run.summary
    return [
        html.H2("Memory and replicas"),
        html.P(["KV bytes a node holds over time, split into its own (owner) blocks, replicas pushed to it, and transient "
                "copies held for one use. The dashed line is the node's owner-only share at the end (the decode-ready layout). ",
                f"Peak {D.fmt_bytes(s.get('peak_node_kv_bytes'))} on one node; owner-only at the end: "
                f"{'yes' if s.get('final_layout_owner_only') else 'no'}."], className="lede"),
        html.Div([html.Label(["Node ", dcc.Dropdown(id="mem-node", options=[{"label": f"node {i}", "value": i} for i in range(n)],
                                                    value=peak_node, clearable=False, style={"width": "160px"})],
                             style={"display": "flex", "alignItems": "center", "gap": "8px", "fontSize": "13px"})],
                 className="filters"),
        html.Div([html.Div(graph("mem-node-fig", mem_node_fig(st, run, peak_node)), className="panel"),
                  html.Div(graph("mem-heat", st.figs.get((run.key, "memheat"), heat)), className="panel")], className="row"),
        html.Div(graph("replica-fig", st.figs.get((run.key, "replica"), replica)), className="panel"),
    ]


def timeline_fig(st: AppState, run: D.Run, lo=None, hi=None):
    def make():
        ops = run.ops()
        n = int(run.summary.get("nodes") or (max(int(ops["node"].max()), int(ops["src"].max())) + 1))
        seg = D.timeline_segments(ops, n, lo, hi)
        return F.timeline_figure(seg, run.summary.get("ttft_s"))
    key = (run.key, "timeline", None if lo is None else round(float(lo), 9), None if hi is None else round(float(hi), 9))
    return st.figs.get(key, make)


def page_timeline(st: AppState, run: D.Run):
    return [
        html.H2("Timeline"),
        html.P("Per node, its compute engine (qkv, attention, MLP, LM head, decode) and its NIC (sends, reductions, drains and "
               "invalidations it starts). At full view each pixel column shows the kind of op that kept the lane busiest; "
               "zoom in (drag) and the server redraws the window, down to every single op with its chunk, layer and bytes.", className="lede"),
        html.Div(graph("timeline", timeline_fig(st, run)), className="panel"),
    ]


def page_frames(st: AppState, run: D.Run):
    cap = run.capture()
    if cap is None:
        return [html.H2("Frames"), note_box(f"{run.key} has no capture. Replay with ",
                                            html.Code("emu replay TRACE --out DIR --capture cap.pcap"),
                                            " to record its frames, then open the folder here.")]
    n = int(run.summary.get("nodes") or 0)
    boards = [{"label": str(i), "value": i} for i in range(n)]
    ops = [{"label": name, "value": v} for v, name in sorted(enum_names()["op"].items())] + [{"label": "malformed", "value": -1}]
    return [
        html.H2("Frames"),
        html.P([f"Decoded frames of {cap.name}, one row per frame per hop, with the MCF header fields as columns. "
                "\"hop from\" is the board that put the frame on the link (the capture does not record which board "
                "received it, so the link filter selects by transmitting board). The destination filter matches frames "
                "whose dst_set holds the board."], className="lede"),
        html.Div([
            html.Label(["op", dcc.Dropdown(id="fr-op", options=ops, multi=True, placeholder="any", style={"minWidth": "220px"})]),
            html.Label(["source board (src_node)", dcc.Dropdown(id="fr-src", options=boards, placeholder="any")]),
            html.Label(["destination board", dcc.Dropdown(id="fr-dst", options=boards, placeholder="any")]),
            html.Label(["link: hop from board", dcc.Dropdown(id="fr-hop", options=boards, placeholder="any")]),
            html.Label(["time from (s)", dcc.Input(id="fr-from", type="text", placeholder="e.g. 1.5", debounce=True)]),
            html.Label(["time to (s)", dcc.Input(id="fr-to", type="text", placeholder="e.g. 2 or 2500ms", debounce=True)]),
        ], className="filters"),
        dcc.Store(id="fr-page", data=0),
        dcc.Interval(id="fr-poll", interval=700, disabled=False),
        html.Div(id="fr-status", className="kpi"),
        html.Div(graph("fr-hist", F.message_figure("indexing the capture…", 300)), className="panel"),
        html.Div([
            html.Div([html.Button("◀ previous", id="fr-prev", className="secondary"),
                      html.Button("next ▶", id="fr-next", className="secondary"),
                      html.Span(id="fr-pageinfo")], className="pager"),
            html.Div(id="fr-table", className="tablewrap"),
        ], className="panel"),
    ]


def _parse_time(v) -> float | None:
    if v in (None, ""):
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(s|ms|us|µs|ns)?\s*", str(v))
    if not m:
        raise ValueError(f"time {v!r}: a number of seconds, or with a unit like 250ms")
    return float(m[1]) * {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, None: 1}[m[2]]


def frames_table(rows: list[dict]):
    """The page of frames as one Markdown table: one component, not thousands (the Dash renderer
    takes seconds over a table of html.Td components)."""
    if not rows:
        return html.Div("no frames match", className="muted")
    head = "| " + " | ".join(FRAME_COLUMNS) + " |\n|" + "---:|" * len(FRAME_COLUMNS) + "\n"
    body = "\n".join("| " + " | ".join(str(r.get(c, "")).replace("|", "/") for c in FRAME_COLUMNS) + " |" for r in rows)
    return dcc.Markdown(head + body, className="frames", id="fr-md")


def page_sweep(st: AppState):
    head = [html.H2("Sweep")]
    if not st.sweep_path:
        return head + [note_box(html.B("No sweep dataset given. "), "Start the dashboard with ",
                                html.Code("emu dashboard --sweep PATH"),
                                " (a .parquet file, or a folder of them, as written by ", html.Code("emu sweep"),
                                ") to see TTFT and bytes against nodes, prompt length and chunk size for each scheme.")]
    if st.sweep_error:
        return head + [error_box(st.sweep_error)]
    df = st.sweep_df
    fv = filter_values(df, axes_of(df, st.sweep_meta))
    controls = []
    for c, vals in fv.items():
        controls.append(html.Label([c.replace("_", " "), dcc.Dropdown(
            id={"type": "sw-filter", "col": c}, options=[{"label": "all", "value": "all"}] +
            [{"label": filter_label(c, v), "value": str(v)} for v in vals], value="all", clearable=False,
            style={"minWidth": "180px"})]))
    desc = st.sweep_meta.get("description")
    return head + [
        html.P([f"{desc}. " if desc else "",
                "Each line is one slice of the sweep: a scheme's points that differ only in the panel's parameter "
                "(the legend names what the other parameters were held at; repeated points are medians). ",
                summary_line(df, st.sweep_meta)], className="lede"),
        html.Div(controls, className="filters") if controls else None,
        html.Div(id="sw-figs", children=sweep_panels(df, axes_of(df, st.sweep_meta))),
    ]


def sweep_panels(df, axes):
    if not len(df):
        return [note_box("no points pass these filters")]
    xs = sweep_axes(df, axes)
    if not xs:
        return [note_box("No slice of this dataset varies nodes, prompt length or chunk size alone, so there is "
                         "nothing to draw against them.")]
    metrics = [("ttft_s", "TTFT"), ("wire_bytes", "Bytes on the wire")] + \
        ([("kv_bytes", "KV payload bytes")] if "kv_bytes" in df.columns else [])
    return [html.Div([html.Div(graph(f"sw-{m.replace('_', '-')}-{x}", sweep_figure(df, m, x, axes, f"{title} against {t}")),
                               className="panel") for x, t in xs], className="row") for m, title in metrics]


def page_whatif(st: AppState):
    traces = [{"label": k, "value": k} for k in st.traces]
    given = st.registry.runs()
    default_trace = None
    for r in given:  # preselect the trace of the first run when the server has it
        t = r.summary.get("trace") if not r.error else None
        if t in st.traces:
            default_trace = t
            break
    if default_trace is None and traces:
        default_trace = traces[0]["value"]
    return [
        html.H2("What-if"),
        html.P(["Replay a trace with different links, loss, a failure or another topology. The replay runs as its own "
                "process (", html.Code("python -m emu replay"), ") and writes a results folder into ",
                html.Code(str(st.whatif_dir)), "; when it finishes the run joins the others (run picker and Overview)."],
               className="lede"),
        note_box("No traces to replay: start the dashboard with ", html.Code("--traces DIR_OR_FILE"),
                 " (default: ./traces when it exists).") if not traces else None,
        html.Div([
            html.Div([
                html.Label(["trace", dcc.Dropdown(id="wi-trace", options=traces, value=default_trace, clearable=False)]),
                html.Label(["topology", dcc.Dropdown(id="wi-topo", options=[{"label": t, "value": t} for t in TOPOLOGIES],
                                                     value="auto", clearable=False)]),
                html.Label(["shape (optional)", dcc.Input(id="wi-shape", type="text", placeholder="e.g. 4x4 or 16")]),
                html.Label(["link rate", dcc.Input(id="wi-rate", type="text", placeholder="profile default, e.g. 10Gbps")]),
                html.Label(["link latency", dcc.Input(id="wi-lat", type="text", placeholder="profile default, e.g. 2us")]),
                html.Label(["frame loss probability", dcc.Input(id="wi-loss", type="text", placeholder="0, e.g. 0.001")]),
                html.Label(["failure", dcc.Input(id="wi-fail", type="text", placeholder="e.g. link 0-1 down at 0.5s")]),
                html.Div([html.Button("Run what-if", id="wi-run"), " ",
                          html.Button("Cancel", id="wi-cancel", className="secondary")]),
            ], className="form"),
            html.Div(id="wi-msg"),
            html.Div(html.Div(id="wi-bar-fill", style={"width": "0%"}), className="bar", id="wi-bar"),
            html.Div(id="wi-status", className="kpi"),
        ], className="panel"),
        dcc.Interval(id="wi-poll", interval=600),
        dcc.Store(id="wi-sig"),
        html.Div(html.Div(id="wi-jobs"), className="panel"),
    ]


def jobs_table(st: AppState):
    jobs = st.whatifs.jobs
    whatif_runs = [r for r in st.registry.runs() if r.origin == "what-if"]
    if not jobs and not whatif_runs:
        return html.Div("No what-if runs yet.", className="muted")
    rows = []
    listed = set()
    for j in reversed(jobs):
        run = st.registry.get(j.run_key) if j.run_key else None
        listed.add(j.run_key)
        s = run.summary if run and not run.error else {}
        rows.append(html.Tr([html.Td(j.run_key or j.out.name), html.Td(j.trace_key), html.Td(j.desc),
                             html.Td(j.state + (f" ({j.progress:.0%})" if j.state == "running" else "")),
                             html.Td(D.fmt_s(s.get("ttft_s"))), html.Td(D.fmt_bytes(s.get("wire_bytes"))),
                             html.Td(f"{j.elapsed:.1f} s"), html.Td(j.message)]))
    for r in whatif_runs:
        if r.key in listed:
            continue
        s = r.summary if not r.error else {}
        rows.append(html.Tr([html.Td(r.key), html.Td(s.get("trace", "")), html.Td(r.note or "(earlier session)"), html.Td("done"),
                             html.Td(D.fmt_s(s.get("ttft_s"))), html.Td(D.fmt_bytes(s.get("wire_bytes"))), html.Td(""),
                             html.Td(r.error or "")]))
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in ("run", "trace", "change", "state", "TTFT", "wire", "took", "")])),
                       html.Tbody(rows)], className="jobs", id="wi-jobs-table")


# ------------------------------------------------------------------------------ app


def create_app(cfg: Config) -> tuple[Dash, AppState]:
    st = AppState(cfg)
    app = Dash(__name__, title="mcf-emu dashboard", suppress_callback_exceptions=True, update_title=None,
               assets_folder=str(Path(__file__).parent / "_no_assets"), serve_locally=True)
    app.index_string = INDEX
    runs = st.registry.runs()
    first = next((r.key for r in runs if not r.error), runs[0].key if runs else None)
    app.layout = html.Div([
        dcc.Location(id="url"),
        html.Div([
            html.Div(["mcf-emu", html.Small("dashboard")], className="brand"),
            html.Div(id="nav", className="nav",
                     children=[dcc.Link(name, href=path, id={"type": "nav", "path": path}) for path, name in PAGES]),
            html.Div(["run", dcc.Dropdown(id="run", options=[{"label": r.label, "value": r.key} for r in runs], value=first,
                                          clearable=False, searchable=True, optionHeight=36)], className="runpick"),
        ], className="top"),
        dcc.Interval(id="runs-poll", interval=1500),
        dcc.Store(id="runs-version", data=st.registry.version),
        dcc.Loading(html.Div(id="page", className="page"), type="dot", delay_show=400),
    ])

    @app.callback(Output({"type": "nav", "path": ALL}, "className"), Input("url", "pathname"))
    def nav_active(path):
        return ["active" if p == (path or "/") else "" for p, _ in PAGES]

    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("run", "value"))
    def render(path, key):
        t0 = time.perf_counter()
        path = path or "/"
        try:
            out = _render(path, key)
        finally:
            st.timings[path] = time.perf_counter() - t0
        return out

    @guarded
    def _render(path, key):
        if path == "/":
            return page_overview(st)
        if path == "/sweep":
            return page_sweep(st)
        if path == "/whatif":
            return page_whatif(st)
        if path in RUN_PAGES:
            run = st.registry.get(key)
            if run is None:
                return [note_box("Pick a run in the run list at the top." if st.registry.runs() else
                                 "No runs: start the dashboard with results folders, or make one on the What-if page.")]
            if run.error:
                return [html.H2(dict(PAGES)[path]), error_box(run.error)]
            return {"/links": page_links, "/memory": page_memory, "/timeline": page_timeline,
                    "/frames": page_frames}[path](st, run)
        return [html.H2("Not found"), note_box("No such page. ", dcc.Link("Back to the overview", href="/"))]

    @app.callback(Output("run", "options"), Output("run", "value", allow_duplicate=True), Output("runs-version", "data"),
                  Input("runs-poll", "n_intervals"), State("runs-version", "data"), State("run", "value"),
                  prevent_initial_call=True)
    def refresh_runs(_, seen, current):
        if seen == st.registry.version:
            return no_update, no_update, no_update
        runs = st.registry.runs()
        value = no_update if st.registry.get(current) else (runs[0].key if runs else None)
        return [{"label": r.label, "value": r.key} for r in runs], value, st.registry.version

    @app.callback(Output("run", "value", allow_duplicate=True), Input({"type": "pick-run", "key": ALL}, "n_clicks"),
                  prevent_initial_call=True)
    def pick_run(clicks):
        if not ctx.triggered_id or not any(clicks or []):
            return no_update
        key = ctx.triggered_id.get("key")
        return key if st.registry.get(key) else no_update

    # -- links
    @app.callback(Output("sel-link", "data"), Input("topo", "clickData"), Input("link-heat", "clickData"),
                  State("run", "value"), prevent_initial_call=True)
    def select_link(topo_click, heat_click, key):
        click = topo_click if ctx.triggered_id == "topo" else heat_click
        try:
            p = click["points"][0]
        except (TypeError, KeyError, IndexError):
            return no_update
        cd = p.get("customdata")
        # a lane's customdata is its link id; a heatmap cell is found by its row label "u→v"
        if ctx.triggered_id == "topo":
            return int(cd) if isinstance(cd, (int, float)) and not isinstance(cd, bool) else no_update
        m = re.fullmatch(r"(\d+)→(\d+)", str(p.get("y", "")))
        run = st.registry.get(key)
        if not m or run is None or run.error:
            return no_update
        totals, _ = _links_data(st, run)
        hit = totals[(totals["src"] == int(m[1])) & (totals["dst"] == int(m[2]))]
        return int(hit["link"].iloc[0]) if len(hit) else no_update

    @app.callback(Output("link-detail", "figure"), Output("topo", "figure"), Input("sel-link", "data"),
                  State("run", "value"), prevent_initial_call=True)
    def show_link(link, key):
        run = st.registry.get(key)
        if run is None or run.error or not isinstance(link, int):
            return no_update, no_update
        return fig_guard(detail_fig)(st, run, link), fig_guard(topo_fig)(st, run, link)

    # -- memory
    @app.callback(Output("mem-node-fig", "figure"), Input("mem-node", "value"), State("run", "value"),
                  prevent_initial_call=True)
    def show_node(node, key):
        run = st.registry.get(key)
        if run is None or run.error or not isinstance(node, int):
            return no_update
        return fig_guard(mem_node_fig)(st, run, node)

    @app.callback(Output("mem-node", "value"), Input("mem-heat", "clickData"), prevent_initial_call=True)
    def heat_node(click):
        try:
            return int(str(click["points"][0]["y"]).split()[-1])
        except (TypeError, KeyError, IndexError, ValueError):
            return no_update

    # -- timeline
    @app.callback(Output("timeline", "figure"), Input("timeline", "relayoutData"), State("run", "value"),
                  prevent_initial_call=True)
    def zoom_timeline(relayout, key):
        run = st.registry.get(key)
        if run is None or run.error or not isinstance(relayout, dict):
            return no_update
        rng = relayout.get("xaxis.range")
        if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:  # a drag
            rng = [relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]]
        if isinstance(rng, list) and len(rng) == 2:
            try:
                lo, hi = float(rng[0]), float(rng[1])
            except (TypeError, ValueError):
                return no_update
            if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
                return no_update
            return fig_guard(timeline_fig)(st, run, lo, hi)
        if relayout.get("xaxis.autorange"):
            return fig_guard(timeline_fig)(st, run)
        return no_update

    # -- frames
    @app.callback(Output("fr-page", "data"), Input("fr-prev", "n_clicks"), Input("fr-next", "n_clicks"),
                  Input("fr-op", "value"), Input("fr-src", "value"), Input("fr-dst", "value"), Input("fr-hop", "value"),
                  Input("fr-from", "value"), Input("fr-to", "value"), State("fr-page", "data"), prevent_initial_call=True)
    def frames_page(_p, _n, *rest):
        page = rest[-1] or 0
        if ctx.triggered_id == "fr-prev":
            return max(0, page - 1)
        if ctx.triggered_id == "fr-next":
            return page + 1
        return 0

    @app.callback(Output("fr-status", "children"), Output("fr-table", "children"), Output("fr-hist", "figure"),
                  Output("fr-pageinfo", "children"), Output("fr-poll", "disabled"),
                  Input("fr-poll", "n_intervals"), Input("fr-page", "data"),
                  Input("fr-op", "value"), Input("fr-src", "value"), Input("fr-dst", "value"), Input("fr-hop", "value"),
                  Input("fr-from", "value"), Input("fr-to", "value"), State("run", "value"))
    def frames_view(_tick, page, ops, src, dst, hop, t_from, t_to, key):
        run = st.registry.get(key)
        if run is None or run.error:
            return "no run", None, no_update, "", True
        cap = run.capture()
        if cap is None:
            return "no capture", None, no_update, "", True
        ix = st.captures.get(run.key, cap)
        if ix.state == "error":
            return error_box(ix.error), None, F.message_figure(ix.error, 300), "", True
        if ix.state != "ready":
            return (f"Indexing {cap.name} ({cap.stat().st_size / 2**20:,.0f} MiB): {ix.progress:.0%} — the first visit decodes "
                    "the capture once.", None, F.message_figure(f"indexing the capture… {ix.progress:.0%}", 300), "", False)
        try:
            flt = FrameFilter(ops=tuple(int(o) for o in (ops or [])), src=src if isinstance(src, int) else None,
                              dst=dst if isinstance(dst, int) else None, hop=hop if isinstance(hop, int) else None,
                              t_from=_parse_time(t_from), t_to=_parse_time(t_to))
        except ValueError as exc:
            return error_box(str(exc)), None, no_update, "", True
        page = page if isinstance(page, int) and page >= 0 else 0
        t0 = time.perf_counter()
        total, rows, hist = ix.query(flt, page, FRAMES_PAGE_SIZE)
        pages = max(1, math.ceil(total / FRAMES_PAGE_SIZE))
        if page >= pages and total:
            page = pages - 1
            total, rows, hist = ix.query(flt, page, FRAMES_PAGE_SIZE)
        dt = time.perf_counter() - t0
        status = (f"{total:,} of {ix.n_frames:,} frames match" if not flt.empty() else f"{ix.n_frames:,} frames") + \
            f" · query {dt * 1e3:.0f} ms"
        info = f"page {page + 1:,} of {pages:,} (rows {page * FRAMES_PAGE_SIZE + 1:,}–{page * FRAMES_PAGE_SIZE + len(rows):,})" \
            if rows else ""
        title = "Captured frames over time by op" + ("" if flt.empty() else " (filtered)")
        return status, frames_table(rows), F.frames_histogram(hist, title), info, True

    # -- sweep
    @app.callback(Output("sw-figs", "children"), Input({"type": "sw-filter", "col": ALL}, "value"),
                  State({"type": "sw-filter", "col": ALL}, "id"), prevent_initial_call=True)
    def sweep_filter(values, ids):
        if st.sweep_df is None:
            return no_update
        return sweep_panels(apply_filters(st.sweep_df, {i["col"]: v for i, v in zip(ids, values)}),
                            axes_of(st.sweep_df, st.sweep_meta))

    # -- what-if
    @app.callback(Output("wi-msg", "children"), Input("wi-run", "n_clicks"), Input("wi-cancel", "n_clicks"),
                  State("wi-trace", "value"), State("wi-topo", "value"), State("wi-shape", "value"), State("wi-rate", "value"),
                  State("wi-lat", "value"), State("wi-loss", "value"), State("wi-fail", "value"), prevent_initial_call=True)
    def whatif_submit(run_clicks, cancel_clicks, trace, topo, shape, rate, lat, loss, fail):
        if ctx.triggered_id == "wi-cancel":
            j = st.whatifs.current()
            if j:
                st.whatifs.cancel(j.id)
                return note_box(f"cancelling what-if {j.id}")
            return no_update
        if not run_clicks:
            return no_update
        try:
            job = st.whatifs.submit(trace, {"topology": topo, "shape": shape, "rate": rate, "latency": lat, "loss": loss,
                                            "failure": fail})
        except WhatIfError as exc:
            return error_box(str(exc))
        return note_box(f"started what-if {job.id}: {job.trace_key}, {job.desc}")

    @app.callback(Output("wi-bar-fill", "style"), Output("wi-status", "children"), Output("wi-jobs", "children"),
                  Output("wi-run", "disabled"), Output("wi-sig", "data"), Input("wi-poll", "n_intervals"),
                  State("wi-sig", "data"))
    def whatif_poll(_, seen):
        j = st.whatifs.current()
        last = st.whatifs.jobs[-1] if st.whatifs.jobs else None
        sig = repr([(x.id, x.state, round(x.progress, 3), int(x.elapsed) if x.state == "running" else 0)
                    for x in st.whatifs.jobs] + [st.registry.version])
        if sig == seen:
            return no_update, no_update, no_update, no_update, no_update
        if j:
            txt = f"what-if {j.id} running: {j.progress:.0%} of the ops finished, simulated {j.sim_s:.3f} s, " \
                  f"{j.elapsed:.0f} s elapsed"
            return {"width": f"{j.progress * 100:.1f}%"}, txt, jobs_table(st), True, sig
        if last:
            txt = f"what-if {last.id} {last.state}" + (f": {last.message}" if last.message else "") + \
                (f"; it is now listed as run {last.run_key}" if last.run_key else "")
            return {"width": "100%" if last.state == "done" else "0%"}, txt, jobs_table(st), False, sig
        return {"width": "0%"}, "idle", jobs_table(st), False, sig

    return app, st


def make_server(app: Dash, host: str = "127.0.0.1", port: int = 8050):
    """A threaded werkzeug server for the app (port 0 picks a free one); call serve_forever()."""
    from werkzeug.serving import make_server as mk

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    return mk(host, port, app.server, threaded=True)
