"""A results folder's timeline as Chrome trace-event JSON, which Perfetto UI and chrome://tracing open.

Reads the folder only (ops, deliveries, nodes and links tables and summary.json:
docs/results.md) and imports nothing of the engine, so the dashboard can offer the same file.
A folder written before deliveries.parquet existed gets no receive slices, arrows or reductions.

What is drawn (docs/api.md, "Timeline export"):

- one process per board; in it a ``compute`` lane (one slice per compute op, which the
  engine runs one at a time per board), ``nic send`` lanes (one slice per message the
  board sends: drain and invalidate control messages too, from the send until its last
  destination has it), a ``nic receive`` lane (a zero-length slice where a message became
  whole at this board) and ``nic reduce`` lanes (a reduction, at its root, from the first
  contribution until the result is whole). Slices on one lane must not overlap in the
  format, so concurrent sends (or reductions) go to further lanes ``nic send 2``, ...;
- a flow arrow from each send slice to each of its deliveries;
- counter tracks: KV memory per board (owner, replica, transient bytes), and per link
  direction its utilization per time bin (in a ``links`` process).

Times are in microseconds with nanosecond resolution (the format's unit; Perfetto keeps
nanoseconds). A message whose sources are several boards (an all-to-all) is drawn at its
first source, the one the ops table names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import atomic_file
from ..errors import ConfigError, EmuError
from ..reader import ResultsError, ResultsFolder

SEND_KINDS = ("send", "all_to_all", "drain", "invalidate")
REDUCE_KINDS = ("reduce",)
COMPUTE_TID, SEND_TID, RECEIVE_TID, REDUCE_TID = 1, 100, 1000, 2000  # first tid of each lane family
MAX_LANES = 900  # per lane family; past that a window or a node set is needed


def board_set(nodes, boards: int, what: str = "nodes") -> list[int]:
    """The boards ``nodes`` names, sorted: a spec like "0,1,5" or "0-3" (what ``--nodes`` takes),
    a range or an iterable of ints. Each is checked against the run's ``boards`` before
    anything is expanded, so "0-100000000" or range(10**9) costs nothing (ConfigError)."""
    def past(n) -> ConfigError:
        return ConfigError(f"{what} {shown}: node {n} is not in the run (boards 0..{boards - 1})")

    shown = repr(nodes) if isinstance(nodes, (str, range)) else "list"
    keep: set[int] = set()
    if isinstance(nodes, str):
        for part in nodes.split(","):
            a, dash, b = part.strip().partition("-")
            try:
                lo, hi = int(a), int(b) if dash else int(a)
            except ValueError:
                raise ConfigError(f"{what} {nodes!r}: expected boards like 0,1,5 or 0-3") from None
            if hi < lo:
                raise ConfigError(f"{what} {nodes!r}: range {part.strip()} runs backwards")
            if lo < 0 or hi >= boards:
                raise past(lo if lo < 0 else hi)
            keep.update(range(lo, hi + 1))
    elif isinstance(nodes, range):
        if len(nodes):
            lo, hi = min(nodes[0], nodes[-1]), max(nodes[0], nodes[-1])
            if lo < 0 or hi >= boards:
                raise past(lo if lo < 0 else hi)
        keep.update(nodes)
    else:
        try:
            items = iter(nodes)
        except TypeError:
            raise ConfigError(f"{what}: expected boards like \"0-3\", a range or a list of ints") from None
        for n in items:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise ConfigError(f"{what}: {n!r} is not a board number")
            if not 0 <= n < boards:
                raise past(int(n))
            keep.add(int(n))
    if not keep:
        raise ConfigError(f"{what} {shown}: names no board")
    return sorted(keep)


def _deliveries(folder: ResultsFolder, n_ops: int) -> pd.DataFrame:
    d = folder.table("deliveries.parquet")
    bad = (d["op"] < 0) | (d["op"] >= n_ops)
    if bad.any():
        raise ResultsError(f"{folder.label}: deliveries.parquet: op {int(d['op'][bad].iloc[0])} is not in "
                           f"ops.parquet (ops 0..{n_ops - 1})")
    return d


def _ns(seconds) -> np.ndarray:
    return np.rint(np.asarray(seconds, np.float64) * 1e9).astype(np.int64)


def _us(ns: int) -> float:
    return ns / 1000


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy interval partitioning: each slice to the first lane free at its start (slices in start order)."""
    lane = np.zeros(len(start), np.int64)
    free_at: list[int] = []
    for i in np.argsort(start, kind="stable").tolist():
        s = int(start[i])
        for k, t in enumerate(free_at):
            if t <= s:
                lane[i] = k
                free_at[k] = int(end[i])
                break
        else:
            lane[i] = len(free_at)
            free_at.append(int(end[i]))
    return lane


