"""The generators against the paper's closed forms (eqs. 6-22, 29)."""

import functools
import math

import numpy as np
import pytest

from emu.workload import analytic
from emu.workload.analysis import delivered_bytes, kv_memory, layout_of
from emu.workload.costs import Model
from emu.workload.enums import MsgOp, Stage
from emu.workload.generate import Params, generate
from emu.workload.placement import Net
from emu.workload.profiles import load

BASE = dict(seq=4096, nodes=8, chunk=512, overrides=["model.layers=4"])
M_TOKEN = 256 * 4  # Qwen2.5-1.5B INT4 KV per token with 4 layers


@functools.lru_cache(maxsize=None)
def trace(scheme, **kw):
    return generate(Params(scheme=scheme, **{**BASE, **dict(kw)}))


def test_eq1_kv_per_token():
    assert analytic.m_token(28, 2, 128, 0.5) == 7168
    assert analytic.m_chunk(1024, 7168) == 7168 * 1024
    assert analytic.m_hist(3, 10) == 30


@pytest.mark.parametrize("scheme", ["ring", "zigzag"])
def test_ring_scheduled_kv_bytes_equal_eq21(scheme):
    t = trace(scheme)
    C, N = t.meta["n_chunks"], t.meta["nodes"]
    expected = analytic.c_ring(C, N, analytic.m_chunk(t.meta["chunk"], M_TOKEN))
    assert delivered_bytes(t, MsgOp.kv_transfer, Stage.prefill) == expected == 512 * M_TOKEN * 7 * 8 * 9 / 2


def test_full_replication_bytes_equal_eq22():
    t = trace("full")
    C, N = t.meta["n_chunks"], t.meta["nodes"]
    assert delivered_bytes(t, MsgOp.kv_replica) == analytic.c_full(C, N, analytic.m_chunk(512, M_TOKEN))
    assert delivered_bytes(t, MsgOp.kv_fetch_resp) == 0


def test_mars_bytes_follow_eq18_and_eq19():
    t = trace("mars")
    lay = layout_of(t.meta)
    C, N, r = lay.n_chunks, lay.nodes, t.schedule["r"]
    m_chunk = analytic.m_chunk(512, M_TOKEN)
    assert delivered_bytes(t, MsgOp.kv_replica) == analytic.c_rep_total(r, m_chunk)
    # prefetch: history blocks every node lacks under the factors in force at each chunk
    # (eq. 19 with the drained factors and h_near = 1) + the causal part of the chunk itself
    factor = {c: list(r[: c + 1]) for c in range(C)}
    for d in t.schedule["drains"]:
        for c in range(d["decision"], C):
            factor[c][d["chunk"]] = d["to"]
    history = sum(m_chunk * (N - factor[c][j]) for c in range(C) for j in range(c))
    block = 512 // N * M_TOKEN
    current = sum(block for c in range(C) for n in range(N) for o in range(n) if n not in t.schedule["holders"][c][o])
    assert delivered_bytes(t, MsgOp.kv_fetch_resp) == history + current
    # the paper's ordering: full replication < MARS < Ring in bytes moved
    moved = delivered_bytes(t, MsgOp.kv_replica) + delivered_bytes(t, MsgOp.kv_fetch_resp)
    assert delivered_bytes(trace("full"), MsgOp.kv_replica) < moved < delivered_bytes(trace("ring"), MsgOp.kv_transfer)


@pytest.mark.parametrize("budget", ["1x", "1.5x", "2x", "3x", 6 * 2**20])
def test_mars_memory_stays_within_s_node_and_ends_owner_only(budget):
    """Eq. 10 at every chunk, per node (not only on average), and eq. 29 at the end."""
    t = trace("mars", kv_budget=budget)
    mem = kv_memory(t)
    s_node = t.schedule["kv_budget_bytes"]
    assert mem.max() <= s_node
    lay = layout_of(t.meta)
    assert mem[-1].tolist() == [lay.owner_tokens(n) * M_TOKEN for n in range(lay.nodes)]
    assert mem.tolist() == t.schedule["node_kv_bytes"]  # the trace does what the schedule says
    if budget in ("1.5x", "2x", "3x"):
        assert mem[:-1].max() > mem[-1].max()  # replicas exist during prefill ...
        assert t.schedule["drains"] and any(d["decision"] < lay.n_chunks for d in t.schedule["drains"])  # ... and drain early
    assert t.schedule["r"][-1] == 1  # eq. 29


def test_default_budget_binds_on_the_paper_setup():
    """16K tokens, 16 boards: the default budget makes MARS drain during prefill."""
    t = generate(Params(scheme="mars", overrides=["model.layers=1"]))
    mem = kv_memory(t)
    assert mem.max() == t.schedule["kv_budget_bytes"]
    assert any(d["decision"] < t.meta["n_chunks"] for d in t.schedule["drains"])
    assert t.schedule["r"][0] == 16 and t.schedule["r"][-1] == 1


