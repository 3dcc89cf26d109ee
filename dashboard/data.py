"""Results folders as the dashboard reads them: a registry of runs, validated loading, and
server-side aggregation (time bins, downsampling) so figures stay small.

Reads the files of docs/results.md only; imports nothing of the engine. Runs are addressed
by a key from the registry, never by a path that came from a request.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from emu import reader as _reader

CAPTURE_SUFFIXES = (".pcap", ".pcapng")

# what a screen shows: about this many columns of a time axis
SCREEN_BINS = 600


# A results folder (or one of its files) that cannot be shown; the message says why. The
# checks and messages are those of every command (emu.reader).
ResultsError = _reader.ResultsError


class LRU:
    """A small thread-safe least-recently-used cache."""

    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, make):
        value = self.find(key)
        if value is None:
            value = self.put(key, make())  # made outside the lock: two threads may both make it, alike
        return value

    def find(self, key):
        """The value kept for ``key``, or None."""
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        return None

    def put(self, key, value):
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)
        return value


_FILES = LRU(24)  # whole tables and JSON files, keyed by (folder, file name)
_COLUMNS = LRU(24 * 12)  # table columns, keyed by (folder, file name, column)
OPS_COLUMNS = tuple(_reader.TABLES["ops.parquet"])
SPAN_COLUMNS = ("kind", "stage", "node", "chunk", "start_s", "end_s")  # what chunk_spans reads
# what the timeline reads (an op's id is its row: emu.reader checks op is 0, 1, 2, ...)
TIMELINE_COLUMNS = ("kind", "node", "src", "start_s", "end_s", "chunk", "layer", "bytes")


@dataclass
class Run:
    """One results folder in the registry."""

    key: str
    path: Path
    origin: str = "given"  # given | what-if
    summary: dict = field(default_factory=dict)
    error: str | None = None  # set when the folder cannot be shown at all
    note: str | None = None  # what a what-if changed

    @property
    def label(self) -> str:
        s = self.summary
        if self.error or not s:
            return f"{self.key} (unreadable)"
        return f"{self.key}: {s.get('scheme')} {s.get('nodes')} nodes, seq {s.get('seq')}, {s.get('topology')}"

    # -- files ------------------------------------------------------------------------------

    def _file(self, name: str) -> Path:
        return self.path / name

    def table(self, name: str, columns: tuple | None = None) -> pd.DataFrame:
        """A parquet file of the folder, validated against its columns; cached. With
        ``columns``, only those the file has, each read (and checked) once whichever view
        asks: a view reads what it draws, and the next finds what the last one read."""
        if self.error:
            raise ResultsError(self.error)
        if columns is None:
            return _FILES.get((str(self.path), name), lambda: _reader.ResultsFolder(self.path, self.key).table(name))
        got = {c: _COLUMNS.find((str(self.path), name, c)) for c in columns}
        missing = [c for c, v in got.items() if v is None]
        if missing:
            df = _reader.ResultsFolder(self.path, self.key).table(name, missing)
            got.update({c: _COLUMNS.put((str(self.path), name, c), df[c]) for c in df.columns})
        return pd.DataFrame({c: v for c, v in got.items() if v is not None}, copy=False)

    def ops(self, columns: tuple | None = None) -> pd.DataFrame:
        """ops.parquet's documented columns (or ``columns``): every view but an op's details
        (``op_details``) needs no per-op dependency lists, which take most of the time to read."""
        return self.table("ops.parquet", columns or OPS_COLUMNS)

    def links(self) -> pd.DataFrame:
        return self.table("links.parquet")

    def nodes(self) -> pd.DataFrame:
        return self.table("nodes.parquet")

    def json_file(self, name: str, required: bool = False) -> dict | None:
        if self.error:
            raise ResultsError(self.error)

        def load():
            return _reader.ResultsFolder(self.path, self.key).json(name, required)

        return _FILES.get((str(self.path), name), load)

    def topology(self) -> dict | None:
        return self.json_file("topology.json")

    def schedule(self) -> dict | None:
        return self.json_file("schedule.json")

    def capture(self) -> Path | None:
        """The capture file in the folder, if any (the first by name)."""
        if self.error or not self.path.is_dir():
            return None
        caps = sorted(p for p in self.path.iterdir() if p.suffix in CAPTURE_SUFFIXES and p.is_file())
        return caps[0] if caps else None


def is_sweep_dir(path: Path) -> bool:
    """A sweep output folder: ``sweep.json`` beside ``results.parquet`` or ``parts/``
    (docs/sweeps.md), never a results folder."""
    path = Path(path)
    return path.is_dir() and not (path / "summary.json").exists() and (path / "sweep.json").is_file() and \
        ((path / "results.parquet").is_file() or (path / "parts").is_dir())


def read_summary(path: Path) -> dict:
    """summary.json of a results folder, checked (emu.reader); ResultsError names the folder."""
    return _reader.ResultsFolder(path, Path(path).name).summary()


class Registry:
    """The runs the app serves, by key. Keys are made here from folder names; a request
    only ever names a key, and an unknown key finds nothing."""

    def __init__(self):
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()
        self.version = 0  # bumps when a run is added

    def _unique_key(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"
        key, i = base, 2
        while key in self._runs:
            key, i = f"{base}-{i}", i + 1
        return key

    def add(self, path, origin: str = "given", key: str | None = None, note: str | None = None) -> Run:
        path = Path(path).resolve()
        with self._lock:
            for r in self._runs.values():
                if r.path == path:
                    return r
            run = Run(self._unique_key(key or path.name), path, origin, note=note)
            try:
                run.summary = read_summary(path)
            except ResultsError as exc:
                run.error = str(exc)
            self._runs[run.key] = run
            self.version += 1
            return run

    def add_tree(self, path, origin: str = "given", sweeps: list | None = None) -> list[Run]:
        """A results folder, or a folder of results folders (each child with a summary.json).

        Sweep output folders (docs/sweeps.md) met on the way are not runs: they are appended
        to ``sweeps`` (when given) and skipped."""
        path = Path(path)
        if is_sweep_dir(path):
            if sweeps is not None:
                sweeps.append(path)
                return []
        if (path / "summary.json").exists() or not path.is_dir():
            return [self.add(path, origin)]
        kids = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        found_sweeps = [k for k in kids if is_sweep_dir(k)]
        kids = [k for k in kids if (k / "summary.json").exists()]
        if sweeps is not None:
            sweeps.extend(found_sweeps)
        if not kids:
            if found_sweeps and sweeps is not None:
                return []
            return [self.add(path, origin)]  # shown as unreadable, with the reason
        return [self.add(k, origin) for k in kids]

    def get(self, key) -> Run | None:
        if not isinstance(key, str):
            return None
        with self._lock:
            return self._runs.get(key)

    def runs(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._runs)


# ------------------------------------------------------------------------------ aggregation


def time_bins(lo: float, hi: float, n: int = SCREEN_BINS) -> np.ndarray:
    """n + 1 edges over [lo, hi]."""
    if not hi > lo:
        hi = lo + 1e-9
    return np.linspace(lo, hi, n + 1)


@dataclass
class LinkMatrix:
    """Utilization per link direction (rows) and time column, downsampled to the screen."""

    links: np.ndarray  # link ids, row order
    src: np.ndarray
    dst: np.ndarray
    t0: np.ndarray  # column start times
    t1: np.ndarray
    util: np.ndarray  # [rows, cols], 0..1
    busy_s: np.ndarray  # [rows, cols]
    wire_bytes: np.ndarray
    lost: np.ndarray
    queue_max: np.ndarray
    frames: np.ndarray


def _bin_index(t_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts, idx = np.unique(t_start, return_inverse=True)
    return starts, idx


def link_matrix(df: pd.DataFrame, max_cols: int = SCREEN_BINS) -> LinkMatrix:
    """Pivot links.parquet to link x bin and merge neighbouring bins down to ``max_cols``."""
    ids, row = np.unique(df["link"].to_numpy(), return_inverse=True)
    starts, col = _bin_index(df["t_start_s"].to_numpy(float))
    nb = len(starts)
    k = max(1, math.ceil(nb / max_cols))
    g = col // k
    ng = int(g.max()) + 1 if len(g) else 0
    R = len(ids)

    def acc(values, how="sum"):
        out = np.zeros((R, ng))
        if how == "sum":
            np.add.at(out, (row, g), values)
        else:
            np.maximum.at(out, (row, g), values)
        return out

    busy = acc(df["busy_s"].to_numpy(float))
    t_end = df["t_end_s"].to_numpy(float)
    t_start = df["t_start_s"].to_numpy(float)
    # column bounds and widths from the bins themselves (the last bin may be short)
    c0 = np.full(ng, np.inf)
    c1 = np.full(ng, -np.inf)
    np.minimum.at(c0, g, t_start)
    np.maximum.at(c1, g, t_end)
    width = np.maximum(c1 - c0, 1e-15)
    util = np.clip(busy / width, 0, 1)
    first = np.zeros(R, dtype=np.int64)
    order = np.argsort(row, kind="stable")
    first[row[order]] = order  # any row of each link: its src and dst
    return LinkMatrix(ids, df["src"].to_numpy()[first], df["dst"].to_numpy()[first], c0, c1, util, busy,
                      acc(df["wire_bytes"].to_numpy(float)), acc(df["lost_frames"].to_numpy(float)),
                      acc(df["queue_bytes_max"].to_numpy(float), "max"), acc(df["frames"].to_numpy(float)))


def link_totals(df: pd.DataFrame, span_s: float | None = None) -> pd.DataFrame:
    """Per link direction over the run (or a window already cut from df): utilization, bytes, drops."""
    g = df.groupby("link", sort=True)
    out = g.agg(src=("src", "first"), dst=("dst", "first"), busy_s=("busy_s", "sum"), wire_bytes=("wire_bytes", "sum"),
                frames=("frames", "sum"), lost_frames=("lost_frames", "sum"), queue_bytes_max=("queue_bytes_max", "max"),
                t0=("t_start_s", "min"), t1=("t_end_s", "max")).reset_index()
    span = span_s if span_s else max(float(out["t1"].max() - out["t0"].min()) if len(out) else 0.0, 1e-12)
    out["utilization"] = (out["busy_s"] / span).clip(0, 1)
    return out


def link_series(df: pd.DataFrame, link: int, max_points: int = 1500) -> pd.DataFrame:
    """One link direction's bins over time; merged (sum / max) when there are more than a screen's worth."""
    d = df[df["link"] == link].sort_values("t_start_s")
    if len(d) <= max_points:
        return d.reset_index(drop=True)
    k = math.ceil(len(d) / max_points)
    grp = np.arange(len(d)) // k
    a = d.groupby(grp).agg(t_start_s=("t_start_s", "min"), t_end_s=("t_end_s", "max"), busy_s=("busy_s", "sum"),
                           wire_bytes=("wire_bytes", "sum"), frames=("frames", "sum"), lost_frames=("lost_frames", "sum"),
                           queue_bytes_max=("queue_bytes_max", "max"))
    a["utilization"] = (a["busy_s"] / (a["t_end_s"] - a["t_start_s"]).clip(lower=1e-15)).clip(0, 1)
    a["link"], a["src"], a["dst"] = link, d["src"].iloc[0], d["dst"].iloc[0]
    return a.reset_index(drop=True)


def step_resample(t: np.ndarray, values: dict[str, np.ndarray], lo: float, hi: float,
                  n: int = SCREEN_BINS, peak_of: str | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Downsample a step function (each row holds until the next) to ``n`` points over [lo, hi].

    Each bin shows the row with the largest ``peak_of`` value that held in it (so peaks
    survive), or the state carried in from before the bin when no row falls in it.
    """
    t = np.asarray(t, float)
    if len(t) <= n:
        return t, {k: np.asarray(v) for k, v in values.items()}
    edges = time_bins(lo, hi, n)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    key = np.asarray(values[peak_of] if peak_of else next(iter(values.values())), float)
    # the row with the largest key per bin: sort by (bin, key) and take each bin's last
    order = np.lexsort((key, b))
    last = np.r_[np.flatnonzero(np.diff(b[order])), len(order) - 1]
    pick = order[last]
    # bins without rows carry the state in from the last row before them
    has = np.zeros(n, bool)
    has[b[pick]] = True
    carry = np.searchsorted(t, edges[:-1], side="right") - 1
    rows = np.full(n, -1, np.int64)
    rows[b[pick]] = pick
    rows[~has] = carry[~has]
    keep = rows >= 0
    tt = np.where(has, t[np.maximum(rows, 0)], edges[:-1])[keep]
    rows = rows[keep]
    return tt, {k: np.asarray(v)[rows] for k, v in values.items()}


