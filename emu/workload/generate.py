"""``emu trace``'s engine: profiles + scheme parameters -> a validated Trace.

Everything that varies is in ``Params``; the output depends on nothing else (no clock, no
randomness), so the same parameters give a byte-identical file.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..units import parse_budget, resolve_budget
from . import analytic, decode, mars, pd, profiles, ring, usp
from .builder import OpBuilder
from .costs import Model
from .enums import Kind, Stage
from .layout import Layout
from .placement import Net
from .schemes import RING_ORDERS, SCHEMES
from .trace import FORMAT, VERSION, Trace, from_columns

# Bump when the generators' output changes for the same parameters (the shipped traces and
# their regeneration test follow it).
GENERATOR = "mcf-emu-workload/3"


@dataclass
class Params:
    scheme: str
    seq: int = 16384
    nodes: int = 16
    chunk: int | str = 1024  # or "auto" (eq. 8), or "whole" (unchunked: the prompt is one chunk)
    model: str = "qwen2.5-1.5b"
    hw: str = "kr260"
    decode_tokens: int = 0
    kv_budget: str | int | None = None  # None: the hardware profile's
    alpha: float = 1.0
    overrides: list[str] = field(default_factory=list)
    pd_mode: str = "bulk"
    prefill_nodes: int | None = None
    topology: str | None = None  # None: the hardware's default for the node count
    ring_order: str = "embedding"  # ring schemes: the topology's best ring, or "boards" (0..N-1)
    ulysses_degree: int | None = None  # usp: u (None: the GQA limit, H_kv, if it divides N)
    # Baseline options, each with its authors' choice as default (docs/workloads.md)
    ring_forward: str = "after-compute"  # ring schemes: forward a set after the compute on the one before
    ring_lookahead: bool = False  # ring schemes: circulate the history from the layer's start
    all_to_all: str = "concurrent"  # ulysses, usp: every pair posted at once, or "pairwise" (NIC engine)
    first_token: str = "prefill"  # pd: LM head on the prefill side, or "decode" (after the handoff)
    uneven_heads: bool = False  # ulysses, usp: allow degrees that do not divide the query heads
    mars_lookahead: bool = True  # mars, full: push history one layer ahead (off: after the consumer's QKV)


def _need_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"--{name} must be an integer >= {lo}, got {value!r}")
    return value


def _usp_degree(u, N: int, model: Model) -> int:
    """USP's Ulysses degree: as given, else the GQA limit (H_kv) when it divides N, else 1."""
    if u is None:
        u = usp.gqa_limit(model)
        while N % u:
            u -= 1
    u = _need_int("ulysses-degree", u, 1)
    if N % u:
        raise ConfigError(f"--ulysses-degree {u} does not divide the {N} nodes")
    return u


def _check_options(p: Params) -> None:
    """The baseline options' values (docs/workloads.md), named as ``emu trace`` spells them."""
    for flag, value, allowed in (("ring-forward", p.ring_forward, ring.FORWARDS),
                                 ("all-to-all", p.all_to_all, usp.A2A_MODES),
                                 ("first-token", p.first_token, pd.FIRST_TOKENS)):
        if value not in allowed:
            raise ConfigError(f"--{flag} must be one of {', '.join(allowed)}, got {value!r}")
    for flag, value in (("ring-lookahead", p.ring_lookahead), ("uneven-heads", p.uneven_heads),
                        ("no-lookahead", p.mars_lookahead)):
        if not isinstance(value, bool):
            raise ConfigError(f"--{flag} must be true or false, got {value!r}")


def _check_size(N: int, layers: int, chunks: int, decode_tokens: int) -> None:
    """Refuse, before anything is built, a trace larger than the loader accepts. The estimate
    is the ring's shape (every board, every layer, N steps per chunk: the largest scheme per
    chunk), plus decode steps; the shipped MARS 16K trace is within 2x of it."""
    from .validate import MAX_NODES, MAX_OPS

    if N > MAX_NODES:
        raise ConfigError(f"--nodes {N}: at most {MAX_NODES} boards")
    est = layers * (chunks * N * (N + 8) + decode_tokens * (N + 4))
    if est > MAX_OPS:
        raise ConfigError(f"--nodes {N}, --seq/--chunk ({chunks} chunks), {layers} layers and --decode-tokens "
                          f"{decode_tokens} make about {est:,} ops, more than the {MAX_OPS:,} a trace may hold")


def _weights_bytes(m: Model, tied: bool) -> int:
    embed = m.w(m.head_params) * (1 if tied else 2)
    return m.layers * (m.w(m.qkv_params) + m.w(m.mlp_params)) + embed


