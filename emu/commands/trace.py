"""`emu trace SCHEME ...`: generate a workload trace; `emu trace show FILE`: validate one."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..units import format_size


def _ints(args, names) -> dict:
    """The count options' text as ints ("1e3" is 1000); emu.api.trace_params checks their values."""
    from ..validate import integer_text

    out = {}
    for name in names:
        value = getattr(args, name, None)
        out[name] = None if value is None else integer_text(value, "--" + name.replace("_", "-"))
    return out


SCHEME_HELP = {
    "mars": "MARS: each chunk's KV multicast to r(c) replicas chosen by memory (eq. 11) and reuse (eq. 15), "
            "drained to owner-only by the end",
    "ring": "Ring Attention: KV blocks passed one board along the ring per step, transient copies",
    "zigzag": "Zigzag ring attention: the ring's steps with causal work balanced across boards",
    "pd": "PD disaggregation: a prefill pool hands its KV to a decode pool (bulk or streamed)",
    "full": "full replication: every block multicast to every board, drained at the end of prefill",
    "ulysses": "DeepSpeed-Ulysses: per layer an all-to-all turns sequence shards into head shards and back "
               "(KV heads replicated past the model's GQA limit)",
    "usp": "USP: Ulysses all-to-all inside groups of u boards, ring attention across the groups",
}


def register(subparsers) -> None:
    from ..workload.schemes import PD_MODES, RING_ORDERS, SCHEMES

    parser = subparsers.add_parser(
        "trace", help="generate a workload trace (MARS, Ring, Zigzag, PD, full replication, Ulysses, USP) or check one",
        description="Generate the op DAG of one scheme as a trace file (docs/workloads.md, docs/trace-format.md).",
        epilog="examples:\n  emu trace mars --seq 16384 --nodes 16 -o mars_16k.json\n  emu trace show mars_16k.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="scheme", metavar="SCHEME")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seq", default="16384", help="prompt length in tokens (default 16384)")
    common.add_argument("--nodes", default="16", help="boards (default 16)")
    common.add_argument("--chunk", default="1024", help="prefill chunk size in tokens, 'auto' (eq. 8) or 'whole' (unchunked: "
                             "the prompt is one chunk, as ring-flash-attention runs); default 1024")
    common.add_argument("--model", default="qwen2.5-1.5b", help="model profile name or file (default qwen2.5-1.5b)")
    common.add_argument("--hw", default="kr260", help="hardware profile name or file (default kr260)")
    common.add_argument("--decode-tokens", default="0", metavar="K", help="decode steps after the first token (default 0)")
    common.add_argument("--kv-budget", default=None, metavar="BYTES|Nx",
                        help="S_node: bytes (e.g. 16MiB) or a multiple of the owner-only share (e.g. 2x); default: the hardware profile's")
    common.add_argument("--alpha", default="1.0", help="MARS reuse aggressiveness (eq. 15), default 1.0")
    common.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a profile field, e.g. hw.link_rate=10Gbps or model.layers=4 (repeatable)")
    common.add_argument("--topology", default=None,
                        help="topology the placement assumes (emu.topology spec, e.g. torus:4x4, full, star); default: the hardware's for the node count")
    common.add_argument("--ring-order", choices=RING_ORDERS, default="embedding",
                        help="ring schemes (ring, zigzag, pd's prefill, usp): the topology's best ring embedding "
                             "(default; one link per step where the topology has such a cycle) or board order 0..N-1")
    common.add_argument("-o", "--output", required=True, help="trace file to write (.json or .json.gz)")
    common.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    common.add_argument("--progress", nargs="?", const="bar", choices=("bar", "json", "none"), metavar="MODE",
                        help="progress on stderr: bar (ops generated, then written, and the wall time; the default "
                             "on a terminal without --json), json (one JSON object per line) or none")
    for name in SCHEMES:
        p = sub.add_parser(name, parents=[common], help=SCHEME_HELP[name], description=SCHEME_HELP[name] + ".",
                           epilog=f"example: emu trace {name} --seq 4096 --nodes 8 -o {name}_4k.json",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == "pd":
            p.add_argument("--pd-mode", choices=PD_MODES, default="bulk",
                           help="KV handoff: bulk after each prefill board finishes, or streamed per block (default bulk)")
            p.add_argument("--prefill-nodes", default=None, help="prefill pool size P (default nodes/2)")
        if name == "usp":
            p.add_argument("--ulysses-degree", default=None, metavar="U",
                           help="Ulysses degree u (all-to-all groups of u boards, ring over nodes/u groups); "
                                "default: the model's KV heads (the largest degree without replicating them)")
        _baseline_options(p, name)
        p.set_defaults(func=_generate)
    show = sub.add_parser("show", help="validate a trace and summarise it",
                          description="Load a trace with every check `emu replay` makes (structure, types, enums, "
                                      "board sets, dependencies, profiles) and print its scheme, size, op counts, "
                                      "bytes per message op and the replica plan r(c). Exit 2 naming the JSON path "
                                      "of the first problem.",
                          epilog="example: emu trace show traces/mars_16k.json")
    show.add_argument("file", help="trace file (.json or .json.gz), or the name of a shipped trace (emu trace list)")
    show.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    show.set_defaults(func=_show)
    ls = sub.add_parser("list", help="the traces shipped with emu (replay one by name: emu replay mars_16k)",
                        epilog="example: emu trace list; emu replay mars_16k")
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    ls.set_defaults(func=_list)
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])


