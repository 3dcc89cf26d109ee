"""The Dash app: Dash pages (``dashboard/pages``, one module per page with its callbacks) over
the registered results folders, sweep datasets and what-if runs; styles in ``assets/``.

``create_app(cfg)`` builds the app; ``make_server(...)`` a threaded werkzeug server (127.0.0.1
by default) that answers only requests whose Host header names the address it is bound to.
Requests name runs by registry key only; no request value is ever used as a path.
"""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path

import dash
from dash import ALL, Dash, Input, Output, State, dcc, html, no_update
from werkzeug.exceptions import BadRequest

from . import warm
from .pages import PAGES
from .state import AppState, Config, current
from .ui import ANY, CLICKS, KEYS, PATHNAME, SEARCH, checked

log = logging.getLogger("dashboard")
ASSETS = Path(__file__).parent / "assets"
__all__ = ["Config", "create_app", "make_server"]

# the last run selection, so a nav link keeps the runs; and the nav links carry it
SEL_SYNC = """function(v) { if (v === null || v === undefined) return window.dash_clientside.no_update;
  return Array.isArray(v) ? v : [v]; }"""
NAV_HREFS = """function(sel, paths) { const q = (sel && sel.length) ? '?runs=' + sel.map(encodeURIComponent).join(',') : '';
  return paths.map(p => p.path + ((p.path === '/' || p.path === '/sweep' || p.path === '/whatif') ? '' : q)); }"""


def create_app(cfg: Config) -> tuple[Dash, AppState]:
    st = AppState(cfg)
    warm.warm()  # a process's one-time costs, here rather than on the first page a user opens
    app = Dash(__name__, title="mcf-emu dashboard", suppress_callback_exceptions=True, update_title=None,
               use_pages=True, pages_folder="", assets_folder=str(ASSETS), serve_locally=True,
               routing_callback_inputs={"sel": State("sel", "data")})
    app.server.config["EMU_STATE"] = st
    app.server.register_error_handler(BadRequest, one_line)
    app.server.before_request(lambda: check_request(app))
    for page in PAGES:
        dash.register_page(page.__name__, path=page.PATH, name=page.NAME, order=PAGES.index(page), layout=page.layout,
                           title=f"{page.NAME} · mcf-emu")
        page.register(app)
    app.layout = html.Div([
        html.Div([
            html.Div(["mcf-emu", html.Small("dashboard")], className="brand"),
            html.Div(className="nav", children=[dcc.Link(p.NAME, href=p.PATH, id={"type": "nav", "path": p.PATH})
                                                for p in PAGES]),
        ], className="top"),
        dcc.Store(id="sel", storage_type="session"),
        dcc.Location(id="url"),
        dash.page_container,
    ])

    app.clientside_callback(SEL_SYNC, Output("sel", "data"), Input("runs", "value"))
    app.clientside_callback(NAV_HREFS, Output({"type": "nav", "path": ALL}, "href"), Input("sel", "data"),
                            State({"type": "nav", "path": ALL}, "id"))
    app.clientside_callback(
        """function(path, ids) { return ids.map(i => i.path === (path || '/') ? 'active' : ''); }""",
        Output({"type": "nav", "path": ALL}, "className"), Input("url", "pathname"), State({"type": "nav", "path": ALL}, "id"))

    @app.callback(Output("runs", "options"), Output("runs-version", "data"), Input("runs-poll", "n_intervals"),
                  State("runs-version", "data"), prevent_initial_call=True)
    @checked(_=CLICKS, seen=ANY)
    def refresh_runs(_, seen):
        s = current()
        if seen == s.registry.version:
            return no_update, no_update
        return [{"label": r.label, "value": r.key} for r in s.registry.runs()], s.registry.version

    return app, st


# Dash's own page-routing callback (URL to page layout) takes client state as well: checked
# here, before Dash reads it, with the checks every page callback uses.
ROUTING = {"_pages_location.pathname": PATHNAME, "_pages_location.search": SEARCH, "sel.data": KEYS}


def _dep_ok(d) -> bool:
    one = lambda x: isinstance(x, dict) and isinstance(x.get("property"), str)  # noqa: E731
    return one(d) or isinstance(d, list) and all(one(x) for x in d)


def check_request(app: Dash):
    """A callback request's shape (a known callback; its inputs and state as Dash sends them),
    before Dash reads it: a malformed one is answered 400 with one line, not 500."""
    import flask

    req = flask.request
    if req.method != "POST" or not req.path.endswith("/_dash-update-component"):
        return None
    body = req.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("output"), str) or \
            not all(isinstance(body.get(k, []), list) for k in ("inputs", "state", "changedPropIds")) or \
            not all(_dep_ok(d) for d in body.get("inputs", []) + body.get("state", [])):
        raise BadRequest("a callback request: an object with output, inputs and state expected")
    if body["output"] not in app.callback_map:
        raise BadRequest(f"no callback for {body['output'][:200]!r}")
    if "_pages_content" in body["output"]:
        for dep in body.get("inputs", []) + body.get("state", []):
            name = f"{dep.get('id')}.{dep.get('property')}" if isinstance(dep, dict) else None
            if name in ROUTING:
                ROUTING[name](dep.get("value"), name)
    return None


def one_line(exc: BadRequest):
    """A malformed request's answer: 400 and the one line that says what is wrong."""
    import flask

    return flask.Response(" ".join(str(exc.description).split()) + "\n", status=400, mimetype="text/plain")


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """Host header values the server answers (None: any, for a wildcard bind). A page that
    another name resolves to 127.0.0.1 (DNS rebinding) must not drive what-if runs."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        ip = None
    if ip is not None and ip.is_unspecified:
        return None
    names = {host}
    if ip is not None and ip.is_loopback or host == "localhost":
        names |= {"127.0.0.1", "localhost", "[::1]", "::1"}
    if ip is not None and ip.version == 6:
        names.add(f"[{host.strip('[]')}]")
    return {f"{n}:{port}" for n in names} | ({n for n in names} if port == 80 else set())


def make_server(app: Dash, host: str = "127.0.0.1", port: int = 8050):
    """A threaded werkzeug server for the app (port 0 picks a free one); call serve_forever()."""
    import flask
    from werkzeug.serving import make_server as mk

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = mk(host, port, app.server, threaded=True)
    hosts = allowed_hosts(host, server.server_port)

    @app.server.before_request
    def check_host():
        if hosts is not None and flask.request.host.lower() not in hosts:
            return flask.Response(f"Host {flask.request.host!r} is not this dashboard's address\n", status=403,
                                  mimetype="text/plain")
        return None

    return server