def generate(p: Params, builder: OpBuilder | None = None) -> Trace:
    """The trace of ``p``; ``builder``: the OpBuilder to fill (a caller may read its length
    from another thread to show progress)."""
    if p.scheme not in SCHEMES:
        raise ConfigError(f"unknown scheme {p.scheme!r}; expected one of {', '.join(SCHEMES)}")
    N = _need_int("nodes", p.nodes, 2)
    _need_int("seq", p.seq, 1)
    K = _need_int("decode-tokens", p.decode_tokens, 0)
    if not isinstance(p.alpha, (int, float)) or not p.alpha >= 0 or not math.isfinite(p.alpha):
        raise ConfigError(f"--alpha must be a finite number >= 0, got {p.alpha!r}")
    model_p, hw_p = profiles.load_pair(p.model, p.hw, p.overrides)
    if p.chunk == "whole":
        p = dataclasses.replace(p, chunk=p.seq)
        whole = True
    else:
        whole = False
    _check_size(N, model_p["layers"], 1 if p.chunk == "auto" else -(-p.seq // max(_need_int("chunk", p.chunk, 1), 1)), K)
    _check_options(p)
    if p.kv_budget is not None:
        hw_p["kv_budget"] = parse_budget(p.kv_budget, "--kv-budget")
    model = Model.from_profile(model_p)
    weights = _weights_bytes(model, model_p["tied_embeddings"])
    if weights > hw_p["dram_bytes"]:
        raise ConfigError(f"model {model_p['name']}: weights take {weights} B, more than hw.dram_bytes {hw_p['dram_bytes']} B")
    net = Net(p.topology, N, hw_p)
    if p.ring_order not in RING_ORDERS:
        raise ConfigError(f"--ring-order must be one of {', '.join(RING_ORDERS)}, got {p.ring_order!r}")

    zig = p.scheme == "zigzag"
    P, D = pd.split(N, p.prefill_nodes) if p.scheme == "pd" else (N, 0)
    heads = None
    if p.scheme in ("ulysses", "usp"):
        u = N if p.scheme == "ulysses" else _usp_degree(p.ulysses_degree, N, model)
        if not p.uneven_heads:
            usp.check_degree(model, u, f"--nodes {N}" if p.scheme == "ulysses" else f"--ulysses-degree {u}")
        heads = usp.head_split(model, u)
        P = N // u  # the layout cuts chunks into R = N / u group slices
    parts = 2 * P if zig else P
    chunk_choice = None
    if p.chunk == "auto":
        share = -(-p.seq // N) * model.m_token
        s_auto = resolve_budget(hw_p["kv_budget"], share)
        chunk_choice = analytic.choose_chunk(p.seq, N, model, hw_p, net, p.alpha, s_auto,
                                             granule=math.lcm(2 * N, parts))  # one granule for every scheme
        B = chunk_choice["chunk"]
    else:
        B = _need_int("chunk", p.chunk, 1)
    _check_size(N, model.layers, -(-p.seq // B), K)
    layout = Layout(p.seq, B, P, model.layers, zigzag=zig, kv_nodes=N)
    C = layout.n_chunks
    owner_share = max(layout.owner_tokens(n) for n in range(P)) * model.m_token
    if heads is not None:  # a member holds its group's tokens of its KV heads
        owner_share = max(layout.owner_tokens(g) for g in range(P)) * model.layers * \
            model.kv_head_bytes(1, max(len(h) for h in heads.kv_heads))
    s_node = resolve_budget(hw_p["kv_budget"], owner_share)
    if s_node + weights > hw_p["dram_bytes"]:
        raise ConfigError(f"kv budget {s_node} B plus weights {weights} B exceed hw.dram_bytes {hw_p['dram_bytes']} B")

    b = OpBuilder() if builder is None else builder
    sched = {"chunk": B, "n_chunks": C, "kv_budget_bytes": s_node, "owner_share_bytes": owner_share,
             "slices": "zigzag" if zig else "contiguous", "topology": net.name}
    if chunk_choice:
        sched["chunk_choice"] = chunk_choice
    if p.scheme in ("mars", "full"):
        plan = mars.make_plan(p.scheme, layout, model, net, p.alpha, s_node)
        out = mars.generate(b, layout, model, net, plan, p.mars_lookahead)
        sched.update(mars.schedule(plan, net, layout))
    elif heads is not None:
        u, R = N // P, P
        order = net.ring() if p.ring_order == "embedding" else list(range(N))
        grid = usp.place(net, u, R, order)
        out = usp.generate(b, layout, model, grid, heads, p.all_to_all)
        rings = [[grid[g][k] for g in range(R)] for k in heads.active] if R > 1 else []
        sched.update(r=[1] * C, holders=[[[] for _ in range(N)] for _ in range(C)], drains=[],
                     node_kv_bytes=out["node_kv_bytes"])
        sched["ulysses"] = {
            "degree": u, "ring_degree": R, "groups": grid, "heads": [list(h) for h in heads.heads],
            "kv_heads": [list(h) for h in heads.kv_heads], "kv_replication": heads.replication,
            "gqa_limit": usp.gqa_limit(model), "attention_boards": sorted(grid[g][k] for g in range(R) for k in heads.active)}
        if rings:
            sched["ring"] = {"order": rings[0], "hops": net.ring_hops(rings[0]), "mode": p.ring_order,
                             "rings": rings, "rings_hops": [net.ring_hops(r) for r in rings]}
    else:
        order = net.ring(range(P)) if p.ring_order == "embedding" else list(range(P))
        sched["ring"] = {"order": order, "hops": net.ring_hops(order), "mode": p.ring_order}
        ropt = {"forward": p.ring_forward, "lookahead": p.ring_lookahead}
        out = (pd.generate(b, layout, model, N, p.pd_mode, order, first_token=p.first_token, **ropt)
               if p.scheme == "pd" else ring.generate(b, layout, model, order, **ropt))
        # owner-only throughout; PD's decode boards hold nothing until the handoff
        sched.update(r=[1] * C, holders=[[[] for _ in range(N)] for _ in range(C)], drains=[],
                     node_kv_bytes=[[sum(layout.tokens(j, n) for j in range(c + 1)) * model.m_token if n < P else 0
                                     for n in range(N)] for c in range(C)])
    dec_heads = dec_groups = None
    if p.scheme == "pd":
        leader, lm, shards = out["leader"], out["decode_start"], out["shards"]
        sched["pd"] = out["handoff"]
    elif heads is not None:
        leader = out["leader"]
        lm = b.compute(Kind.lm_head, Stage.prefill, leader, C - 1, -1, -1, model.lm_head(1),
                       [out["mlp"][C - 1][model.layers - 1][leader]])
        shards, dec_heads, dec_groups = usp.decode_layout(layout, model, grid, heads)
    else:
        leader = layout.holder_of_last_token()
        lm = b.compute(Kind.lm_head, Stage.prefill, leader, C - 1, -1, -1, model.lm_head(1),
                       [out["mlp"][C - 1][model.layers - 1][leader]])
        shards = {n: layout.owner_tokens(n) for n in range(N)}
    dec = decode.generate(b, model, model.layers, leader, shards, lm, K,
                          lambda t, x, l: layout.kv_id(C + t, x, l), heads=dec_heads, groups=dec_groups)
    if dec_groups is None:
        sched["decode"] = {"leader": leader, "kv_nodes": sorted(shards),
                           "start_shards": [shards[h] for h in sorted(shards)], **dec}
    else:  # head-sharded: a group of boards holds a token range, each board its heads
        sched["decode"] = {"leader": leader, "kv_nodes": sorted(dec_heads), "layout": "head-sharded",
                           "groups": [dec_groups[g] for g in sorted(dec_groups)],
                           "start_shards": [shards[g] for g in sorted(shards)], **dec}
    sched["stats"] = out.get("stats", {})
    if p.scheme == "pd":
        sched["stats"] = {**sched["stats"], "handoff_bytes": out["handoff_bytes"]}

    scheme = {"name": p.scheme, "chunk_mode": "auto" if chunk_choice else ("whole" if whole else "fixed"),
              "topology": net.name,
              "kv_budget": hw_p["kv_budget"], "kv_budget_bytes": s_node}
    if p.scheme == "mars":
        scheme["alpha"] = float(p.alpha)
    if p.scheme in ("mars", "full") and not p.mars_lookahead:
        scheme["lookahead"] = False
    if "ring" in sched:
        scheme["ring_order"] = p.ring_order
    if p.scheme in ("ring", "zigzag", "pd"):
        scheme.update(ring_forward=p.ring_forward, ring_lookahead=bool(p.ring_lookahead))
    if p.scheme == "pd":
        scheme.update(pd_mode=p.pd_mode, prefill_nodes=P, decode_nodes=D, first_token=p.first_token)
    if heads is not None:
        scheme.update(ulysses_degree=N // P, ring_degree=P, all_to_all=p.all_to_all)
        if p.uneven_heads:
            scheme["uneven_heads"] = True
    meta = {
        "format": FORMAT, "version": VERSION, "generator": GENERATOR, "scheme": scheme,
        "model": model_p, "hw": hw_p, "nodes": N, "seq": p.seq, "chunk": B, "n_chunks": C,
        "decode_tokens": K, "leader": leader, "kv_id": "(chunk * nodes + owner) * layers + layer",
    }
    return from_columns(meta, sched, b.columns())