def time_weighted_bins(t: np.ndarray, v: np.ndarray, lo: float, hi: float, n: int = SCREEN_BINS):
    """Time-weighted mean per bin of a step function (each value holds until the next t)."""
    t = np.asarray(t, float)
    v = np.asarray(v, float)
    edges = time_bins(lo, hi, n)
    if not len(t):
        return edges[:-1], np.full(n, np.nan)
    # integrate the step function at the edges
    seg_t = np.r_[t, max(hi, t[-1])]
    area = np.r_[0.0, np.cumsum(v * np.diff(seg_t))]

    def integral(x):
        i = np.clip(np.searchsorted(t, x, side="right") - 1, -1, len(t) - 1)
        base = np.where(i >= 0, area[np.maximum(i, 0)], 0.0)
        return base + np.where(i >= 0, v[np.maximum(i, 0)] * (x - t[np.maximum(i, 0)]), 0.0)

    I = integral(edges)
    w = np.diff(edges)
    mean = np.diff(I) / w
    mean[edges[1:] <= t[0]] = np.nan  # before the first row: nothing known
    return (edges[:-1] + edges[1:]) / 2, mean


# ------------------------------------------------------------------------------- timeline

COMPUTE_KINDS = {"qkv": "qkv", "attn": "attn", "mlp": "mlp", "lm_head": "lm head"}
COMM_KINDS = {"send": "send", "reduce": "reduce", "all_to_all": "all-to-all", "drain": "drain / invalidate",
              "invalidate": "drain / invalidate"}
