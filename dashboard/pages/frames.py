"""Frames: the run's capture decoded, one row per frame per hop (with its link when the
capture names one per interface); filters, a time histogram that filters by brushing, and a
selected frame's decoded header as a tree and its bytes as hex; follow a message across its
fragments."""

from __future__ import annotations

import math
import re
import time

from dash import Input, Output, State, ctx, dcc, html, no_update

from .. import figures as F
from ..frames import FrameFilter, enum_names, header_tree, hexdump, link_label
from ..state import current
from ..ui import (BOOL, CLICKS, EVENT, INT, INTS, KEY, NUMBER, TEXT, checked, error_box, graph, guarded, no_runs, note_box,
                  run_picker, url_sync)

PATH = "/frames"
NAME = "Frames"
PAGE_SIZE = 100


def parse_time(v) -> float | None:
    if v in (None, ""):
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*(s|ms|us|µs|ns)?\s*", str(v))
    if not m:
        raise ValueError(f"time {v!r}: a number of seconds, or with a unit like 250ms")
    return float(m[1]) * {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, None: 1}[m[2]]


def frames_table(rows: list[dict], columns: list[str], status: str = "") -> dict:
    """The page of frames as plain strings for ``DRAW_TABLE``, with the status line that
    goes with it: a capture's text (interface names, ...) is data, never markup."""
    return {"columns": list(columns), "rows": [[str(r.get(c, "")) for c in columns] for r in rows], "status": status}


# The table drawn in the browser with textContent (nothing in it is parsed as HTML or
# Markdown), in one pass: the Dash renderer takes tens of seconds over 100 rows of html.Td
# components, a Markdown table would read a capture's text as markup. The record number
# links to its detail (#frame-N, which fr-loc reads). The status line ("N frames match")
# changes in the same pass, so it never names rows not drawn yet.
DRAW_TABLE = """function(t) {
  const wrap = document.getElementById('fr-table'), keep = window.dash_clientside.no_update;
  if (!wrap) return [keep, keep];
  const out = document.createElement('div');
  if (!t || !Array.isArray(t.rows) || !t.rows.length) {
    out.className = 'muted'; out.textContent = t ? 'no frames match' : '';
  } else {
    out.className = 'frames';
    const table = document.createElement('table'), head = document.createElement('tr'), body = document.createElement('tbody');
    for (const c of t.columns) { const th = document.createElement('th'); th.textContent = c; head.appendChild(th); }
    table.appendChild(document.createElement('thead')).appendChild(head);
    const rec = t.columns.indexOf('#');
    for (const r of t.rows) {
      const tr = document.createElement('tr');
      r.forEach((v, i) => {
        const td = tr.appendChild(document.createElement('td'));
        if (i === rec && /^\\d+$/.test(v)) { const a = td.appendChild(document.createElement('a')); a.href = '#frame-' + v;
          a.textContent = v; } else td.textContent = v;
      });
      body.appendChild(tr);
    }
    table.appendChild(body); out.appendChild(table);
  }
  wrap.replaceChildren(out);
  return [t && typeof t.status === 'string' ? t.status : keep, t ? t.rows.length : 0];
}"""


def _index(st, run):
    cap = run.capture()
    return (cap, st.captures.get(run.key, cap)) if cap is not None else (None, None)


@guarded(NAME)
def layout(runs=None, sel=None, frame=None, **_):
    st = current()
    picked = st.pick(runs or sel)[:1]
    if not picked:
        return no_runs(st, NAME)
    try:
        frame = int(frame)
    except (TypeError, ValueError):
        frame = None
    return html.Div([html.H2(NAME), run_picker(st, picked, multi=False, asked=runs or sel), dcc.Store(id="fr-url"),
                     html.Div(body(st, picked[0], frame), id="fr-body")], className="page")


