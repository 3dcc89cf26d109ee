"""A results folder's timeline as Chrome trace-event JSON, which Perfetto UI and chrome://tracing open.

Reads the folder only (ops, deliveries, nodes and links tables and summary.json:
docs/results.md) and imports nothing of the engine, so the dashboard can offer the same file.
A folder written before deliveries.parquet existed gets no receive slices, arrows or reductions.

What is drawn (docs/api.md, "Timeline export"):

- one process per board; in it a ``compute`` thread lane (one slice per compute op, which
  the engine runs one at a time per board), a ``nic receive`` lane (a zero-length slice
  where a message became whole at this board), and async slices, which overlap freely and
  Perfetto packs into a track per kind: one per message the board sends (drain and
  invalidate control messages too, from the send until its last destination has it) and
  one per reduction at its root (from the first contribution until the result is whole);
- a flow arrow from each send slice to each of its deliveries (flow v2: the send's op as
  ``bind_id``);
- counter tracks: KV memory per board, stacked (owner, owner+replica, total bytes), and per
  link direction its utilization per time bin (in a ``links`` process).

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
COMPUTE_TID, RECEIVE_TID = 1, 1000  # the board's thread lanes; sends and reductions are async slices
KV_TRACKS = ("KV owner", "KV owner+replica", "KV total")  # counters, each including the ones before


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


def _us(ns) -> str:
    """Nanoseconds as the format's microseconds, exactly: 1234567 -> 1234.567."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _text(v) -> str:
    return json.dumps(v if isinstance(v, str) else str(v))


def perfetto_trace(results_dir, *, start_ps: int | None = None, end_ps: int | None = None, nodes=None,
                   flag: str = "") -> dict:
    """The timeline of the results folder ``results_dir`` as a trace-event JSON object.

    ``start_ps``/``end_ps`` keep a time window (slices cut at its edges, counters starting
    with the value they had at its start); ``nodes`` keeps those boards (and the links that
    touch them): "0,1,5", "0-3", a range or a list (``board_set``). ``flag``: what error
    messages put before an option's name (the CLI passes "--")."""
    return json.loads("".join(trace_chunks(results_dir, start_ps=start_ps, end_ps=end_ps, nodes=nodes, flag=flag)))


