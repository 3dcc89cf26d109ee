"""Pieces every page uses: message boxes, graphs, the run picker, guards that turn a bad
results folder into a message, the checks of what a callback receives from the browser, and
the script that keeps a page's selection in its URL."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import traceback

from dash import dcc, html
from werkzeug.exceptions import BadRequest

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


def missing_runs(st, asked, shown):
    """A note naming the runs a URL asks for that the dashboard does not have (a bookmark of a
    run since renamed or removed), and what is shown instead; None when every one is there."""
    if isinstance(asked, str):
        asked = asked.split(",")
    if not isinstance(asked, list):
        return None
    gone = [k for k in dict.fromkeys(asked) if isinstance(k, str) and k and st.registry.get(k) is None]
    if not gone:
        return None
    instead = ", ".join(r.key for r in shown)
    return html.Div([html.B(f"No run named {', '.join(gone)}. " if len(gone) == 1 else
                            f"No runs named {', '.join(gone)}. "),
                     "The link names runs this dashboard does not have; " +
                     (f"showing {instead}{' instead' if all(r.key not in asked for r in shown) else ''}."
                      if instead else "pick a run in the list above.")],
                    className="note missing", id="missing-runs")


def run_picker(st, selected, id_="runs", multi=True, asked=None):
    """The runs of this page (pick two or more to compare); its value is the URL's ``runs``.
    ``asked``: the runs the URL named, to say which of them are missing."""
    runs = st.registry.runs()
    bar = html.Div(["runs", dcc.Dropdown(id=id_, options=[{"label": r.label, "value": r.key} for r in runs],
                                          value=[r.key for r in selected] if multi else (selected[0].key if selected else None),
                                          multi=multi, clearable=False, searchable=True, optionHeight=36,
                                          placeholder="pick one run, or several to compare"),
                     dcc.Interval(id="runs-poll", interval=1500), dcc.Store(id="runs-version", data=st.registry.version)],
                    className="runbar")
    note = missing_runs(st, asked, selected)
    return bar if note is None else html.Div([note, bar])


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
        return None, html.Div([html.H2(title), run_picker(st, picked, asked=keys), *[error_box(r.error) for r in bad]],
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


# -- what a callback receives from the browser ---------------------------------------------
# Every value a callback takes is client state: a crafted request can send any JSON in its
# place. ``checked`` tests each argument against its kind before the callback runs; a value
# the page never sends is answered 400 with one line (werkzeug logs no traceback for it).

MAX_TEXT = 4096
MAX_ITEMS = 1024


def _bad(name: str, want: str, v) -> BadRequest:
    return BadRequest(f"{name}: {want} expected, got {type(v).__name__}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 2**53


def _list(name, v, want, item) -> list:
    if not isinstance(v, list) or len(v) > MAX_ITEMS or not all(item(x) for x in v):
        raise _bad(name, want, v)
    return v


def _text(v) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def _scalar(v) -> bool:
    return v is None or _text(v) or _is_num(v) or isinstance(v, bool)


def _opt(test, want):
    def check(v, name):
        if v is None or test(v):
            return v
        raise _bad(name, want, v)
    return check


CLICKS = _opt(lambda v: _is_int(v) and v >= 0, "a click count")
INT = _opt(_is_int, "an integer")
NUMBER = _opt(_is_num, "a finite number")
TEXT = _opt(_text, f"a text of at most {MAX_TEXT} characters")
BOOL = _opt(lambda v: isinstance(v, bool), "true or false")
PATHNAME = _opt(lambda v: _text(v) and v.startswith("/"), "a path starting with /")
SEARCH = _opt(lambda v: _text(v) and (v == "" or v.startswith("?")), "a query string starting with ?")
EVENT = _opt(lambda v: isinstance(v, dict), "plotly event data (an object)")


KEY = _opt(_text, "a run key")  # a picker of one run


def KEYS(v, name):
    """Run keys: a list of them, one, or none."""
    if v is None or _text(v):
        return v
    return _list(name, v, "a list of run keys", _text)


def INTS(v, name):
    return v if v is None else _list(name, v, "a list of integers", _is_int)


def TEXTS(v, name):
    return v if v is None else _list(name, v, "a list of texts", _text)


def SCALARS(v, name):
    return _list(name, v, "a list of texts or numbers", _scalar)


def EVENTS(v, name):
    return _list(name, v, "a list of plotly event data", lambda x: x is None or isinstance(x, dict))


def IDS(v, name):
    """A pattern-matching State's ids: objects of text and numbers."""
    return _list(name, v, "a list of component ids", lambda x: isinstance(x, dict) and all(
        _text(k) and (_text(i) or _is_num(i)) for k, i in x.items()))


def WINDOW(v, name):
    """A time window [from, to] in seconds (finite, from < to), or none."""
    if v is None:
        return None
    if not (isinstance(v, list) and len(v) == 2 and all(_is_num(x) for x in v) and v[0] < v[1]):
        raise BadRequest(f"{name}: a time window [from, to] of finite seconds with from < to expected, got "
                         f"{str(v)[:80] if isinstance(v, (list, dict)) else type(v).__name__}")
    return [float(v[0]), float(v[1])]


def window(v) -> list[float] | None:
    """``v`` as a time window WINDOW accepts, or None: for a page's own state (a URL's from/to)."""
    try:
        return WINDOW(v, "window")
    except BadRequest:
        return None


def ANY(v, name):
    """A value only compared with what the server sent (a version, a signature)."""
    return v


def _dep_names(n: int) -> list[str] | None:
    """``id.property`` of the request's Inputs and States, in the callback's argument order."""
    from dash import callback_context as cc

    try:
        deps = list(cc.inputs_list) + list(cc.states_list)
    except Exception:  # noqa: BLE001 - called outside a request (a test calling the function)
        return None
    out = []
    for d in deps:
        d = d[0] if isinstance(d, list) and d else d
        i = d.get("id") if isinstance(d, dict) else None
        out.append(f"{i if isinstance(i, str) else json.dumps(i, sort_keys=True)}.{d.get('property')}"
                   if i is not None else None)
    return out if len(out) == n else None


def checked(**kinds):
    """Check a callback's arguments by name (``CLICKS``, ``KEYS``, ``WINDOW``, ...) before it
    runs; the message names the component (``tl-range.data: ...``). Every argument must be
    named: a new Input without a check is an error when the app starts."""
    def deco(fn):
        names = list(inspect.signature(fn).parameters)
        missing = [n for n in names if n not in kinds]
        if missing or set(kinds) - set(names):
            raise TypeError(f"{fn.__name__}: checks for {missing or sorted(set(kinds) - set(names))}")

        @functools.wraps(fn)
        def wrap(*args):
            shown = _dep_names(len(args)) or names
            return fn(*(kinds[n](v, s or n) for n, s, v in zip(names, shown, args)))
        return wrap
    return deco
