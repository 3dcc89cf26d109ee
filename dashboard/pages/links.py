"""Links: the topology of each picked run with its link directions coloured by utilization
(one colour scale over all picked runs), a heatmap per run on a shared time axis and colour
scale, and one link direction (``?link=U-V``) overlaid across the runs."""

from __future__ import annotations

import html as htmlesc
import re

from dash import ALL, Input, Output, ctx, dcc, html, no_update

from .. import compare as C
from .. import data as D
from .. import figures as F
from ..state import current
from ..ui import EVENTS, KEYS, TEXT, checked, error_box, fig_guard, graph, guarded, no_runs, run_picker, span, url_sync

PATH = "/links"
NAME = "Links"
_LINK = re.compile(r"(\d{1,6})-(\d{1,6})")


def links_data(st, run):
    def make():
        df = run.links()
        lo, hi = span(run)
        return D.link_totals(df, span_s=max(hi - lo, 1e-12)), D.link_matrix(df)
    return st.figs.get((run.key, "links-data"), make)


def parse_link(v) -> tuple[int, int] | None:
    m = _LINK.fullmatch(v) if isinstance(v, str) else None
    return (int(m[1]), int(m[2])) if m else None


def default_link(run) -> str | None:
    b = run.summary.get("busiest_link") or {}
    if isinstance(b.get("src"), int) and isinstance(b.get("dst"), int):
        return f"{b['src']}-{b['dst']}"
    return None


def link_id(totals, uv) -> int | None:
    if uv is None:
        return None
    m = totals[(totals["src"] == uv[0]) & (totals["dst"] == uv[1])]
    return int(m["link"].iloc[0]) if len(m) else None


def shared_scales(st, runs):
    """The largest average and per-bin utilization over the runs, and the longest run: every
    figure of the comparison uses them, so one colour means one utilization everywhere."""
    vmax = zmax = 0.0
    t1 = 0.0
    for r in runs:
        totals, m = links_data(st, r)
        vmax = max(vmax, float(totals["utilization"].max()) if len(totals) else 0.0)
        zmax = max(zmax, float(m.util.max()) if m.util.size else 0.0)
        t1 = max(t1, span(r)[1])
    return vmax, zmax, (0.0, t1)


def topo_fig(st, run, uv, vmax):
    totals, _ = links_data(st, run)
    lid = link_id(totals, uv)
    return st.figs.get((run.key, "topo", lid, round(vmax, 12)), lambda: F.topology_figure(
        run.topology(), totals, selected=lid, vmax=vmax, height=460,
        title=f"{run.key} · {htmlesc.escape(str(run.summary.get('topology') or 'topology'))}: average utilization "
              "(click a link)"))


def heat_fig(st, run, zmax, xr):
    _, m = links_data(st, run)
    return st.figs.get((run.key, "heat", round(zmax, 12), xr), lambda: F.link_heatmap(
        m, title=f"{run.key}: utilization per link direction over time", zmax=zmax, x_range=xr))


def detail_fig(st, runs, uv):
    if uv is None:
        return F.message_figure("pick a link: click a lane of a topology or a heatmap cell")
    colors = C.run_colors(runs)
    items = []
    for r in runs:
        df = r.links()
        totals, _ = links_data(st, r)
        lid = link_id(totals, uv)
        items.append((r.key, colors[r.key], D.link_series(df, lid) if lid is not None else None))
    if len(runs) == 1:
        ser = items[0][2]
        if ser is None:
            return F.message_figure(f"link {uv[0]}→{uv[1]} is not in {runs[0].key}")
        df = runs[0].links()
        totals, _ = links_data(st, runs[0])
        rid = link_id(totals, (uv[1], uv[0]))
        rev = D.link_series(df, rid) if rid is not None else None
        return F.link_detail(ser, uv[0], uv[1], rev, title=f"Link {uv[0]}→{uv[1]} (id {link_id(totals, uv)}) over time")
    return F.link_detail_compare(items, f"{uv[0]}→{uv[1]}", title=f"Link {uv[0]}→{uv[1]} in each run (shared axes)")


