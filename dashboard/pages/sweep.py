"""Sweep: TTFT and bytes against nodes, prompt length and chunk size, one line per sweep,
scheme and setting of every other varying parameter; the table view (scheme x nodes, or any
parameter) with CSV download."""

from __future__ import annotations

from dash import ALL, Input, Output, State, dcc, html, no_update

from emu.csvtext import to_csv

from ..state import current
from ..sweep import (NOT_APPLICABLE, TABLE_METRICS, apply_filters, filter_label, filter_values, params_of, summary_line,
                     sweep_axes, sweep_figure, sweep_lines, sweep_table)
from ..ui import CLICKS, IDS, SCALARS, TEXT, TEXTS, checked, error_box, graph, guarded, note_box

PATH = "/sweep"
NAME = "Sweep"


def panels(df):
    if not len(df):
        return [note_box("no points pass these filters")]
    params = params_of(df)  # once for the page's nine figures
    metrics = [("ttft_s", "TTFT"), ("wire_bytes", "Bytes on the wire")] + \
        ([("kv_bytes", "KV payload bytes")] if "kv_bytes" in df.columns else [])
    lines = sweep_lines(df, [m for m, _ in metrics], params)  # and their lines, per axis
    xs = sweep_axes(df, params=params, lines=lines)
    if not xs:
        return [note_box("No slice of this dataset varies nodes, prompt length or chunk size alone, so there is "
                         "nothing to draw against them; the table below lists every point.")]
    return [html.Div([html.Div(graph(f"sw-{m.replace('_', '-')}-{x}", sweep_figure(
        df, m, x, None, f"{title} against {t}", params, lines[x][m])), className="panel") for x, t in xs],
        className="row") for m, title in metrics]


def table_view(tab):
    if not len(tab):
        return html.Div("nothing to tabulate", className="muted")
    cols = list(tab.columns)

    def cell(v):
        if isinstance(v, float):
            return "-" if v != v else f"{v:.4g}"
        return str(v)
    return html.Table([html.Thead(html.Tr([html.Th(c, className="p" if i < _n_params(tab) else "")
                                           for i, c in enumerate(cols)])),
                       html.Tbody([html.Tr([html.Td(cell(v), className="p" if i < _n_params(tab) else "")
                                            for i, v in enumerate(row)]) for row in tab.itertuples(index=False)])],
                      className="sweep", id="sw-table-el")


def _n_params(tab) -> int:
    return sum(1 for c in tab.columns if " @ " not in c)


def _filtered(st, values, ids):
    return apply_filters(st.sweep_df, {i.get("col"): v for i, v in zip(ids or [], values or [])})


@guarded(NAME)
def layout(sweep=None, **_):
    st = current()
    head = [html.H2(NAME)]
    if not st.sweep_paths:
        return html.Div(head + [note_box(html.B("No sweep dataset given. "), "Start the dashboard with ",
                                         html.Code("emu dashboard --sweep PATH"), " or give a sweep output folder "
                                         "among the results (", html.Code("emu dashboard results/*"), "), as written by ",
                                         html.Code("emu sweep"), ", to see TTFT and bytes against nodes, prompt "
                                         "length and chunk size for each scheme.")], className="page")
    if st.sweep_error:
        return html.Div(head + [error_box(st.sweep_error)], className="page")
    df = st.sweep_df
    fv = {}
    names = sorted(df["sweep"].unique().tolist())
    if len(names) > 1:
        fv["sweep"] = names
    fv.update(filter_values(df, params_of(df)))
    controls = []
    for c, vals in fv.items():
        init = sweep if c == "sweep" and sweep in names else "all"
        controls.append(html.Label([c.replace("_", " "), dcc.Dropdown(
            id={"type": "sw-filter", "col": c}, options=[{"label": "all", "value": "all"}] +
            [{"label": filter_label(c, v), "value": str(v)} for v in vals], value=init, clearable=False,
            style={"minWidth": "180px"})]))
    shown = df if not (sweep in names and len(names) > 1) else df[df["sweep"] == sweep]
    desc = st.sweep_meta.get("description")
    pcols = [c for c in ("nodes", "seq", "chunk", "scheme", "topology", "link_rate", "loss") if c in df.columns]
    return html.Div(head + [
        html.P([f"{desc}. " if desc else "",
                "Each line is one slice of a sweep: a scheme's points that differ only in the panel's parameter (the "
                "legend names the sweep and what every other varying parameter was held at; points are never merged "
                "across a parameter). ", summary_line(df, st.sweep_meta)], className="lede"),
        html.Div(controls, className="filters") if controls else None,
        html.Div(id="sw-figs", children=panels(shown)),
        html.Div([
            html.H3("Table"),
            html.Div([html.Label(["columns", dcc.Dropdown(id="sw-col", options=[{"label": c, "value": c} for c in pcols],
                                                          value="nodes" if "nodes" in pcols else pcols[0],
                                                          clearable=False, style={"width": "160px"})]),
                      html.Label(["values", dcc.Dropdown(id="sw-metrics", options=[
                          {"label": v[0], "value": k} for k, v in TABLE_METRICS.items() if k in df.columns],
                          value=[m for m in ("ttft_s", "wire_bytes") if m in df.columns], multi=True,
                          style={"minWidth": "320px"})]),
                      html.Button("Download CSV", id="sw-csv-btn"), dcc.Download(id="sw-csv")],
                     className="filters"),
            html.Div(table_view(sweep_table(shown, "nodes" if "nodes" in pcols else pcols[0])), id="sw-table",
                     className="tablewrap"),
        ], className="panel"),
    ], className="page")


def register(app) -> None:
    @app.callback(Output("sw-figs", "children"), Input({"type": "sw-filter", "col": ALL}, "value"),
                  State({"type": "sw-filter", "col": ALL}, "id"), prevent_initial_call=True)
    @checked(values=SCALARS, ids=IDS)
    def sweep_filter(values, ids):
        st = current()
        if st.sweep_df is None:
            return no_update
        return panels(_filtered(st, values, ids))

    @app.callback(Output("sw-table", "children"), Input({"type": "sw-filter", "col": ALL}, "value"),
                  Input("sw-col", "value"), Input("sw-metrics", "value"),
                  State({"type": "sw-filter", "col": ALL}, "id"), prevent_initial_call=True)
    @checked(values=SCALARS, col=TEXT, metrics=TEXTS, ids=IDS)
    def table(values, col, metrics, ids):
        st = current()
        if st.sweep_df is None or not isinstance(col, str):
            return no_update
        return table_view(sweep_table(_filtered(st, values, ids), col, tuple(m for m in metrics or [] if isinstance(m, str))))

    @app.callback(Output("sw-csv", "data"), Input("sw-csv-btn", "n_clicks"), State({"type": "sw-filter", "col": ALL}, "value"),
                  State("sw-col", "value"), State("sw-metrics", "value"), State({"type": "sw-filter", "col": ALL}, "id"),
                  prevent_initial_call=True)
    @checked(n=CLICKS, values=SCALARS, col=TEXT, metrics=TEXTS, ids=IDS)
    def csv(n, values, col, metrics, ids):
        st = current()
        if not n or st.sweep_df is None or not isinstance(col, str):
            return no_update
        tab = sweep_table(_filtered(st, values, ids), col, tuple(m for m in metrics or [] if isinstance(m, str)))
        # a parameter the row's scheme does not read is blank in the CSV ("-" on the page)
        tab = tab.replace({NOT_APPLICABLE: ""})
        return dict(content=to_csv(tab), filename="sweep-table.csv", type="text/csv")
