"""Timeline: compute and NIC lanes per node of each picked run, one subplot per run on one
time axis. Drag or wheel to zoom (the server redraws the window, down to single ops); hover
names the op under the pointer, a click opens its details; a merged segment zooms in when
clicked. ``?from=&to=`` keep the window in the URL. With ``emu.export.perfetto`` installed, a
button downloads the window as a Perfetto trace."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math

from dash import Input, Output, State, ctx, dcc, html, no_update

from .. import data as D
from .. import figures as F
from ..state import current
from ..ui import (CLICKS, EVENT, KEYS, URL_SYNC, WINDOW, checked, error_box, fig_guard, graph, guarded, picked_runs,
                  run_picker, window)

PATH = "/timeline"
NAME = "Timeline"
PERFETTO = "emu.export.perfetto"


def perfetto_available() -> bool:
    """Whether the Perfetto export (another part of mcf-emu) is installed; the button hides otherwise."""
    try:
        return importlib.util.find_spec(PERFETTO) is not None
    except (ImportError, ValueError):
        return False


def segments(st, run, lo=None, hi=None):
    def make():
        ops = run.ops(D.TIMELINE_COLUMNS)
        n = int(run.summary.get("nodes") or (max(int(ops["node"].max()), int(ops["src"].max())) + 1))
        return D.timeline_segments(ops, n, lo, hi)
    key = (run.key, "timeline", None if lo is None else round(float(lo), 9), None if hi is None else round(float(hi), 9))
    return st.figs.get(key, make)


def timeline_fig(st, runs, lo=None, hi=None):
    segs = [segments(st, r, lo, hi) for r in runs]
    return F.timeline_figure(segs, [r.summary.get("ttft_s") for r in runs], names=[r.key for r in runs])


def _num(v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def detail(run, op: int):
    d = D.op_details(run.table("ops.parquet"), op)  # the whole table: the op's dependencies too
    if d is None:
        return html.Div(f"op {op} is not in {run.key}", className="muted")

    def fmt(k, v):
        if k in ("start_s", "end_s"):
            return "never ran" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{float(v):.9f} s"
        if k == "bytes":
            return f"{int(v):,} B ({D.fmt_bytes(v)})"
        if k == "deps":
            if v is None:
                return "not recorded (this results folder's ops.parquet has no deps column)"
            return ", ".join(str(x) for x in v) if len(v) else "none"
        return str(v)

    rows = [("run", run.key)] + [(k, fmt(k, v)) for k, v in d.items()]
    s, e = _num(d.get("start_s")), _num(d.get("end_s"))
    if s is not None and e is not None:
        rows.append(("duration", D.fmt_s(e - s)))
    return html.Div([html.H3(f"{d['kind']} op {d['op']}"),
                     html.Table([html.Tbody([html.Tr([html.Td(k), html.Td(v)]) for k, v in rows])])],
                    id="tl-op", **{"data-op": str(d["op"])})


@guarded(NAME)
def layout(runs=None, sel=None, **q):
    st = current()
    picked, instead = picked_runs(st, runs or sel, NAME)
    if instead is not None:
        return instead
    lo, hi = window([_num(q.get("from")), _num(q.get("to"))]) or (None, None)  # the window the callbacks accept
    tools = []
    if perfetto_available():
        tools = [html.Button("Download as Perfetto trace", id="tl-perfetto", className="secondary"),
                 html.Span("the first run, in the window shown, for ui.perfetto.dev", className="muted", id="tl-dl-msg"),
                 dcc.Download(id="tl-dl")]
    return html.Div([
        html.H2(NAME),
        run_picker(st, picked, asked=runs or sel),
        html.P("Per node, its compute engine (qkv, attention, MLP, LM head, decode) and its NIC (sends, reductions, "
               "drains and invalidations it starts). At full view each pixel column shows the kind of op that kept the "
               "lane busiest and thin strips below it every other kind that ran there; zoom in (drag or wheel) and the "
               "server redraws the window, down to every single op: hover names it, a click shows its details.",
               className="lede"),
        html.Div(tools, className="toolbar") if tools else None,
        html.Div(graph("timeline", fig_guard(timeline_fig)(st, picked, lo, hi), config={"scrollZoom": True}),
                 className="panel"),
        html.Div(html.Div("Click an op for its details.", className="muted"), id="tl-detail",
                 className="panel opdetail"),
        dcc.Store(id="tl-range", data=[lo, hi] if lo is not None else None),
        dcc.Store(id="tl-url"),
    ], className="page")


def _range_of(relayout: dict):
    """The new x window of a relayout event of any subplot (all share one axis), or 'reset'."""
    for k, v in relayout.items():
        if k.startswith("xaxis") and k.endswith(".autorange") and v:
            return "reset"
    lo = next((v for k, v in relayout.items() if k.startswith("xaxis") and k.endswith(".range[0]")), None)
    hi = next((v for k, v in relayout.items() if k.startswith("xaxis") and k.endswith(".range[1]")), None)
    if lo is None:
        rng = next((v for k, v in relayout.items() if k.startswith("xaxis") and k.endswith(".range")), None)
        if isinstance(rng, list) and len(rng) == 2:
            lo, hi = rng
    w = window([_num(lo), _num(hi)])
    return tuple(w) if w else None


def register(app) -> None:
    app.clientside_callback(  # runs and the window into the URL
        (URL_SYNC % "['runs', 'from', 'to']").replace("arguments[i]", "args[i]").replace(
            "function() {", "function(runs, rng) { const args = [runs, rng ? rng[0] : null, rng ? rng[1] : null];"),
        Output("tl-url", "data"), Input("runs", "value"), Input("tl-range", "data"))

    @app.callback(Output("timeline", "figure"), Output("tl-detail", "children"), Output("tl-range", "data"),
                  Input("timeline", "relayoutData"), Input("timeline", "clickData"), Input("runs", "value"),
                  State("tl-range", "data"), prevent_initial_call=True)
    @checked(relayout=EVENT, click=EVENT, keys=KEYS, rng=WINDOW)
    def update(relayout, click, keys, rng):
        st = current()
        picked = [r for r in st.pick(keys) if not r.error]
        if not picked:
            return no_update, no_update, no_update
        trig = ctx.triggered_id
        if trig == "runs":
            lo, hi = (rng or [None, None])
            return fig_guard(timeline_fig)(st, picked, lo, hi), no_update, no_update
        if trig == "timeline" and any(t["prop_id"] == "timeline.clickData" for t in ctx.triggered):
            try:
                p = click["points"][0]
                op, run_i = int(p["customdata"][0]), int(p["customdata"][1])
            except (TypeError, KeyError, IndexError, ValueError, OverflowError):
                return no_update, no_update, no_update
            if not 0 <= run_i < len(picked):
                return no_update, no_update, no_update
            if op >= 0:
                return no_update, detail(picked[run_i], op), no_update
            if op == -1:  # a merged segment: zoom into it
                try:
                    lo, hi = _num(p["customdata"][2]), _num(p["customdata"][3])
                except (IndexError, TypeError):
                    return no_update, no_update, no_update
                if lo is None or hi is None or not hi > lo:
                    return no_update, no_update, no_update
                return fig_guard(timeline_fig)(st, picked, lo, hi), no_update, [lo, hi]
            return no_update, no_update, no_update
        if not isinstance(relayout, dict):
            return no_update, no_update, no_update
        r = _range_of(relayout)
        if r is None:
            return no_update, no_update, no_update
        if r == "reset":
            return fig_guard(timeline_fig)(st, picked), no_update, None
        return fig_guard(timeline_fig)(st, picked, *r), no_update, list(r)

    @app.callback(Output("tl-dl", "data"), Output("tl-dl-msg", "children"), Input("tl-perfetto", "n_clicks"),
                  State("runs", "value"), State("tl-range", "data"), prevent_initial_call=True)
    @checked(n=CLICKS, keys=KEYS, rng=WINDOW)
    def download(n, keys, rng):
        if not n:
            return no_update, no_update
        st = current()
        picked = [r for r in st.pick(keys) if not r.error]
        if not picked:
            return no_update, no_update
        lo, hi = (rng or [None, None])
        kw = {}
        if lo is not None and hi is not None:
            kw = {"start_ps": int(round(lo * 1e12)), "end_ps": int(round(hi * 1e12))}
        run = picked[0]
        try:
            mod = importlib.import_module(PERFETTO)  # lazily: the page works without it
            if hasattr(mod, "trace_chunks"):  # the file's text as the export writes it, one event a line
                chunks = mod.trace_chunks(run.path, **kw)
                text, events = "".join(chunks), (chunks[1].count("\n") + 1 if chunks[1] else 0)
            else:
                doc = mod.perfetto_trace(run.path, **kw)
                text, events = json.dumps(doc, separators=(",", ":")), len(doc.get("traceEvents", []))
        except Exception as exc:  # noqa: BLE001 - the export says what it cannot draw (a window needed, ...)
            return no_update, error_box(f"Perfetto export: {exc}")
        return dict(content=text, filename=f"{run.key}.perfetto.json", type="application/json"), \
            f"{run.key}: {events:,} events"

