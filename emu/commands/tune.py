"""`emu tune`: each scheme at its best configuration on one cluster, and MARS's attribution."""

from __future__ import annotations

import json
import sys

from .. import validate as V


def register(sub) -> None:
    from ..tuning import SCHEMES

    p = sub.add_parser(
        "tune", help="find each scheme's best configuration on a cluster by replaying pruned candidates",
        description="For one cluster (prompt length, boards, model, hardware, topology), search each scheme's "
                    "options (chunk, lookahead, MARS alpha, USP degree) by replaying candidates, skip those whose "
                    "compute bound cannot beat the best found, and print each scheme at its best with its "
                    "configuration, its compute bound and how far it is from it; then MARS with replication "
                    "and lookahead turned off (docs/workloads.md, 'Each scheme at its best').",
        epilog="example: emu tune --seq 16384 --nodes 16\n         emu tune --seq 4096 --nodes 16 --schemes mars,zigzag --json")
    p.add_argument("--seq", default="16384", help="prompt length in tokens (default 16384)")
    p.add_argument("--nodes", default="16", help="boards (default 16)")
    p.add_argument("--model", default="qwen2.5-1.5b", help="model profile name or file (default qwen2.5-1.5b)")
    p.add_argument("--hw", default="kr260", help="hardware profile name or file (default kr260)")
    p.add_argument("--topology", default=None, help="topology (emu.topology spec); default: the hardware's for the node count")
    p.add_argument("--kv-budget", default=None, metavar="BYTES|Nx", help="S_node (default: the hardware profile's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a profile field, e.g. hw.link_rate=10Gbps (repeatable)")
    p.add_argument("--schemes", default=",".join(SCHEMES), help=f"comma-separated schemes (default {','.join(SCHEMES)})")
    p.add_argument("--no-attribution", action="store_true", help="skip MARS's attribution replays")
    p.add_argument("--scheduler", metavar="ADDRESS", help="replay candidates on this Dask scheduler (emu sweep's)")
    p.add_argument("--workers", default="1", help="local process pool size (default 1: in this process)")
    p.add_argument("--quiet", action="store_true", help="do not print each candidate on stderr as it finishes")
    p.add_argument("--json", action="store_true", help="print the search and its results as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..tuning import Cluster, format_table, tune

    seq, nodes = V.integer_text(args.seq, "--seq", lo=1), V.integer_text(args.nodes, "--nodes", lo=2)
    workers = V.integer_text(args.workers, "--workers", lo=1)
    cl = Cluster(seq=seq, nodes=nodes, model=args.model, hw=args.hw, topology=args.topology,
                 overrides=list(args.overrides), kv_budget=args.kv_budget)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    log = None if args.quiet else (lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    res = tune(cl, schemes, attribution=not args.no_attribution, scheduler=args.scheduler, workers=workers, log=log)
    print(json.dumps(res, indent=2, default=str) if args.json else format_table(res))
    return 0
