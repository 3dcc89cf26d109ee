"""`emu compare RESULTS...`: summaries of several replays side by side."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("compare", epilog="example: emu compare results/mars_16k-* results/ring_16k-*", help="print replay summaries side by side",
                       description="Print the summaries of several results folders side by side.")
    p.add_argument("results", nargs="+", help="results folders (or their summary.json)")
    p.add_argument("--json", action="store_true", help="print a JSON list of the summaries")
    p.set_defaults(func=run)


def _same_file(path: str) -> str:
    """One key for a folder named several ways (``r``, ``./r/``, ``r/summary.json``)."""
    p = Path(path)
    return os.path.realpath(p / "summary.json" if p.is_dir() else p)


def run(args) -> int:
    from ..jsontext import parse_json
    from ..compare import Comparison, table_fields
    from ..reader import ResultsError, ResultsFolder

    # Every folder is read and checked before anything is printed; each distinct file once,
    # and only what is printed is kept (the table's fields, or the summary's text for
    # --json), so memory does not grow with how often a folder is named.
    kept: dict[str, object] = {}
    for p in args.results:
        key = _same_file(p)
        if key not in kept:
            folder = ResultsFolder(p)
            kept[key] = folder.summary_text() if args.json else table_fields(folder.summary())
    keys = [_same_file(p) for p in args.results]
    if args.json:
        out = sys.stdout
        out.write("[\n")
        for i, (p, key) in enumerate(zip(args.results, keys)):
            doc = parse_json(kept[key], p, ResultsError)
            out.write(textwrap.indent(json.dumps(doc, indent=2), "  ") + (",\n" if i < len(keys) - 1 else "\n"))
        out.write("]\n")
        return 0
    print(Comparison([kept[k] for k in keys], [Path(p).name for p in args.results]))
    return 0
