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


MAX_SUMMARY_BYTES = 64 << 20  # a summary is a few kB; anything this large is not one


def load_summary(path: str) -> dict:
    """The summary object of a results folder (or of its summary.json); EmuError names the file."""
    p = Path(path)
    f = p / "summary.json" if p.is_dir() else p
    try:
        if f.is_dir():
            raise EmuError(f"{f}: is a folder, not a summary file")
        with open(f, "rb") as fh:
            raw = fh.read(MAX_SUMMARY_BYTES + 1)
    except FileNotFoundError:
        raise EmuError(f"{path}: no summary.json (is it a results folder?)") from None
    except OSError as exc:
        raise EmuError(f"{f}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_SUMMARY_BYTES:
        raise EmuError(f"{f}: more than {MAX_SUMMARY_BYTES >> 20} MiB; not a replay summary")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise EmuError(f"{f}: not a summary (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise EmuError(f"{f}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise EmuError(f"{f}: not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise EmuError(f"{f}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise EmuError(f"{f}: expected a summary object, got a JSON {type(doc).__name__}")
    for key, _, fmt in ROWS:  # what compare and report print must be what it claims to be
        _cell(doc, key, fmt, str(f))
    return doc


def _cell(s: dict, key: str, fmt: str, where: str) -> str:
    v = s.get(key)
    if v is None:
        return "-"
    number = fmt != "{}"
    if number and (isinstance(v, bool) and key != "final_layout_owner_only" or not isinstance(v, (int, float))):
        raise EmuError(f"{where}: {key}: expected a number, got {json.dumps(v)[:60]}")
    if not number and not isinstance(v, (str, int, float, bool)):
        raise EmuError(f"{where}: {key}: expected a single value, got {json.dumps(v)[:60]}")
    try:
        return fmt.format(v / 2**20 if key in MIB else v)
    except (ValueError, OverflowError):
        raise EmuError(f"{where}: {key}: {json.dumps(v)[:60]} is not a number that prints") from None


def run(args) -> int:
    sums = [load_summary(p) for p in args.results]
    if args.json:
        print(json.dumps(sums, indent=2))
        return 0
    names = [Path(p).name for p in args.results]
    table = [["", *names]]
    for key, label, fmt in ROWS:
        table.append([label, *(_cell(s, key, fmt, p) for s, p in zip(sums, args.results))])  # checked on load
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    return 0
