"""Plotly figures of one or more runs, shared by the Dash app and the static report.

Every builder takes data already loaded from a results folder and returns a small figure:
the aggregation (time bins, merged segments, downsampled series) happens here, on the
server, so what reaches the browser is about what a screen can show.
"""

from __future__ import annotations

import copy
import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale, sample_colorscale
from plotly.subplots import make_subplots

from . import data as D

SCHEME_COLORS = {"mars": "#d1495b", "ring": "#00798c", "zigzag": "#6a4c93", "pd": "#edae49", "full": "#30638e",
                 "ulysses": "#7cb518", "usp": "#ff7f51"}
CATEGORY_COLORS = {"qkv": "#8ecae6", "attn": "#219ebc", "mlp": "#023047", "lm head": "#000000", "decode": "#8d99ae",
                   "send": "#fb8500", "reduce": "#e63946", "all-to-all": "#9d4edd", "drain / invalidate": "#2a9d8f"}
MEM_COLORS = {"owner": "#30638e", "replica": "#edae49", "transient": "#d1495b"}
UTIL_SCALE = "YlOrRd"
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=12)


_WHITE = None


def white():
    """The plotly_white template object, looked up once: given by name, plotly copies it out of
    its registry for every figure (a tenth of the Memory page's time)."""
    global _WHITE
    if _WHITE is None:
        import plotly.io as pio

        _WHITE = pio.templates["plotly_white"]
    return _WHITE


def themed(fig: go.Figure) -> go.Figure:
    """``fig`` with plotly_white as its template, set unvalidated as plotly sets its default
    template (validating copies the whole template: 10-20 ms a figure, a fifth of a page)."""
    lay = fig.layout
    was, lay._validate = lay._validate, False
    try:
        lay.template = white()
    finally:
        lay._validate = was
    return fig


def _base_layout(title: str | None = None, height: int = 380, **more) -> dict:
    """Every figure's layout: its height, font, margins, title and legend, then ``more`` (merged
    into those: ``margin=dict(t=80)`` keeps the other margins)."""
    # The legend goes under the x axis: with several runs it wraps, and above the plot it would
    # run into the title.
    layout = dict(height=height, font=FONT, margin=dict(l=60, r=20, t=48 if title else 16, b=96),
                  legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0.0),
                  hoverlabel=dict(namelength=-1))
    if title:
        layout["title"] = dict(text=title, x=0.01, xanchor="left", font=dict(size=15))
    return _merged(layout, more)


def _merged(a: dict, b: dict) -> dict:
    """``a`` updated by ``b`` as plotly updates a layout: nested objects key by key."""
    out = dict(a)
    for k, v in b.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _base(fig: go.Figure, title: str | None = None, height: int = 380) -> go.Figure:
    themed(fig).update_layout(**{"title": None, **_base_layout(title, height)})
    return fig


def message_figure(text: str, height: int = 260) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=14, color="#555"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base(fig, height=height)


def scheme_color(s: str | None, i: int = 0) -> str:
    pal = ["#d1495b", "#00798c", "#6a4c93", "#edae49", "#30638e", "#2a9d8f", "#8d99ae"]
    return SCHEME_COLORS.get(str(s).lower(), pal[i % len(pal)])


# ------------------------------------------------------------------------------ overview


def overview_figures(runs: list) -> tuple[go.Figure, go.Figure]:
    ok = [r for r in runs if not r.error]
    names = [r.key for r in ok]
    colors = [scheme_color(r.summary.get("scheme"), i) for i, r in enumerate(ok)]
    ttft = [r.summary.get("ttft_s") for r in ok]
    e = (lambda v: html.escape(str(v)))  # values from files: plotly draws some HTML in text
    hover = [f"{e(r.key)}<br>{e(r.summary.get('scheme'))} · {e(r.summary.get('nodes'))} nodes · seq {e(r.summary.get('seq'))}"
             f"<br>TTFT {D.fmt_s(r.summary.get('ttft_s'))}" for r in ok]
    f1 = go.Figure(go.Bar(x=names, y=ttft, marker_color=colors, hovertext=hover, hoverinfo="text",
                          text=[D.fmt_s(t) for t in ttft], textposition="outside", cliponaxis=False, name="TTFT"))
    f1.update_yaxes(title="TTFT (s)", rangemode="tozero")
    _base(f1, "Time to first token", 360)
    gib = 2**30
    f2 = go.Figure([
        go.Bar(x=names, y=[r.summary.get("wire_bytes", 0) / gib for r in ok], name="on the wire (every hop)",
               marker_color="#30638e", hovertemplate="%{x}<br>wire %{y:.3f} GiB<extra></extra>"),
        go.Bar(x=names, y=[r.summary.get("kv_bytes", 0) / gib for r in ok], name="KV payload delivered",
               marker_color="#edae49", hovertemplate="%{x}<br>KV %{y:.3f} GiB<extra></extra>"),
    ])
    f2.update_layout(barmode="group")
    f2.update_yaxes(title="GiB", rangemode="tozero")
    _base(f2, "Bytes moved", 360)
    return f1, f2


# ------------------------------------------------------------------------------ topology