def test_r_is_eq16_and_never_increases_under_the_pure_memory_bound():
    t = trace("mars", alpha=1e9)
    lay = layout_of(t.meta)
    s_node, N = t.schedule["kv_budget_bytes"], lay.nodes
    r = t.schedule["r"]
    expected = [analytic.r_feasible(c + 1, N, s_node, lay.tokens_through(c) * M_TOKEN) for c in range(lay.n_chunks)]
    assert expected == t.schedule["r_mem"]
    # the reuse bound is 1 + floor(alpha * 0) = 1 for the last chunk whatever alpha (eq. 29)
    assert r[:-1] == expected[:-1] and r[-1] == 1
    assert all(a >= b for a, b in zip(r, r[1:]))
    assert r[0] == N and r[-1] < N


def test_r_follows_eq16_with_reuse():
    t = trace("mars", alpha=0.5)
    lay = layout_of(t.meta)
    C, N, s_node = lay.n_chunks, lay.nodes, t.schedule["kv_budget_bytes"]
    want = [analytic.r_mars(c + 1, C, N, s_node, lay.tokens_through(c) * M_TOKEN, 0.5) for c in range(C)]
    assert t.schedule["r"] == want
    assert t.schedule["r_reuse"] == [analytic.r_reuse(c + 1, C, 0.5, N) for c in range(C)]
    assert analytic.r_reuse(C, C, 100.0, N) == 1  # the last chunk never replicates


def test_closed_form_traffic_relations():
    m = analytic.m_chunk(1024, 7168)
    C, N = 16, 16
    assert analytic.c_mars([1] * C, N, m) == pytest.approx(sum(analytic.c_access(c, [1] * C, N, m) for c in range(1, C + 1)))
    assert analytic.c_mars([N] * C, N, m) == pytest.approx(analytic.c_full(C, N, m))
    assert analytic.c_ring(C, N, m) == pytest.approx(m * (N - 1) * C * (C + 1) / 2)
    assert analytic.m_node([16, 8, 4], 1600, 16) == 2800


def test_eq8_picks_the_smallest_chunk_that_hides_propagation():
    hw = load("hw", "kr260")
    model = Model.from_profile(load("model", "qwen2.5-1.5b"))
    net = Net(None, 16, hw)
    s_node = 2 * 16384 // 16 * model.m_token
    got = analytic.choose_chunk(16384, 16, model, hw, net, 1.0, s_node)
    B = got["chunk"]
    assert got["overlap_met"] and B % 16 == 0 and B * model.m_token <= hw["comm_buffer"]

    def hides(b):
        C = -(-16384 // b)
        for c in range(1, C + 1):
            r = analytic.r_mars(c, C, 16, s_node, min(c * b, 16384) * model.m_token, 1.0)
            ta = analytic.t_attn(b, c, model.layers, model.heads, model.head_dim, 16, hw["compute_flops"])
            tp = analytic.t_prop(b, r, model.m_token, 16, hw, net.tree_edges(r) if r > 1 else 0, net.tree_depth(r) if r > 1 else 0)
            if ta < hw["gamma"] * tp:
                return False
        return True

    assert hides(B) and not hides(B - 16)
    # a faster link hides propagation with smaller chunks
    fast = dict(hw, link_rate=10 * hw["link_rate"])
    assert analytic.choose_chunk(16384, 16, model, fast, Net(None, 16, fast), 1.0, s_node)["chunk"] < B
    # the buffer bounds B (eq. 5) when nothing hides propagation
    tiny = dict(hw, comm_buffer=64 * model.m_token, link_rate=10**6)
    got = analytic.choose_chunk(16384, 16, model, tiny, Net(None, 16, tiny), 1.0, s_node)
    assert got["chunk"] == 64 and not got["overlap_met"]


def test_chunk_auto_in_a_trace():
    t = generate(Params(scheme="mars", seq=4096, nodes=8, chunk="auto", overrides=["model.layers=2"]))
    assert t.meta["scheme"]["chunk_mode"] == "auto"
    assert t.meta["chunk"] == t.schedule["chunk_choice"]["chunk"]


def test_placement_keeps_copies_near():
    """On the 4x4 torus every node is within h_near hops of a copy, and h_near falls as r grows."""
    net = Net(None, 16, load("hw", "kr260"))
    assert net.name == "torus4x4"
    near = [net.mean_nearest(r) for r in range(2, 16)]
    assert all(a >= b for a, b in zip(near, near[1:]))
    # greedy k-median beats the naive "next ids" placement for r = 4
    naive = np.mean([min(net.hops[n, [o, (o + 1) % 16, (o + 2) % 16, (o + 3) % 16]]) for o in range(16) for n in range(16)
                     if n not in (o, (o + 1) % 16, (o + 2) % 16, (o + 3) % 16)])
    assert net.mean_nearest(4) < naive
    # every node holds the same number of replicas (memory balance)
    for r in (2, 5, 9):
        counts = np.bincount([h for o in range(16) for h in net.holders(o, r)], minlength=16)
        assert (counts == r - 1).all()
    assert math.isclose(net.tree_edges(16), 15)
