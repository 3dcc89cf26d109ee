"""Overview: one card per run with the parameters that tell the runs apart, TTFT and bytes
across runs, and each what-if against its base run."""

from __future__ import annotations

from urllib.parse import quote

from dash import dcc, html

from emu.compare import diff, judgement

from .. import compare as C
from .. import data as D
from .. import figures as F
from ..state import current
from ..ui import error_box, graph, guarded, note_box

PATH = "/"
NAME = "Overview"


def run_card(run, differ: set[str], runs):
    s = run.summary
    if run.error:
        return html.Div([html.H3(run.key), html.Div(str(run.path.name), className="sub"), error_box(run.error)],
                        className="card", style={"borderTopColor": "#d1495b"})
    p = C.params(run)
    shown = ["scheme", "nodes", "prompt", "chunk", "topology"] + [k for k in p if k in differ and k not in
                                                                  ("scheme", "nodes", "prompt", "chunk", "topology")]
    prow = [html.Tr([html.Td(k), html.Td(html.Span(p[k], className="changed") if k in differ else p[k], className="v")])
            for k in shown]
    rows = [("TTFT", D.fmt_s(s.get("ttft_s"))),
            ("decode", f"{s['decode_tokens_per_s']:.2f} tokens/s" if s.get("decode_tokens_per_s") else "-"),
            ("on the wire", D.fmt_bytes(s.get("wire_bytes"))), ("KV payload", D.fmt_bytes(s.get("kv_bytes"))),
            ("peak KV / node", D.fmt_bytes(s.get("peak_node_kv_bytes"))),
            ("dropped frames", f"{s.get('dropped_frames', 0):,}")]
    tags = [html.Span(run.origin, className="tag")]
    if s.get("final_layout_owner_only"):
        tags.append(html.Span("owner-only at end", className="tag ok"))
    elif "final_layout_owner_only" in s:
        tags.append(html.Span("replicas left", className="tag warn"))
    if s.get("incomplete_ops"):
        tags.append(html.Span(f"{s['incomplete_ops']} ops incomplete", className="tag warn"))
    base = C.base_of(run, runs)
    return html.Div([
        html.H3(run.key), html.Div([f"{p['trace']} · {p['model']} on {p['hardware']}"], className="sub"),
        html.Div(f"what-if: {run.note}" + (f" (base: {base.key})" if base else ""), className="sub") if run.note else None,
        html.Div(tags),
        html.Table([html.Tbody(prow)], className="params"),
        html.Table([html.Tbody([html.Tr([html.Td(k), html.Td(v, className="v")]) for k, v in rows])]),
        dcc.Link(html.Button("Show this run", className="secondary"), href=f"/links?runs={quote(run.key)}"),
        " ",
        dcc.Link(html.Button("Compare with its base", className="secondary"),
                 href=f"/links?runs={quote(base.key)},{quote(run.key)}") if base else None,
    ], className="card", style={"borderTopColor": F.scheme_color(s.get("scheme"))}, **{"data-run": run.key})


def diff_table(base, run):
    rows, same = diff(base.summary, run.summary)
    head = html.Tr([html.Th("metric"), html.Th(base.key), html.Th(run.key), html.Th("change"), html.Th("")])
    body = []
    for r in rows:
        d, pct, u = r["delta"], r["pct"], r["unit"]
        change = "-" if d is None else (("+" if d > 0 else "−") + C.fmt_metric(abs(d), u))
        body.append(html.Tr([html.Td(r["metric"]), html.Td(C.fmt_metric(r["base"], u)), html.Td(C.fmt_metric(r["run"], u)),
                             html.Td(change, className=judgement(r["key"], d)), html.Td(C.fmt_pct(pct))]))
    return html.Div([
        html.H3(f"{run.key} against {base.key}: {run.note or 'what-if'}"),
        html.Table([html.Thead(head), html.Tbody(body)], className="diff", id=f"diff-{run.key}") if body else
        html.Div("no metric changed", className="muted"),
        html.Div(f"unchanged: {', '.join(same)}" if same else "", className="muted"),
    ], className="panel")


@guarded(NAME)
def layout(**_):
    st = current()
    runs = st.registry.runs()
    if not runs:
        return html.Div([html.H2("Overview"), note_box(
            "No results folders yet. Start with ", html.Code("emu dashboard RESULTS_DIR ..."),
            " or make one on the What-if page.")], className="page")
    ok = [r for r in runs if not r.error]
    differ = C.differing(runs)
    f1, f2 = F.overview_figures(runs) if ok else (None, None)
    diffs = [(C.base_of(r, runs), r) for r in runs]
    diffs = [diff_table(b, r) for b, r in diffs if b is not None]
    return html.Div([
        html.H2("Overview"),
        html.P([f"{len(runs)} run{'s' if len(runs) != 1 else ''}: one card each"
                + (f"; highlighted, what differs between them ({', '.join(sorted(differ))})" if differ else "")
                + ". TTFT is when the LM head of the last prompt token finished; wire bytes count every hop with Ethernet "
                "overhead, KV payload counts each delivery once."], className="lede"),
        html.Div([run_card(r, differ, runs) for r in runs], className="cards", id="cards"),
        html.Div([html.Div(graph("ov-ttft", f1), className="panel"), html.Div(graph("ov-bytes", f2), className="panel")],
                 className="row") if ok else None,
        html.Div([html.H2("What-if runs against their base"), *diffs], id="diffs") if diffs else None,
    ], className="page")


def register(app) -> None:
    pass