def _positions(topo: dict | None, nodes: list[int]) -> tuple[dict[int, tuple[float, float]], dict[int, str]]:
    """Node positions for drawing, and each node's kind."""
    info = {}
    if topo and isinstance(topo.get("nodes"), list):
        for n in topo["nodes"]:
            if isinstance(n, dict) and isinstance(n.get("id"), int):
                info[n["id"]] = n
            elif isinstance(n, int):
                info[n] = {"id": n}
    allnodes = sorted(set(nodes) | set(info))
    kind = {n: str(info.get(n, {}).get("kind", "board")) for n in allnodes}
    boards = [n for n in allnodes if kind[n] == "board"]
    switches = [n for n in allnodes if kind[n] != "board"]
    pos: dict[int, tuple[float, float]] = {}
    if boards and all(isinstance(info.get(n, {}).get("row"), int) and isinstance(info.get(n, {}).get("col"), int) for n in boards):
        for n in boards:
            pos[n] = (float(info[n]["col"]), -float(info[n]["row"]))
    elif switches and any("layer" in info.get(s, {}) for s in switches):
        layers = {"core": 3.0, "agg": 2.0, "edge": 1.0}
        rows: dict[float, list[int]] = {}
        for s in switches:
            rows.setdefault(layers.get(str(info.get(s, {}).get("layer")), 1.5), []).append(s)
        rows.setdefault(0.0, []).extend(boards)
        width = max(len(v) for v in rows.values())
        for y, members in rows.items():
            members.sort()
            step = width / max(len(members), 1)
            for i, n in enumerate(members):
                pos[n] = ((i + 0.5) * step, y * 1.6)
    else:
        R = max(1.5, len(boards) / (2 * math.pi) * 1.2)
        for i, n in enumerate(boards):
            a = math.pi / 2 - 2 * math.pi * i / max(len(boards), 1)
            pos[n] = (R * math.cos(a), R * math.sin(a))
        for i, s in enumerate(switches):
            a = 2 * math.pi * i / max(len(switches), 1)
            r = 0 if len(switches) == 1 else R * 0.35
            pos[s] = (r * math.cos(a), r * math.sin(a))
    for n in allnodes:  # anything left (ids only in links.parquet)
        pos.setdefault(n, (len(pos) * 0.7, -3.0))
    return pos, kind


def _lane(p0, p1, lane: float, trim: float, out=None, height: float = 0.0, k: int = 24):
    """The drawn lane of one link direction from p0 to p1, as (x, y) points.

    A straight link is shifted ``lane`` to the right of its direction of travel, so the two
    directions of a full-duplex link run side by side. A link that would pass over other
    nodes (a torus wrap-around) is drawn as a bracket that leaves both ends towards ``out``
    (a unit vector) at ``height``; the direction whose right-hand side faces ``out`` takes the
    outer track. Both ends are cut back by ``trim`` so lanes stop short of the node markers.
    """
    a, b = np.asarray(p0, float), np.asarray(p1, float)
    d = b - a
    L = float(np.hypot(*d)) or 1.0
    dh = d / L
    right = np.array([dh[1], -dh[0]])
    if out is None:
        a2, b2 = a + lane * right, b + lane * right
        cut = min(trim / L, 0.45)
        pts = np.array([a2 + cut * (b2 - a2), b2 - cut * (b2 - a2)])
        return pts[:, 0], pts[:, 1]
    out = np.asarray(out, float)
    sig = 1.0 if float(right @ out) >= 0 else -1.0  # outer or inner track
    a2, b2 = a - sig * lane * dh, b + sig * lane * dh
    H = (height + sig * lane) * 4 / 3  # a cubic's control height for a peak of height + ...
    t = np.linspace(0, 1, k)[:, None]
    c0, c1 = a2 + H * out, b2 + H * out
    pts = (1 - t) ** 3 * a2 + 3 * (1 - t) ** 2 * t * c0 + 3 * (1 - t) * t**2 * c1 + t**3 * b2
    keep = (np.hypot(*(pts - a).T) > trim) & (np.hypot(*(pts - b).T) > trim)
    pts = pts[keep] if keep.sum() >= 2 else pts
    return pts[:, 0], pts[:, 1]


