"""`emu compare RESULTS...`: summaries of several replays side by side."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import EmuError

ROWS = [
    ("scheme", "scheme", "{}"),
    ("nodes", "nodes", "{}"),
    ("seq", "prompt tokens", "{}"),
    ("topology", "topology", "{}"),
    ("ttft_s", "TTFT s", "{:.4f}"),
    ("prefill_s", "prefill s", "{:.4f}"),
    ("decode_tokens_per_s", "decode tokens/s", "{:.2f}"),
    ("wire_bytes", "wire MiB", "{:.1f}"),
    ("kv_bytes", "KV payload MiB", "{:.1f}"),
    ("frames", "frame-hops", "{:,}"),
    ("dropped_frames", "dropped frames", "{:,}"),
    ("retransmitted_frames", "retransmitted", "{:,}"),
    ("peak_node_kv_bytes", "peak node KV MiB", "{:.2f}"),
    ("final_layout_owner_only", "owner-only at end", "{}"),
    ("wall_s", "wall s", "{:.2f}"),
]
MIB = {"wire_bytes", "kv_bytes", "peak_node_kv_bytes"}


def register(sub) -> None:
    p = sub.add_parser("compare", epilog="example: emu compare results/mars_16k-* results/ring_16k-*", help="print replay summaries side by side",
                       description="Print the summaries of several results folders side by side.")
    p.add_argument("results", nargs="+", help="results folders (or their summary.json)")
    p.add_argument("--json", action="store_true", help="print a JSON list of the summaries")
    p.set_defaults(func=run)


def load_summary(path: str) -> dict:
    p = Path(path)
    f = p / "summary.json" if p.is_dir() else p
    try:
        return json.loads(f.read_text())
    except FileNotFoundError:
        raise EmuError(f"{path}: no summary.json (is it a results folder?)") from None
    except json.JSONDecodeError as exc:
        raise EmuError(f"{f}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def run(args) -> int:
    sums = [load_summary(p) for p in args.results]
    if args.json:
        print(json.dumps(sums, indent=2))
        return 0
    names = [Path(p).name for p in args.results]
    table = [["", *names]]
    for key, label, fmt in ROWS:
        row = [label]
        for s in sums:
            v = s.get(key)
            if v is None:
                row.append("-")
            else:
                row.append(fmt.format(v / 2**20 if key in MIB else v))
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    return 0