def body(st, runs, uv):
    bad = [r for r in runs if r.error]
    if bad:
        return [error_box(r.error) for r in bad]
    vmax, zmax, xr = shared_scales(st, runs)
    wide = len(runs) > 1
    tops = [html.Div(graph({"type": "lk-topo", "run": r.key}, topo_fig(st, r, uv, vmax)), className="panel")
            for r in runs]
    heats = [html.Div(graph({"type": "lk-heat", "run": r.key}, heat_fig(st, r, zmax, xr)), className="panel")
             for r in runs]
    notes = []
    for r in runs:
        s = r.summary
        b = s.get("busiest_link") or {}
        notes.append(html.Li(f"{r.key}: busiest {b.get('src')}→{b.get('dst')} at {b.get('utilization', 0):.1%}; "
                             f"{s.get('dropped_frames', 0):,} frames dropped (queue-full and link-down drops are totals "
                             f"only: {', '.join(f'{k} {v:,}' for k, v in (s.get('dropped_by_cause') or {}).items()) or 'none'})"))
    return [
        html.P(("Shared scales: one colour is one utilization in every figure (top of the scale "
                f"{max(vmax, 0.05):.1%} on the topologies, {max(zmax, 0.05):.1%} on the heatmaps), one time axis. ")
               if wide else "", className="muted"),
        html.Div(tops, className="row"),
        html.Div(graph("link-detail", fig_guard(detail_fig)(st, runs, uv)), className="panel"),
        *heats,
        html.Ul(notes, className="muted"),
    ]


@guarded(NAME)
def layout(runs=None, link=None, sel=None, **_):
    st = current()
    picked = st.pick(runs or sel)
    if not picked:
        return no_runs(st, NAME)
    uv = parse_link(link) or parse_link(default_link(picked[0]))
    return html.Div([
        html.H2(NAME),
        run_picker(st, picked, asked=runs or sel),
        html.P("Each link direction is its own lane (traffic drives on the right), coloured by its average utilization "
               "over the run. Click a lane or a heatmap cell to see that direction's utilization, queue depth and drops "
               "over time; with several runs picked, every figure shares its axes and colour scale.", className="lede"),
        dcc.Store(id="lk-link", data=f"{uv[0]}-{uv[1]}" if uv else None),
        dcc.Store(id="lk-url"),
        html.Div(body(st, picked, uv), id="lk-body"),
    ], className="page")


def register(app) -> None:
    url_sync(app, "lk-url", ["runs", "link"], [Input("runs", "value"), Input("lk-link", "data")])

    @app.callback(Output("lk-link", "data"), Input({"type": "lk-topo", "run": ALL}, "clickData"),
                  Input({"type": "lk-heat", "run": ALL}, "clickData"), prevent_initial_call=True)
    @checked(_t=EVENTS, _h=EVENTS)
    def select_link(_t, _h):
        trig = ctx.triggered_id
        if not isinstance(trig, dict) or not ctx.triggered or not ctx.triggered[0].get("value"):
            return no_update
        try:
            p = ctx.triggered[0]["value"]["points"][0]
        except (TypeError, KeyError, IndexError):
            return no_update
        if not isinstance(p, dict):
            return no_update
        run = current().registry.get(trig.get("run"))
        if run is None or run.error:
            return no_update
        if trig.get("type") == "lk-topo":
            cd = p.get("customdata")
            if not (isinstance(cd, int) and not isinstance(cd, bool) or isinstance(cd, float) and cd.is_integer()):
                return no_update
            totals, _ = links_data(current(), run)
            hit = totals[totals["link"] == int(cd)]
            return f"{int(hit['src'].iloc[0])}-{int(hit['dst'].iloc[0])}" if len(hit) else no_update
        m = re.fullmatch(r"(\d+)→(\d+)", str(p.get("y", "")))
        return f"{m[1]}-{m[2]}" if m else no_update

    @app.callback(Output("lk-body", "children"), Input("runs", "value"), Input("lk-link", "data"),
                  prevent_initial_call=True)
    @checked(keys=KEYS, link=TEXT)
    def redraw(keys, link):
        st = current()
        picked = st.pick(keys)
        if not picked:
            return [error_box("pick at least one run")]
        # figures come from the cache: a click redraws only the highlight and the detail
        return body(st, picked, parse_link(link))