def topology_figure(topo: dict | None, totals, selected: int | None = None, title: str | None = None,
                    height: int = 520, vmax: float | None = None) -> go.Figure:
    """The topology with each link direction drawn as its own lane, coloured by utilization.

    ``totals``: link_totals() rows (link, src, dst, utilization, wire_bytes, lost_frames, ...).
    Clicking a lane gives clickData whose customdata is the link id."""
    rows = totals.to_dict("records")
    nodes = sorted({int(r["src"]) for r in rows} | {int(r["dst"]) for r in rows})
    pos, kind = _positions(topo, nodes)
    pts = np.array([pos[n] for n in pos]) if pos else np.zeros((1, 2))
    centre = pts.mean(axis=0)
    d = [math.dist(pos[a], pos[b]) for a in pos for b in pos if a < b]
    unit = min([x for x in d if x > 1e-9], default=1.0)
    lane = 0.07 * unit
    if vmax is None:  # a comparison passes the largest over all its runs: one colour scale
        vmax = max((r["utilization"] for r in rows), default=0.0)
    vmax = max(0.05, vmax)
    colorscale = get_colorscale(UTIL_SCALE)

    def color_of(u: float) -> str:
        return sample_colorscale(colorscale, [min(max(u / vmax, 0.0), 1.0)])[0]

    buckets: dict[int, dict] = {}
    mids_x, mids_y, mids_c, mids_id, mids_text = [], [], [], [], []
    sel_x, sel_y = [], []
    NB = 10
    for r in rows:
        u, v, lid = int(r["src"]), int(r["dst"]), int(r["link"])
        p0, p1 = pos[u], pos[v]
        # bulge a link whose straight line would pass over another node (torus wrap-arounds)
        a, b = np.array(p0), np.array(p1)
        ab = b - a
        L2 = float(ab @ ab) or 1.0
        near = False
        for n, q in pos.items():
            if n in (u, v):
                continue
            t = float((np.array(q) - a) @ ab) / L2
            if 0.05 < t < 0.95 and np.linalg.norm(a + t * ab - np.array(q)) < 0.25 * unit:
                near = True
                break
        wrap = None
        if near:
            m = (a + b) / 2
            nrm = np.array([ab[1], -ab[0]]) / math.sqrt(L2)
            side = float((m - centre) @ nrm)
            # away from the centre; the same vector for both directions
            wrap = nrm if side > 1e-9 else -nrm if side < -1e-9 else (nrm if u < v else -nrm)
        x, y = _lane(p0, p1, lane, 0.24 * unit, out=wrap, height=0.32 * unit)
        util = float(r["utilization"])
        bk = min(int(util / vmax * NB), NB - 1) if vmax > 0 else 0
        bb = buckets.setdefault(bk, {"x": [], "y": [], "id": []})
        xs, ys = [float(v) for v in x], [float(v) for v in y]
        bb["x"] += xs + [None]
        bb["y"] += ys + [None]
        bb["id"] += [lid] * len(xs) + [None]
        mi = len(xs) // 2
        mids_x.append(xs[mi] if len(xs) > 2 else (xs[0] + xs[-1]) / 2)
        mids_y.append(ys[mi] if len(ys) > 2 else (ys[0] + ys[-1]) / 2)
        mids_c.append(util)
        mids_id.append(lid)
        mids_text.append(f"link {u}→{v} (id {lid})<br>utilization {util:.1%}<br>{D.fmt_bytes(r.get('wire_bytes'))} on the wire"
                         f"<br>peak queue {D.fmt_bytes(r.get('queue_bytes_max'))} · lost frames {int(r.get('lost_frames', 0)):,}"
                         "<br><i>click for its detail</i>")
        if selected is not None and lid == selected:
            sel_x, sel_y = xs, ys
    traces = []
    if sel_x:
        traces.append(dict(type="scatter", x=sel_x, y=sel_y, mode="lines", line=dict(color="#111", width=11),
                           hoverinfo="skip", showlegend=False, name="selected"))
    for bk in sorted(buckets):
        bb = buckets[bk]
        traces.append(dict(type="scatter", x=bb["x"], y=bb["y"], customdata=bb["id"], mode="lines",
                           line=dict(color=color_of((bk + 0.5) / NB * vmax), width=5), hoverinfo="skip",
                           showlegend=False, name=f"util bucket {bk}"))
    traces.append(dict(type="scatter", x=mids_x, y=mids_y, mode="markers", customdata=mids_id, hovertext=mids_text,
                       hoverinfo="text", name="links",
                       marker=dict(size=11, color=mids_c, colorscale=_scale(UTIL_SCALE), cmin=0, cmax=vmax,
                                   line=dict(color="#333", width=0.6),
                                   colorbar=dict(title=dict(text="utilization", side="right"), tickformat=".0%",
                                                 thickness=14, len=0.8)),
                       showlegend=False))
    bx = [pos[n][0] for n in pos if kind.get(n) == "board"]
    by = [pos[n][1] for n in pos if kind.get(n) == "board"]
    bl = [str(n) for n in pos if kind.get(n) == "board"]
    traces.append(dict(type="scatter", x=bx, y=by, mode="markers+text", text=bl, textposition="middle center",
                       marker=dict(size=30, color="#ffffff", line=dict(color="#30638e", width=2.5)),
                       textfont=dict(size=12, color="#1b2a41"), hovertext=[f"board {n}" for n in bl],
                       hoverinfo="text", showlegend=False, name="boards"))
    sw = [n for n in pos if kind.get(n) != "board"]
    if sw:
        traces.append(dict(type="scatter", x=[pos[n][0] for n in sw], y=[pos[n][1] for n in sw], mode="markers+text",
                           text=[f"s{n}" for n in sw], textposition="middle center", hoverinfo="text",
                           hovertext=[f"switch {n} ({kind[n]})" for n in sw],
                           marker=dict(size=30, symbol="square", color="#eef2f7", line=dict(color="#555", width=2)),
                           textfont=dict(size=10), showlegend=False, name="switches"))
    layout = _base_layout(title, height, xaxis=dict(visible=False),
                          yaxis=dict(visible=False, scaleanchor="x", scaleratio=1),
                          margin=dict(l=10, r=10, t=48 if title else 10, b=10), clickmode="event",
                          hovermode="closest", plot_bgcolor="#fbfbfd")
    return plain_figure(traces, layout)


