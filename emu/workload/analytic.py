"""The paper's closed forms (section 4, eqs. 1-22), in the paper's own indexing.

Chunks are 1-indexed here, c = 1..C, as in the paper: M_hist(c) = c * M_chunk counts the
chunk being produced, and R_c = C - c is zero for the last chunk, so r(C) = 1 (eq. 29).
The generators use 0-indexed chunks and call these with c + 1.

Quantities the paper leaves abstract are fixed as follows (docs/workloads.md explains):
- P_node = hw.compute_flops; BW_link = hw.link_rate / 8 bytes/s times the frame payload
  efficiency (MTU - MCF header) / (MTU + Ethernet overhead);
- H_prop(r) = max(1, E(r) / ports) for r > 1, with E(r) the links of the owner's
  multicast tree: each owner's block crosses E(r) links and all N owners send at once
  over N * ports links, but a block never goes faster than one link;
- BW_eff = N * BW_link, so M_chunk * H_prop / BW_eff is the time one owner needs for its
  share M_chunk / N;
- D_crit(r) = depth of the multicast tree in hops; tau_link = link latency + NIC frame
  latency + one MTU frame's serialization (store and forward per hop).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError

MCF_HEADER_BYTES = 48  # MCF meta header inside each frame's payload (emu/codec)
ETH_OVERHEAD_BYTES = 38  # preamble 8 + header 14 + FCS 4 + inter-frame gap 12


# ---------------------------------------------------------------- memory (1, 3, 4)
def m_token(layers: int, kv_heads: int, head_dim: int, b_kv: float) -> float:
    """Eq. 1: KV bytes per token, 2 * L * H_kv * d * b."""
    return 2 * layers * kv_heads * head_dim * b_kv


def m_chunk(B: int, m_tok: float) -> float:
    """Eq. 3."""
    return B * m_tok


def m_hist(c: int, m_chk: float) -> float:
    """Eq. 4: history through chunk c (1-indexed)."""
    return c * m_chk


# ---------------------------------------------------------------- chunk size (6-8)
def t_attn(B: int, c: int, layers: int, heads: int, head_dim: int, N: int, P: float) -> float:
    """Eq. 6: attention time of chunk c (seconds)."""
    return 4 * layers * heads * head_dim * B * c * B / (N * P)


def payload_efficiency(mtu: int) -> float:
    return (mtu - MCF_HEADER_BYTES) / (mtu + ETH_OVERHEAD_BYTES)


def tau_link(hw: dict) -> float:
    """Per-hop latency in seconds: link + NIC + one full frame's serialization."""
    ser = (hw["mtu"] + ETH_OVERHEAD_BYTES) * 8 / hw["link_rate"]
    return (hw["link_latency_ps"] + hw["nic_latency_ps"]) * 1e-12 + ser


def h_prop(r: int, tree_edges: float, ports: int) -> float:
    return 0.0 if r <= 1 else max(1.0, tree_edges / ports)


def t_prop(B: int, r: int, m_tok: float, N: int, hw: dict, tree_edges: float, tree_depth: float) -> float:
    """Eq. 7: propagation time of chunk c's KV with replica factor r (seconds)."""
    if r <= 1:
        return 0.0
    bw_eff = N * hw["link_rate"] / 8 * payload_efficiency(hw["mtu"])
    return m_chunk(B, m_tok) * h_prop(r, tree_edges, hw["ports"]) / bw_eff + tree_depth * tau_link(hw)


# ---------------------------------------------------------------- replica factor (9-16)
def m_node(r_hist, m_chk: float, N: int) -> float:
    """Eq. 9: mean per-node KV bytes with replica factors r(1..c)."""
    return m_chk / N * float(np.sum(r_hist))


def r_mem(c: int, N: int, s_node: float, m_hist_c: float) -> int:
    """Eq. 11 (unbounded above; eq. 12/16 clip it)."""
    if m_hist_c <= 0:
        return N
    return int(math.floor(N * s_node / m_hist_c))


def r_feasible(c: int, N: int, s_node: float, m_hist_c: float) -> int:
    """Eq. 12."""
    return max(1, min(N, r_mem(c, N, s_node, m_hist_c)))


def r_reuse(c: int, C: int, alpha: float, N: int) -> int:
    """Eq. 15: 1 + floor(alpha * (C - c)), clipped to [1, N]."""
    return max(1, min(N, 1 + int(math.floor(alpha * (C - c)))))


def r_mars(c: int, C: int, N: int, s_node: float, m_hist_c: float, alpha: float) -> int:
    """Eq. 16."""
    return max(1, min(N, r_mem(c, N, s_node, m_hist_c), r_reuse(c, C, alpha, N)))


# ---------------------------------------------------------------- traffic (17-22)
def c_rep(r: int, m_chk: float, h_dis: float = 1.0) -> float:
    """Eq. 17: replication traffic of one chunk (bytes x distance)."""
    return m_chk * (r - 1) * h_dis


def c_rep_total(rs, m_chk: float, h_dis=1.0) -> float:
    """Eq. 18."""
    h = np.broadcast_to(np.asarray(h_dis, dtype=float), (len(rs),))
    return float(sum(c_rep(r, m_chk, hd) for r, hd in zip(rs, h)))


def c_access(c: int, rs, N: int, m_chk: float, h_near=1.0) -> float:
    """Eq. 19: remote accesses of chunk c (1-indexed) to blocks 1..c."""
    h = np.broadcast_to(np.asarray(h_near, dtype=float), (len(rs),))
    return float(sum(m_chk * (N - rs[i]) * h[i] for i in range(c)))


