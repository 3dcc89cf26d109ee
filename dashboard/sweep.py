"""The Sweep page's data: the Parquet dataset `emu sweep` writes, one row per point
(docs/sweeps.md).

``--sweep PATH`` is a ``results.parquet`` file, a sweep output folder (its
``results.parquet`` is read, not the folder recursively: it also holds ``parts/`` and the
kept runs), or a folder of Parquet files. Columns used: ``scheme``, ``nodes``, ``seq``,
``chunk``, ``ttft_s``, ``wire_bytes``, ``kv_bytes``; ``status`` (only ``ok`` points are
drawn); ``topology_name``/``topology`` and ``link_rate_bps``/``link_rate`` for the filters.
The Parquet metadata key ``emu.sweep`` names the parameters that vary (``axes``); each line
of a figure is one true slice of the grid: a scheme's points that differ only in the
panel's parameter.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pyarrow.parquet as pq

from emu.jsontext import parse_json

from .figures import FONT, plain_figure, scheme_color

NEEDED = ("scheme", "ttft_s", "wire_bytes")
AXES = (("nodes", "nodes"), ("seq", "prompt length (tokens)"), ("chunk", "chunk size (tokens)"))
# when the dataset does not name its axes: the parameters that may vary
GRID = ("nodes", "seq", "chunk", "topology", "link_rate", "loss", "seed", "decode_tokens", "model", "hw", "kv_budget",
        "alpha", "pd_mode", "prefill_nodes", "overrides")
# filters offered when the sweep varies them: (axis as given, column to show)
FILTERS = (("topology", "topology"), ("link_rate", "link_rate"), ("hw.link_rate", "hw.link_rate"), ("loss", "loss"))


class SweepError(Exception):
    pass


def _files(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    if (p / "results.parquet").is_file():
        return [p / "results.parquet"]
    top = sorted(f for f in p.glob("*.parquet") if f.is_file())
    if top:
        return top
    if (p / "parts").is_dir():
        return sorted(f for f in (p / "parts").glob("*.parquet") if f.is_file())
    return []


def _load_one(p: Path) -> tuple[pd.DataFrame, dict]:
    files = _files(p)
    if not files:
        raise SweepError(f"{p}: no results.parquet or other .parquet files in this folder")
    out = []
    for f in files:
        try:
            t = pq.read_table(f)
        except Exception as exc:
            raise SweepError(f"{f.name}: not a readable Parquet dataset ({type(exc).__name__}: {str(exc)[:200]})") from None
        raw = (t.schema.metadata or {}).get(b"emu.sweep")
        meta: dict = {}
        if raw:
            try:
                meta = parse_json(raw, f.name, ValueError)
            except ValueError:
                meta = {}
        meta = meta if isinstance(meta, dict) else {}
        df = t.to_pandas()
        # the dataset's own name keeps two sweeps apart; a file without one is named by its folder
        name = str(meta.get("name") or (f.parent.name if f.name == "results.parquet" else f.stem))
        if "sweep" not in df.columns:
            df["sweep"] = name
        df["sweep"] = df["sweep"].astype(str)
        out.append((df, meta))
    return out


def load_sweeps(paths) -> tuple[pd.DataFrame, dict]:
    """Every point that finished ok of one or more datasets, in one frame whose ``sweep``
    column keeps them apart, and the metadata: ``sweeps`` {name: emu.sweep metadata}, ``axes``
    (the union of their axes), point counts. SweepError says what is wrong."""
    parts, metas = [], {}
    for path in paths if isinstance(paths, (list, tuple)) else [paths]:
        p = Path(path)
        if not p.exists():
            raise SweepError(f"{p}: no such file or folder")
        for df, meta in _load_one(p):
            parts.append(df)
            for name in df["sweep"].unique().tolist():
                metas.setdefault(name, meta)
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise SweepError(f"{Path(paths[0] if isinstance(paths, (list, tuple)) else paths).name}: the dataset lacks the "
                         f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (docs/sweeps.md)")
    n_all = len(df)
    if "status" in df.columns:
        df = df[df["status"].astype(str) == "ok"]
    df = df[pd.to_numeric(df["ttft_s"], errors="coerce").notna()].reset_index(drop=True)
    axes: list[str] = []
    for m in metas.values():
        for a in m.get("axes") or []:
            if isinstance(a, str) and a not in axes:
                axes.append(a)
    one = next(iter(metas.values())) if len(metas) == 1 else {}
    meta = dict(one, sweeps=metas, axes=axes, points_total=n_all, points_ok=len(df))
    if len(metas) > 1:
        meta["name"] = ", ".join(metas)
        meta.pop("description", None)
    return df, meta


def load_sweep(path) -> tuple[pd.DataFrame, dict]:
    return load_sweeps([path])


PARAM_EXCLUDE = {"index", "point", "status", "error", "version", "wall_s", "run_dir"}


def params_of(df: pd.DataFrame) -> list[str]:
    """Every parameter column that varies in the dataset: the sweep's name, the grid
    parameters, and profile fields (``hw.*``, ``model.*``). Points that differ in any of
    them are never merged. A parameter a scheme does not read (``pd_mode`` of a MARS point)
    is missing at that scheme's points: that is not a variation (``varies``)."""
    cand = ["sweep", *GRID, "chunk_mode", "scheme"] + sorted(c for c in df.columns if c.startswith(("hw.", "model.")))
    out = []
    for c in cand:
        if c in df.columns and c not in out and c not in PARAM_EXCLUDE and varies(df, c):
            out.append(c)
    return out