def link_heatmap(m: D.LinkMatrix, title: str | None = None, max_rows: int = 256, zmax: float | None = None,
                 x_range=None) -> go.Figure:
    rows = np.arange(len(m.links))
    note = ""
    if len(rows) > max_rows:
        busiest = np.argsort(-m.busy_s.sum(axis=1))[:max_rows]
        rows = np.sort(busiest)
        note = f" (the {max_rows} busiest of {len(m.links)} link directions)"
    labels = [f"{int(m.src[i])}→{int(m.dst[i])}" for i in rows]
    z = m.util[rows]
    trace = dict(type="heatmap", z=z, x=(m.t0 + m.t1) / 2, y=labels, colorscale=_scale(UTIL_SCALE), zmin=0,
                 zmax=max(0.05, zmax if zmax is not None else float(np.nanmax(z)) if z.size else 1),
                 customdata=m.lost[rows],
                 hovertemplate="link %{y}<br>t %{x:.4f} s<br>utilization %{z:.1%}<br>lost frames %{customdata:.0f}"
                               "<extra></extra>",
                 colorbar=dict(title=dict(text="utilization", side="right"), tickformat=".0%", thickness=14))
    layout = _base_layout((title or "Utilization per link direction over time") + note,
                          max(360, min(900, 14 * len(rows) + 120)), xaxis=_time_axis(x_range),
                          yaxis=dict(title=dict(text="link direction"), autorange="reversed", type="category",
                                     tickfont=dict(size=9)))
    return plain_figure([trace], layout)


SUBPLOT_TITLES = ("utilization", "largest queue backlog a frame found", "frames lost on the wire")


def link_detail(series, src: int, dst: int, reverse=None, title: str | None = None) -> go.Figure:
    t = ((series["t_start_s"] + series["t_end_s"]) / 2).to_numpy()
    traces = [dict(type="scatter", x=t, y=series["utilization"].to_numpy(), mode="lines", name=f"{src}→{dst}",
                   line=dict(color="#d1495b", width=1.6), fill="tozeroy", fillcolor="rgba(209,73,91,0.15)",
                   hovertemplate="t %{x:.4f} s<br>%{y:.1%}<extra>" + f"{src}→{dst}</extra>", **_PANELS[0])]
    if reverse is not None and len(reverse):
        tr = ((reverse["t_start_s"] + reverse["t_end_s"]) / 2).to_numpy()
        traces.append(dict(type="scatter", x=tr, y=reverse["utilization"].to_numpy(), mode="lines",
                           name=f"{dst}→{src} (reverse)", line=dict(color="#00798c", width=1, dash="dot"),
                           hovertemplate="t %{x:.4f} s<br>%{y:.1%}<extra>" + f"{dst}→{src}</extra>", **_PANELS[0]))
    traces.append(dict(type="scatter", x=t, y=(series["queue_bytes_max"] / 1024).to_numpy(), mode="lines",
                       name="queue (KiB)", line=dict(color="#30638e", width=1.2), line_shape="hv", showlegend=False,
                       hovertemplate="t %{x:.4f} s<br>%{y:.1f} KiB<extra>queue</extra>", **_PANELS[1]))
    traces.append(dict(type="bar", x=t, y=series["lost_frames"].to_numpy(), name="lost frames", marker_color="#6a4c93",
                       showlegend=False, hovertemplate="t %{x:.4f} s<br>%{y} lost<extra></extra>", **_PANELS[2]))
    notes = [] if float(series["lost_frames"].sum()) else [
        dict(text="no frames lost on this link", x=0.5, y=0.5, xref="x3 domain", yref="y3 domain", showarrow=False,
             font=dict(color="#888"))]
    return _detail_figure(traces, title or f"Link {src}→{dst}", notes)


# ------------------------------------------------------------------------------ memory


def memory_node_figure(t, cols, node: int, owner_only: float | None, budget: float | None, ttft: float | None,
                       title: str | None = None) -> go.Figure:
    mib = 2**20
    fig = go.Figure()
    for name in ("owner", "replica", "transient"):
        fig.add_trace(go.Scatter(x=t, y=cols[name] / mib, name=f"{name}", mode="lines", stackgroup="kv", line_shape="hv",
                                 line=dict(width=0.5, color=MEM_COLORS[name]), fillcolor=MEM_COLORS[name],
                                 hovertemplate="t %{x:.4f} s<br>%{y:.2f} MiB<extra>" + name + "</extra>"))
    x_hi = float(t[-1]) if len(t) else 1.0
    x_lo = float(t[0]) if len(t) else 0.0
    if owner_only is not None:
        fig.add_trace(go.Scatter(x=[x_lo, x_hi], y=[owner_only / mib] * 2, mode="lines", name="owner-only (final shard)",
                                 line=dict(color="#111", dash="dash", width=1.6),
                                 hovertemplate="owner-only %{y:.2f} MiB<extra></extra>"))
    if budget:
        fig.add_trace(go.Scatter(x=[x_lo, x_hi], y=[budget / mib] * 2, mode="lines", name="KV budget",
                                 line=dict(color="#d1495b", dash="dot", width=1.4),
                                 hovertemplate="budget %{y:.2f} MiB<extra></extra>"))
    if ttft:
        fig.add_vline(x=ttft, line=dict(color="#888", width=1, dash="dot"), annotation_text="first token",
                      annotation_position="top left", annotation_font_size=10)
    fig.update_yaxes(title="KV memory (MiB)", rangemode="tozero")
    fig.update_xaxes(title="simulated time (s)")
    _base(fig, title or f"KV memory of node {node}", 420)
    fig.update_layout(margin=dict(t=80), legend=dict(y=1.03, traceorder="reversed"))
    return fig


