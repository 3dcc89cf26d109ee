"""Pieces every page uses: message boxes, graphs, the run picker, guards that turn a bad
results folder into a message, and the script that keeps a page's selection in its URL."""

from __future__ import annotations

import logging
import traceback

from dash import dcc, html

from . import data as D
from . import figures as F

log = logging.getLogger("dashboard")

GRAPH_CONFIG = {"displaylogo": False, "responsive": True}


def error_box(msg: str):
    return html.Div([html.B("Cannot show this: "), msg], className="error")


def note_box(*children):
    return html.Div(list(children), className="note")


def graph(id_, fig, config=None, **kw):
    return dcc.Graph(id=id_, figure=fig, config=dict(GRAPH_CONFIG, **(config or {})), **kw)


def guarded(title: str):
    """A page layout ``fn(**query)``: a results problem becomes a message under the page's
    title, anything else a short one (the traceback goes to the server log, never the page)."""
    def deco(fn):
        def wrap(*a, **kw):
            try:
                return fn(*a, **kw)
            except D.ResultsError as exc:
                return html.Div([html.H2(title), error_box(str(exc))], className="page")
            except Exception as exc:  # noqa: BLE001 - the page must say something, not fail blank
                log.error("page failed: %s", traceback.format_exc())
                return html.Div([html.H2(title), error_box(f"{type(exc).__name__}: {exc}" if str(exc) else
                                                           type(exc).__name__)], className="page")
        wrap.__name__ = fn.__name__
        return wrap
    return deco


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


def run_picker(st, selected, id_="runs", multi=True):
    """The runs of this page (pick two or more to compare); its value is the URL's ``runs``."""
    runs = st.registry.runs()
    return html.Div(["runs", dcc.Dropdown(id=id_, options=[{"label": r.label, "value": r.key} for r in runs],
                                          value=[r.key for r in selected] if multi else (selected[0].key if selected else None),
                                          multi=multi, clearable=False, searchable=True, optionHeight=36,
                                          placeholder="pick one run, or several to compare"),
                     dcc.Interval(id="runs-poll", interval=1500), dcc.Store(id="runs-version", data=st.registry.version)],
                    className="runbar")


def no_runs(st, title):
    return html.Div([html.H2(title), note_box(
        "Pick a run in the list above." if st.registry.runs() else
        "No runs: start the dashboard with results folders, or make one on the What-if page.")], className="page")


def picked_runs(st, keys, title):
    """The runs a page's URL picks, or the page to show instead (none picked, or unreadable)."""
    picked = st.pick(keys)
    if not picked:
        return None, no_runs(st, title)
    bad = [r for r in picked if r.error]
    if bad:
        return None, html.Div([html.H2(title), run_picker(st, picked), *[error_box(r.error) for r in bad]],
                              className="page")
    return picked, None


def span(run) -> tuple[float, float]:
    s = run.summary
    end = s.get("sim_end_s") or s.get("ttft_s") or 1.0
    return 0.0, float(end)


# The page's selection into its URL (history.replaceState: no navigation, no re-render), so a
# view can be reloaded, bookmarked and shared. Arguments: the query names, then their values.
URL_SYNC = """function() {
  const names = %s; const q = new URLSearchParams(window.location.search);
  for (let i = 0; i < names.length; i++) {
    let v = arguments[i];
    if (Array.isArray(v)) v = v.join(',');
    if (v === null || v === undefined || v === '') q.delete(names[i]); else q.set(names[i], String(v));
  }
  const s = q.toString().replace(/%%2C/g, ',');
  const url = window.location.pathname + (s ? '?' + s : '');
  if (url !== window.location.pathname + window.location.search) window.history.replaceState(null, '', url);
  return s;
}"""


def url_sync(app, store_id: str, names: list[str], inputs) -> None:
    """Keep ``names`` in the URL's query from ``inputs`` (Input objects, one per name)."""
    from dash import Output

    app.clientside_callback(URL_SYNC % ("[" + ",".join(f"'{n}'" for n in names) + "]"), Output(store_id, "data"),
                            *inputs)
