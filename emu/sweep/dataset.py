"""A sweep's output folder: one Parquet part per finished point, one consolidated file.

::

    OUT/sweep.json          the sweep: name, axes, fixed values, every point with its id
    OUT/parts/<id>.parquet  one row per finished point (ok, incomplete or failed)
    OUT/results.parquet     every finished point of the sweep, in sweep order
    OUT/runs/<scheme>-<id>/ the point's results folder (--keep-runs)

Every file is written to a temporary name and renamed (``emu.atomic``), so an interrupted
sweep leaves each part whole or absent, and a rerun runs exactly the points without a part.
All parts and the consolidated file share one schema (``COLUMNS``), so ``OUT/parts`` is also
a valid Parquet dataset.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..atomic import atomic_file

S, I, F, B = pa.string(), pa.int64(), pa.float64(), pa.bool_()

# The dataset's columns (docs/sweeps.md). Profile-field parameters ("hw.mem_bw") are added
# as string columns after "overrides"; keys a later replay summary adds go before "wall_s".
COLUMNS: list[tuple[str, pa.DataType]] = [
    # the point
    ("sweep", S), ("index", I), ("point", S), ("status", S), ("error", S),
    ("scheme", S), ("seq", I), ("nodes", I), ("chunk", I), ("chunk_mode", S), ("model", S), ("hw", S),
    ("decode_tokens", I), ("kv_budget", S), ("alpha", F), ("pd_mode", S), ("prefill_nodes", I),
    ("topology", S), ("link_rate", S), ("loss", F), ("seed", I), ("overrides", S),
    # what the generator decided
    ("n_chunks", I), ("kv_budget_bytes", I), ("owner_share_bytes", I), ("r_schedule", S), ("r_max", I),
    ("r_mean", F),
    # what the replay measured (the summary, docs/results.md)
    ("topology_name", S), ("link_rate_bps", I), ("version", S),
    ("ttft_s", F), ("prefill_s", F), ("decode_s", F), ("decode_tokens_per_s", F),
    ("wire_bytes", I), ("kv_bytes", I), ("frames", I), ("dropped_frames", I),
    ("dropped_queue_full", I), ("dropped_loss", I), ("dropped_corrupt", I), ("dropped_link_down", I),
    ("dropped_mtu", I), ("dropped_no_route", I), ("dropped_duplicate", I), ("retransmitted_frames", I), ("control_frames", I),
    ("final_layout_owner_only", B), ("peak_node_kv_bytes", I), ("final_node_kv_bytes_max", I),
    ("owner_only_node_kv_bytes_max", I), ("busiest_link_src", I), ("busiest_link_dst", I),
    ("busiest_link_utilization", F), ("directory_errors", I), ("incomplete_ops", I), ("sim_end_s", F),
    ("replica_factor_peak", F), ("replica_factor_mean", F), ("peak_node_owner_replica_bytes", I), ("peak_node_replica_bytes", I),
    ("peak_node_transient_bytes", I),
    # the fabric (docs/engine.md, Port buffers and flow control)
    ("flow_control", S), ("signals", S), ("port_buffer_bytes", I), ("ports", I), ("peak_transit_backlog_bytes", I),
    ("ports_over_buffer", I), ("peak_held_bytes", I), ("paused_s", F), ("ports_paused", I),
    ("routing", S), ("dependency_cycle", S), ("reliable", B), ("rto_min_s", F),
    ("run_dir", S),
    ("engine", S),  # the replay loop that ran the point (compiled or python: identical results)
    ("wall_s", F),
]
KNOWN = dict(COLUMNS)
NONDETERMINISTIC = ("wall_s",)


def schema(rows: list[dict], meta: dict | None = None) -> pa.Schema:
    """``COLUMNS`` plus the profile-field parameters and any new keys the rows carry."""
    extra_params, extra_other = [], []
    for row in rows:
        for k in row:
            if k in KNOWN or k in extra_params or k in extra_other:
                continue
            (extra_params if "." in k else extra_other).append(k)
    fields = []
    for name, typ in COLUMNS:
        if name == "wall_s":
            for k in extra_other:
                typ_k = pa.array([r.get(k) for r in rows]).type
                fields.append(pa.field(k, S if pa.types.is_null(typ_k) else typ_k))
        fields.append(pa.field(name, typ))
        if name == "overrides":
            fields += [pa.field(k, S) for k in sorted(extra_params)]
    sch = pa.schema(fields)
    if meta is not None:
        sch = sch.with_metadata({b"emu.sweep": json.dumps(meta).encode()})
    return sch


def table(rows: list[dict], meta: dict | None = None) -> pa.Table:
    sch = schema(rows, meta)
    return pa.Table.from_pylist([{k: r.get(k) for k in sch.names} for r in rows], schema=sch)


def part_path(out: Path, pid: str) -> Path:
    return Path(out) / "parts" / f"{pid}.parquet"


@contextlib.contextmanager
def naming(path: Path):
    """A failed write names the file it was writing (a full disk's OSError names none)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def write_part(out: Path, row: dict) -> Path:
    path = part_path(out, row["point"])
    with naming(path), atomic_file(path) as fh:
        pq.write_table(table([row]), fh)
    return path


def clear_part_temps(out: Path, pid: str) -> None:
    """Remove the temporary files of a point's part that a killed sweep left (emu.atomic)."""
    for p in (Path(out) / "parts").glob(f".{pid}.parquet.*.part"):
        with contextlib.suppress(OSError):
            p.unlink()


def read_part(out: Path, pid: str) -> dict | None:
    """The row of a finished point, or None (no part, or one that does not read)."""
    path = part_path(out, pid)
    if not path.is_file():
        return None
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException):
        return None
    return rows[0] if len(rows) == 1 and rows[0].get("point") == pid else None


def consolidate(out: Path, rows: list[dict], meta: dict) -> Path:
    """Write ``OUT/results.parquet``: the given rows (the sweep's finished points, in order)."""
    path = Path(out) / "results.parquet"
    with naming(path), atomic_file(path) as fh:
        pq.write_table(table(rows, meta), fh)
    return path


def read(out_or_file: str | Path):
    """The consolidated dataset as a pandas DataFrame, and the sweep's metadata."""
    p = Path(out_or_file)
    f = p / "results.parquet" if p.is_dir() else p
    t = pq.read_table(f)
    raw = (t.schema.metadata or {}).get(b"emu.sweep")
    return t.to_pandas(), (json.loads(raw) if raw else {})