def memory_heatmap(x, z, title: str | None = None, zmax: float | None = None, x_range=None) -> go.Figure:
    mib = 2**20
    trace = dict(type="heatmap", z=z / mib, x=x, y=[f"node {i}" for i in range(z.shape[0])], colorscale=_scale("Blues"),
                 zmin=0, colorbar=dict(title=dict(text="MiB", side="right"), thickness=14),
                 hovertemplate="%{y}<br>t %{x:.4f} s<br>%{z:.2f} MiB (peak in bin)<extra></extra>")
    if zmax is not None:
        trace["zmax"] = zmax / mib
    layout = _base_layout(title or "KV memory per node (click a row to show that node above)",
                          max(260, min(640, 22 * z.shape[0] + 110)),
                          yaxis=dict(autorange="reversed", type="category"), xaxis=_time_axis(x_range))
    return plain_figure([trace], layout)


def _time_axis(x_range=None) -> dict:
    axis = dict(title=dict(text="simulated time (s)"))
    if x_range:
        axis["range"] = list(x_range)
    return axis


def _scale(name: str) -> list:
    """A named colour scale as the list of stops plotly makes of the name (plotly.js knows other
    scales by some of the same names)."""
    return [list(stop) for stop in get_colorscale(name)]


REPLICA_TITLES = ("average copies per block over time", "replica factor per prefill chunk")


def _replica_layout(title: str | None) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.09,
                        subplot_titles=REPLICA_TITLES)
    fig.update_xaxes(title="simulated time (s)  (grey lines: chunk starts)", row=1, col=1)
    fig.update_yaxes(title="copies per block", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title="chunk", row=1, col=2)
    fig.update_yaxes(title="replicas", rangemode="tozero", row=1, col=2)
    _base(fig, title, 420)
    fig.update_layout(legend=dict(y=-0.22, yanchor="top", x=0, xanchor="left"), margin=dict(b=90))
    for a in fig.layout.annotations:
        if a.text in REPLICA_TITLES:
            a.font.size = 12
    return fig


def replica_figure(mid, mean, mx, spans, ttft: float | None, schedule: dict | None, measured_at_chunk=None,
                   title: str | None = None) -> go.Figure:
    """Left: the cluster's replica factor over time; right: per chunk, the scheduled r(c) and the
    measured copies per block when the chunk's compute ended (the paper's Figure 4 view)."""
    left, right = dict(xaxis="x", yaxis="y"), dict(xaxis="x2", yaxis="y2")
    ok = np.isfinite(mean)
    traces = [dict(type="scatter", x=mid[ok], y=mx[ok], mode="lines", line=dict(width=0), showlegend=False,
                   hoverinfo="skip", name="max in bin", **left),
              dict(type="scatter", x=mid[ok], y=mean[ok], mode="lines", name="average copies per block", fill="tonexty",
                   fillcolor="rgba(209,73,91,0.15)", line=dict(color="#d1495b", width=1.8),
                   hovertemplate="t %{x:.4f} s<br>%{y:.2f} copies per block<extra></extra>", **left)]
    # chunk starts and TTFT as vertical lines on the left panel, set at once (add_vline per
    # line re-laid the figure out each time: 1.1 s of the Memory page for 32 chunks)
    lines = []
    if spans is not None and len(spans):
        lines += [dict(x=s, line=dict(color="#bbb", width=0.7)) for s in spans["start_s"].tolist() if np.isfinite(s)]
        traces.append(dict(type="scatter", x=spans["start_s"].to_numpy(), y=[None] * len(spans), showlegend=False,
                           hoverinfo="skip", **left))
    if ttft:
        lines.append(dict(x=ttft, line=dict(color="#555", width=1, dash="dot")))
    layout = _layout_of("replica", _replica_layout, title)
    layout["shapes"] = [dict(type="line", x0=v["x"], x1=v["x"], y0=0, y1=1, xref="x", yref="y domain", line=v["line"])
                        for v in lines]
    r = (schedule or {}).get("r")
    if isinstance(r, list) and r:
        chunks = list(range(len(r)))
        traces.append(dict(type="bar", x=chunks, y=r, name="r(c) scheduled", marker_color="#edae49",
                           hovertemplate="chunk %{x}<br>r = %{y}<extra></extra>", **right))
        for key, name, dash in (("r_mem", "memory bound r_mem", "dot"), ("r_reuse", "reuse bound r_reuse", "dash")):
            v = (schedule or {}).get(key)
            if isinstance(v, list) and len(v) == len(r):
                traces.append(dict(type="scatter", x=chunks, y=v, mode="lines+markers", name=name,
                                   line=dict(dash=dash, width=1.2), marker=dict(size=4),
                                   hovertemplate="chunk %{x}<br>%{y}<extra>" + key + "</extra>", **right))
    if measured_at_chunk is not None and len(measured_at_chunk[0]):
        traces.append(dict(type="scatter", x=measured_at_chunk[0], y=measured_at_chunk[1], mode="lines+markers",
                           name="measured copies per block at chunk end", line=dict(color="#d1495b", width=2),
                           marker=dict(size=6), hovertemplate="chunk %{x}<br>%{y:.2f} copies<extra>measured</extra>",
                           **right))
    if isinstance(r, list) and len(r) <= 24:
        layout["xaxis2"]["dtick"] = 1
    return plain_figure(traces, layout)


