"""`emu sweep SWEEP.toml`: run a grid of replays on a local process pool or a Dask cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", epilog="example: emu sweep quick --workers 2", help="run a parameter sweep of replays (local process pool or Dask cluster)",
        description="Generate and replay every point of a sweep file's grid; write one Parquet row per point "
                    "to OUT/results.parquet (docs/sweeps.md). Rerunning skips the points already done.")
    p.add_argument("sweep", help="sweep file (TOML), or the name of a shipped one (e.g. quick); "
                                 "`emu sweep list` shows the shipped ones")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on this Dask distributed scheduler, e.g. tcp://10.0.0.1:8786 (default: a local process pool)")
    p.add_argument("--workers", metavar="K", help="local pool size (default: one per core)")
    p.add_argument("--out", help="output folder (default results/sweeps/<name>)")
    p.add_argument("--keep-runs", action="store_true",
                   help="also keep each point's results folder in OUT/runs (on a cluster OUT must be a shared path)")
    p.add_argument("--retry-failed", action="store_true", help="run failed and incomplete points again")
    p.add_argument("--dry-run", action="store_true", help="list the points (and which are done) and exit")
    p.add_argument("--json", action="store_true", help="print the outcome (or the list) as one JSON object")
    p.set_defaults(func=run)


def _workers(text: str | None, scheduler: str | None) -> int | None:
    if text is None:
        return None
    if scheduler:
        raise ConfigError("--workers sizes the local pool; a Dask cluster has the workers started on it")
    try:
        k = int(text)
    except ValueError:
        raise ConfigError(f"--workers {text!r}: expected a whole number >= 1") from None
    if k < 1:
        raise ConfigError(f"--workers {text!r}: expected a whole number >= 1")
    return k


def varying(sweep) -> list[str]:
    """The sweep's axes (grid and include keys): the table's parameter columns."""
    return list(sweep.axes) or ["scheme"]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return "; ".join(map(str, v)) or "-"
    return str(v)


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    w = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.rjust(w[i]) if i in right else c.ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), *(fmt(r) for r in rows)])


MIB = 2**20
METRICS = [  # column, header, format
    ("chunk", "chunk", "{}"),
    ("ttft_s", "TTFT s", "{:.4f}"),
    ("wire_bytes", "wire MiB", "{:.1f}"),
    ("kv_bytes", "KV MiB", "{:.1f}"),
    ("peak_node_kv_bytes", "peak KV MiB", "{:.2f}"),
    ("r_max", "r max", "{}"),
    ("replica_factor_mean", "mean copies", "{:.2f}"),
]


def results_table(sweep, rows: list[dict]) -> str:
    cols = varying(sweep)
    metrics = [m for m in METRICS if m[0] not in cols]
    header = ["#", *cols, "status", *(m[1] for m in metrics)]
    body = []
    for r in rows:
        cells = [str(r["index"]), *(_cell(r.get("overrides") if c == "overrides" else r.get(c)) for c in cols),
                 r["status"]]
        for key, _, fmt in metrics:
            v = r.get(key)
            if v is None or v != v:
                cells.append("-")
            else:
                cells.append(fmt.format(v / MIB if key.endswith("bytes") else v))
        body.append(cells)
    right = {0, *range(len(cols) + 2, len(header))}
    right |= {i + 1 for i, c in enumerate(cols) if all(isinstance(r.get(c), (int, float)) for r in rows)}
    text = _table(header, body, right)
    errors = [f"  #{r['index']}: {r['error']}" for r in rows if r.get("error")]
    return text + ("\nerrors\n" + "\n".join(errors) if errors else "")


def _json_rows(rows: list[dict]) -> list[dict]:
    """Dataset rows as JSON: NaN (a metric a failed point lacks) becomes null."""
    def plain(v):
        v = v.item() if hasattr(v, "item") else v  # numpy scalars
        return None if isinstance(v, float) and v != v else v

    return [{k: plain(v) for k, v in r.items()} for r in rows]


def _list(args) -> int:
    from ..shipped import sweeps
    from ..sweep import spec

    rows = []
    for name, path in sweeps().items():
        s = spec.load(path)
        rows.append({"name": name, "points": len(s.points), "description": s.description, "path": str(path)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        print(f"{r['name']:{w}s}  {r['points']:4d} points  {r['description']}")
    return 0


def _dry_run(sweep, out: Path, as_json: bool = False) -> int:
    from ..sweep import runner

    runner.check_out(sweep, out)  # the refusal the real run would give
    have = runner.status(sweep, out)
    if as_json:
        ids = sweep.ids()
        print(json.dumps({"sweep": sweep.name, "out": str(out), "points": [
            {"index": i, "point": ids[i], "state": h["status"] if h else "todo", "params": p}
            for i, (p, h) in enumerate(zip(sweep.points, have))]}, indent=2, default=str))
        return 0
    cols = varying(sweep)
    const = {k: v for k, v in sweep.points[0].items()
             if all(p.get(k) == v for p in sweep.points) and (v or v == 0) and k not in cols}
    print(f"sweep {sweep.name}: {len(sweep.points)} points"
          + (f" ({sweep.duplicates} duplicates merged)" if sweep.duplicates else "") + f"; output {out}")
    if sweep.description:
        print(f"  {sweep.description}")
    print("  same for all: " + ", ".join(f"{k}={_cell(v)}" for k, v in const.items()))
    ids = sweep.ids()
    body = [[str(i), ids[i], h["status"] if h else "todo", *(_cell(p.get("set") if c == "overrides" else p.get(c)) for c in cols)]
            for i, (p, h) in enumerate(zip(sweep.points, have))]
    print(_table(["#", "point", "state", *cols], body, {0}))
    todo = sum(h is None for h in have)
    print(f"{todo} to run, {len(have) - todo} done")
    return 0


def run(args) -> int:
    from ..sweep import runner, spec

    if args.sweep == "list" and not Path(args.sweep).exists():
        return _list(args)
    workers = _workers(args.workers, args.scheduler)
    path = spec.resolve(args.sweep)
    sweep = spec.load(path)
    out = Path(args.out) if args.out else Path("results") / "sweeps" / sweep.name
    if args.dry_run:
        return _dry_run(sweep, out, args.json)
    rep = runner.run(sweep, out, scheduler=args.scheduler, workers=workers, keep_runs=args.keep_runs,
                     retry_failed=args.retry_failed, progress=sys.stderr.isatty() and not args.json)
    if args.json:
        print(json.dumps({"sweep": sweep.name, "points": len(sweep.points), "ran": rep.ran, "earlier": rep.earlier,
                          "ok": rep.count("ok"), "incomplete": rep.count("incomplete"), "failed": rep.count("failed"),
                          "elsewhere": rep.elsewhere, "lost": list(rep.lost),
                          "scheduler_lost": rep.scheduler_lost, "wall_s": rep.wall_s, "results": str(rep.results),
                          "rows": _json_rows(rep.rows)}, indent=2, default=str))
        return 0 if rep.ok else 1
    if rep.rows:
        print(results_table(sweep, rep.rows))
    lost = len(rep.lost)
    print(f"sweep {sweep.name}: {len(sweep.points)} points: {rep.ran} run now, {rep.earlier} done before"
          + (f", {rep.elsewhere} run by another sweep on {out}" if rep.elsewhere else "") + "; "
          f"{rep.count('ok')} ok, {rep.count('incomplete')} incomplete, {rep.count('failed')} failed"
          + (f", {lost} lost (worker died; rerun to resume)" if lost else "") + f"; {rep.wall_s:.1f} s")
    for line in rep.lost[:5]:
        print(f"  lost {line}", file=sys.stderr)
    if rep.scheduler_lost:
        print(f"emu sweep: lost the scheduler {args.scheduler}: {rep.scheduler_lost} points not run; "
              f"run the same command again to resume", file=sys.stderr)
    print(f"results   {rep.results}")
    return 0 if rep.ok else 1