def trace_chunks(results_dir, *, start_ps: int | None = None, end_ps: int | None = None, nodes=None,
                 flag: str = "") -> list[str]:
    """``perfetto_trace``'s document as JSON text, in pieces written as they are (a million
    event dicts dumped by json cost 2.7x the replay's own time on mars_16k)."""
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
    keep_list = sorted(keep)
    on_kept = np.isin(board, keep_list)

    def visible(a, b):
        return (b >= lo) & ((a <= hi) if hi is not None else True)

    def clip(a, b):
        return np.maximum(a, lo), (np.minimum(b, hi) if hi is not None else b)

    # each op's name and arguments as JSON text; a distinct string is escaped once
    names = {k: _text(k) for k in np.unique(kind).tolist()}
    stage = ops["stage"].astype(str)
    stages = {k: _text(k) for k in stage.unique().tolist()}
    kind_txt = [names[k] for k in kind.tolist()]

    def num(col):
        v = ops[col]
        if v.notna().all():
            return [str(int(x)) for x in v.tolist()]
        return ["null" if x is None or x != x else str(int(x)) for x in v.tolist()]

    args = [f'"op":{i},"kind":{k},"chunk":{c},"layer":{y},"bytes":{b},"stage":{stages[g]}'
            for i, k, c, y, b, g in zip(range(len(ops)), kind_txt, num("chunk"), num("layer"), num("bytes"),
                                        stage.tolist())]

    out: list[str] = []
    meta: list[str] = []
    for b in keep_list:
        meta += [f'{{"ph":"M","name":"process_name","pid":{b + 1},"tid":0,"args":{{"name":"board {b}"}}}}',
                 f'{{"ph":"M","name":"process_sort_index","pid":{b + 1},"tid":0,"args":{{"sort_index":{b}}}}}']
    lanes: set[tuple[int, int, str]] = set()
    # compute: one lane per board (the engine runs one compute op at a time per board)
    idx = np.flatnonzero(is_compute & ran & on_kept & visible(t0, t1))
    a, z = clip(t0[idx], t1[idx])
    lanes.update((b + 1, COMPUTE_TID, "compute") for b in np.unique(board[idx]).tolist())
    out += [f'{{"ph":"X","name":{kind_txt[i]},"cat":"compute","pid":{b + 1},"tid":{COMPUTE_TID},"ts":{_us(s)},'
            f'"dur":{_us(e - s)},"args":{{{args[i]}}}}}'
            for i, b, s, e in zip(idx.tolist(), board[idx].tolist(), a.tolist(), z.tolist())]
    # sends and reductions: async slices, which Perfetto packs into one track per board and
    # kind however many overlap (thread lanes took one per concurrent send: 18-41 a board)
    d_op = deliv["op"].to_numpy(np.int64)
    d_node = deliv["node"].to_numpy(np.int64)
    d_t = _ns(deliv["t_s"])
    take = np.isin(d_node, keep_list) & is_send[d_op] & (d_t >= lo)
    if hi is not None:
        take &= d_t <= hi
    spans = {cat: np.flatnonzero(family & ran & on_kept & visible(t0, t1))
             for family, cat in ((is_send, "send"), (is_reduce, "reduce"))}
    # deliveries: a zero-length receive slice each, and an arrow from its send's slice: the
    # send binds its op as flow id (flow v2: bind_id), each delivery ends a flow of that id
    flows = np.zeros(len(ops), bool)
    flows[spans["send"]] = True
    flows &= np.isin(np.arange(len(ops)), d_op[take])
    for cat, idx in spans.items():
        a, z = clip(t0[idx], t1[idx])
        for i, b, s, e in zip(idx.tolist(), board[idx].tolist(), a.tolist(), z.tolist()):
            fl = f',"bind_id":{i},"flow_out":true' if flows[i] else ""
            out.append(f'{{"ph":"b","name":{kind_txt[i]},"cat":"{cat}","id":{i},"pid":{b + 1},"ts":{_us(s)}{fl},'
                       f'"args":{{{args[i]}}}}}')
            out.append(f'{{"ph":"e","name":{kind_txt[i]},"cat":"{cat}","id":{i},"pid":{b + 1},"ts":{_us(e)}}}')
    recv_txt = []
    for i, n, t in zip(d_op[take].tolist(), d_node[take].tolist(), d_t[take].tolist()):
        fl = f',"bind_id":{i},"flow_in":true' if flows[i] else ""
        recv_txt.append(f'{{"ph":"X","name":{kind_txt[i]},"cat":"receive","pid":{n + 1},"tid":{RECEIVE_TID},'
                        f'"ts":{_us(t)},"dur":0{fl},"args":{{{args[i]},"latency_us":{_us(t - int(t0[i]))}}}}}')
    out += recv_txt
    lanes.update((n + 1, RECEIVE_TID, "nic receive") for n in np.unique(d_node[take]).tolist())
    for pid, tid, name in sorted(lanes):
        meta += [f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":"{name}"}}}}',
                 f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}']

    # KV memory per board, stacked: owner, owner+replica and total bytes, each a counter that
    # includes the ones before it (Perfetto draws each counter track on its own); a value at
    # each change (the last one at a time), from the window's start
    kv = kv[kv["node"].isin(keep)]
    for b, g in kv.groupby("node", sort=True):
        t = _ns(g["t_s"])
        layers = np.cumsum(g[["owner_bytes", "replica_bytes", "transient_bytes"]].to_numpy(np.int64), axis=1)
        last = np.r_[t[1:] != t[:-1], True]
        t, layers = t[last], layers[last]
        first = max(int(np.searchsorted(t, lo, side="right")) - 1, 0)
        stop = len(t) if hi is None else int(np.searchsorted(t, hi, side="right"))
        t, layers = np.maximum(t[first:stop], lo), layers[first:stop]
        for k, name in enumerate(KV_TRACKS):
            v = layers[:, k]
            change = np.r_[True, v[1:] != v[:-1]] if len(v) else np.zeros(0, bool)
            out += [f'{{"ph":"C","name":"{name}","pid":{int(b) + 1},"ts":{_us(s)},"args":{{"bytes":{x}}}}}'
                    for s, x in zip(t[change].tolist(), v[change].tolist())]
    # link utilization per direction and bin, in a process of its own; Perfetto names a
    # counter track by the event's name and its argument: "link 0->1 utilization"
    lpid = boards + 1
    links = links[links["src"].isin(keep) | links["dst"].isin(keep)]
    if len(links):
        meta += [f'{{"ph":"M","name":"process_name","pid":{lpid},"tid":0,"args":{{"name":"links"}}}}',
                 f'{{"ph":"M","name":"process_sort_index","pid":{lpid},"tid":0,"args":{{"sort_index":{boards}}}}}']
    for (src, dst), g in links.groupby(["src", "dst"], sort=True):
        a, z = _ns(g["t_start_s"]), _ns(g["t_end_s"])
        u = g["utilization"].to_numpy(np.float64)
        vis = visible(a, z)
        a, z, u = a[vis], z[vis], u[vis]
        name = f"link {int(src)}->{int(dst)}"
        out += [f'{{"ph":"C","name":"{name}","pid":{lpid},"ts":{_us(s)},"args":{{"utilization":{round(v, 6)!r}}}}}'
                for s, v in zip(np.maximum(a, lo).tolist(), u.tolist())]
        if len(z):
            end = int(z[-1]) if hi is None else min(int(z[-1]), hi)
            out.append(f'{{"ph":"C","name":"{name}","pid":{lpid},"ts":{_us(end)},"args":{{"utilization":0.0}}}}')

    other = {"source": "mcf-emu", "results": results.name, "trace": summary.get("trace"),
             "scheme": summary.get("scheme"), "nodes": boards, "topology": summary.get("topology"),
             "window_ps": [lo * 1000, None if hi is None else hi * 1000], "boards": keep_list,
             "deliveries": has_deliveries}
    return ['{"traceEvents":[\n', ",\n".join(meta + out), '\n],"displayTimeUnit":"ns","otherData":',
            json.dumps(other, separators=(",", ":")), "}"]


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
    chunks = trace_chunks(results_dir, start_ps=start_ps, end_ps=end_ps, nodes=nodes, flag=flag)
    size = 0
    try:
        with atomic_file(out, "wb") as fh:
            for c in chunks:
                data = c.encode("utf-8")
                fh.write(data)
                size += len(data)
    except OSError as exc:
        raise EmuError(f"cannot write {out}: {exc.strerror or exc}") from None
    return size