# ---- baseline options (docs/workloads.md "Baseline options"): each default is its authors' choice
# (the schemes that read it, its flag, how argparse takes it); _baseline_params passes the given ones on
BASELINE_OPTIONS = (
    (("ring", "zigzag", "pd"), "--ring-forward", dict(
        choices=("after-compute", "on-arrival"), default="after-compute",
        help="when a board forwards a received KV set: after its attention on the set before "
             "(ring-flash-attention's double buffer; default) or as soon as it arrives")),
    (("ring", "zigzag", "pd"), "--ring-lookahead", dict(
        action="store_true",
        help="circulate the existing history from the layer's start, as MARS pushes one layer "
             "ahead (same bytes); default off, as ring-flash-attention")),
    (("ulysses", "usp"), "--all-to-all", dict(
        choices=("concurrent", "pairwise"), default="concurrent",
        help="every pair posted at once, interleaved by the NICs (DeepSpeed, yunchang; default), "
             "or the NIC all-to-all engine's pairwise shift schedule")),
    (("ulysses", "usp"), "--uneven-heads", dict(
        action="store_true",
        help="allow a Ulysses degree that does not divide the query heads (uneven split or idle "
             "boards), which no reference implementation accepts")),
    (("mars", "full"), "--no-lookahead", dict(
        dest="mars_lookahead", action="store_false",
        help="push history after the consumer's QKV of the layer, not one layer ahead "
             "(what emu tune --attribution measures)")),
    (("pd",), "--first-token", dict(
        choices=("prefill", "decode"), default="prefill",
        help="where the first token's LM head runs: the prefill side (DistServe, Splitwise; "
             "default: TTFT excludes the KV handoff) or the decode side after the handoff")),
)


def _baseline_options(p, name: str) -> None:
    for schemes, flag, kw in BASELINE_OPTIONS:
        if name in schemes:
            p.add_argument(flag, **kw)


def _baseline_params(args) -> dict:
    dests = (kw.get("dest", flag[2:].replace("-", "_")) for _, flag, kw in BASELINE_OPTIONS)
    return {k: getattr(args, k) for k in dests if hasattr(args, k)}


def _generate(args) -> int:
    from ..api import trace_params
    from ..outputs import check_writable
    from ..validate import number_text
    from ..progress import Progress, Ticker
    from ..progress import mode as progress_mode
    from ..workload.builder import OpBuilder
    from ..workload.generate import generate
    from ..workload.trace import save_trace

    check_writable(args.output, "-o")  # before generating: a bad path fails at once
    params = trace_params(
        args.scheme, **_ints(args, ("seq", "nodes", "decode_tokens", "prefill_nodes", "ulysses_degree")),
        chunk=args.chunk if args.chunk in ("auto", "whole") else _ints(args, ("chunk",))["chunk"], model=args.model, hw=args.hw,
        kv_budget=args.kv_budget, alpha=number_text(args.alpha, "--alpha"), set=args.overrides,
        pd_mode=getattr(args, "pd_mode", "bulk"), topology=args.topology, ring_order=args.ring_order, flag="--",
        **_baseline_params(args))
    mode = progress_mode(args.progress, sys.stderr.isatty() and not args.json)
    if mode is None:
        trace = generate(params)
        save_trace(trace, args.output)
    else:  # a 64K trace takes seconds to build and to write: say how far it is
        bar, builder = Progress(f"trace {args.scheme}", None, mode), OpBuilder()
        with Ticker(bar, builder.__len__, "generating"):
            trace = generate(params, builder)
        try:
            bar.update(trace.n_ops, phase="writing")
            save_trace(trace, args.output)
        except BaseException:
            bar.stop()
            raise
        bar.end(trace.n_ops, phase="written")
    size = os.path.getsize(args.output)
    if args.json:
        print(json.dumps({"path": args.output, "ops": trace.n_ops, "dependencies": len(trace.dep_idx), "bytes": size,
                          "chunk": trace.meta["chunk"], "r": trace.schedule["r"]}, indent=2, default=int))
        return 0
    print(f"wrote {args.output}: {trace.n_ops} ops, {len(trace.dep_idx)} dependencies, "
          f"{format_size(size)}; chunk {trace.meta['chunk']}, r(c) {trace.schedule['r']}")
    return 0