# ------------------------------------------------------------------------------ timeline


def _timeline_traces(seg: D.Segments, run_i: int, axes: dict) -> list[dict]:
    """Bars of one run's timeline on the subplot of ``axes`` (xaxis, yaxis): y is the lane index
    (0 at the top). Plain values (lists, numbers, text made here), for an unvalidated figure."""
    out = []
    for cat, b in seg.bars:
        if not b["base"]:
            continue
        out.append(dict(
            type="bar", base=b["base"], x=b["length"], y=b["lane"], orientation="h", width=0.54, offset=-0.42, name=cat,
            legendgroup=cat, showlegend=False, marker=dict(color=CATEGORY_COLORS.get(cat, "#999"), line=dict(width=0)),
            hovertext=b["text"], hoverinfo="text",
            # op id (-1: a merged segment), the run, and the bar's own start and end (a click zooms to them)
            customdata=[[o, run_i, a, a + w] for o, a, w in zip(b["op"], b["base"], b["length"])], **axes))
    # strips share the band under the bars: one row per kind that has strips, per lane group
    groups: dict[bool, list] = {}
    for cat, b in seg.strips:
        if b["base"]:
            groups.setdefault(cat in D.COMM_CATS, []).append(cat)
    for cat, b in seg.strips:
        if not b["base"]:
            continue
        g = groups[cat in D.COMM_CATS]
        slot, slots = g.index(cat), len(g)
        y = 0.14 + (slot + 0.5) * 0.3 / slots  # the strip's row under the lane's bars
        # one line path per kind (thousands of strips stay cheap to draw); no hover of their own
        xs = np.empty(3 * len(b["base"]), dtype=object)
        ys = np.empty(3 * len(b["base"]), dtype=object)
        base, length, lane = (np.asarray(b[k], float) for k in ("base", "length", "lane"))
        xs[0::3], xs[1::3], xs[2::3] = base, base + length, None
        ys[0::3], ys[1::3], ys[2::3] = lane + y, lane + y, None
        out.append(dict(type="scatter", x=xs.tolist(), y=ys.tolist(), mode="lines", name=cat, legendgroup=cat,
                        showlegend=False, line=dict(color=CATEGORY_COLORS.get(cat, "#999"), width=max(1.5, 6 / slots)),
                        hoverinfo="skip", connectgaps=False, **axes))
    return out


def timeline_figure(segs, ttft=None, title: str | None = None, names=None) -> go.Figure:
    """Gantt chart of one or more runs (one subplot each, one shared time axis).

    ``segs``: a Segments or a list of them; ``ttft``: a number or a list; ``names``: the runs.
    The subplots are laid out by plotly; the bars (thousands of values) join them unvalidated."""
    if isinstance(segs, D.Segments):
        segs, ttft = [segs], [ttft]
    ttft = ttft if isinstance(ttft, list) else [ttft] * len(segs)
    names = names or [None] * len(segs)
    k = len(segs)
    lanes_n = [len(sg.lanes) for sg in segs]
    fig = make_subplots(rows=k, cols=1, shared_xaxes=True, vertical_spacing=0.06 if k > 1 else 0.02,
                        row_heights=[max(n, 1) for n in lanes_n])
    traces = []
    seen = set()
    for i, sg in enumerate(segs):
        axes = dict(xaxis=f"x{i + 1 if i else ''}", yaxis=f"y{i + 1 if i else ''}")  # row i + 1 of one column
        present = {c for c, b in sg.bars if b["base"]} | {c for c, b in sg.strips if b["base"]}
        traces += _timeline_traces(sg, i, axes)
        for c in [c for c in D.CATEGORY_ORDER if c in present - seen] + sorted(present - seen - set(D.CATEGORY_ORDER)):
            # one legend entry per kind over all runs, in lane order
            traces.append(dict(type="bar", x=[None], y=[None], orientation="h", name=c, legendgroup=c,
                               marker=dict(color=CATEGORY_COLORS.get(c, "#999")), hoverinfo="skip", **axes))
        seen |= present
        n = len(sg.lanes)
        fig.update_yaxes(tickmode="array", tickvals=list(range(n)), ticktext=sg.lanes, tickfont=dict(size=9),
                         fixedrange=True, range=[n - 0.5, -0.5], row=i + 1, col=1,
                         title=dict(text=f"<b>{html.escape(str(names[i]))}</b>", font=dict(size=13)) if k > 1 else None)
        t = ttft[i]
        if t and present and sg.t0 <= t <= sg.t1:  # (a subplot without bars has no line, as plotly leaves it)
            fig.add_vline(x=t, line=dict(color="#555", width=1, dash="dot"), row=i + 1, col=1,
                          exclude_empty_subplots=False)
    t0, t1 = min(sg.t0 for sg in segs), max(sg.t1 for sg in segs)
    fig.update_xaxes(range=[t0, t1])
    fig.update_xaxes(title="simulated time (s)", row=k, col=1)
    fig = plain_figure(traces, fig.layout.to_plotly_json())
    h = max(360, min(1800, sum(16 * n + 40 for n in lanes_n) + 120))
    exact = all(sg.exact for sg in segs)
    how = ("every op as it ran" if exact else
           f"{sum(sg.n_ops for sg in segs):,} ops; each pixel shows the kind that kept the lane busiest, thin strips the "
           "other kinds that ran")
    _base(fig, title or f"Compute and NIC activity per node, {t0:.4f}–{t1:.4f} s ({how}; drag or wheel to zoom, "
                        "double-click to reset)", h)
    fig.update_layout(hovermode="closest", dragmode="zoom", barmode="overlay", bargap=0, margin=dict(t=88),
                      legend=dict(y=1.0, yanchor="bottom", x=0, xanchor="left"))
    fig.update_layout(title=dict(y=0.995, yanchor="top"))
    return fig