def perfetto_trace(results_dir, *, start_ps: int | None = None, end_ps: int | None = None, nodes=None,
                   flag: str = "") -> dict:
    """The timeline of the results folder ``results_dir`` as a trace-event JSON object.

    ``start_ps``/``end_ps`` keep a time window (slices cut at its edges, counters starting
    with the value they had at its start); ``nodes`` keeps those boards (and the links that
    touch them): "0,1,5", "0-3", a range or a list (``board_set``). ``flag``: what error
    messages put before an option's name (the CLI passes "--")."""
    folder = ResultsFolder(results_dir)
    results = folder.path
    summary = folder.summary()
    boards = summary["nodes"]
    keep = set(range(boards)) if nodes is None else set(board_set(nodes, boards, f"{flag}nodes"))
    lo = 0 if start_ps is None else int(start_ps) // 1000
    hi = None if end_ps is None else -(-int(end_ps) // 1000)
    if hi is not None and hi <= lo:
        raise EmuError(f"time window {start_ps} ps .. {end_ps} ps is empty")

    ops = folder.table("ops.parquet")
    has_deliveries = folder.has("deliveries.parquet")
    deliv = _deliveries(folder, len(ops)) if has_deliveries else \
        pd.DataFrame({"op": pd.Series([], dtype="int64"), "node": pd.Series([], dtype="int64"),
                      "t_s": pd.Series([], dtype="float64")})  # folders from before it: no arrows, no reductions
    kv = folder.table("nodes.parquet")
    links = folder.table("links.parquet")
    kind = ops["kind"].astype(str).to_numpy()
    kinds = kind.tolist()
    ran = ops["start_s"].notna().to_numpy() & ops["end_s"].notna().to_numpy()
    t0 = np.where(ran, _ns(ops["start_s"].fillna(0)), 0)
    t1 = np.where(ran, _ns(ops["end_s"].fillna(0)), 0)
    is_send = np.isin(kind, SEND_KINDS)
    is_reduce = np.isin(kind, REDUCE_KINDS)
    is_compute = ~(is_send | is_reduce)
    # the board each op's slice is drawn on: compute at its node, sends at their source,
    # reductions at their root (the one destination)
    root = deliv.groupby("op")["node"].first()
    board = np.where(is_send, ops["src"].to_numpy(), ops["node"].to_numpy()).astype(np.int64)
    red_ops = np.flatnonzero(is_reduce)
    board[red_ops] = root.reindex(red_ops).fillna(-1).to_numpy(np.int64)

    def visible(a, b):
        return (b >= lo) & ((a <= hi) if hi is not None else True)

    def clip(a, b):
        return np.maximum(a, lo), (np.minimum(b, hi) if hi is not None else b)

    events: list[dict] = []
    meta: list[dict] = []

    chunk, layer = ops["chunk"].tolist(), ops["layer"].tolist()
    nbytes, stage = ops["bytes"].tolist(), ops["stage"].astype(str).tolist()

    def arg_of(i: int) -> dict:
        return {"op": i, "kind": kinds[i], "chunk": chunk[i], "layer": layer[i], "bytes": nbytes[i], "stage": stage[i]}

    for b in sorted(keep):
        pid = b + 1
        meta += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"board {b}"}},
                 {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": b}}]
    send_slot: dict[int, tuple[int, int, int]] = {}  # op -> (pid, tid, ts of its slice)
    used: dict[tuple[int, int], str] = {}
    for family, base, label in ((is_compute, COMPUTE_TID, "compute"), (is_send, SEND_TID, "nic send"),
                                (is_reduce, REDUCE_TID, "nic reduce")):
        idx = np.flatnonzero(family & ran & np.isin(board, list(keep)) & visible(t0, t1))
        a, z = clip(t0[idx], t1[idx])
        for b in np.unique(board[idx]).tolist():
            mine = board[idx] == b
            lane = np.zeros(int(mine.sum()), np.int64) if base == COMPUTE_TID else _lanes(a[mine], z[mine])
            if lane.max(initial=0) >= MAX_LANES:
                raise EmuError(f"board {b}: more than {MAX_LANES} overlapping {label} slices; "
                               "keep a time window or fewer nodes")
            for i, s, e, k in zip(idx[mine].tolist(), a[mine].tolist(), z[mine].tolist(), lane.tolist()):
                tid = base + k
                used[(b + 1, tid)] = label if k == 0 else f"{label} {k + 1}"
                events.append({"ph": "X", "name": kinds[i], "cat": label.split()[-1], "pid": b + 1, "tid": tid,
                               "ts": _us(s), "dur": _us(e - s), "args": arg_of(i)})
                if base == SEND_TID:
                    send_slot[i] = (b + 1, tid, s)
    # deliveries: a zero-length receive slice, and a flow from the send
    d_op = deliv["op"].to_numpy(np.int64)
    d_node = deliv["node"].to_numpy(np.int64)
    d_t = _ns(deliv["t_s"])
    take = np.isin(d_node, list(keep)) & is_send[d_op] & (d_t >= lo)
    if hi is not None:
        take &= d_t <= hi
    flow = 0
    for i, n, t in zip(d_op[take].tolist(), d_node[take].tolist(), d_t[take].tolist()):
        used[(n + 1, RECEIVE_TID)] = "nic receive"
        args = arg_of(i) | {"latency_us": _us(t - int(t0[i]))}
        events.append({"ph": "X", "name": kinds[i], "cat": "receive", "pid": n + 1, "tid": RECEIVE_TID,
                       "ts": _us(t), "dur": 0.0, "args": args})
        if i in send_slot:
            flow += 1
            pid, tid, s = send_slot[i]
            events.append({"ph": "s", "name": "message", "cat": "message", "id": flow, "pid": pid, "tid": tid,
                           "ts": _us(s)})
            events.append({"ph": "f", "bp": "e", "name": "message", "cat": "message", "id": flow, "pid": n + 1,
                           "tid": RECEIVE_TID, "ts": _us(t)})
    for (pid, tid), name in sorted(used.items()):
        meta += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
                 {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]

    # KV memory per board: the value at each change (the last one at a time), from the window's start
    kv = kv[kv["node"].isin(keep)]
    for b, g in kv.groupby("node", sort=True):
        t = _ns(g["t_s"])
        vals = g[["owner_bytes", "replica_bytes", "transient_bytes"]].to_numpy(np.int64)
        last = np.r_[t[1:] != t[:-1], True]
        t, vals = t[last], vals[last]
        first = max(int(np.searchsorted(t, lo, side="right")) - 1, 0)
        for k in range(first, len(t)):
            if hi is not None and t[k] > hi:
                break
            events.append({"ph": "C", "name": "KV memory", "pid": int(b) + 1, "ts": _us(max(int(t[k]), lo)),
                           "args": {"owner": int(vals[k, 0]), "replica": int(vals[k, 1]), "transient": int(vals[k, 2])}})
    # link utilization per direction and bin, in a process of its own
    lpid = boards + 1
    links = links[links["src"].isin(keep) | links["dst"].isin(keep)]
    if len(links):
        meta += [{"ph": "M", "name": "process_name", "pid": lpid, "tid": 0, "args": {"name": "links"}},
                 {"ph": "M", "name": "process_sort_index", "pid": lpid, "tid": 0, "args": {"sort_index": boards}}]
    for (src, dst), g in links.groupby(["src", "dst"], sort=True):
        a, z = _ns(g["t_start_s"]), _ns(g["t_end_s"])
        u = g["utilization"].to_numpy(np.float64)
        vis = visible(a, z)
        a, z, u = a[vis], z[vis], u[vis]
        name = f"link {int(src)}->{int(dst)} utilization"
        for s, v in zip(np.maximum(a, lo).tolist(), u.tolist()):
            events.append({"ph": "C", "name": name, "pid": lpid, "ts": _us(s), "args": {"utilization": round(v, 6)}})
        if len(z):
            end = int(z[-1]) if hi is None else min(int(z[-1]), hi)
            events.append({"ph": "C", "name": name, "pid": lpid, "ts": _us(end), "args": {"utilization": 0.0}})

    events.sort(key=lambda e: e["ts"])
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"source": "mcf-emu", "results": results.name, "trace": summary.get("trace"),
                          "scheme": summary.get("scheme"), "nodes": boards, "topology": summary.get("topology"),
                          "window_ps": [lo * 1000, None if hi is None else hi * 1000], "boards": sorted(keep),
                          "deliveries": has_deliveries}}


def write_perfetto(results_dir, out, *, start_ps: int | None = None, end_ps: int | None = None, nodes=None,
                   flag: str = "") -> int:
    """Write ``perfetto_trace(...)`` to ``out`` atomically; returns the bytes written. ``out`` is
    a file: a path ending in "/" or naming a folder is refused (ConfigError), nothing written."""
    from ..outputs import check_writable, reclaim_stale

    out_what = "-o" if flag else "out"
    if str(out).endswith(("/", os.sep)) or Path(out).is_dir():
        raise ConfigError(f"{out_what} {out}: is a folder; give a file name, e.g. {Path(out) / 'timeline.json'}")
    ResultsFolder(results_dir).summary()  # a bad folder is refused before the output is touched
    check_writable(out, out_what)
    reclaim_stale(Path(out).parent, out_what)  # what a killed export left there
    doc = perfetto_trace(results_dir, start_ps=start_ps, end_ps=end_ps, nodes=nodes, flag=flag)
    data = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    try:
        with atomic_file(out, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise EmuError(f"cannot write {out}: {exc.strerror or exc}") from None
    return len(data)

