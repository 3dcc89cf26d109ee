"""Reading a results folder: the one reader every command, the Python API and the dashboard use.

A folder may be damaged, truncated or crafted (docs/results.md lists what it holds), so each
file is checked before anyone computes with it: summary.json's shape and the type of every
documented key, each parquet file's columns and their types, topology.json and
schedule.json as JSON of bounded size and nesting. Every problem is one ``ResultsError``
(an EmuError: the CLI prints it as one line, exit 2) that names the folder and the file:
``r: summary.json: nodes is not an integer (got "4"; docs/results.md)``.

Imports nothing of the engine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .errors import EmuError
from .jsontext import parse_json

SUMMARY = "summary.json"
MAX_SUMMARY_BYTES = 4 << 20   # a summary is a few kB (two per-board lists at 4096 boards: ~100 kB)
MAX_JSON_BYTES = 64 << 20     # topology.json, schedule.json
MAX_BOARDS = 4096             # as many as a trace may have (emu.workload.validate.MAX_NODES)


class ResultsError(EmuError):
    """A results folder, or one of its files, that cannot be read; the message names it."""


# -- summary.json -----------------------------------------------------------------------------
# The documented keys (docs/results.md) and what each must hold when present.
INT, NUM, TEXT, BOOL, INTS, NUMS, TEXTS, COUNTS, LINK, OBJECT = (
    "an integer", "a number", "a string", "true or false", "a list of integers", "a list of numbers",
    "a list of strings", "an object of counts", "an object {src, dst, utilization}", "an object")
SUMMARY_KEYS = {
    "version": TEXT, "trace": TEXT, "scheme": TEXT, "model": TEXT, "hw": TEXT, "topology": TEXT, "engine": TEXT,
    "nodes": INT, "seq": INT, "chunk": INT, "seed": INT, "decode_tokens": INT, "frames": INT,
    "dropped_frames": INT, "retransmitted_frames": INT, "control_frames": INT, "incomplete_ops": INT,
    "loss": NUM, "ttft_s": NUM, "prefill_s": NUM, "decode_s": NUM, "decode_tokens_per_s": NUM, "sim_end_s": NUM,
    "wall_s": NUM, "wire_bytes": NUM, "kv_bytes": NUM, "peak_node_kv_bytes": NUM,
    "peak_node_owner_replica_bytes": NUM, "peak_node_transient_bytes": NUM,
    "final_layout_owner_only": BOOL,
    "final_node_kv_bytes": NUMS, "owner_only_node_kv_bytes": NUMS,
    "scenario": TEXTS, "overrides": TEXTS, "directory_errors": TEXTS, "incomplete": TEXTS, "failed_sends": TEXTS,
    "dropped_by_cause": COUNTS, "control_frames_by_op": COUNTS,
    "busiest_link": LINK, "functional": OBJECT,
}
SUMMARY_NEEDS = ("scheme", "nodes", "ttft_s", "wire_bytes", "kv_bytes")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _holds(kind: str, v) -> bool:
    if kind == INT:
        return _is_int(v)
    if kind == NUM:
        return _is_num(v)
    if kind == TEXT:
        return isinstance(v, str)
    if kind == BOOL:
        return isinstance(v, bool)
    if kind in (INTS, NUMS, TEXTS):
        ok = {INTS: _is_int, NUMS: _is_num, TEXTS: lambda x: isinstance(x, str)}[kind]
        return isinstance(v, list) and all(ok(x) for x in v)
    if kind == COUNTS:
        return isinstance(v, dict) and all(_is_int(x) for x in v.values())
    if kind == LINK:
        return isinstance(v, dict) and _is_int(v.get("src")) and _is_int(v.get("dst")) and _is_num(v.get("utilization"))
    return isinstance(v, dict)


def _shown(v) -> str:
    try:
        text = json.dumps(v)
    except (ValueError, RecursionError):  # an integer past Python's digit limit
        text = type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def check_summary(doc, where: str) -> dict:
    """``doc`` if it is a summary object (docs/results.md), else ResultsError naming ``where``."""
    if not isinstance(doc, dict):
        raise ResultsError(f"{where}: expected a summary object, got a JSON {_json_type(doc)}")
    missing = [k for k in SUMMARY_NEEDS if k not in doc]
    if missing:
        raise ResultsError(f"{where}: lacks {', '.join(missing)} (docs/results.md)")
    for key, kind in SUMMARY_KEYS.items():
        v = doc.get(key)
        if v is None and key not in SUMMARY_NEEDS:
            continue
        if not _holds(kind, v):
            raise ResultsError(f"{where}: {key} is not {kind} (got {_shown(v)}; docs/results.md)")
    if not 1 <= doc["nodes"] <= MAX_BOARDS:
        raise ResultsError(f"{where}: nodes {doc['nodes']}: expected 1..{MAX_BOARDS} boards")
    return doc


def _json_type(doc) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(doc), type(doc).__name__)


# -- parquet tables ---------------------------------------------------------------------------
# Each file's columns and the kind of values they hold (docs/results.md); more columns are fine.
I, F, S = "integers", "numbers", "strings"
TABLES = {
    "ops.parquet": {"op": I, "kind": S, "stage": S, "node": I, "src": I, "dsts": I, "chunk": I, "layer": I,
                    "bytes": I, "start_s": F, "end_s": F},
    "links.parquet": {"link": I, "src": I, "dst": I, "t_start_s": F, "t_end_s": F, "frames": I, "wire_bytes": I,
                      "busy_s": F, "utilization": F, "queue_bytes_max": I, "lost_frames": I},
    "nodes.parquet": {"t_s": F, "node": I, "owner_bytes": I, "replica_bytes": I, "transient_bytes": I,
                      "replica_factor": F},
    "deliveries.parquet": {"op": I, "node": I, "t_s": F},
}
# Columns that hold a board (-1: none), checked against the summary's board count.
BOARD_COLUMNS = {"ops.parquet": ("node", "src"), "nodes.parquet": ("node",), "deliveries.parquet": ("node",)}
# Times that may be NaN (an op that never ran); every other number must be finite and in
# 0..MAX_NUMBER: times, utilization and replica factors, none past the engine's int64 picoseconds.
MAY_BE_NAN = {("ops.parquet", "start_s"), ("ops.parquet", "end_s")}
MAX_NUMBER = 2**63 / 1e12


def _type_kind(t) -> str | None:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return I
    if pa.types.is_floating(t):
        return F
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return S
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


class ResultsFolder:
    """A results folder, read on demand. ``label`` is how messages name it (default: the path).

    ``path`` may also be a summary file (``emu compare`` takes one): the folder is its parent."""

    def __init__(self, path, label: str | None = None):
        path = Path(path)
        self.label = str(path) if label is None else label
        if not path.exists():
            raise ResultsError(f"{self.label}: no such results folder")
        self.summary_name = SUMMARY
        self._summary_where = f"{self.label}: {SUMMARY}"
        if not path.is_dir():
            if not path.is_file():
                raise ResultsError(f"{self.label}: not a folder (give a results folder written by emu replay)")
            self.summary_name, self._summary_where, path = path.name, self.label, path.parent
        self.path = path
        self._summary: dict | None = None

    def _where(self, name: str) -> str:
        return self._summary_where if name == self.summary_name else f"{self.label}: {name}"

    def _bytes(self, name: str, limit: int, required: bool = True) -> bytes | None:
        f = self.path / name
        if not f.exists() and not f.is_symlink():
            if not required:
                return None
            if name == self.summary_name:
                raise ResultsError(f"{self.label}: not a results folder (no {SUMMARY})")
            raise ResultsError(f"{self._where(name)} is missing (docs/results.md lists the files of a results folder)")
        if not f.is_file():
            raise ResultsError(f"{self._where(name)}: not a file")
        try:
            with open(f, "rb") as fh:
                raw = fh.read(limit + 1)
        except OSError as exc:
            raise ResultsError(f"{self._where(name)}: cannot read ({exc.strerror or exc})") from None
        if len(raw) > limit:
            raise ResultsError(f"{self._where(name)}: more than {limit >> 20} MiB; not what emu replay writes")
        return raw

    def summary(self) -> dict:
        """summary.json, checked (``check_summary``)."""
        if self._summary is None:
            self._summary = check_summary(self._summary_doc(), self._summary_where)
        return self._summary

    def _summary_doc(self, raw: bytes | None = None):
        raw = self._bytes(self.summary_name, MAX_SUMMARY_BYTES) if raw is None else raw
        return parse_json(raw, self._summary_where, ResultsError)

    def summary_text(self) -> bytes:
        """summary.json's bytes once it is known good (``emu compare --json`` keeps these, not the objects)."""
        raw = self._bytes(self.summary_name, MAX_SUMMARY_BYTES)
        check_summary(self._summary_doc(raw), self._summary_where)
        return raw

    def json(self, name: str, required: bool = False, kind: type = dict):
        """topology.json or schedule.json: a JSON ``kind``; None when missing and not ``required``."""
        raw = self._bytes(name, MAX_JSON_BYTES, required)
        if raw is None:
            return None
        doc = parse_json(raw, self._where(name), ResultsError)
        if not isinstance(doc, kind):
            raise ResultsError(f"{self._where(name)}: expected a JSON object, got a JSON {_json_type(doc)}")
        return doc

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def _schema(self, name: str):
        """The parquet file's path and column names once its columns are the documented ones
        (``TABLES``)."""
        import pyarrow.parquet as pq

        f = self.path / name
        if not f.is_file():
            if f.exists():
                raise ResultsError(f"{self._where(name)}: not a file")
            raise ResultsError(f"{self._where(name)} is missing (docs/results.md lists the files of a results folder)")
        try:
            schema = pq.read_schema(f)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise ResultsError(f"{self._where(name)} is not a readable Parquet file ({_first_line(exc)})") from None
        want = TABLES[name]
        missing = [c for c in want if c not in schema.names]
        if missing:
            raise ResultsError(f"{self._where(name)} lacks the column{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(missing)} (docs/results.md)")
        for col, kind in want.items():
            got = _type_kind(schema.field(col).type)
            if not (got == kind or (kind == F and got == I)):
                raise ResultsError(f"{self._where(name)}: column {col} holds {schema.field(col).type}, "
                                   f"expected {kind} (docs/results.md)")
        return f, schema.names

    def check(self) -> None:
        """Every file without reading the tables' rows: the summary, the columns of each table
        (deliveries.parquet when present: older folders lack it), the JSON files present."""
        self.summary()
        for name in TABLES:
            if name != "deliveries.parquet" or self.has(name):
                self._schema(name)
        for name in ("topology.json", "schedule.json"):
            self.json(name)

    def table(self, name: str, columns=None):
        """A parquet file as a DataFrame, its columns and values checked (``TABLES``).

        ``columns``: read only those of these the file has (each checked as in the whole
        table): a view that needs no per-op lists (``deps``) reads ops.parquet 4-8x faster."""
        import numpy as np
        import pandas as pd

        f, names = self._schema(name)
        want = TABLES[name]
        if columns is not None:
            columns = [c for c in columns if c in names]
            want = {c: k for c, k in want.items() if c in columns}
        try:
            df = pd.read_parquet(f, columns=columns)
        except Exception as exc:
            raise ResultsError(f"{self._where(name)} is not a readable Parquet file ({_first_line(exc)})") from None
        for col, kind in want.items():
            if kind != F:
                continue
            v = df[col].to_numpy(np.float64)
            with np.errstate(invalid="ignore"):
                bad = ~((v >= 0) & (v <= MAX_NUMBER))
            if (name, col) in MAY_BE_NAN:
                bad &= ~np.isnan(v)
            if bad.any():
                raise ResultsError(f"{self._where(name)}: column {col} holds {v[bad][0]} in row {int(np.argmax(bad))}; "
                                   f"expected 0..{MAX_NUMBER:.3g}")
        if name == "ops.parquet" and "op" in want and not np.array_equal(df["op"].to_numpy(), np.arange(len(df))):
            raise ResultsError(f"{self._where(name)}: column op is not 0, 1, 2, ... (one row per trace op, in order)")
        boards = self.summary()["nodes"]
        for col in (c for c in BOARD_COLUMNS.get(name, ()) if c in want):
            v = df[col].to_numpy()
            bad = (v < -1) | (v >= boards) if col != "node" or name == "ops.parquet" else (v < 0) | (v >= boards)
            if bad.any():
                raise ResultsError(f"{self._where(name)}: column {col} holds board {int(v[bad][0])}; "
                                   f"the run has boards 0..{boards - 1}")
        return df
