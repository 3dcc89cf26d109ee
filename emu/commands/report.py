"""`emu report RESULTS_DIR ... -o report.html`: the dashboard's figures as one static HTML file."""

from __future__ import annotations

import json

from pathlib import Path

from ..errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("report", epilog="example: emu report results/mars_16k-* -o report.html", help="write the dashboard's figures of results folders to one HTML file",
                       description="Write one self-contained HTML file (plotly.js embedded, opens offline) with the "
                                   "dashboard's figures of one or more results folders: overview, links, memory and "
                                   "replicas, timeline and, when there is a capture, frames.")
    p.add_argument("results", nargs="+", help="results folders (or folders holding them)")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--title", help="title of the report")
    p.add_argument("--frames", type=int, default=200, metavar="N",
                   help="rows of the frames table per capture (default 200; 0 leaves the capture out)")
    p.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    p.set_defaults(func=run)


def _results_folders(arg: str) -> list[Path]:
    """The results folders ``arg`` names: itself, or the folders holding a summary.json in it."""
    p = Path(arg)
    if not p.exists():
        raise ConfigError(f"{arg}: no such results folder")
    if not p.is_dir():
        raise ConfigError(f"{arg}: not a folder (give a results folder, or a folder holding them)")
    if (p / "summary.json").exists():
        return [p]
    found = sorted(d for d in p.iterdir() if d.is_dir() and (d / "summary.json").exists())
    if not found and not _has_sweeps(p):
        raise ConfigError(f"{arg}: no results in it (no summary.json or sweep results.parquet there or in its folders)")
    return found


def _has_sweeps(p: Path) -> bool:
    """A sweep folder, or a folder holding sweep folders (their figures go in the report too)."""
    return any(p.glob("*.parquet")) or any(p.glob("*/results.parquet")) or any(p.glob("*/*.parquet"))


def run(args) -> int:
    from ..outputs import check_writable
    from ..reader import ResultsFolder

    for r in args.results:
        for folder in _results_folders(r):
            # one line naming the file, before any figure is drawn: the summary, each table's
            # columns, topology.json and schedule.json (the reader every command uses)
            ResultsFolder(folder).check()
    if args.frames < 0:
        raise ConfigError(f"--frames {args.frames}: must be >= 0")
    check_writable(args.output, "-o")
    from dashboard.report import write_report

    out, n = write_report(args.results, args.output, title=args.title, frames_rows=args.frames)
    if args.json:
        print(json.dumps({"path": str(out), "figures": n, "bytes": out.stat().st_size}))
    else:
        print(f"wrote {out}: {n} figures, {out.stat().st_size / 2**20:.1f} MiB")
    return 0
