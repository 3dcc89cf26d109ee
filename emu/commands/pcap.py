"""`emu pcap FILE`: decode a capture and summarize it; `emu pcap diff EXPECTED GOT`: compare two."""

from __future__ import annotations

import argparse
import json

from ..errors import ConfigError, EmuError


def register(subparsers) -> None:
    p = subparsers.add_parser("pcap", epilog="example: emu pcap results/mars_16k-20260101-120000/cap.pcap", help="decode and summarize an MCF capture (pcap or pcapng)",
                              description="Decode every frame of a capture and summarize it: frames, bytes, "
                                          "counts per op / source / destination, malformed frames by reason, "
                                          "incomplete messages.")
    p.add_argument("file", help="pcap or pcapng file; or `diff EXPECTED GOT`: compare a board's capture (GOT) "
                                "with the frames expected of it, frame by frame (exit 1 when they differ)")
    p.add_argument("more", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--limit", type=int, default=20, help="incomplete messages (or differences) listed (default 20)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..codec.summary import summarize_capture

    if args.file == "diff" and args.more:
        return run_diff(args)
    if args.more:
        raise ConfigError(f"one capture, or `diff EXPECTED GOT`; got {len(args.more) + 1} arguments")

    try:
        s = summarize_capture(args.file, limit=args.limit)
    except OSError as exc:
        raise EmuError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    print(json.dumps(s, indent=2) if args.json else render(s))
    return 0


def run_diff(args) -> int:
    from ..codec import capdiff

    if len(args.more) != 2:
        raise ConfigError(f"diff: two captures, EXPECTED and GOT; got {len(args.more)}")
    frames = []
    for path in args.more:
        try:
            frames.append(capdiff.load(path))
        except OSError as exc:
            raise EmuError(f"cannot read {path}: {exc.strerror or exc}") from None
    d = capdiff.diff(*frames)
    print(json.dumps(capdiff.as_dict(d, args.limit), indent=2) if args.json else capdiff.render(d, args.limit))
    return 0 if d.ok else 1


def _table(title: str, counts: dict, key: str) -> list[str]:
    if not counts:
        return []
    width = max(len(key), *(len(k) for k in counts))
    rows = [f"{key:<{width}}  {'frames':>10}"]
    rows += [f"{k:<{width}}  {v:>10,}" for k, v in counts.items()]
    return ["", title, *rows]


def render(s: dict) -> str:
    span = ""
    if s["frames"]:
        span = f", {s['first_ts_ns'] / 1e9:.9f} s .. {s['last_ts_ns'] / 1e9:.9f} s"
    out = [
        f"capture    {s['file']} ({s['format']}, link type {s['linktype']}, snaplen {s['snaplen']})",
        f"frames     {s['frames']:,} ({s['valid_frames']:,} valid){span}",
        f"bytes      {s['wire_bytes']:,} on the wire, {s['captured_bytes']:,} captured"
        + (" (headers only)" if s["headers_only"] else ""),
    ]
    bad = s["malformed"]
    reasons = ", ".join(f"{k}: {v:,}" for k, v in bad.items())
    out.append(f"malformed  {sum(bad.values()):,}" + (f" ({reasons})" if bad else ""))
    out += [f"  {e}" for e in s["malformed_examples"]]
    m = s["messages"]
    out.append(f"messages   {m['total']:,}: {m['complete']:,} complete, {m['incomplete']:,} incomplete, "
               f"{m['duplicate_fragments']:,} duplicate fragments")
    out += _table("per op", s["per_op"], "op")
    out += _table("per source board", s["per_src"], "src")
    out += _table("per destination board (frames addressed by dst_set)", s["per_dst"], "dst")
    out += _table("per route / multicast group (frames addressed by route_id)", s["per_route"], "route")
    if s["incomplete"]:
        out += ["", f"incomplete messages (first {len(s['incomplete'])})", "src    msg_id  received  missing fragments"]
        for r in s["incomplete"]:
            missing = ",".join(map(str, r["missing"]))
            out.append(f"{r['src_node']:<5} {r['msg_id']:>7}  {r['received']:>4}/{r['frag_cnt']:<4} {missing}")
    return "\n".join(out)