# ------------------------------------------------------------------------------ frames


def frames_histogram(hist, title: str | None = None) -> go.Figure:
    from .frames import enum_names

    edges, counts = hist
    names = enum_names()["op"]
    x = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure()
    pal = ["#30638e", "#edae49", "#d1495b", "#00798c", "#6a4c93", "#2a9d8f", "#fb8500", "#8d99ae", "#003d5b", "#e76f51", "#264653"]
    for i, op in enumerate(sorted(counts)):
        name = "malformed" if op == -1 else names.get(op, str(op))
        fig.add_trace(go.Bar(x=x, y=counts[op], name=name, marker_color="#111" if op == -1 else pal[i % len(pal)],
                             marker_line_width=0, hovertemplate="t %{x:.4f} s<br>%{y:,} frames<extra>" + name + "</extra>"))
    fig.update_layout(barmode="stack", bargap=0)
    fig.update_yaxes(title="frames per bin")
    fig.update_xaxes(title="capture time (s)")
    return _base(fig, title or "Captured frames over time by op", 300)


# ------------------------------------------------------------------------------ comparisons


def link_detail_compare(items, label: str, title: str | None = None) -> go.Figure:
    """One link direction ``label`` (``u→v``) in several runs, overlaid on shared axes.
    ``items``: (run key, colour, series or None)."""
    traces = []
    for key, color, ser in items:
        name = html.escape(str(key))
        if ser is None or not len(ser):
            traces.append(dict(type="scatter", x=[None], y=[None], name=f"{name}: no such link", mode="lines",
                               line=dict(color=color), **_PANELS[0]))
            continue
        t = ((ser["t_start_s"] + ser["t_end_s"]) / 2).to_numpy()
        traces += [
            dict(type="scatter", x=t, y=ser["utilization"].to_numpy(), mode="lines", name=name, legendgroup=name,
                 line=dict(color=color, width=1.5), hovertemplate="t %{x:.4f} s<br>%{y:.1%}<extra>" + name + "</extra>",
                 **_PANELS[0]),
            dict(type="scatter", x=t, y=(ser["queue_bytes_max"] / 1024).to_numpy(), mode="lines", name=name,
                 legendgroup=name, showlegend=False, line=dict(color=color, width=1.2), line_shape="hv",
                 hovertemplate="t %{x:.4f} s<br>%{y:.1f} KiB<extra>" + name + "</extra>", **_PANELS[1]),
            dict(type="bar", x=t, y=ser["lost_frames"].to_numpy(), name=name, legendgroup=name, showlegend=False,
                 marker_color=color, hovertemplate="t %{x:.4f} s<br>%{y} lost<extra>" + name + "</extra>", **_PANELS[2])]
    fig = _detail_figure(traces, title or f"Link {label} in each run")
    fig.update_layout(barmode="group")
    return fig


# the link detail's panels, top to bottom: the axes of each
_PANELS = [dict(xaxis="x", yaxis="y"), dict(xaxis="x2", yaxis="y2"), dict(xaxis="x3", yaxis="y3")]


