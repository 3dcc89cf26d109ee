"""`emu compare RESULTS...`: summaries of several replays side by side."""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("compare", epilog="example: emu compare results/mars_16k-* results/ring_16k-*", help="print replay summaries side by side",
                       description="Print the summaries of several results folders side by side.")
    p.add_argument("results", nargs="+", help="results folders (or their summary.json)")
    p.add_argument("--json", action="store_true", help="print a JSON list of the summaries")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..replay.compare import Comparison, load_summary

    sums = [load_summary(p) for p in args.results]
    if args.json:
        print(json.dumps(sums, indent=2))
        return 0
    print(Comparison(sums, [Path(p).name for p in args.results]))
    return 0
