"""Memory and replicas: one node's KV memory (``?node=N``) in each picked run on one axis,
peak KV per node of every run against the owner-only layout, a heatmap per run on a shared
colour scale and time axis, and the replica factor over time and per chunk."""

from __future__ import annotations

import numpy as np
from dash import ALL, Input, Output, State, ctx, dcc, html, no_update

from .. import compare as C
from .. import data as D
from .. import figures as F
from ..state import current
from ..ui import (EVENTS, INT, KEYS, checked, error_box, fig_guard, graph, guarded, picked_runs, run_picker, span,
                  url_sync)

PATH = "/memory"
NAME = "Memory and replicas"


def n_nodes(run) -> int:
    return int(run.summary.get("nodes") or 0)


def peak_node(st, run) -> int:
    def make():
        nodes = run.nodes()
        if not len(nodes):
            return 0
        tot = nodes["owner_bytes"] + nodes["replica_bytes"] + nodes["transient_bytes"]
        return int(nodes["node"].iloc[int(np.argmax(tot.to_numpy()))])
    return st.figs.get((run.key, "peak-node"), make)


def owner_only(run):
    oo = run.summary.get("owner_only_node_kv_bytes")
    return [float(v) for v in oo] if isinstance(oo, list) and all(isinstance(v, (int, float)) for v in oo) else None


def node_fig(st, runs, node):
    if len(runs) == 1:
        run = runs[0]

        def make():
            lo, hi = span(run)
            t, cols = D.node_memory(run.nodes(), node, lo, hi)
            oo = owner_only(run)
            sched = run.schedule() or {}
            budget = sched.get("kv_budget_bytes") if isinstance(sched.get("kv_budget_bytes"), (int, float)) else None
            return F.memory_node_figure(t, cols, node, oo[node] if oo and 0 <= node < len(oo) else None, budget,
                                        run.summary.get("ttft_s"),
                                        title=f"KV memory of node {node}: owner, replica and transient bytes")
        return st.figs.get((run.key, "memnode", node), make)
    colors = C.run_colors(runs)
    items = []
    for r in runs:
        lo, hi = span(r)
        t, cols = D.node_memory(r.nodes(), node, lo, hi)
        oo = owner_only(r)
        items.append((r.key, colors[r.key], t, cols["total"], oo[node] if oo and 0 <= node < len(oo) else None))
    return F.memory_node_compare(items, node, title=f"KV memory of node {node} in each run (dashed: its owner-only "
                                                    "share at the end)")


def per_node_fig(st, runs):
    colors = C.run_colors(runs)
    items = []
    for r in runs:
        def make(r=r):
            nodes = r.nodes()
            tot = (nodes["owner_bytes"] + nodes["replica_bytes"] + nodes["transient_bytes"]).to_numpy(float)
            peak = np.zeros(n_nodes(r))
            node = nodes["node"].to_numpy()
            ok = (node >= 0) & (node < len(peak))
            np.maximum.at(peak, node[ok], tot[ok])
            return peak
        items.append((r.key, colors[r.key], st.figs.get((r.key, "peak-per-node"), make), owner_only(r)))
    return F.memory_per_node_figure(items)


def heat_data(st, run):
    def make():
        lo, hi = span(run)
        return D.memory_matrix(run.nodes(), n_nodes(run), lo, hi)
    return st.figs.get((run.key, "memheat-data"), make)


def replica_series(st, run):
    """The run's replica factor over time: (bin middles, time-weighted mean, max per bin)."""
    def make():
        lo, hi = span(run)
        return D.replica_factor_series(run.nodes(), lo, run.summary.get("ttft_s") or hi)
    return st.figs.get((run.key, "replica-series"), make)


def replica_fig(st, run):
    def make():
        nodes = run.nodes()
        mid, mean, mx = replica_series(st, run)
        spans = D.chunk_spans(run.ops(D.SPAN_COLUMNS))
        d = nodes.sort_values("t_s", kind="stable")
        meas = None
        if len(spans) and len(d):
            at = D.value_at(d["t_s"].to_numpy(float), d["replica_factor"].to_numpy(float), spans["end_s"].to_numpy(float))
            meas = (spans["chunk"].to_numpy(), at)
        return F.replica_figure(mid, mean, mx, spans, run.summary.get("ttft_s"), run.schedule(), meas,
                                title=f"{run.key}: replicas")
    return st.figs.get((run.key, "replica"), make)


def replica_compare_fig(st, runs):
    colors = C.run_colors(runs)
    items = []
    for r in runs:
        mid, mean, _ = replica_series(st, r)
        items.append((r.key, colors[r.key], mid, mean))
    return F.replica_compare(items)


