"""What-if: replay a trace with other links, loss, a failure or another topology, in a child
process; the finished run joins the others and the Overview compares it with its base."""

from __future__ import annotations

from dash import Input, Output, State, ctx, dcc, html, no_update
from werkzeug.exceptions import BadRequest

from .. import data as D
from ..state import current
from ..ui import ANY, CLICKS, TEXT, checked, error_box, guarded, note_box
from ..whatif import TOPOLOGIES, FormTypeError, WhatIfError

PATH = "/whatif"
NAME = "What-if"


@guarded(NAME)
def layout(**_):
    st = current()
    traces = [{"label": k, "value": k} for k in st.traces]
    default_trace = None
    for r in st.registry.runs():  # preselect the trace of the first run when the server has it
        t = r.summary.get("trace") if not r.error else None
        if t in st.traces:
            default_trace = t
            break
    if default_trace is None and traces:
        default_trace = traces[0]["value"]
    return html.Div([
        html.H2(NAME),
        html.P(["Replay a trace with different links, loss, a failure or another topology. The replay runs as its own "
                "process (", html.Code("python -m emu replay"), ") and writes a results folder into ",
                html.Code(str(st.whatif_dir)), "; when it finishes the run joins the others, and the Overview shows "
                "what changed against its base run."], className="lede"),
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
    ], className="page")


def jobs_table(st):
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
        rows.append(html.Tr([html.Td(r.key), html.Td(str(s.get("trace", ""))), html.Td(r.note or "(earlier session)"),
                             html.Td("done"), html.Td(D.fmt_s(s.get("ttft_s"))), html.Td(D.fmt_bytes(s.get("wire_bytes"))),
                             html.Td(""), html.Td(r.error or "")]))
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in ("run", "trace", "change", "state", "TTFT", "wire", "took", "")])),
                       html.Tbody(rows)], className="jobs", id="wi-jobs-table")


def register(app) -> None:
    @app.callback(Output("wi-msg", "children"), Input("wi-run", "n_clicks"), Input("wi-cancel", "n_clicks"),
                  State("wi-trace", "value"), State("wi-topo", "value"), State("wi-shape", "value"), State("wi-rate", "value"),
                  State("wi-lat", "value"), State("wi-loss", "value"), State("wi-fail", "value"), prevent_initial_call=True)
    @checked(run_clicks=CLICKS, cancel_clicks=CLICKS, trace=TEXT, topo=TEXT, shape=TEXT, rate=TEXT, lat=TEXT, loss=TEXT,
             fail=TEXT)
    def submit(run_clicks, cancel_clicks, trace, topo, shape, rate, lat, loss, fail):
        st = current()
        if ctx.triggered_id == "wi-cancel":
            j = st.whatifs.current()
            if j:
                st.whatifs.cancel(j.id)
                return note_box(f"cancelling what-if {j.id}")
            return no_update
        if not run_clicks:
            return no_update
        if trace is not None and not isinstance(trace, str):
            raise BadRequest("trace: a text value expected")
        try:
            job = st.whatifs.submit(trace, {"topology": topo, "shape": shape, "rate": rate, "latency": lat, "loss": loss,
                                            "failure": fail})
        except FormTypeError as exc:  # not something the form sends: a malformed request
            raise BadRequest(str(exc)) from None
        except WhatIfError as exc:
            return error_box(str(exc))
        return note_box(f"started what-if {job.id}: {job.trace_key}, {job.desc}")

    @app.callback(Output("wi-bar-fill", "style"), Output("wi-status", "children"), Output("wi-jobs", "children"),
                  Output("wi-run", "disabled"), Output("wi-sig", "data"), Input("wi-poll", "n_intervals"),
                  State("wi-sig", "data"))
    @checked(_=CLICKS, seen=ANY)
    def poll(_, seen):
        st = current()
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
