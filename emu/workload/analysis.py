"""Figures read back from a trace (no replay needed): traffic by message type and the
per-node KV memory at chunk granularity, as paper eqs. 9-10 and 17-22 count them."""

from __future__ import annotations

import numpy as np

from .enums import Kind, MsgOp, Residency, Stage
from .layout import Layout


def layout_of(meta: dict) -> Layout:
    """The token layout a trace was generated with."""
    scheme = meta["scheme"]
    nodes = scheme.get("prefill_nodes", meta["nodes"]) if scheme["name"] == "pd" else meta["nodes"]
    if scheme["name"] in ("ulysses", "usp"):  # chunks cut into ring_degree group slices
        nodes = scheme["ring_degree"]
    return Layout(meta["seq"], meta["chunk"], nodes, meta["model"]["layers"], zigzag=scheme["name"] == "zigzag",
                  kv_nodes=meta["nodes"])


def fan_out(trace) -> np.ndarray:
    """Messages each op delivers: destinations; a reduction: contributions; an all-to-all:
    (source, destination) pairs with source != destination."""
    ops = trace.ops
    fan = np.where(ops["kind"] == Kind.reduce, np.diff(trace.src_ptr), np.diff(trace.dst_ptr))
    for i in np.flatnonzero(ops["kind"] == Kind.all_to_all).tolist():
        src, dst = set(trace.src(i).tolist()), trace.dst(i).tolist()
        fan[i] = sum(len(src) - (d in src) for d in dst)
    return fan


def delivered_bytes(trace, msg_op: MsgOp | None = None, stage: Stage | None = None) -> int:
    """Payload bytes delivered: bytes x destinations (a reduction: x contributions, an
    all-to-all: x pairs)."""
    ops = trace.ops
    fan = fan_out(trace)
    sel = ops["kind"] >= Kind.send
    if msg_op is not None:
        sel &= ops["msg_op"] == msg_op
    if stage is not None:
        sel &= ops["stage"] == stage
    return int((ops["bytes"][sel] * fan[sel]).sum())


def block_of(kv_id: np.ndarray, nodes: int, layers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk, owner, layer) of block ids."""
    layer = kv_id % layers
    rest = kv_id // layers
    return rest // nodes, rest % nodes, layer


def kv_memory(trace) -> np.ndarray:
    """Owner + replica KV bytes per node during each prefill chunk c (rows 0..C-1) and
    after prefill (row C). A replica counts from its chunk's row; one invalidated at
    decision d stops counting at row d (its last readers were chunk d-1's)."""
    meta, ops = trace.meta, trace.ops
    N, L = meta["nodes"], meta["model"]["layers"]
    if meta["scheme"]["name"] in ("ulysses", "usp"):  # head shards, owner-only: the generator's exact figures
        rows = trace.schedule["node_kv_bytes"]
        return np.array(rows + rows[-1:], dtype=np.int64)
    lay = layout_of(meta)
    C = lay.n_chunks
    m = _kv_bytes_per_token_layer(meta["model"])
    delta = np.zeros((C + 2, N), dtype=np.int64)
    for c in range(C):
        for n in range(lay.nodes):
            delta[c, n] += lay.tokens(c, n) * m * L
    rows = np.repeat(np.arange(trace.n_ops), np.diff(trace.dst_ptr))
    dst = trace.dst_idx
    rep = (ops["residency"][rows] == Residency.replica) & (ops["kind"][rows] == Kind.send)
    np.add.at(delta, (ops["chunk"][rows[rep]], dst[rep]), ops["bytes"][rows[rep]])
    inv = ops["kind"][rows] == Kind.invalidate
    j, o, _ = block_of(ops["kv_id"][rows[inv]], N, L)
    size = np.array([lay.tokens(a, b) * m for a, b in zip(j, o)], dtype=np.int64)
    np.add.at(delta, (ops["chunk"][rows[inv]], dst[inv]), -size)
    return np.cumsum(delta, axis=0)[: C + 1]


def _kv_bytes_per_token_layer(model: dict) -> int:
    from .costs import Model

    return Model.from_profile(model).m