def _detail_layout(title: str) -> go.Figure:
    """The link detail: utilization, largest queue backlog and frames lost over one time axis.
    Title, subplot titles and legend never overprint: the subplot titles sit left-aligned over
    their panels and the legend under the time axis (_base), where it may wrap over as many
    rows as there are runs. At the top it ran into "utilization"."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=SUBPLOT_TITLES)
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="KiB", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title="frames", rangemode="tozero", row=3, col=1)
    fig.update_xaxes(title="simulated time (s)", row=3, col=1)
    _base(fig, title, 560)
    fig.update_layout(margin=dict(t=84, b=110))
    for a in fig.layout.annotations:
        if a.xref == "paper" and a.text in SUBPLOT_TITLES:
            a.update(x=0.0, xanchor="left", font=dict(size=12))
    return fig


def _detail_figure(traces: list[dict], title: str, notes=()) -> go.Figure:
    layout = _layout_of("link detail", _detail_layout, title)
    layout["annotations"] += list(notes)
    return plain_figure(traces, layout)


_LAYOUTS: dict = {}


def _layout_of(name: str, make, title: str | None) -> dict:
    """A copy of the layout ``make(title)`` lays out (subplots, axes, legend), made by plotly once
    per process, titled ``title``: make_subplots and its updates took most of a figure's time.
    Without its template: ``plain_figure`` sets that."""
    key = (name, bool(title))
    if key not in _LAYOUTS:
        layout = make("-" if title else None).layout.to_plotly_json()
        layout.pop("template", None)
        _LAYOUTS[key] = layout
    layout = copy.deepcopy(_LAYOUTS[key])
    if title:
        layout["title"]["text"] = title
    return layout


def plain_figure(traces: list[dict], layout: dict) -> go.Figure:
    """A figure of traces and a layout made of plain values here (lists, arrays, numbers, escaped
    text; each trace naming its axes), unvalidated: plotly's checks of every value took a third
    to a half of a page's time."""
    return themed(go.Figure(data=traces, layout=layout, _validate=False))


def memory_node_compare(items, node: int, title: str | None = None) -> go.Figure:
    """One node's KV memory in several runs on one axis: total held (solid) and the run's
    owner-only share at the end (dashed). ``items``: (run key, colour, t, total, owner_only)."""
    mib = 2**20
    traces = []
    for key, color, t, total, oo in items:
        name = html.escape(str(key))
        traces.append(dict(type="scatter", x=t, y=np.asarray(total) / mib, mode="lines", line_shape="hv",
                           name=f"{name}: held", legendgroup=name, line=dict(color=color, width=1.6),
                           hovertemplate="t %{x:.4f} s<br>%{y:.2f} MiB<extra>" + name + "</extra>"))
        if oo is not None and len(t):
            traces.append(dict(type="scatter", x=[float(t[0]), float(t[-1])], y=[oo / mib] * 2, mode="lines",
                               name=f"{name}: owner-only", legendgroup=name,
                               line=dict(color=color, dash="dash", width=1.2),
                               hovertemplate="owner-only %{y:.2f} MiB<extra>" + name + "</extra>"))
    layout = _base_layout(title or f"KV memory of node {node} in each run (dashed: its owner-only share at the end)", 420,
                          yaxis=dict(title=dict(text="KV memory (MiB)"), rangemode="tozero"), xaxis=_time_axis(),
                          margin=dict(t=80), legend=dict(y=1.03))
    return plain_figure(traces, layout)


def memory_per_node_figure(items, title: str | None = None) -> go.Figure:
    """Per node, the peak KV each run held against the owner-only layout (the paper's Figure 4
    view with its baselines). ``items``: (run key, colour, peak per node, owner-only per node)."""
    mib = 2**20
    traces = []
    owner_drawn = False
    for key, color, peak, oo in items:
        name = html.escape(str(key))
        nodes = list(range(len(peak)))
        traces.append(dict(type="bar", x=nodes, y=np.asarray(peak, float) / mib, name=f"{name}: peak", marker_color=color,
                           hovertemplate="node %{x}<br>peak %{y:.2f} MiB<extra>" + name + "</extra>"))
        if oo is not None and not owner_drawn:
            traces.append(dict(type="scatter", x=list(range(len(oo))), y=np.asarray(oo, float) / mib, mode="markers",
                               name="owner-only (decode-ready layout)", legendrank=1,
                               marker=dict(symbol="line-ew-open", size=28, color="#111", line=dict(width=2.5)),
                               hovertemplate="node %{x}<br>owner-only %{y:.2f} MiB<extra></extra>"))
            owner_drawn = True
    layout = _base_layout(title or "Peak KV memory per node in each run against the owner-only layout", 400,
                          barmode="group", bargap=0.25, xaxis=dict(title=dict(text="node"), dtick=1),
                          yaxis=dict(title=dict(text="KV memory (MiB)"), rangemode="tozero"))
    return plain_figure(traces, layout)


def replica_compare(items, title: str | None = None) -> go.Figure:
    """Average copies per block over time, one line per run. ``items``: (run key, colour, mid, mean)."""
    traces = []
    for key, color, mid, mean in items:
        name = html.escape(str(key))
        ok = np.isfinite(mean)
        traces.append(dict(type="scatter", x=mid[ok], y=mean[ok], mode="lines", name=name,
                           line=dict(color=color, width=1.6),
                           hovertemplate="t %{x:.4f} s<br>%{y:.2f} copies per block<extra>" + name + "</extra>"))
    layout = _base_layout(title or "Average copies per block over time in each run (prefill)", 380,
                          yaxis=dict(title=dict(text="copies per block"), rangemode="tozero"), xaxis=_time_axis())
    return plain_figure(traces, layout)
