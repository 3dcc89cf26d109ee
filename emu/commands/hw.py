"""`emu hw send|listen|serve|check`: MCF frames on a real network interface (raw layer-2 sockets).

See docs/hardware.md for bring-up of a KR260 with these commands.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading

from .. import validate as V
from ..errors import ConfigError, EmuError
from ..units import parse_int, parse_rate, parse_time

SNAPLEN_MIN, SNAPLEN_MAX = V.SNAPLEN_MIN, V.SNAPLEN_MAX
IFACE_HELP = "network interface (in this network namespace), e.g. enp3s0 or a veth end"


def register(subparsers) -> None:
    from ..hw.defaults import BROKEN_RULES, DEFAULT_RATES

    p = subparsers.add_parser("hw", epilog="example: emu hw check --iface eth1 --scenario all --node 1", help="send, receive, serve and check MCF frames on a network interface",
                              description="The hardware path: MCF frames on a real interface through a raw "
                                          "layer-2 socket (root or CAP_NET_RAW). See docs/hardware.md.")
    sub = p.add_subparsers(dest="hw_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])

    s = sub.add_parser("send", epilog="example: emu hw send --iface eth1 --pcap cap.pcap --rate 100Mbps", help="put MCF frames from a capture or a trace on the wire",
                       description="Send the frames of a pcap/pcapng capture byte for byte (headers-only records "
                                   "are zero-padded to their wire length), or the frames of a trace's replay, "
                                   "paced by a rate or by the capture's timestamps.")
    s.add_argument("--iface", required=True, help=IFACE_HELP)
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--pcap", metavar="FILE", help="capture to send (pcap or pcapng)")
    src.add_argument("trace", nargs="?", metavar="TRACE",
                     help="a trace: replayed on the emulator (headers-only capture), its frames sent")
    pace = s.add_mutually_exclusive_group()
    pace.add_argument("--rate", help="line rate to pace at, e.g. 100Mbps, 1Gbps (frame + FCS + preamble + IFG); "
                                     "default: unpaced, as fast as the interface takes them")
    pace.add_argument("--timing", choices=("original",), help="original: keep the capture's inter-frame times")
    s.add_argument("--count", help="send this many frames (going through the source again if it has fewer)")
    s.add_argument("--topology", default="auto", help="topology of the trace's replay (default auto)")
    s.add_argument("--capture-filter", action="append", default=[], metavar="F",
                   help="with a TRACE: frames to keep, as `emu replay --capture-filter` (into=N: what board N "
                        "receives; link=U-V, link=U>V, node=N, op=NAME, from=T, to=T; repeatable)")
    s.add_argument("--to", metavar="K",
                   help="with a TRACE: the golden diff of board K: send exactly the frames K receives in the trace "
                        "(at the replay's timing unless --rate), collect what the device sends back and diff it "
                        "against the frames the emulator's NIC sends (exit 1 on any difference)")
    s.add_argument("--out", metavar="DIR",
                   help="with --to: keep inbound.pcap, expected.pcap, got.pcap and board.pcap (both directions, "
                        "for emu calibrate) in DIR")
    s.add_argument("--timeout", default="2s", help="with --to: how long to wait for the device's frames (default 2s)")
    s.add_argument("--settle", default="100ms",
                   help="with --to: how long to keep listening for extra frames (default 100ms)")
    s.add_argument("--json", action="store_true", help="print what was sent as one JSON object")
    s.set_defaults(func=run_send)

    s = sub.add_parser("listen", epilog="example: emu hw listen --iface eth1 --out rx.pcap --timeout 10s", help="receive MCF frames, validate, count, capture",
                       description="Receive MCF frames (kernel filter on EtherType 0x88B5), validate them in "
                                   "batches, count frames, bytes, malformed frames by reason and incomplete "
                                   "messages, optionally write a capture. Stops at --count, --timeout or Ctrl-C.")
    s.add_argument("--iface", required=True, help=IFACE_HELP)
    s.add_argument("--out", metavar="FILE", help="write the frames to a capture (.pcapng for pcapng, else pcap)")
    s.add_argument("--count", help="stop after this many frames")
    s.add_argument("--timeout", help="stop after this long, e.g. 10s or 500ms (plain number: seconds)")
    s.add_argument("--snaplen", default=str(SNAPLEN_MAX),
                   help=f"bytes kept per captured frame, {SNAPLEN_MIN}..{SNAPLEN_MAX} (default {SNAPLEN_MAX}; "
                        f"{SNAPLEN_MIN}: headers only)")
    s.add_argument("--json", action="store_true", help="print the counters as JSON")
    s.set_defaults(func=run_listen)

    s = sub.add_parser("serve", epilog="example: emu hw serve --iface veth0 --node 1 -v", help="run the emulated NIC of board K as a live device on an interface",
                       description="The NIC of board K answering the wire as the board should: forwarding and "
                                   "multicast (one copy back out, ttl - 1), delivery with reassembly, acks and "
                                   "nacks, reductions (emu.nic.reduce) to the parent, the replica directory. "
                                   "Runs until Ctrl-C, SIGTERM or --duration. See docs/hardware.md.")
    s.add_argument("--iface", required=True, help=IFACE_HELP)
    s.add_argument("--node", required=True, help="this board's id K")
    _board_options(s)
    s.add_argument("--rto-min", help="floor of the adaptive retransmission timeout "
                                                       "(default: the kr260 profile's, 100us)")
    s.add_argument("--rto-initial", help="retransmission timeout towards a board before its first "
                                                        "RTT sample (default: the kr260 profile's, 1ms)")
    s.add_argument("--max-retries", default="20", help="probes before giving up on a message (default 20)")
    s.add_argument("--duration", help="stop after this long (default: run until stopped)")
    s.add_argument("--max-partial", default="256", metavar="N",
                   help="incomplete messages held at once; the oldest is evicted (default 256)")
    s.add_argument("--max-partial-bytes", default="64MiB", metavar="SIZE",
                   help="bytes the incomplete messages may hold (default 64MiB)")
    s.add_argument("--partial-timeout", default="5s", metavar="TIME",
                   help="an incomplete message older than this is dropped (default 5s)")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="log every delivery, reduction, directory change and rejected frame")
    s.add_argument("--wrong-reduce-op", choices=("max", "sum", "merge"), metavar="OP",
                   help="TEST ONLY: reduce with OP (and stamp it in the result) whatever the frames ask, "
                        "to see `emu hw check` fail")
    s.add_argument("--delay-us", metavar="US",
                   help="REHEARSAL: hold every frame the board sends this many microseconds before it leaves "
                        "(a known latency for `emu calibrate` to find)")
    s.add_argument("--break-rule", choices=sorted(BROKEN_RULES), help=argparse.SUPPRESS)  # tests: one rule broken
    s.add_argument("--json", action="store_true", help="print the final counters as one JSON object")
    s.set_defaults(func=run_serve)

    from ..hw.defaults import SCENARIOS

    s = sub.add_parser("check", epilog="example: emu hw check --iface eth1 --scenario all --node 1", help="drive a device with a scenario and diff its frames against the model",
                       description="Send a scenario's frames to the device (a KR260 or `emu hw serve`), playing "
                                   "every other board, and compare the frames it returns with the NIC model's, "
                                   "field by field. Exit 0 when all match, 1 on any difference, 2 when the "
                                   "device never answers. Scenarios: "
                                   + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    s.add_argument("--iface", required=True, help=IFACE_HELP)
    s.add_argument("--scenario", required=True, choices=[*SCENARIOS, "all"], metavar="NAME",
                   help=f"one of {', '.join(SCENARIOS)}, or all")
    s.add_argument("--node", default="1", help="the device's board id K (default 1)")
    _board_options(s)
    s.add_argument("--head-dim", default="128",
                   help="head dimension of the merged states, 1..16384 (default 128)")
    s.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32", help="reduction payload type (default fp32)")
    s.add_argument("--no-ack-req", action="store_true", help="send without ACK_REQ (expect no acks)")
    s.add_argument("--timeout", default="2s", help="how long to wait for the device's frames (default 2s)")
    s.add_argument("--settle", default="100ms", help="how long to keep listening for extra frames (default 100ms)")
    s.add_argument("--rtol", default="1e-5", help="relative tolerance of reduced values (default 1e-5)")
    s.add_argument("--atol", default="1e-6", help="absolute tolerance of reduced values (default 1e-6)")
    s.add_argument("--seed", help="seed of the scenario's data (default: fresh each run)")
    s.add_argument("--json", action="store_true", help="print the results as a JSON list, one object per scenario")
    s.set_defaults(func=run_check)

    s = sub.add_parser("bringup", epilog="example: emu hw bringup eth1 --node 1 --report bringup",
                       help="the scripted bring-up plan: listen, every check, a rate ramp, a loss check, a golden diff",
                       description="Run the bring-up plan of docs/hardware.md on each interface (a port of the "
                                   "board): listen, every check scenario, a rate ramp of relayed frames (send "
                                   "--rate), a loss check (unpaced), the golden diff of a small trace; one "
                                   "JSON and one self-contained HTML report, pass/fail per step. Exit 1 if a "
                                   "step fails.")
    s.add_argument("ifaces", nargs="+", metavar="IFACE", help=IFACE_HELP)
    s.add_argument("--node", default="1", help="the board's id K (default 1)")
    _board_options(s)
    s.add_argument("--report", default="bringup", metavar="NAME",
                   help="write NAME.json and NAME.html (default bringup)")
    s.add_argument("--listen", default="1s", help="how long to listen before sending anything (default 1s)")
    s.add_argument("--rates", default=",".join(DEFAULT_RATES), help=f"the rate ramp (default {','.join(DEFAULT_RATES)})")
    s.add_argument("--frames", default="200", help="frames per rate step and in the loss check (default 200)")
    s.add_argument("--trace", help="trace for the golden diff (default: a small MARS trace for the topology)")
    s.add_argument("--timeout", default="2s", help="how long to wait for the board's frames per step (default 2s)")
    s.set_defaults(func=run_bringup)


def _board_options(s) -> None:
    from ..hw.defaults import DEFAULT_HEADS, DEFAULT_TOPOLOGY

    s.add_argument("--topology", default=DEFAULT_TOPOLOGY,
                   help=f"the cluster the board belongs to (default {DEFAULT_TOPOLOGY}); same syntax as emu replay")
    s.add_argument("--root", default="0", help="root of the installed reduction tree (default 0)")
    s.add_argument("--heads", default=str(DEFAULT_HEADS),
                   help=f"attention heads of a merged (m, l, o~) state (default {DEFAULT_HEADS})")
    s.add_argument("--mtu", default="1500", help="MCF mtu of the frames the board sends (default 1500)")
    s.add_argument("--group", action="append", default=[], metavar="ID=BOARDS",
                   help="install multicast group ID (route_id) with BOARDS, e.g. 7=0,2,3 or 7=0-3 (repeatable)")


def seconds(value, what: str) -> float:
    """A duration: "2s", "500ms", or a plain number of seconds."""
    text = str(value).strip()
    if re.fullmatch(r"[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return parse_time(text, what) / 1e12


def _groups(items) -> dict:
    out = {}
    for item in items:
        rid, _, members = item.partition("=")
        try:
            boards = set()
            for part in members.split(","):
                a, _, b = part.strip().partition("-")
                boards.update(range(int(a), int(b or a) + 1))
            out[int(rid)] = tuple(sorted(boards))
        except ValueError:
            raise ConfigError(f"--group {item!r}: expected ID=BOARDS, e.g. 7=0,2,3 or 7=0-3") from None
    return out


def _board(args, node):
    from ..hw.board import Board

    return Board(node=node, topology=args.topology, root=parse_int(args.root, "--root"),
                 heads=parse_int(args.heads, "--heads"), mtu=parse_int(args.mtu, "--mtu"), groups=_groups(args.group))


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()

    def handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    return stop


# ---- send ------------------------------------------------------------------------------------


def run_send(args) -> int:
    from ..hw import send as S
    from ..hw.rawsock import RawSocket

    rate = parse_rate(args.rate, "--rate") if args.rate else None
    if rate is not None and rate <= 0:
        raise ConfigError(f"--rate {args.rate}: must be positive")
    count = parse_int(args.count, "--count") if args.count is not None else None
    if count is not None and count < 1:
        raise ConfigError(f"--count {args.count}: must be at least 1")
    if args.pcap is None and args.capture_filter and not args.trace:  # pragma: no cover - argparse needs a source
        raise ConfigError("--capture-filter applies to a TRACE")
    if args.to is not None:
        return _golden(args, rate)
    sock = RawSocket(args.iface)  # first: a missing interface or permission fails before any work
    stop = _stop_on_sigterm()
    with sock:
        if args.pcap:
            return _send_file(S, sock, args.pcap, args.pcap, rate, args.timing == "original", count, stop, args.json)
        print(f"replaying {args.trace} on the emulator to get its frames ...", file=sys.stderr)
        with S.trace_capture(args.trace, topology=args.topology, filters=args.capture_filter,
                             progress=sys.stderr.isatty()) as path:
            if sys.stderr.isatty():
                print(file=sys.stderr)
            return _send_file(S, sock, path, args.trace, rate, args.timing == "original", count, stop, args.json)


def _send_file(S, sock, path, name, rate, original, count, stop, as_json=False) -> int:
    try:
        sv = S.survey(path)
    except OSError as exc:
        raise EmuError(f"cannot read {name}: {exc.strerror or exc}") from None
    if sv.frames == 0:
        raise ConfigError(f"{name}: no frames to send")
    S.check_mtu(sock, sv, name)
    if sv.malformed:
        print(f"note: {sv.malformed:,} of {sv.frames:,} frames are malformed MCF frames; sending them as they are",
              file=sys.stderr)
    st = S.send(sock, path, rate_bps=rate, original=original, count=count, frames_in_source=sv.frames,
                stop=stop.is_set)
    if as_json:
        print(json.dumps({"source": name, "iface": sock.iface, "frames": st.frames, "bytes": st.bytes,
                          "elapsed_s": st.elapsed, "late_ns": st.late_ns, "scheduled_s": st.scheduled_ns / 1e9,
                          "behind_schedule": st.behind, "malformed_in_source": sv.malformed}, indent=2))
    else:
        print(st.line() + f" on {sock.iface}")
    return 0


def _golden(args, rate) -> int:
    """``emu hw send TRACE --to K``: emu.hw.golden."""
    import shutil
    from pathlib import Path

    from ..hw import golden as G
    from ..hw.rawsock import RawSocket

    if args.pcap or not args.trace:
        raise ConfigError("--to K takes a TRACE (the frames board K receives in its replay), not --pcap")
    for flag, given in (("--count", args.count), ("--capture-filter", args.capture_filter),
                        ("--timing", args.timing)):
        if given:
            raise ConfigError(f"--to sends what board K receives in the trace, at the replay's timing; "
                              f"{flag} does not apply")
    K = parse_int(args.to, "--to")
    if K < 0:
        raise ConfigError(f"--to {args.to}: a board id is 0 or more")
    timeout, settle = seconds(args.timeout, "--timeout"), seconds(args.settle, "--settle")
    folder = None
    if args.out:
        from ..outputs import check_writable

        folder = Path(args.out)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise ConfigError(f"--out {args.out}: exists and is not an empty folder")
        check_writable(folder / "expected.pcap", "--out")
    sock = RawSocket(args.iface)  # a missing interface or permission fails before the replay
    with sock:
        print(f"replaying {args.trace} on the emulator to get board {K}'s frames ...", file=sys.stderr)
        plan = G.plan(args.trace, K, topology=args.topology, progress=sys.stderr.isatty())
        work = G.scratch()
        try:
            r = G.run(plan, sock, work, rate_bps=rate, timeout=timeout, settle=settle)
            where = folder if folder is not None else Path()
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
                for f in work.iterdir():
                    shutil.move(str(f), folder / f.name)
            r.diff.expected.path, r.diff.got.path = str(where / "expected.pcap"), str(where / "got.pcap")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    out = G.as_dict(r)
    if folder is not None:
        out["folder"] = str(folder)
    print(json.dumps(out, indent=2) if args.json else G.render(r, args.iface)
          + (f"\ncaptures in {folder}/ (frame numbers are Wireshark's in expected.pcap and got.pcap)" if folder else ""))
    return 0 if G.passed(r.diff) else 1


# ---- listen ------------------------------------------------------------------------------------


def run_listen(args) -> int:
    from ..codec.pcap import CaptureWriter
    from ..hw.listen import listen, render
    from ..hw.rawsock import RawSocket

    count = parse_int(args.count, "--count") if args.count is not None else None
    timeout = seconds(args.timeout, "--timeout") if args.timeout is not None else None
    snaplen = V.snaplen(V.integer_text(args.snaplen, "--snaplen"), "--snaplen")  # checked with or without --out
    if args.out:
        from ..outputs import check_writable

        check_writable(args.out, "--out")  # before the socket: a bad path fails at once
    sock = RawSocket(args.iface, batch=1024)
    stop = _stop_on_sigterm()
    print(f"listening on {args.iface} (mtu {sock.mtu})", file=sys.stderr, flush=True)
    with sock:
        writer = None
        if args.out:
            fmt = "pcapng" if args.out.endswith(".pcapng") else "pcap"
            writer = CaptureWriter(args.out, format=fmt, snaplen=snaplen)
            writer.__enter__()
        try:
            st = listen(sock, count=count, timeout=timeout, writer=writer, stop=stop.is_set)
        finally:
            if writer is not None:
                try:
                    writer.__exit__(*sys.exc_info())  # an error or signal: the partial capture goes
                except OSError as exc:
                    raise EmuError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    s = st.as_dict()
    print(json.dumps(s, indent=2) if args.json else render(s, args.iface, args.out))
    return 0


# ---- serve -------------------------------------------------------------------------------------


def _at_least(value: int, lo: int, what: str) -> int:
    if value < lo:
        raise ConfigError(f"{what} {value}: must be at least {lo}")
    return value


def run_serve(args) -> int:
    from ..codec import ReduceOp
    from ..hw.defaults import BROKEN_RULES
    from ..hw.errors import MtuTooSmall
    from ..hw.rawsock import RawSocket
    from ..hw.board import protocol_config
    from ..hw.serve import Device, ServeLimits, warm_up
    from ..units import parse_size

    board = _board(args, parse_int(args.node, "--node"))
    limits = ServeLimits(partial_messages=_at_least(parse_int(args.max_partial, "--max-partial"), 1, "--max-partial"),
                         partial_bytes=_at_least(parse_size(args.max_partial_bytes, "--max-partial-bytes"), 1,
                                                 "--max-partial-bytes"),
                         partial_age_s=seconds(args.partial_timeout, "--partial-timeout"))
    delay_ns = None
    if args.delay_us is not None:
        from ..units import parse_float

        delay_ns = round(parse_float(args.delay_us, "--delay-us") * 1000)
        if not 0 <= delay_ns <= 10**10:
            raise ConfigError(f"--delay-us {args.delay_us}: 0..10,000,000 (10 s)")
    sock = RawSocket(args.iface)
    if board.mtu > sock.mtu:
        sock.close()
        raise MtuTooSmall(f"{args.iface} has MTU {sock.mtu}, the board sends {board.mtu}-byte frames "
                          f"(--mtu); ip link set {args.iface} mtu {board.mtu}")
    wrong = int(ReduceOp[args.wrong_reduce_op]) if args.wrong_reduce_op else None
    def ps(value, what):  # a time option in ps (None: the profile's); a zero timeout would spin
        return None if value is None else _at_least(round(seconds(value, what) * 1e12), 1, what)

    proto = protocol_config(rto_min_ps=ps(args.rto_min, "--rto-min"), rto_initial_ps=ps(args.rto_initial, "--rto-initial"),
                            max_retries=parse_int(args.max_retries, "--max-retries"),
                            answer_memory=limits.done_messages)
    wire = sock
    if delay_ns or args.break_rule:
        from ..hw.rehearsal import DelayedSocket

        wire = DelayedSocket(sock, delay_ns=delay_ns or 0, rule=args.break_rule, node=board.node)
    warm_up(board, proto)  # the first check's frames are answered at once, not after loading code
    dev = Device(board, wire, protocol=proto, wrong_reduce_op=wrong, verbose=args.verbose, limits=limits)
    stop = _stop_on_sigterm()
    duration = seconds(args.duration, "--duration") if args.duration else None
    parent = f"parent {board.parent}" if board.parent is not None else "the root"
    print(f"serving node {board.node} of {board.topology} on {args.iface} (mtu {board.mtu}; reduction tree to "
          f"{board.root}: children {board.children() or 'none'}, {parent})"
          + (f"; FAULT: reducing with {args.wrong_reduce_op}" if wrong is not None else "")
          + (f"; FAULT: {BROKEN_RULES[args.break_rule]}" if args.break_rule else "")
          + (f"; REHEARSAL: every frame sent {delay_ns / 1000:g} us late" if delay_ns else "") + ": ready",
          file=sys.stderr if args.json else sys.stdout, flush=True)
    with sock:
        try:
            dev.run(duration=duration, stop=stop.is_set)
        except KeyboardInterrupt:
            pass
    print(json.dumps(dev.summary_dict(), indent=2) if args.json else dev.summary(), flush=True)
    return 0


# ---- check -------------------------------------------------------------------------------------


def run_check(args) -> int:
    from ..codec import Dtype
    from ..hw import check as C
    from ..hw.rawsock import RawSocket
    from ..units import parse_float

    board = _board(args, parse_int(args.node, "--node"))
    head_dim = V.integer_text(args.head_dim, "--head-dim")
    C.check_state(board.heads, head_dim)  # before a scenario allocates its states
    names = list(C.SCENARIOS) if args.scenario == "all" else [args.scenario]
    seed = parse_int(args.seed, "--seed") if args.seed is not None else None
    scenarios = []
    skipped = []
    for name in names:
        try:
            scenarios.append(C.build(name, board, reliable=not args.no_ack_req, seed=seed, dtype=Dtype[args.dtype],
                                     head_dim=head_dim))
        except ConfigError as exc:
            if args.scenario != "all":
                raise
            skipped.append({"scenario": name, "skipped": str(exc)})
            if not args.json:
                print(f"scenario {name}: skipped: {exc}")
    sock = RawSocket(args.iface)
    failed = 0
    results = []
    with sock:
        for sc in scenarios:
            res = C.run(sc, sock, timeout=seconds(args.timeout, "--timeout"), settle=seconds(args.settle, "--settle"),
                        rtol=parse_float(args.rtol, "--rtol"), atol=parse_float(args.atol, "--atol"))
            if args.json:
                results.append(C.as_dict(res, args.iface))
            else:
                print(C.report(res, args.iface), flush=True)
            failed += not res.ok
    if args.json:
        print(json.dumps(skipped + results, indent=2, default=str))
    return 1 if failed else 0


# ---- bringup -----------------------------------------------------------------------------------


def run_bringup(args) -> int:
    from ..hw import bringup as B
    from ..hw.rawsock import interface_index
    from ..outputs import check_writable
    from ..units import parse_rate

    board = _board(args, parse_int(args.node, "--node"))
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    if not rates:
        raise ConfigError(f"--rates {args.rates!r}: expected rates, e.g. 10Mbps,100Mbps,1Gbps")
    for r in rates:
        if parse_rate(r, "--rates") <= 0:
            raise ConfigError(f"--rates {r}: must be positive")
    frames = parse_int(args.frames, "--frames")
    if frames < 1:
        raise ConfigError(f"--frames {args.frames}: must be at least 1")
    listen_s, timeout = seconds(args.listen, "--listen"), seconds(args.timeout, "--timeout")
    for iface in args.ifaces:
        interface_index(iface)  # an unknown interface fails before anything runs
    json_path, html_path = f"{args.report}.json", f"{args.report}.html"
    for p in (json_path, html_path):
        check_writable(p, "--report")
    trace = None
    if args.trace:
        from ..api import load_trace

        trace = load_trace(args.trace)
    steps = B.plan(args.ifaces, board, listen_s=listen_s, rates=rates, frames=frames, timeout=timeout, trace=trace,
                   say=lambda text: print(text, flush=True))
    report = B.as_dict(steps, board)
    B.write(report, json_path, html_path)
    print(f"{'PASS' if report['ok'] else 'FAIL'}: {report['passed']} passed, {report['failed']} failed, "
          f"{report['skipped']} skipped; report {json_path} and {html_path}")
    return 0 if report["ok"] else 1