def body(st, run, frame=None):
    """Everything under the run picker: a new run redraws it (its boards, its capture)."""
    if run.error:
        return [error_box(run.error)]
    cap = run.capture()
    if cap is None:
        return [note_box(f"{run.key} has no capture. Replay with ",
                         html.Code("emu replay TRACE --out DIR --capture cap.pcapng"),
                         " to record its frames, then open the folder here.")]
    n = int(run.summary.get("nodes") or 0)
    boards = [{"label": str(i), "value": i} for i in range(n)]
    ops = [{"label": name, "value": v} for v, name in sorted(enum_names()["op"].items())] + [{"label": "malformed", "value": -1}]
    return [
        html.P([f"Decoded frames of {cap.name}, one row per frame per hop, with the MCF header fields as columns. With "
                "one capture interface per link direction the link column names the direction a hop crossed (the copies "
                "of a multicast frame are then distinct rows); \"hop from\" is the board that put the frame on the link. "
                "Click a frame number for its header and bytes; drag across the histogram to filter by time."],
               className="lede"),
        html.Div([
            html.Label(["op", dcc.Dropdown(id="fr-op", options=ops, multi=True, placeholder="any", style={"minWidth": "220px"})]),
            html.Label(["source board (src_node)", dcc.Dropdown(id="fr-src", options=boards, placeholder="any")]),
            html.Label(["destination board", dcc.Dropdown(id="fr-dst", options=boards, placeholder="any")]),
            html.Label(["hop from board", dcc.Dropdown(id="fr-hop", options=boards, placeholder="any")]),
            html.Label(["link", dcc.Dropdown(id="fr-link", options=[], placeholder="any")], id="fr-link-wrap",
                       style={"display": "none"}),  # shown when the capture names its links
            html.Label(["time from (s)", dcc.Input(id="fr-from", type="text", placeholder="e.g. 1.5", debounce=True)]),
            html.Label(["time to (s)", dcc.Input(id="fr-to", type="text", placeholder="e.g. 2 or 2500ms", debounce=True)]),
        ], className="filters"),
        html.Div(id="fr-msgbar", className="toolbar"),
        dcc.Store(id="fr-msg"),
        dcc.Store(id="fr-page", data=0),
        dcc.Location(id="fr-loc", refresh=False),
        dcc.Interval(id="fr-poll", interval=700, disabled=False),
        html.Div(id="fr-status", className="kpi"),
        html.Div(graph("fr-hist", F.message_figure("indexing the capture…", 300)), className="panel"),
        html.Div([
            html.Div([html.Button("◀ previous", id="fr-prev", className="secondary"),
                      html.Button("next ▶", id="fr-next", className="secondary"),
                      html.Span(id="fr-pageinfo"),
                      html.Label(["frame #", dcc.Input(id="fr-sel", type="number", min=0, value=frame, debounce=True,
                                                       style={"width": "110px"})])], className="pager"),
            html.Div(id="fr-table", className="tablewrap"), dcc.Store(id="fr-rows"), dcc.Store(id="fr-drawn"),
        ], className="panel"),
        html.Div([html.Div([html.H3("Header"), html.Div(id="fr-tree", className="tree")], className="panel frdetail"),
                  html.Div([html.H3("Bytes"), html.Pre(id="fr-hex", className="hex")], className="panel")],
                 className="panes"),
    ]


def tree_view(sections):
    return [html.Details([html.Summary(title), *[html.Div(f"{k}: {v}", className="f") for k, v in fields]], open=True,
                         className=f"sec-{title.split()[0].lower()}") for title, fields in sections]