def varies(df: pd.DataFrame, c: str) -> bool:
    """Whether ``c`` takes two values among the points that have one, or is set at some of a
    scheme's points and missing at others."""
    col = df[c]
    if c in ("sweep", "scheme"):
        return col.astype(str).nunique(dropna=False) > 1
    na = col.isna()
    if col[~na].astype(str).nunique() > 1:
        return True
    if "scheme" not in df.columns:
        return bool(na.any() and not na.all())
    return bool((na.groupby(df["scheme"].astype(str)).nunique() > 1).any())


def axes_of(df: pd.DataFrame, meta: dict) -> list[str]:
    ax = meta.get("axes")
    if isinstance(ax, list) and ax:
        return [a for a in ax if a in df.columns and a != "scheme"]
    return [c for c in GRID if c in df.columns and varies(df, c)]


def filter_values(df: pd.DataFrame, axes: list[str]) -> dict[str, list]:
    """The parameters besides nodes, prompt and chunk that this sweep varies, with their values."""
    out = {}
    for axis, col in FILTERS:
        if axis in axes and col in df.columns and df[col].nunique(dropna=False) > 1:
            out[col] = sorted(df[col].unique().tolist(), key=lambda v: (v is None, isinstance(v, str), str(v)))
    return out


def filter_label(col: str, v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "profile default" if "rate" in col else "default"
    return str(v)


NOT_APPLICABLE = "-"  # a parameter the point's scheme does not read


def _label(v) -> str:
    if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
        return NOT_APPLICABLE
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


def _key_label(cols, key) -> str:
    """The legend's settings of a line; the parameters its scheme does not read are left out."""
    return ", ".join(f"{o} {k}" for o, k in zip(cols, key) if k != NOT_APPLICABLE)


def _slices(df: pd.DataFrame, x: str, metrics: list[str], params: list[str] | None = None) -> dict[str, list]:
    """Per metric, (scheme, name, frame) per line along ``x``: the points of one sweep and
    scheme equal in every other parameter that varies (``params_of``). Several rows at one x are
    the same point repeated (equal in every parameter): their median is drawn. One groupby for
    all lines and metrics: a groupby per line cost the Sweep page most of its 3 s. ``params``:
    params_of(df) when the caller has it."""
    others = [c for c in (params_of(df) if params is None else params) if c not in (x, "scheme")]
    keys = ["__scheme", *(f"__{c}" for c in others)]
    keyed = df[[x, *metrics]].assign(__scheme=df["scheme"].astype(str), **{f"__{c}": df[c].map(_label) for c in others})
    med = keyed.groupby([*keys, x], sort=True)[list(metrics)].median().reset_index()
    out: dict[str, list] = {m: [] for m in metrics}
    for key, g in med.groupby(keys, sort=True):
        if g[x].nunique() < 2:
            continue  # not a slice along this axis
        key = key if isinstance(key, tuple) else (key,)
        held = _key_label(others, key[1:])
        for m in metrics:
            out[m].append((key[0], key[0] + (" · " + held if held else ""), g[[x, m]].reset_index(drop=True)))
    return out


def sweep_lines(df: pd.DataFrame, metrics: list[str], params: list[str] | None = None) -> dict[str, dict[str, list]]:
    """The lines of every figure of a page: per axis column of ``df`` (nodes, prompt, chunk), per
    metric (``_slices``), one grouping per axis."""
    return {x: _slices(df, x, metrics, params) for x, _ in AXES if x in df.columns}


SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star"]


def sweep_axes(df: pd.DataFrame, axes: list[str] | None = None, params: list[str] | None = None,
               lines: dict | None = None) -> list[tuple[str, str]]:
    """The panels worth drawing: (column, title) of nodes, prompt length and chunk size where at
    least one slice varies that parameter alone. ``lines``: sweep_lines(df, [..., "ttft_s"])."""
    lines = sweep_lines(df, ["ttft_s"], params) if lines is None else lines
    return [(x, t) for x, t in AXES if lines.get(x, {}).get("ttft_s")]


def sweep_figure(df: pd.DataFrame, metric: str, x: str, axes: list[str] | None = None, title: str | None = None,
                 params: list[str] | None = None, lines: list | None = None) -> go.Figure:
    """``metric`` against ``x``: one line per scheme and setting of the other parameters
    (``lines``: sweep_lines(...)[x][metric] when the caller has them). Built from plain values,
    unvalidated (every value here is a number or text made above)."""
    lines = _slices(df, x, [metric], params)[metric] if lines is None else lines
    scale, unit = (1.0, "s") if metric == "ttft_s" else (2**30, "GiB")
    schemes = sorted(df["scheme"].astype(str).unique())
    data = []
    seen: dict[str, int] = {}
    for scheme, name, g in lines:
        k = seen.get(scheme, 0)
        seen[scheme] = k + 1
        si = schemes.index(scheme)
        data.append(dict(
            type="scatter", x=g[x].tolist(), y=(g[metric] / scale).tolist(), mode="lines+markers", name=html.escape(name),
            line=dict(color=scheme_color(scheme, si), width=2, dash=["solid", "dash", "dot", "dashdot", "longdash"][k % 5]),
            marker=dict(size=8, symbol=SYMBOLS[si % len(SYMBOLS)], line=dict(width=1, color="#fff")),
            hovertemplate=f"{html.escape(name)}<br>{x} %{{x}}<br>%{{y:.4g}} {unit}<extra></extra>"))
    xaxis = dict(title=dict(text=dict(AXES).get(x, x)))
    vals = sorted(df[x].dropna().unique()) if x in df.columns else []
    if len(vals) > 1 and min(vals) > 0 and max(vals) / min(vals) >= 8:
        xaxis["type"] = "log"
    if 0 < len(vals) <= 12:
        xaxis["tickvals"] = [v.item() if hasattr(v, "item") else v for v in vals]
    layout = dict(font=FONT, height=430, title=dict(text=title, x=0.01, font=dict(size=15)),
                  margin=dict(l=60, r=20, t=50, b=40), hoverlabel=dict(namelength=-1),
                  legend=dict(orientation="h", yanchor="top", y=-0.2, x=0, font=dict(size=11)), xaxis=xaxis,
                  yaxis=dict(title=dict(text="TTFT (s)" if metric == "ttft_s" else "GiB"), rangemode="tozero"))
    if not lines:
        layout["annotations"] = [dict(text=f"no slice of this dataset varies {x} alone", x=0.5, y=0.5, xref="paper",
                                      yref="paper", showarrow=False)]
    return plain_figure(data, layout)


def apply_filters(df: pd.DataFrame, values: dict) -> pd.DataFrame:
    for c, v in (values or {}).items():
        if c in df.columns and v not in (None, "", "all"):
            df = df[df[c].astype(str) == str(v)]
    return df


def summary_line(df: pd.DataFrame, meta: dict) -> str:
    parts = []
    if meta.get("name"):
        parts.append(f"sweep {meta['name']}")
    tot = meta.get("points_total")
    parts.append(f"{len(df):,} points" + (f" ok of {tot:,}" if tot is not None and tot != len(df) else ""))
    for c in ("scheme", "nodes", "seq", "chunk"):
        if c in df.columns:
            vals = sorted(df[c].dropna().unique().tolist(), key=lambda v: (isinstance(v, str), v))
            parts.append(f"{c}: {', '.join(_label(v) for v in vals[:8])}{' …' if len(vals) > 8 else ''}")
    return " · ".join(parts)


# ------------------------------------------------------------------------------ the table view

TABLE_METRICS = {"ttft_s": ("TTFT (s)", 1.0), "wire_bytes": ("wire GiB", 2**30), "kv_bytes": ("KV GiB", 2**30),
                 "peak_node_kv_bytes": ("peak KV per node (GiB)", 2**30), "prefill_s": ("prefill (s)", 1.0),
                 "decode_tokens_per_s": ("decode tokens/s", 1.0), "replica_factor_peak": ("replica factor peak", 1.0)}


def sweep_table(df: pd.DataFrame, col: str = "nodes", metrics=("ttft_s", "wire_bytes")) -> pd.DataFrame:
    """The paper's Table 1 view of any sweep: one row per setting of every varying parameter
    but ``col``, one column per value of ``col`` and metric (TTFT in s, bytes in GiB).
    Repeated points (equal in every parameter) show their median."""
    metrics = [m for m in metrics if m in df.columns]
    if not len(df) or col not in df.columns or not metrics:
        return pd.DataFrame()
    rows = [c for c in params_of(df) if c not in (col, "scheme", "sweep")]
    rows = (["sweep"] if "sweep" in params_of(df) and col != "sweep" else []) + ["scheme"] + rows
    keyed = df.assign(**{f"__{c}": df[c].map(_label) for c in rows})
    out = None
    for m in metrics:
        label, scale = TABLE_METRICS.get(m, (m, 1.0))
        pv = keyed.assign(__v=pd.to_numeric(keyed[m], errors="coerce") / scale).pivot_table(
            index=[f"__{c}" for c in rows], columns=col, values="__v", aggfunc="median")
        pv.columns = [f"{label} @ {col} {_label(v)}" for v in pv.columns]
        out = pv if out is None else out.join(pv, how="outer")
    out.index.names = rows
    out = out.reset_index()

    def natural(col):  # numbers by value (256 before 1024), the rest as text
        num = pd.to_numeric(col, errors="coerce")
        return num if num.notna().all() else col.astype(str)
    return out.sort_values(rows, key=natural, kind="stable").reset_index(drop=True)
