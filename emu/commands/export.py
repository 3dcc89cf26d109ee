"""`emu export perfetto RESULTS -o run.json`: a results folder's timeline for Perfetto UI / chrome://tracing."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("export", help="export a results folder to another tool's format (perfetto)",
                       description="Export a results folder: `perfetto` writes Chrome trace-event JSON "
                                   "(ui.perfetto.dev, chrome://tracing).",
                       epilog="example: emu export perfetto results/mars_16k -o mars.json")
    kinds = p.add_subparsers(dest="format", metavar="FORMAT")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    pf = kinds.add_parser("perfetto", help="the timeline as Chrome trace-event JSON",
                          description="One process per board (compute, NIC send/receive/reduce lanes), a slice per op, "
                                      "flow arrows from each send to its deliveries, counters for KV memory per "
                                      "node and link utilization (docs/api.md).",
                          epilog="example: emu export perfetto results/mars_16k -o mars.json --from 1s --to 1.5s "
                                 "--nodes 0-3")
    pf.add_argument("results", help="results folder (from emu replay)")
    pf.add_argument("-o", "--output", required=True, help="JSON file to write (a file name: a path ending in / is refused)")
    pf.add_argument("--from", dest="t_from", metavar="T", help="keep from this time on, e.g. 1.5s or 200ms")
    pf.add_argument("--to", dest="t_to", metavar="T", help="keep up to this time")
    pf.add_argument("--nodes", metavar="LIST", help="keep these boards, e.g. 0,1,5 or 0-3")
    pf.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    pf.set_defaults(func=run)


def run(args) -> int:
    from ..export.perfetto import write_perfetto
    from ..units import parse_time

    start = parse_time(args.t_from, "--from") if args.t_from else None
    end = parse_time(args.t_to, "--to") if args.t_to else None
    n = write_perfetto(args.results, args.output, start_ps=start, end_ps=end, nodes=args.nodes, flag="--")
    if args.json:
        print(json.dumps({"path": args.output, "bytes": n}))
    else:
        print(f"wrote {args.output}: {n / 2**20:.1f} MiB ({n:,} bytes); open it in ui.perfetto.dev or chrome://tracing")
    return 0
