"""`emu report`: the dashboard's figures of one or more runs as one static HTML file.

plotly.js is embedded once (from the plotly package), so the file opens offline and can be
mailed around. The figures are the dashboard's own (dashboard.figures) at their default
views: the busiest link's detail, the node that reached the KV peak, the full timeline.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

import numpy as np
import plotly
import plotly.io as pio

from . import data as D
from . import figures as F

CSS = """
body { font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif; color: #1b2a41; background: #f4f6f9; margin: 0; }
header { background: #1b2a41; color: #fff; padding: 14px 24px; }
header h1 { margin: 0; font-size: 20px; } header p { margin: 4px 0 0; opacity: .75; font-size: 13px; }
main { max-width: 1500px; margin: 0 auto; padding: 16px 24px 40px; }
h2 { font-size: 19px; margin: 26px 0 6px; border-bottom: 2px solid #dde3ea; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 14px 0 6px; }
.panel { background: #fff; border-radius: 10px; box-shadow: 0 1px 3px rgba(20,30,50,.08); padding: 8px 10px; margin-bottom: 14px; }
.row { display: flex; gap: 14px; flex-wrap: wrap; } .row > .panel { flex: 1 1 560px; min-width: 0; }
table.sum { border-collapse: collapse; font-size: 13px; background: #fff; }
table.sum th, table.sum td { padding: 4px 10px; border-bottom: 1px solid #eef0f3; text-align: right; }
table.sum th:first-child, table.sum td:first-child { text-align: left; }
.error { background: #fff1f0; border: 1px solid #f3b7b3; color: #8a1c14; padding: 10px 12px; border-radius: 8px; }
.muted { color: #6b7a8f; font-size: 12.5px; }
table.frames { border-collapse: collapse; font-size: 11.5px; font-variant-numeric: tabular-nums; }
table.frames th, table.frames td { padding: 2px 6px; text-align: right; border-bottom: 1px solid #eef0f3; white-space: nowrap; }
.wrap { overflow: auto; max-height: 420px; }
"""

ROWS = [("scheme", "scheme"), ("nodes", "nodes"), ("seq", "prompt tokens"), ("chunk", "chunk"), ("topology", "topology"),
        ("ttft_s", "TTFT"), ("decode_tokens_per_s", "decode tokens/s"), ("wire_bytes", "on the wire"),
        ("kv_bytes", "KV payload"), ("frames", "frame-hops"), ("dropped_frames", "dropped frames"),
        ("peak_node_kv_bytes", "peak KV per node"), ("final_layout_owner_only", "owner-only at end")]


def _fmt(key, v):
    if v is None:
        return "-"
    if key == "ttft_s":
        return D.fmt_s(v)
    if key in ("wire_bytes", "kv_bytes", "peak_node_kv_bytes"):
        return D.fmt_bytes(v)
    if key == "decode_tokens_per_s":
        return f"{v:.2f}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


class _Doc:
    def __init__(self):
        self.parts: list[str] = []
        self.n_figs = 0

    def fig(self, fig) -> str:
        self.n_figs += 1
        return pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"displaylogo": False, "responsive": True},
                           div_id=f"fig{self.n_figs}")

    def add(self, s: str) -> None:
        self.parts.append(s)


def _panel(doc: _Doc, fig) -> str:
    return f'<div class="panel">{doc.fig(fig)}</div>'


def _section(doc: _Doc, run: D.Run, frames_rows: int, cache_dir: Path | None) -> None:
    s = run.summary
    e = (lambda v: html.escape(str(v)))  # every value from a file is escaped
    doc.add(f'<h2 id="{e(run.key)}">{e(run.key)}: {e(s.get("scheme"))}, '
            f'{e(s.get("nodes"))} nodes, prompt {e(s.get("seq"))}, {e(s.get("topology"))}</h2>')
    if run.error:
        doc.add(f'<div class="error">{html.escape(run.error)}</div>')
        return

    def guarded(what, fn):
        try:
            fn()
        except D.ResultsError as exc:
            doc.add(f'<div class="error">{html.escape(what)}: {html.escape(str(exc))}</div>')

    def links():
        df = run.links()
        lo, hi = 0.0, float(s.get("sim_end_s") or 1.0)
        totals = D.link_totals(df, span_s=max(hi - lo, 1e-12))
        b = s.get("busiest_link") or {}
        m = totals[(totals["src"] == b.get("src")) & (totals["dst"] == b.get("dst"))]
        link = int(m["link"].iloc[0]) if len(m) else (int(totals["link"].iloc[0]) if len(totals) else None)
        doc.add("<h3>Links</h3>")
        topo = F.topology_figure(run.topology(), totals, selected=link,
                                 title=f"{html.escape(str(s.get('topology')))}: average utilization per link direction")
        parts = [_panel(doc, topo)]
        if link is not None:
            ser = D.link_series(df, link)
            src, dst = int(ser["src"].iloc[0]), int(ser["dst"].iloc[0])
            rid = df[(df["src"] == dst) & (df["dst"] == src)]["link"]
            rev = D.link_series(df, int(rid.iloc[0])) if len(rid) else None
            parts.append(_panel(doc, F.link_detail(ser, src, dst, rev, title=f"Busiest link {src}→{dst} over time")))
        doc.add('<div class="row">' + "".join(parts) + "</div>")
        doc.add(_panel(doc, F.link_heatmap(D.link_matrix(df))))

    def memory():
        nodes = run.nodes()
        n = int(s.get("nodes") or (nodes["node"].max() + 1 if len(nodes) else 0))
        lo, hi = 0.0, float(s.get("sim_end_s") or 1.0)
        doc.add("<h3>Memory and replicas</h3>")
        if len(nodes):
            tot = nodes["owner_bytes"] + nodes["replica_bytes"] + nodes["transient_bytes"]
            peak = int(nodes["node"].iloc[int(np.argmax(tot.to_numpy()))])
        else:
            peak = 0
        t, cols = D.node_memory(nodes, peak, lo, hi)
        oo = s.get("owner_only_node_kv_bytes")
        sched = run.schedule() or {}
        budget = sched.get("kv_budget_bytes") if isinstance(sched.get("kv_budget_bytes"), (int, float)) else None
        f1 = F.memory_node_figure(t, cols, peak, oo[peak] if isinstance(oo, list) and peak < len(oo) else None, budget,
                                  s.get("ttft_s"), title=f"KV memory of node {peak} (the node that reached the peak)")
        x, z = D.memory_matrix(nodes, n, lo, hi)
        f2 = F.memory_heatmap(x, z, title="KV memory per node")
        doc.add('<div class="row">' + _panel(doc, f1) + _panel(doc, f2) + "</div>")
        mid, mean, mx = D.replica_factor_series(nodes, lo, s.get("ttft_s") or hi)
        spans = D.chunk_spans(run.ops())
        d = nodes.sort_values("t_s", kind="stable")
        meas = None
        if len(spans) and len(d):
            meas = (spans["chunk"].to_numpy(), D.value_at(d["t_s"].to_numpy(float), d["replica_factor"].to_numpy(float),
                                                          spans["end_s"].to_numpy(float)))
        doc.add(_panel(doc, F.replica_figure(mid, mean, mx, spans, s.get("ttft_s"), run.schedule(), meas)))

    def timeline():
        ops = run.ops()
        n = int(s.get("nodes") or 1)
        doc.add("<h3>Timeline</h3>")
        doc.add(_panel(doc, F.timeline_figure(D.timeline_segments(ops, n), s.get("ttft_s"))))

    def frames():
        cap = run.capture()
        if cap is None or frames_rows <= 0:
            return
        from .frames import CaptureIndex, FrameFilter

        ix = CaptureIndex(cap, cache_dir)
        ix.wait()
        doc.add("<h3>Frames</h3>")
        if ix.state != "ready":
            doc.add(f'<div class="error">{html.escape(ix.error or "capture unreadable")}</div>')
            return
        total, rows, hist = ix.query(FrameFilter(), 0, frames_rows)
        doc.add(_panel(doc, F.frames_histogram(hist, f"{html.escape(cap.name)}: {total:,} frames over time by op")))
        cols = ix.columns()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows)
        doc.add(f'<div class="panel"><p class="muted">The first {len(rows):,} of {total:,} frames.</p>'
                f'<div class="wrap"><table class="frames"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
                "</div></div>")

    guarded("links", links)
    guarded("memory", memory)
    guarded("timeline", timeline)
    guarded("frames", frames)


def _sweeps(doc: _Doc, paths) -> None:
    """The sweep datasets: the Sweep page's figures and its table (scheme x nodes)."""
    from .sweep import SweepError, load_sweeps, summary_line, sweep_axes, sweep_figure, sweep_table

    doc.add("<h2>Sweeps</h2>")
    try:
        df, meta = load_sweeps(list(paths))
    except SweepError as exc:
        doc.add(f'<div class="error">{html.escape(str(exc))}</div>')
        return
    doc.add(f'<p class="muted">{html.escape(summary_line(df, meta))}</p>')
    for m, label in (("ttft_s", "TTFT"), ("wire_bytes", "Bytes on the wire"), ("kv_bytes", "KV payload bytes")):
        if m not in df.columns:
            continue
        figs = [sweep_figure(df, m, x, None, f"{label} against {t}") for x, t in sweep_axes(df)]
        if figs:
            doc.add('<div class="row">' + "".join(_panel(doc, f) for f in figs) + "</div>")
    col = "nodes" if "nodes" in df.columns else "seq"
    tab = sweep_table(df, col)
    if len(tab):
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in tab.columns)
        def cell(v) -> str:
            if isinstance(v, float):
                return "-" if v != v else f"{v:.4g}"  # NaN: that point is not in the sweep
            return str(v)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in row) + "</tr>"
                       for row in tab.itertuples(index=False))
        doc.add(f'<div class="panel"><h3>Table: TTFT and wire GiB per {html.escape(col)}</h3><div class="wrap">'
                f'<table class="sum"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div></div>')


def write_report(paths, out, title: str | None = None, frames_rows: int = 200) -> tuple[Path, int]:
    """Write the report of the results folders ``paths`` to ``out``; returns (path, figures)."""
    from emu.atomic import atomic_file

    reg = D.Registry()
    sweeps: list[Path] = []
    for p in paths:
        reg.add_tree(p, sweeps=sweeps)
    runs = reg.runs()
    doc = _Doc()
    ok = [r for r in runs if not r.error]
    # the summary table and the overview figures
    head = "".join(f"<th>{html.escape(r.key)}</th>" for r in runs)
    body = "".join(f"<tr><td>{label}</td>" + "".join(f"<td>{html.escape(_fmt(k, r.summary.get(k)))}</td>" for r in runs)
                   + "</tr>" for k, label in ROWS)
    doc.add("<h2>Overview</h2>")
    doc.add(f'<div class="panel"><table class="sum"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table></div>')
    for r in runs:
        if r.error:
            doc.add(f'<div class="error">{html.escape(r.error)}</div>')
    if ok:
        f1, f2 = F.overview_figures(ok)
        doc.add('<div class="row">' + _panel(doc, f1) + _panel(doc, f2) + "</div>")
    from .state import user_cache_dir

    for r in runs:  # frame indexes come from (and go to) the user cache, as the dashboard's do
        _section(doc, r, frames_rows, user_cache_dir())
    if sweeps:
        _sweeps(doc, sweeps)
    title = title or ("mcf-emu report: " + ", ".join([r.key for r in runs] + [p.name for p in sweeps]))
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
            f"<style>{CSS}</style><script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head><body>"
            f"<header><h1>{html.escape(title)}</h1><p>written {time.strftime('%Y-%m-%d %H:%M')} by emu report from "
            f"{len(runs)} results folder{'s' if len(runs) != 1 else ''}; plotly.js {plotly.__version__} embedded, "
            "works offline</p></header><main>" + "\n".join(doc.parts) + "</main>"
            # figures are drawn as the page is parsed, before their row has its final layout: fit them once loaded
            "<script>window.addEventListener('load', function () { document.querySelectorAll('.js-plotly-plot')"
            ".forEach(function (g) { Plotly.Plots.resize(g); }); });</script></body></html>")
    out = Path(out)
    with atomic_file(out, "w") as fh:
        fh.write(page)
    return out, doc.n_figs
