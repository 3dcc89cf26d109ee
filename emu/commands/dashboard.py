"""`emu dashboard [RESULTS_DIR ...]`: the Dash app over results folders, a sweep and what-if runs."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("dashboard", epilog="example: emu dashboard results/", help="browse results folders in a Dash app (docs/dashboard.md)",
                       description="Serve the dashboard over results folders (or folders of them): link utilization, "
                                   "KV memory and replicas, timeline, frames, a sweep dataset, and what-if replays.")
    p.add_argument("results", nargs="*", help="results folders written by `emu replay --out`, or folders holding them")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050; 0 picks a free one)")
    p.add_argument("--sweep", metavar="PATH", action="append",
                   help="sweep dataset for the Sweep page: a sweep output folder, a .parquet file or a folder of them "
                        "(repeatable; sweep folders among RESULTS_DIR are found too)")
    p.add_argument("--traces", action="append", metavar="PATH",
                   help="trace file or folder the What-if page may replay (repeatable; default ./traces if it exists, "
                        "else the shipped traces)")
    p.add_argument("--whatif-dir", metavar="DIR",
                   help="folder the app writes what-if results into and lists at start (default: a new temporary folder)")
    p.set_defaults(func=run)


def check_address(host: str, port: int) -> None:
    """Resolve and bind ``host:port`` now, as werkzeug will (its address family, SO_REUSEADDR):
    werkzeug reports a name that does not resolve or a port in use on stderr and exits 1."""
    import socket

    if host.startswith("unix://"):
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        addr = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, socket.IPPROTO_TCP)[0][4]
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--host {host}: cannot resolve it ({getattr(exc, 'strerror', None) or exc})") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def default_traces() -> list[str]:
    """What-if traces without --traces: ./traces in a checkout, else the shipped traces the
    package installed (emu.shipped), so the page has traces wherever the dashboard starts."""
    if Path("traces").is_dir():
        return ["traces"]
    from ..shipped import traces

    return [str(f) for f in traces().values()]


def run(args) -> int:
    for r in args.results:
        if not Path(r).exists():
            raise ConfigError(f"{r}: no such results folder")
    for sw in args.sweep or []:
        if not Path(sw).exists():
            raise ConfigError(f"--sweep {sw}: no such file or folder")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: must be 0..65535")
    traces = args.traces if args.traces is not None else default_traces()
    for t in traces:
        if not Path(t).exists():
            raise ConfigError(f"--traces {t}: no such file or folder")
    check_address(args.host, args.port)  # before the app makes its what-if folder

    from dashboard.app import Config, create_app, make_server

    app, state = create_app(Config(results=args.results, sweep=args.sweep, traces=traces, whatif_dir=args.whatif_dir))
    try:
        server = make_server(app, args.host, args.port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    except SystemExit:  # werkzeug's own report of a bind failure (taken since check_address): ours is exit 2
        state.close()
        raise ConfigError(f"cannot listen on {args.host}:{args.port}") from None
    host = args.host if args.host not in ("0.0.0.0", "::") else "127.0.0.1"
    url = f"http://{'[' + host + ']' if ':' in host else host}:{server.server_port}/"
    runs = state.registry.runs()
    bad = [r for r in runs if r.error]
    print(f"dashboard: {len(runs)} run{'s' if len(runs) != 1 else ''}"
          + (f" ({len(bad)} unreadable)" if bad else "")
          + (f", sweeps {', '.join(str(p) for p in state.sweep_paths)}" if state.sweep_paths else "")
          + f", {len(state.traces)} trace{'s' if len(state.traces) != 1 else ''} for what-ifs in {state.whatif_dir}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"dashboard: listening on {args.host}: anyone who can reach it can start what-if replays", file=sys.stderr)
    print(f"dashboard: {url}  (Ctrl-C to stop)", flush=True)
    import signal

    def on_term(signum, frame):  # SIGTERM ends the server as Ctrl-C does: unfinished indexes removed
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, old)
        server.server_close()
        state.close()
    print("dashboard: stopped")
    return 0
