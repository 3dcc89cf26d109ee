"""A process's one-time costs, paid when the app is made (``create_app``, before the server
answers) rather than on the first page a user opens.

The first figure of each kind costs several times the next: plotly loads the validators of
each trace type and property on first use, make_subplots its machinery, pandas its parquet
reader and its groupby and sort paths (0.2-0.5 s over the first Links, Memory and Timeline
pages). ``warm()`` runs every aggregation and figure builder of those pages once, on a
made-up run of two boards and three ops, and serializes a figure as Dash does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from . import data as D
from . import figures as F

_DONE = False


def warm() -> None:
    global _DONE
    if _DONE:
        return
    t = np.repeat([0.0, 0.5, 1.0], 2)
    two = np.tile([0, 1], 3)
    links = pd.DataFrame({"link": two, "src": two, "dst": 1 - two, "t_start_s": t, "t_end_s": t + 0.5, "frames": 1,
                          "wire_bytes": 100, "busy_s": 0.1, "utilization": 0.2, "queue_bytes_max": 10, "lost_frames": 0})
    nodes = pd.DataFrame({"t_s": t, "node": two, "owner_bytes": 10, "replica_bytes": 5, "transient_bytes": 1,
                          "replica_factor": 1.5})
    ops = pd.DataFrame({"op": [0, 1, 2], "kind": pd.Categorical(["qkv", "mlp", "send"]), "stage": "prefill",
                        "node": [0, 1, -1], "src": [0, 1, 0], "dsts": [0, 0, 2], "chunk": 0, "layer": 0,
                        "bytes": [0, 0, 64], "start_s": [0.0, 0.2, 0.3], "end_s": [0.2, 0.4, 0.5]})
    with tempfile.TemporaryDirectory(prefix="mcf-warm-") as tmp:  # a file, as the tables are read
        ops.to_parquet(Path(tmp) / "ops.parquet")
        ops = pd.read_parquet(Path(tmp) / "ops.parquet", columns=list(ops.columns))

    totals, m, ser = D.link_totals(links), D.link_matrix(links), D.link_series(links, 0)
    F.topology_figure(None, totals, selected=0, title="w")
    F.link_heatmap(m, zmax=1.0, x_range=(0.0, 1.0))
    F.link_detail(ser, 0, 1, D.link_series(links, 1))
    F.link_detail_compare([("w", "#000", ser)], "0→1")

    tt, cols = D.node_memory(nodes, 0, 0.0, 1.0)
    F.memory_node_figure(tt, cols, 0, 10.0, 20.0, 0.5, title="w")
    F.memory_node_compare([("w", "#000", tt, cols["total"], 10.0)], 0)
    x, z = D.memory_matrix(nodes, 2, 0.0, 1.0)
    F.memory_heatmap(x, z, zmax=20.0, x_range=(0.0, 1.0))
    F.memory_per_node_figure([("w", "#000", np.ones(2), [1.0, 1.0])])
    mid, mean, mx = D.replica_factor_series(nodes, 0.0, 1.0)
    spans = D.chunk_spans(ops)
    F.replica_figure(mid, mean, mx, spans, 0.5, {"r": [1], "r_mem": [1], "r_reuse": [1]},
                     (spans["chunk"].to_numpy(), np.ones(len(spans))), title="w")
    F.replica_compare([("w", "#000", mid, mean)])

    segs = [D.timeline_segments(ops, 2), D.timeline_segments(ops, 2, exact_below=0)]
    F.timeline_figure(segs, [0.3, 0.3], names=["a", "b"]).to_json()
    F.overview_figures([])
    _DONE = True