def register(app) -> None:
    url_sync(app, "fr-url", ["runs", "frame"], [Input("runs", "value"), Input("fr-sel", "value")])

    @app.callback(Output("fr-body", "children"), Input("runs", "value"), prevent_initial_call=True)
    @checked(key=KEY)
    def redraw(key):
        st = current()
        run = st.registry.get(key)
        return body(st, run) if run is not None else [error_box("pick a run")]

    @app.callback(Output("fr-page", "data"), Input("fr-prev", "n_clicks"), Input("fr-next", "n_clicks"),
                  Input("fr-op", "value"), Input("fr-src", "value"), Input("fr-dst", "value"), Input("fr-hop", "value"),
                  Input("fr-link", "value"), Input("fr-from", "value"), Input("fr-to", "value"), Input("fr-msg", "data"),
                  State("fr-page", "data"), prevent_initial_call=True)
    @checked(prev=CLICKS, next_=CLICKS, ops=INTS, src=INT, dst=INT, hop=INT, link=INT, t_from=TEXT, t_to=TEXT, msg=INTS,
             page=INT)
    def frames_page(prev, next_, ops, src, dst, hop, link, t_from, t_to, msg, page):
        page = max(page or 0, 0)
        if ctx.triggered_id == "fr-prev":
            return max(0, page - 1)
        if ctx.triggered_id == "fr-next":
            return page + 1
        return 0

    app.clientside_callback(DRAW_TABLE, Output("fr-status", "children", allow_duplicate=True), Output("fr-drawn", "data"),
                            Input("fr-rows", "data"), prevent_initial_call=True)

    @app.callback(Output("fr-status", "children"), Output("fr-rows", "data"), Output("fr-hist", "figure"),
                  Output("fr-pageinfo", "children"), Output("fr-poll", "disabled"), Output("fr-link", "options"),
                  Output("fr-link-wrap", "style"),
                  Input("fr-poll", "n_intervals"), Input("fr-page", "data"),
                  Input("fr-op", "value"), Input("fr-src", "value"), Input("fr-dst", "value"), Input("fr-hop", "value"),
                  Input("fr-link", "value"), Input("fr-from", "value"), Input("fr-to", "value"), Input("fr-msg", "data"),
                  State("runs", "value"))
    @checked(_tick=CLICKS, page=INT, ops=INTS, src=INT, dst=INT, hop=INT, link=INT, t_from=TEXT, t_to=TEXT, msg=INTS,
             key=KEY)
    def frames_view(_tick, page, ops, src, dst, hop, link, t_from, t_to, msg, key):
        st = current()
        run = st.registry.get(key)
        if run is None or run.error:
            return "no run", None, no_update, "", True, no_update, no_update
        cap, ix = _index(st, run)
        if ix is None:
            return "no capture", None, no_update, "", True, no_update, no_update
        if ix.state == "error":
            return error_box(ix.error), None, F.message_figure(ix.error, 300), "", True, no_update, no_update
        if ix.state != "ready":
            what = "hashing" if ix.state == "hashing" else "indexing"
            return (f"{what.capitalize()} {cap.name} ({cap.stat().st_size / 2**20:,.0f} MiB): {ix.progress:.0%} — the "
                    "first visit decodes the capture once into the user cache.", None,
                    F.message_figure(f"{what} the capture… {ix.progress:.0%}", 300), "", False, no_update, no_update)
        try:
            intval = (lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None)
            flt = FrameFilter(ops=tuple(int(o) for o in (ops or []) if isinstance(o, int)), src=intval(src),
                              dst=intval(dst), hop=intval(hop), link=intval(link),
                              msg=tuple(msg) if isinstance(msg, list) and len(msg) == 2 and all(
                                  isinstance(x, int) for x in msg) else None,
                              t_from=parse_time(t_from), t_to=parse_time(t_to))
        except ValueError as exc:
            return error_box(str(exc)), None, no_update, "", True, no_update, no_update
        page = page if isinstance(page, int) and page >= 0 else 0
        t0 = time.perf_counter()
        total, rows, hist = ix.query(flt, page, PAGE_SIZE)
        pages = max(1, math.ceil(total / PAGE_SIZE))
        if page >= pages and total:
            page = pages - 1
            total, rows, hist = ix.query(flt, page, PAGE_SIZE)
        dt = time.perf_counter() - t0
        status = (f"{total:,} of {ix.n_frames:,} frames match" if not flt.empty() else f"{ix.n_frames:,} frames") + \
            f" · query {dt * 1e3:.0f} ms"
        info = f"page {page + 1:,} of {pages:,} (rows {page * PAGE_SIZE + 1:,}–{page * PAGE_SIZE + len(rows):,})" \
            if rows else ""
        title = "Captured frames over time by op (drag to filter by time)" + ("" if flt.empty() else " · filtered")
        fig = F.frames_histogram(hist, title)
        fig.update_layout(dragmode="select", selectdirection="h")
        links = [{"label": link_label(n), "value": i} for i, n in enumerate(ix.links)]
        return no_update, frames_table(rows, ix.columns(), status), fig, info, True, links, \
            ({} if links else {"display": "none"})

    @app.callback(Output("fr-from", "value"), Output("fr-to", "value"), Input("fr-hist", "selectedData"),
                  Input("fr-hist", "relayoutData"), prevent_initial_call=True)
    @checked(sel=EVENT, relayout=EVENT)
    def brush(sel, relayout):
        if ctx.triggered_id == "fr-hist" and any(t["prop_id"] == "fr-hist.selectedData" for t in ctx.triggered):
            try:
                lo, hi = sel["range"]["x"]
                return f"{float(min(lo, hi)):.9f}", f"{float(max(lo, hi)):.9f}"
            except (TypeError, KeyError, ValueError, OverflowError):
                return no_update, no_update
        if isinstance(relayout, dict) and relayout.get("xaxis.autorange"):
            return "", ""  # double-click: the whole capture again
        return no_update, no_update

    @app.callback(Output("fr-sel", "value"), Input("fr-loc", "hash"), prevent_initial_call=True)
    @checked(h=TEXT)
    def pick_frame(h):
        m = re.fullmatch(r"#frame-(\d{1,12})", h or "")
        return int(m[1]) if m else no_update

    @app.callback(Output("fr-tree", "children"), Output("fr-hex", "children"), Output("fr-msgbar", "children"),
                  Input("fr-sel", "value"), Input("fr-poll", "disabled"), Input("fr-msg", "data"), State("runs", "value"))
    @checked(rec=NUMBER, ready=BOOL, msg=INTS, key=KEY)
    def show_frame(rec, ready, msg, key):
        st = current()
        run = st.registry.get(key)
        if run is None or run.error or not isinstance(rec, int) or isinstance(rec, bool):
            return html.Div("Pick a frame (click its number).", className="muted"), "", _msgbar(None, msg)
        _, ix = _index(st, run)
        if ix is None or ix.state != "ready":
            return no_update, no_update, no_update
        got = ix.frame(rec)
        if got is None:
            return html.Div(f"no frame {rec} in this capture", className="muted"), "", _msgbar(None, msg)
        row, data = got
        return tree_view(header_tree(row, data, ix.links, ix.reasons)), hexdump(data), \
            _msgbar((int(row["src_node"]), int(row["msg_id"]), int(row["frag_cnt"])), msg)

    @app.callback(Output("fr-msg", "data"), Input("fr-follow", "n_clicks"), Input("fr-unfollow", "n_clicks"),
                  State("fr-sel", "value"), State("runs", "value"), prevent_initial_call=True)
    @checked(n_follow=CLICKS, n_unfollow=CLICKS, rec=NUMBER, key=KEY)
    def follow(n_follow, n_unfollow, rec, key):
        # a button drawn anew fires with n_clicks None: only a click counts
        if ctx.triggered_id == "fr-unfollow":
            return None if n_unfollow else no_update
        if not n_follow:
            return no_update
        st = current()
        run = st.registry.get(key)
        if run is None or run.error or not isinstance(rec, int):
            return no_update
        _, ix = _index(st, run)
        m = ix.message_of(rec) if ix is not None else None
        return list(m) if m else no_update


def _msgbar(this, following):
    out = []
    if this:
        out.append(html.Button(f"Follow message {this[1]} from board {this[0]} ({this[2]} fragment"
                               f"{'s' if this[2] != 1 else ''})", id="fr-follow", className="secondary"))
    else:
        out.append(html.Button("Follow message", id="fr-follow", className="secondary", disabled=True))
    if isinstance(following, list) and len(following) == 2:
        out += [html.Span(f"showing every fragment of message {following[1]} from board {following[0]} on every hop",
                          className="muted", id="fr-following"),
                html.Button("Show all frames", id="fr-unfollow", className="secondary")]
    else:
        out.append(html.Button("Show all frames", id="fr-unfollow", className="secondary", style={"display": "none"}))
    return out