CATEGORY_ORDER = ["qkv", "attn", "mlp", "lm head", "decode", "send", "reduce", "all-to-all", "drain / invalidate"]
COMM_CATS = ["send", "reduce", "all-to-all", "drain / invalidate"]


def _category(kind: str) -> str:
    return COMPUTE_KINDS.get(kind) or COMM_KINDS.get(kind) or ("decode" if kind.startswith("decode_") else kind)


def kind_names(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(names, index): each op's kind is ``names[index]``. From the categories of a categorical
    column (emu replay writes one), else the distinct texts: a name per kind, not per op."""
    kind = ops["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype):
        names = [str(c) for c in kind.cat.categories] + ["nan"]  # code -1 (a missing kind) picks "nan"
        return np.array(names, dtype=object), kind.cat.codes.to_numpy()
    names, index = np.unique(kind.astype(str).to_numpy(dtype=object), return_inverse=True)
    return names.astype(object), index


def _lanes(ops: pd.DataFrame):
    """(category of each distinct kind, each op's index into those, lane node, lane kind 0
    compute / 1 NIC): per kind, not per op, what categorize gives."""
    names, index = kind_names(ops)
    cats = np.array([_category(k) for k in names], dtype=object)
    comm = np.isin(cats, COMM_CATS)[index]
    node = ops["node"].to_numpy()
    lane_node = np.where(comm & (node < 0), ops["src"].to_numpy(), node)
    return cats, index, lane_node, comm.astype(np.int64)


def categorize(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(category, lane node, lane kind 0 compute / 1 NIC) for each op."""
    cats, index, lane_node, comm = _lanes(ops)
    return cats[index], lane_node, comm


def lane_names(n_nodes: int) -> list[str]:
    return [f"node {i // 2} {'NIC' if i % 2 else 'compute'}" for i in range(2 * n_nodes)]


@dataclass
class Segments:
    """Bars of a timeline window. ``bars``: per category, dict of equal-length lists
    base (s), length (s), lane (index into ``lanes``), text (hover), op (op id, -1 for a
    merged segment). ``strips``: per category, thin bars where the kind ran in a pixel
    column it did not dominate (so every kind stays visible at any zoom): base, length,
    lane, text."""

    bars: list
    strips: list
    lanes: list[str]
    n_ops: int
    n_segments: int
    t0: float
    t1: float
    exact: bool = False


def timeline_segments(ops: pd.DataFrame, n_nodes: int, lo: float | None = None, hi: float | None = None,
                      max_segments: int = 6000, px: int = 1000, exact_below: int = 2500) -> Segments:
    """Compute and NIC activity per node over [lo, hi] at screen resolution.

    With at most ``exact_below`` ops in the window every op is its own bar. Otherwise the
    window is cut into ``px`` columns; in each lane and column the category that kept the lane
    busiest wins the full-height bar, neighbouring columns with the same winner merge into one
    segment, and every other kind that ran in a column gets a thin strip of its own in the
    lane (qkv and the LM head are short and would otherwise never show at full view).
    """
    t_s = ops["start_s"].to_numpy(float)
    t_e = ops["end_s"].to_numpy(float)
    ran = np.isfinite(t_s) & np.isfinite(t_e)
    t_all0 = float(t_s[ran].min()) if ran.any() else 0.0
    t_all1 = float(t_e[ran].max()) if ran.any() else 1.0
    lo = t_all0 if lo is None else max(float(lo), t_all0)
    hi = t_all1 if hi is None else min(float(hi), t_all1)
    if not hi > lo:
        hi = lo + 1e-9
    kind_cat, kind, lane_node, comm = _lanes(ops)
    lane = np.where(lane_node >= 0, lane_node * 2 + comm, -1)
    # the ops in view, by row number (a DataFrame cut per window copied every column)
    keep = np.flatnonzero(ran & (t_e >= lo) & (t_s <= hi) & (lane >= 0) & (lane < 2 * n_nodes))
    kind, lane = kind[keep], lane[keep]
    cat = kind_cat[kind]
    s, e = np.maximum(t_s[keep], lo), np.minimum(t_e[keep], hi)
    present = set(kind_cat[np.unique(kind)].tolist())
    cats = [c for c in CATEGORY_ORDER if c in present] + sorted(present - set(CATEGORY_ORDER))
    n_lanes = 2 * n_nodes
    lanes = lane_names(n_nodes)
    min_w = (hi - lo) / 1500  # make instant ops at least about a pixel wide
    if len(s) <= exact_below:
        names, index = kind_names(ops)
        kinds = names[index[keep]]
        chunk, layer, nbytes = (ops[c].to_numpy()[keep] for c in ("chunk", "layer", "bytes"))
        # an op's id: its row, which emu.reader checks the op column says (0, 1, 2, ...)
        opid = ops["op"].to_numpy()[keep] if "op" in ops.columns else keep
        t_true0, t_true1 = t_s[keep], t_e[keep]
        bars = []
        for c in cats:
            m = np.flatnonzero(cat == c)
            length = np.maximum(e[m] - s[m], min_w)
            text = [f"<b>{kinds[i]} op {int(opid[i])}</b><br>{lanes[lane[i]]}<br>chunk {int(chunk[i])}, layer {int(layer[i])}"
                    f"<br>{int(nbytes[i]):,} B<br>{t_true0[i]:.6f} – {t_true1[i]:.6f} s<br><i>click for details</i>"
                    for i in m.tolist()]
            bars.append((c, {"base": s[m].tolist(), "length": length.tolist(), "lane": lane[m].tolist(), "text": text,
                             "op": opid[m].astype(int).tolist()}))
        return Segments(bars, [], lanes, int(len(s)), int(len(s)), lo, hi, exact=True)
    ci = {c: i for i, c in enumerate(cats)}
    cat_i = np.array([ci.get(c, -1) for c in kind_cat.tolist()], np.int64)[kind]  # per kind, then per op
    nc = len(cats)
    while True:
        w = (hi - lo) / px
        c0 = np.clip(((s - lo) / w).astype(np.int64), 0, px - 1)
        c1 = np.clip(((e - lo) / w).astype(np.int64), 0, px - 1)
        k = c1 - c0 + 1
        rep = np.repeat(np.arange(len(s)), k)
        first = np.repeat(np.cumsum(k) - k, k)
        col = c0[rep] + (np.arange(int(k.sum())) - first)
        ov = np.minimum(e[rep], lo + (col + 1) * w) - np.maximum(s[rep], lo + col * w)
        ov = np.maximum(ov, min(w, min_w) * 0.5)  # an instant op still counts a little
        flat = (lane[rep] * px + col) * nc + cat_i[rep]
        busy = np.bincount(flat, weights=ov, minlength=n_lanes * px * nc).reshape(n_lanes, px, nc)
        tot = busy.sum(axis=2)
        win = busy.argmax(axis=2)
        act = tot > 0
        key = np.where(act, win, -1)
        brk = np.ones((n_lanes, px), bool)
        brk[:, 1:] = key[:, 1:] != key[:, :-1]
        starts = brk & act
        minor = (busy > 0) & (np.arange(nc)[None, None, :] != win[:, :, None])
        mbrk = np.ones_like(minor)
        mbrk[:, 1:, :] = minor[:, 1:, :] != minor[:, :-1, :]
        n_minor = int((mbrk & minor).sum())
        total = int(starts.sum()) + n_minor
        if total <= max_segments or px <= 100:
            break
        px //= 2
    seg_id = np.cumsum(brk.ravel()).reshape(n_lanes, px) - 1
    sl, sc = np.nonzero(starts)
    sid = seg_id[sl, sc]
    lanes_idx, cols_idx = np.nonzero(act)
    ends = np.zeros(int(seg_id.max()) + 1, np.int64)
    np.maximum.at(ends, seg_id[lanes_idx, cols_idx], cols_idx)
    busy_sum = np.zeros(int(seg_id.max()) + 1)
    np.add.at(busy_sum, seg_id[lanes_idx, cols_idx], np.minimum(tot[lanes_idx, cols_idx] / w, 1.0))
    ec = ends[sid]
    frac = busy_sum[sid] / (ec - sc + 1)
    wc = win[sl, sc]
    bars, strips = [], []
    for j, c in enumerate(cats):
        m = np.flatnonzero(wc == j)
        a, b = lo + sc[m] * w, lo + (ec[m] + 1) * w
        text = [f"<b>mostly {c}</b><br>{lanes[ln]}<br>{p:.6f} – {q:.6f} s<br>busy {f:.0%} of the time"
                "<br><i>click to zoom into this segment</i>" for ln, p, q, f in zip(sl[m].tolist(), a.tolist(), b.tolist(),
                                                                                 frac[m].tolist())]
        bars.append((c, {"base": a.tolist(), "length": (b - a).tolist(), "lane": sl[m].tolist(), "text": text,
                         "op": [-1] * len(m)}))
        # thin strips: runs of columns where this kind ran without winning
        mk = minor[:, :, j]
        st_ = mk & mbrk[:, :, j]
        ml, mc = np.nonzero(st_)
        if not len(ml):
            continue
        run_id = np.cumsum(st_.ravel()).reshape(n_lanes, px) - 1
        li, co = np.nonzero(mk)
        mend = np.zeros(len(ml), np.int64)
        np.maximum.at(mend, run_id[li, co], co)
        sa, sb = lo + mc * w, lo + (mend + 1) * w
        text = [f"{c} ran here (not the busiest kind)<br>{lanes[ln]}<br>{p:.6f} – {q:.6f} s"
                for ln, p, q in zip(ml.tolist(), sa.tolist(), sb.tolist())]
        strips.append((c, {"base": sa.tolist(), "length": (sb - sa).tolist(), "lane": ml.tolist(), "text": text}))
    return Segments(bars, strips, lanes, int(len(s)), total, lo, hi, exact=False)


def op_details(ops: pd.DataFrame, op: int) -> dict | None:
    """One op's row (and its dependencies when ops.parquet records them) for the detail pane."""
    if "op" not in ops.columns:
        return None
    hit = ops[ops["op"] == op]
    if not len(hit):
        return None
    r = hit.iloc[0]
    out = {k: r[k] for k in ("op", "kind", "stage", "node", "src", "dsts", "chunk", "layer", "bytes", "start_s", "end_s")
           if k in hit.columns}
    deps = r["deps"] if "deps" in hit.columns else None
    if deps is not None and not isinstance(deps, str):
        deps = [int(x) for x in np.asarray(deps).ravel().tolist()]
    out["deps"] = deps
    return out


# ------------------------------------------------------------------------------- memory


def node_memory(nodes: pd.DataFrame, node: int, lo: float, hi: float, n: int = 1200):
    d = nodes[nodes["node"] == node].sort_values("t_s", kind="stable")
    total = (d["owner_bytes"] + d["replica_bytes"] + d["transient_bytes"]).to_numpy(float)
    cols = {"owner": d["owner_bytes"].to_numpy(float), "replica": d["replica_bytes"].to_numpy(float),
            "transient": d["transient_bytes"].to_numpy(float), "total": total}
    return step_resample(d["t_s"].to_numpy(float), cols, lo, hi, n, peak_of="total")


def memory_matrix(nodes: pd.DataFrame, n_nodes: int, lo: float, hi: float, n: int = SCREEN_BINS):
    """Per node and time bin: the largest total KV held in the bin (state carried across empty bins)."""
    edges = time_bins(lo, hi, n)
    z = np.full((n_nodes, n), np.nan)
    who = nodes["node"].to_numpy()
    t_all = nodes["t_s"].to_numpy(float)
    tot_all = (nodes["owner_bytes"] + nodes["replica_bytes"] + nodes["transient_bytes"]).to_numpy(float)
    order = np.lexsort((t_all, who))  # by node, then time (stable: rows at one time keep their order)
    who, t_all, tot_all = who[order], t_all[order], tot_all[order]
    cut = np.searchsorted(who, np.arange(n_nodes + 1))  # node k's rows: cut[k]:cut[k + 1]
    for node in range(n_nodes):
        t, tot = t_all[cut[node]:cut[node + 1]], tot_all[cut[node]:cut[node + 1]]
        if not len(t):
            continue
        b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
        mx = np.full(n, -np.inf)
        np.maximum.at(mx, b, tot)
        carry_i = np.searchsorted(t, edges[:-1], side="right") - 1
        carry = np.where(carry_i >= 0, tot[np.maximum(carry_i, 0)], np.nan)
        z[node] = np.fmax(np.where(np.isfinite(mx), mx, np.nan), carry)
    return (edges[:-1] + edges[1:]) / 2, z


def replica_factor_series(nodes: pd.DataFrame, lo: float, hi: float, n: int = SCREEN_BINS):
    """The cluster-wide replica factor over time (time-weighted per bin) and its per-bin max."""
    d = nodes.sort_values("t_s", kind="stable")
    t = d["t_s"].to_numpy(float)
    v = d["replica_factor"].to_numpy(float)
    # one value per instant: the last row at each time
    if len(t):
        last = np.r_[t[1:] != t[:-1], True]
        t, v = t[last], v[last]
    if not len(t) or t[0] > lo:
        # Before the first block exists the layout is trivially owner-only (factor 1).
        t, v = np.r_[lo, t], np.r_[1.0, v]
    mid, mean = time_weighted_bins(t, v, lo, hi, n)
    edges = time_bins(lo, hi, n)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    mx = np.full(n, np.nan)
    if len(t):
        tmp = np.full(n, -np.inf)
        np.maximum.at(tmp, b, v)
        mx = np.where(np.isfinite(tmp), tmp, np.nan)
        mx = np.fmax(mx, mean)
    return mid, mean, mx


def chunk_spans(ops: pd.DataFrame) -> pd.DataFrame:
    """Per prefill chunk: when its compute started and ended."""
    names, index = kind_names(ops)
    compute = np.isin(index, np.flatnonzero(np.isin(names, ["qkv", "attn", "mlp"])))
    o = ops.loc[(ops["stage"].astype(str) == "prefill").to_numpy() & (ops["node"] >= 0).to_numpy()
                & (ops["chunk"] >= 0).to_numpy() & compute, ["chunk", "start_s", "end_s"]]
    g = o.groupby("chunk").agg(start_s=("start_s", "min"), end_s=("end_s", "max"))
    return g.reset_index()


def value_at(t: np.ndarray, v: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The step function (t, v) evaluated at ``at`` (NaN before its first row)."""
    i = np.searchsorted(t, at, side="right") - 1
    return np.where(i >= 0, v[np.maximum(i, 0)], np.nan)


def fmt_bytes(n) -> str:
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def fmt_s(t) -> str:
    if t is None or not isinstance(t, (int, float)) or not math.isfinite(t):
        return "-"
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3f} ms"
    return f"{t * 1e6:.2f} µs"