def _show(args) -> int:

    from ..workload.analysis import fan_out
    from ..workload.enums import MsgOp
    from ..workload.options import scheme_options
    from ..workload.trace import load_trace

    from ..shipped import trace_path

    t = load_trace(trace_path(args.file))
    m = t.meta
    msgs = fan_out(t)
    fan = msgs * t.ops["bytes"]
    messages = {op.name: (int(sel.sum()), int(msgs[sel].sum()), int(fan[sel].sum())) for op in MsgOp
                if op and (sel := t.ops["msg_op"] == op).any()}
    if args.json:
        print(json.dumps({"file": args.file, "scheme": m["scheme"]["name"], "nodes": m["nodes"], "hw": m["hw"]["name"],
                          "topology": m["scheme"]["topology"], "model": m["model"]["name"], "seq": m["seq"],
                          "chunk": m["chunk"], "n_chunks": m["n_chunks"], "decode_tokens": m["decode_tokens"],
                          "ops": t.n_ops, "kinds": t.kind_count(),
                          "messages": {k: {"ops": n, "count": c, "delivered_bytes": b} for k, (n, c, b) in messages.items()},
                          "r": t.schedule["r"], "kv_budget_bytes": t.schedule["kv_budget_bytes"],
                          "ring": t.schedule.get("ring"), "ulysses": t.schedule.get("ulysses"),
                          "options": m["scheme"]}, indent=2, default=int))
        return 0
    print(f"{args.file}: {m['scheme']['name']} on {m['nodes']} x {m['hw']['name']} ({m['scheme']['topology']}), "
          f"{m['model']['name']}, seq {m['seq']}, chunk {m['chunk']} ({m['n_chunks']} chunks), {m['decode_tokens']} decode tokens")
    print(f"options {scheme_options(m['scheme'])}")
    print(f"ops {t.n_ops}: " + ", ".join(f"{k} {v}" for k, v in t.kind_count().items()))
    for name, (n, k, b) in messages.items():
        print(f"  {name:14s} {n:8d} ops {k:9d} messages {format_size(b):>10s} delivered")
    print(f"r(c) {t.schedule['r']}, S_node {format_size(t.schedule['kv_budget_bytes'])}")
    uly = t.schedule.get("ulysses")
    if uly:
        print(f"ulysses degree {uly['degree']} x ring degree {uly['ring_degree']}; groups {uly['groups']}; "
              f"query heads per board {len(max(uly['heads'], key=len))}, attention on {len(uly['attention_boards'])} of "
              f"{m['nodes']} boards; KV heads replicated x{uly['kv_replication']:g} "
              f"(the model's {m['model']['kv_heads']} KV heads allow degree {uly['gqa_limit']} without replication)")
    ring = t.schedule.get("ring")
    if ring:
        for order, hops in zip(ring.get("rings", [ring["order"]]), ring.get("rings_hops", [ring["hops"]])):
            print(f"ring ({ring['mode']}) {' -> '.join(map(str, order))} -> {order[0]}; hops per step "
                  f"{hops} (mean {sum(hops) / len(hops):.2f})")
    return 0


def _list(args) -> int:
    from ..shipped import peek_meta, traces

    rows = []
    for name, path in traces().items():
        m = peek_meta(path)
        rows.append({"name": name, "scheme": m["scheme"]["name"], "nodes": m["nodes"], "seq": m["seq"],
                     "chunk": m["chunk"], "decode_tokens": m["decode_tokens"], "model": m["model"]["name"],
                     "hw": m["hw"]["name"], "bytes": path.stat().st_size, "path": str(path)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']:16s} {r['scheme']:7s} {r['nodes']:3d} nodes, seq {r['seq']}, chunk {r['chunk']}, "
              f"{r['decode_tokens']} decode tokens, {r['model']} on {r['hw']}  ({format_size(r['bytes'])})")
    return 0