def body(st, runs, node):
    bad = [r for r in runs if r.error]
    if bad:
        return [error_box(r.error) for r in bad]
    heats = [heat_data(st, r) for r in runs]
    zmax = max((float(np.nanmax(z)) for _, z in heats if z.size and np.isfinite(z).any()), default=0.0)
    xr = (0.0, max(span(r)[1] for r in runs))
    heat_figs = [html.Div(graph({"type": "mem-heat", "run": r.key},
                                st.figs.get((r.key, "memheat", zmax, xr), lambda r=r, h=h: F.memory_heatmap(
                                    h[0], h[1], zmax=zmax or None, x_range=xr,
                                    title=f"{r.key}: KV memory per node (click a row to show that node)"))),
                          className="panel") for r, h in zip(runs, heats)]
    lede = []
    for r in runs:
        s = r.summary
        lede.append(html.Li(f"{r.key}: peak {D.fmt_bytes(s.get('peak_node_kv_bytes'))} on one node; owner-only at the "
                            f"end: {'yes' if s.get('final_layout_owner_only') else 'no'}"))
    rep = [html.Div(graph("replica-cmp", fig_guard(replica_compare_fig)(st, runs)), className="panel")] if len(runs) > 1 else []
    rep += [html.Div(graph({"type": "replica-fig", "run": r.key}, fig_guard(replica_fig)(st, r)), className="panel")
            for r in runs]
    return [
        html.Ul(lede, className="muted"),
        html.Div([html.Div(graph("mem-node-fig", fig_guard(node_fig)(st, runs, node)), className="panel"),
                  html.Div(graph("mem-per-node", fig_guard(per_node_fig)(st, runs)), className="panel")], className="row"),
        html.P(f"Heatmaps share one colour scale (0 to {D.fmt_bytes(zmax)}) and one time axis." if len(runs) > 1 else "",
               className="muted"),
        html.Div(heat_figs, className="row"),
        *rep,
    ]


@guarded(NAME)
def layout(runs=None, node=None, sel=None, **_):
    st = current()
    picked, instead = picked_runs(st, runs or sel, NAME)
    if instead is not None:
        return instead
    n = max(n_nodes(r) for r in picked)
    try:
        node = int(node)
    except (TypeError, ValueError):
        node = None
    if node is None or not 0 <= node < n:
        node = peak_node(st, picked[0])
    return html.Div([
        html.H2(NAME),
        run_picker(st, picked, asked=runs or sel),
        html.P("KV bytes a node holds over time (owner blocks, replicas pushed to it, transient copies held for one use) "
               "against its owner-only share at the end (dashed: the decode-ready layout). With several runs picked, "
               "the node's memory of each run is drawn on one axis and the heatmaps share their colour scale.",
               className="lede"),
        html.Div([html.Label(["Node ", dcc.Dropdown(id="mem-node", options=[{"label": f"node {i}", "value": i}
                                                                             for i in range(n)],
                                                    value=node, clearable=False, style={"width": "160px"})],
                             style={"display": "flex", "alignItems": "center", "gap": "8px", "fontSize": "13px"})],
                 className="filters"),
        dcc.Store(id="mem-url"),
        html.Div(body(st, picked, node), id="mem-body"),
    ], className="page")


def register(app) -> None:
    url_sync(app, "mem-url", ["runs", "node"], [Input("runs", "value"), Input("mem-node", "value")])

    @app.callback(Output("mem-node-fig", "figure"), Input("mem-node", "value"), State("runs", "value"),
                  prevent_initial_call=True)
    @checked(node=INT, keys=KEYS)
    def show_node(node, keys):
        st = current()
        picked = [r for r in st.pick(keys) if not r.error]
        if not picked or node is None or not 0 <= node < max(n_nodes(r) for r in picked):
            return no_update
        return fig_guard(node_fig)(st, picked, node)

    @app.callback(Output("mem-body", "children"), Output("mem-node", "options"), Input("runs", "value"),
                  State("mem-node", "value"), prevent_initial_call=True)
    @checked(keys=KEYS, node=INT)
    def redraw(keys, node):
        st = current()
        picked = st.pick(keys)
        if not picked:
            return [error_box("pick at least one run")], no_update
        n = max(n_nodes(r) for r in picked)
        node = node if isinstance(node, int) and 0 <= node < n else 0
        return body(st, picked, node), [{"label": f"node {i}", "value": i} for i in range(n)]

    @app.callback(Output("mem-node", "value"), Input({"type": "mem-heat", "run": ALL}, "clickData"),
                  prevent_initial_call=True)
    @checked(_=EVENTS)
    def heat_node(_):
        try:
            return int(str(ctx.triggered[0]["value"]["points"][0]["y"]).split()[-1])
        except (TypeError, KeyError, IndexError, ValueError, AttributeError):
            return no_update
