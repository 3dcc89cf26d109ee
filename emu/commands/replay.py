"""`emu replay TRACE`: run a trace on the emulated cluster and report what it cost."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("replay", help="replay a trace on the emulated cluster",
                       description="Replay a trace: compute engines, NICs and links; print TTFT, decode rate, "
                                   "bytes, drops and KV memory, and write a results folder.",
                       epilog="example: emu replay traces/mars_16k.json --topology torus:4x4 --loss 0.001 "
                              "--capture cap.pcap --out results/mars-loss")
    p.add_argument("trace", help="trace file (.json or .json.gz), e.g. traces/mars_16k.json, or the name of a "
                                 "shipped trace (emu trace list), e.g. mars_16k")
    p.add_argument("--topology", default="auto",
                   help="ring|bring|mesh|torus|star|full|fattree[:SHAPE], a .json/.graphml file, or auto "
                        "(what the profile's ports cable: 16 KR260s make a 4x4 torus)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile field, e.g. hw.link_rate=10Gbps (repeatable)")
    p.add_argument("--loss", default="0", help="Bernoulli frame loss on every link, e.g. 0.01 (default 0)")
    p.add_argument("--fail", action="append", default=[], metavar="CLAUSE",
                   help="a failure, e.g. 'link 3-7 down at 0.5s up at 0.8s' or 'node 5 down at 1s' (repeatable)")
    p.add_argument("--degrade", action="append", default=[], metavar="CLAUSE",
                   help="a rate change, e.g. 'link 3-7 degrade 0.25 at 1s until 2s' (repeatable)")
    p.add_argument("--detect", default="100us", help="failure detection delay before re-routing (default 100us)")
    p.add_argument("--reliable", choices=("auto", "on", "off"), default="auto",
                   help="acks and retransmission in the NICs; auto (default): on when --loss or --fail can lose "
                        "frames; off: a lost frame leaves its op incomplete")
    p.add_argument("--seed", default="0", help="seed of the loss streams and of functional payloads (default 0)")
    p.add_argument("--functional", action="store_true",
                   help="carry real payload bytes and merge real attention states in the decode reductions; "
                        "the summary reports the error against numpy attention (timing is unchanged)")
    p.add_argument("--no-trains", dest="trains", action="store_false",
                   help="advance every frame as its own event (the same results; trains advance a stream's "
                        "uninterrupted frames on a link as one event, docs/engine.md)")
    p.add_argument("--routing", default="shortest",
                   help="shortest: shortest paths (default); dateline: dimension order with a dateline on a torus, mesh or ring: "
                        "routes whose buffer dependencies have no cycle, so pause cannot deadlock "
                        "(docs/engine.md, Deadlock)")
    # The test suite's hook: "python" runs its reference path (tests/pyreplay.py) where it is
    # registered; the product runs every replay on the compiled loop.
    p.add_argument("--engine", choices=("auto", "compiled", "python"), default="auto", help=argparse.SUPPRESS)
    p.add_argument("--capture", metavar="FILE",
                   help="write the frames to a pcap/pcapng capture: an absolute path is written there, a plain "
                        "NAME.pcap or NAME.pcapng goes into the results folder")
    p.add_argument("--snaplen", default="62", help="bytes kept per captured frame (default 62: headers only)")
    p.add_argument("--capture-filter", action="append", default=[], metavar="F",
                   help="keep only matching frames: link=U-V (both directions), link=U>V (one), node=N (its links, both ways), into=N (what board N receives), op=NAME, from=T, to=T (repeatable)")
    p.add_argument("--out", help="results folder, which must not exist (default results/<trace>-<timestamp>, "
                                 "with -2, -3... when taken)")
    p.add_argument("--no-results", action="store_true", help="print the summary only")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--progress", nargs="?", const="bar", choices=("bar", "json", "none"), metavar="MODE",
                   help="progress on stderr: bar (ops, simulated and wall time, ETA; the default on a terminal "
                        "without --json), json (one JSON object per line: ops_done, ops_total, simulated_s, "
                        "wall_s, eta_s, end) or none")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..progress import mode as progress_mode
    from ..replay.session import replay
    from ..validate import integer_text, number_text

    if args.out is not None and args.no_results:
        raise ConfigError("--out names the results folder; --no-results writes none: drop one")
    stem = Path(args.trace).name.split(".")[0]
    default = None if args.no_results or args.out else Path("results") / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    # The text read into the API's types here; replay() checks the values, as for a Python caller.
    res = replay(args.trace, topology=args.topology, set=args.overrides, loss=number_text(args.loss, "--loss"),
                 fail=args.fail, degrade=args.degrade, detect=args.detect, reliable=args.reliable,
                 seed=integer_text(args.seed, "--seed"), capture=args.capture, functional=args.functional,
                 capture_filter=args.capture_filter, snaplen=integer_text(args.snaplen, "--snaplen"), engine=args.engine, trains=args.trains,
                 routing=args.routing, out=args.out, out_default=default,
                 progress=progress_mode(args.progress, sys.stderr.isatty() and not args.json) or False, flag="--")
    from ..replay.summary import buffer_warning, format_summary  # pandas: after the run, not beside it

    summary = res.summary
    warning = buffer_warning(summary)
    if warning:
        print(f"emu replay: {warning}", file=sys.stderr)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary)
          + (f"\nresults   {summary['results']}" if "results" in summary else "")
          + (f"\ncapture   {summary['capture']}" if "capture" in summary else ""))
    return 1 if summary["incomplete_ops"] else 0