def c_mars(rs, N: int, m_chk: float, h_dis=1.0, h_near=1.0) -> float:
    """Eq. 20."""
    return c_rep_total(rs, m_chk, h_dis) + sum(c_access(c, rs, N, m_chk, h_near) for c in range(1, len(rs) + 1))


def c_ring(C: int, N: int, m_chk: float, h_ring: float = 1.0) -> float:
    """Eq. 21."""
    return m_chk * (N - 1) * h_ring * C * (C + 1) / 2


def c_full(C: int, N: int, m_chk: float, h_dis: float = 1.0) -> float:
    """Eq. 22."""
    return m_chk * (N - 1) * h_dis * C


# ---------------------------------------------------------------- eq. 8 search
def choose_chunk(seq: int, N: int, model, hw: dict, net, alpha: float, s_node: float,
                 granule: int | None = None) -> dict:
    """Eq. 8: the smallest B (a multiple of ``granule``, default N) whose every chunk's
    attention time covers gamma times the propagation of its KV, within the buffer
    (eq. 5). If no B hides propagation, the largest B the buffer allows.

    Returns the choice and the figures behind it (for the trace's schedule).
    """
    g = granule or N
    m_tok = model.m_token
    b_max = min(seq, hw["comm_buffer"] // m_tok) // g * g
    if b_max < g:
        raise ConfigError(
            f"hw.comm_buffer {hw['comm_buffer']} B holds fewer than {g} tokens of KV ({m_tok} B each): eq. 5 has no solution")
    P, gamma = hw["compute_flops"], hw["gamma"]
    edges = np.array([net.tree_edges(r) if r > 1 else 0.0 for r in range(N + 1)])
    depth = np.array([net.tree_depth(r) if r > 1 else 0.0 for r in range(N + 1)])
    chosen = last = None
    for B in range(g, b_max + 1, g):
        C = -(-seq // B)
        if seq - (C - 1) * B < g:
            continue  # last chunk too short to slice
        c = np.arange(1, C + 1)
        mh = np.minimum(c * B, seq) * m_tok
        rm = np.floor(N * s_node / mh).astype(np.int64)
        rr = np.clip(1 + np.floor(alpha * (C - c)).astype(np.int64), 1, N)
        r = np.clip(np.minimum(rm, rr), 1, N)
        ta = 4 * model.layers * model.heads * model.head_dim * B * c * B / (N * P)
        bw_eff = N * hw["link_rate"] / 8 * payload_efficiency(hw["mtu"])
        hp = np.where(r > 1, np.maximum(1.0, edges[r] / hw["ports"]), 0.0)
        tp = np.where(r > 1, B * m_tok * hp / bw_eff + depth[r] * tau_link(hw), 0.0)
        ok = bool((ta >= gamma * tp).all())
        if ok:
            chosen = (B, True, float(ta[0]), float(tp[0]))
            break
        last = (B, False, float(ta[0]), float(tp[0]))
    if chosen is None:
        if last is None:
            raise ConfigError(f"--chunk auto: no chunk size up to {b_max} leaves a last chunk of at least {g} tokens")
        chosen = last
    B, ok, ta1, tp1 = chosen
    return {"chunk": B, "overlap_met": ok, "t_attn_first_s": ta1, "t_prop_first_s": tp1,
            "gamma": gamma, "buffer_max_chunk": b_max, "granule": g}


# ---------------------------------------------------------------- bounds on a generated trace
def op_seconds(ops, hw: dict) -> np.ndarray:
    """Each compute op's time on its board, as the replay's roofline gives it (seconds):
    max(flops / P_node, bytes / BW_mem) plus the fixed per-op overhead; 0 for messages."""
    from .enums import Kind

    t = np.maximum(ops["flops"] / float(hw["compute_flops"]), ops["mem_bytes"] / float(hw["mem_bw"]))
    t = t + float(hw["op_overhead_ps"]) * 1e-12
    return np.where(ops["kind"] <= Kind.decode_lm_head, t, 0.0)


def compute_bound(trace, layers: int | None = None) -> float:
    """TTFT if messages took no time: the busiest board's prefill compute (QKV, attention,
    MLP, and the LM head on its board), in seconds. A trace generated with one layer stands
    for ``layers`` identical ones (every layer's ops are the same)."""
    from .enums import Kind, Stage

    ops, n = trace.ops, int(trace.meta["nodes"])
    pre = (ops["stage"] == Stage.prefill) & (ops["node"] >= 0)
    t = op_seconds(ops, trace.meta["hw"])
    lm = pre & (ops["kind"] == Kind.lm_head)
    scale = (layers or 1) / (1 if layers is None else int(trace.meta["model"]["layers"]))
    per = np.bincount(ops["node"][pre & ~lm], weights=t[pre & ~lm], minlength=n) * scale
    per += np.bincount(ops["node"][lm], weights=t[lm], minlength=n)
    return float(per.max())


def balanced_bound(trace, layers: int | None = None) -> float:
    """The cluster's compute bound: all prefill compute spread evenly over every board (no
    scheme beats it; the per-board bound of a scheme that balances its work approaches it)."""
    from .enums import Kind, Stage

    ops, n = trace.ops, int(trace.meta["nodes"])
    pre = (ops["stage"] == Stage.prefill) & (ops["node"] >= 0)
    t = op_seconds(ops, trace.meta["hw"])
    lm = pre & (ops["kind"] == Kind.lm_head)
    scale = (layers or 1) / (1 if layers is None else int(trace.meta["model"]["layers"]))
    return float(t[pre & ~lm].sum() * scale / n + t[lm].sum())
