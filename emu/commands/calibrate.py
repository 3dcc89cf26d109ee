"""`emu calibrate CAPTURE -o profile.toml`: a board's NIC timings from a capture on both sides of it."""

from __future__ import annotations

import json
import os

from ..errors import ConfigError, EmuError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="estimate a board's NIC latency, rate, ack turnaround and reduction latency from a capture",
        description="From a capture of the frames sent to a board and the frames it sent back on one clock (the "
                    "board.pcap of `emu hw send TRACE --to K --out DIR`), estimate its forwarding latency, "
                    "datapath rate, ack turnaround and reduction latency (medians, 95 % bootstrap intervals) and "
                    "write a hardware profile (`emu trace ... --hw FILE`; replay: the --set it prints).",
        epilog="example: emu calibrate golden/board.pcap -o kr260-measured.toml")
    p.add_argument("capture", help="pcap/pcapng with both sides of the board")
    p.add_argument("-o", "--output", metavar="FILE", help="write the calibrated hardware profile here (.toml)")
    p.add_argument("--node", help="the board's id K (default: the board the frames sent are addressed to)")
    p.add_argument("--base", default="kr260", help="profile whose other fields the output keeps (default kr260)")
    p.add_argument("--json", action="store_true", help="print the estimates as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from .. import calibrate as C
    from ..atomic import atomic_file
    from ..units import parse_int
    from ..workload.profiles import load

    node = parse_int(args.node, "--node") if args.node is not None else None
    if node is not None and node < 0:
        raise ConfigError(f"--node {args.node}: a board id is 0 or more")
    if args.output:
        from ..outputs import check_writable

        if not args.output.lower().endswith(".toml"):
            raise ConfigError(f"-o {args.output}: a hardware profile is a .toml file")
        check_writable(args.output, "-o")
    load("hw", args.base)  # a bad base fails before the capture is read
    if not os.path.isfile(args.capture):
        raise ConfigError(f"{args.capture}: no such file")
    try:
        cap = C.load(args.capture)
    except OSError as exc:
        raise EmuError(f"cannot read {args.capture}: {exc.strerror or exc}") from None
    if not len(cap.h):
        raise ConfigError(f"{args.capture}: no MCF frames")
    try:
        cal = C.calibrate(cap, node)
    except ConfigError as exc:
        raise ConfigError(f"{args.capture}: {exc}") from None
    if cal.forwarding.median is None and cal.ack.median is None and cal.reduction.median is None:
        raise ConfigError(f"{args.capture}: no frame of board {cal.node} answers a frame sent to it "
                          "(no forwarded copy, ack or reduction result): nothing to calibrate")
    text = C.profile_text(cal, args.base, os.path.basename(args.capture))
    if args.output:
        with atomic_file(args.output, "w") as f:
            f.write(text)
    sets = [f"hw.nic_latency_ps={round(cal.forwarding.median)}ps"] if cal.forwarding.median is not None else []
    if cal.rate.median is not None:
        sets.append(f"hw.nic_rate={round(cal.rate.median)}bps")
    if args.json:
        print(json.dumps({**cal.as_dict(), "profile": args.output, "set": sets}, indent=2))
    else:
        print(C.render(cal, args.capture))
        if args.output:
            print(f"wrote {args.output} (emu trace ... --hw {args.output})")
        if sets:
            print("replay an existing trace with it: emu replay TRACE " + " ".join(f"--set {s}" for s in sets))
    return 0
