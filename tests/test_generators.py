"""The generators' DAGs do what schemes.md says: same compute everywhere, every block an
attention reads is readable at its node when it runs, replicas are valid when read and
all retired at the end, decode is KV-stationary."""

import functools

import numpy as np
import pytest

from emu.errors import ConfigError
from emu.workload.analysis import block_of, kv_memory, layout_of
from emu.workload.enums import Collective, Kind, MsgOp, ReduceOp, Residency, Stage
from emu.workload.generate import Params, generate
from emu.workload.trace import dumps

SMALL = dict(seq=1000, nodes=4, chunk=256, decode_tokens=3, overrides=["model.layers=2"])
SCHEMES = ["mars", "ring", "zigzag", "pd", "full"]
ALL = SCHEMES + ["ulysses", "usp"]  # Ulysses and USP: head-sharded, checked further in test_ulysses.py


@functools.lru_cache(maxsize=None)
def small(scheme, **extra):
    return generate(Params(scheme=scheme, **{**SMALL, **dict(extra)}))


def ancestors(t):
    """Bitset (python int) of every op's transitive dependencies."""
    anc = [0] * t.n_ops
    for i in range(t.n_ops):
        a = 0
        for d in t.deps(i):
            a |= anc[d] | (1 << int(d))
        anc[i] = a
    return anc


def attn_ops(t):
    """(chunk, layer, node) -> indices of its prefill attention ops."""
    out = {}
    o = t.ops
    for i in np.flatnonzero((o["kind"] == Kind.attn)):
        out.setdefault((int(o["chunk"][i]), int(o["layer"][i]), int(o["node"][i])), []).append(int(i))
    return out


@pytest.mark.parametrize("scheme", ALL)
def test_generated_traces_are_topologically_ordered_and_deterministic(scheme):
    t = small(scheme)
    rows = np.repeat(np.arange(t.n_ops), np.diff(t.dep_ptr))
    assert (t.dep_idx < rows).all()
    again = generate(Params(scheme=scheme, **SMALL))
    assert dumps(again) == dumps(t)


@pytest.mark.parametrize("scheme", ALL)
def test_every_scheme_does_the_same_compute(scheme):
    """Dataflow equivalence: causal attention computes S(S+1)/2 pairs per layer, and the
    projections run once per token, whatever the KV placement."""
    t, ref = small(scheme), small("ring")
    model = t.meta["model"]
    S, L = SMALL["seq"], model["layers"]
    attn = t.ops["flops"][t.ops["kind"] == Kind.attn].sum()
    assert attn == 4 * model["heads"] * model["head_dim"] * S * (S + 1) // 2 * L
    for kind in (Kind.qkv, Kind.mlp, Kind.lm_head, Kind.decode_qkv, Kind.decode_mlp, Kind.decode_lm_head):
        assert t.ops["flops"][t.ops["kind"] == kind].sum() == ref.ops["flops"][ref.ops["kind"] == kind].sum(), kind.name


@pytest.mark.parametrize("scheme", ALL)
def test_each_node_runs_its_prefill_as_one_chain(scheme):
    """Chunks in order, layers in order: consecutive compute ops of a node depend on each other
    (so the replay's index tie-break never reorders a node's prefill)."""
    t = small(scheme)
    anc = ancestors(t)
    o = t.ops
    for n in range(t.meta["nodes"]):
        idx = np.flatnonzero((o["kind"] <= Kind.lm_head) & (o["node"] == n))
        for a, b in zip(idx[:-1], idx[1:]):
            assert anc[b] >> int(a) & 1, f"node {n}: op {b} does not follow op {a}"


@pytest.mark.parametrize("scheme", ["mars", "full"])
def test_mars_attention_reads_exactly_the_blocks_it_needs(scheme):
    """For each attention of (c, l, n): own blocks + replicas delivered to n before it
    (ancestors) and not drained at a decision <= c + transient pushes it waits for = the
    KV it needs: nothing missing, nothing fetched twice."""
    t = small(scheme)
    lay = layout_of(t.meta)
    N, L, m = t.meta["nodes"], t.meta["model"]["layers"], 256
    anc = ancestors(t)
    o = t.ops
    rows = np.repeat(np.arange(t.n_ops), np.diff(t.dst_ptr))
    inval = {}  # (kv_id, holder) -> decision chunk
    for i in np.flatnonzero(o["kind"] == Kind.invalidate):
        for h in t.dst(i):
            assert (int(o["kv_id"][i]), int(h)) not in inval, "a replica invalidated twice"
            inval[(int(o["kv_id"][i]), int(h))] = int(o["chunk"][i])
    replica_to = {}  # node -> [(op, kv_id)]
    for i in np.flatnonzero((o["residency"] == Residency.replica) & (o["kind"] == Kind.send)):
        for h in t.dst(i):
            replica_to.setdefault(int(h), []).append((int(i), int(o["kv_id"][i])))
            assert (int(o["kv_id"][i]), int(h)) in inval, "a replica never invalidated"
    for (c, l, n), ops in attn_ops(t).items():
        need = {(j, q): lay.tokens(j, q) * m for j in range(c + 1) for q in range(N) if lay.pairs(c, n, j, q) > 0}
        got = sum(v for (j, q), v in need.items() if q == n)
        last = ops[-1]
        for i, kv in replica_to.get(n, []):
            j, q, layer = (int(x) for x in block_of(np.array(kv), N, L))
            # readable: delivered before this attention (an ancestor) and not yet drained
            if layer == l and (j, q) in need and anc[last] >> i & 1 and inval[(kv, n)] > c:
                got += need[(j, q)]
        for a in ops:
            for d in t.deps(a):
                if o["residency"][d] == Residency.transient and n in t.dst(d):
                    assert o["layer"][d] == l
                    got += int(o["bytes"][d])
        assert got == sum(need.values()), (c, l, n)
    del rows


def test_mars_new_replicas_wait_for_the_holders_drains():
    """Memory: a chunk's replicas leave for a holder only once everything that holder's
    drained replicas wait for (its last reads, its last pushes of them) is done, i.e.
    together with their invalidation, never before."""
    t = small("mars", nodes=8, seq=2048, chunk=256)
    anc = ancestors(t)
    o = t.ops
    retire = {}  # (decision, layer, holder) -> ops the invalidations there wait for
    for i in np.flatnonzero(o["kind"] == Kind.invalidate):
        waits = [int(d) for d in t.deps(i) if o["kind"][d] != Kind.drain]
        assert any(o["kind"][d] == Kind.attn for d in waits)
        for h in t.dst(i):
            retire.setdefault((int(o["chunk"][i]), int(o["layer"][i]), int(h)), set()).update(waits)
    checked = 0
    for i in np.flatnonzero((o["msg_op"] == MsgOp.kv_replica)):
        for h in t.dst(i):
            for w in retire.get((int(o["chunk"][i]), int(o["layer"][i]), int(h)), ()):
                assert anc[i] >> w & 1
                checked += 1
    assert checked > 0
    # replicas that served other nodes wait for those pushes too
    assert any(o["kind"][w] == Kind.send for ws in retire.values() for w in ws)


def test_mars_prefetch_is_scheduled_not_on_demand():
    """History pushes for (c, l) to n leave before n even computes qkv(c, l): they do not
    depend on it, only on n having finished the previous layer's attention."""
    t = small("mars")
    anc = ancestors(t)
    o = t.ops
    qkv = {(int(o["chunk"][i]), int(o["layer"][i]), int(o["node"][i])): int(i) for i in np.flatnonzero(o["kind"] == Kind.qkv)}
    pushes = np.flatnonzero(o["msg_op"] == MsgOp.kv_fetch_resp)
    assert pushes.size
    for i in pushes:
        (n,) = t.dst(i)
        assert not anc[i] >> qkv[(int(o["chunk"][i]), int(o["layer"][i]), int(n))] & 1


@pytest.mark.parametrize("scheme", ["ring", "zigzag", "pd"])
def test_ring_steps_pass_the_predecessors_set(scheme):
    t = small(scheme)
    lay = layout_of(t.meta)
    P, L, N = lay.nodes, t.meta["model"]["layers"], t.meta["nodes"]
    o = t.ops
    for (c, l, n), ops in attn_ops(t).items():
        assert len(ops) == P  # own set + P-1 received
        for s, a in enumerate(ops[1:]):
            recv = [d for d in t.deps(a) if o["kind"][d] == Kind.send]
            assert len(recv) == 1
            d = recv[0]
            assert list(t.src(d)) == [(n - 1) % P] and list(t.dst(d)) == [n]
            assert o["step"][d] == s and o["residency"][d] == Residency.transient
            owner = block_of(np.array(o["kv_id"][d]), N, L)[1]
            assert owner == (n - s - 1) % P


def test_zigzag_balances_causal_work():
    def per_node(t):
        o = t.ops
        sel = o["kind"] == Kind.attn
        return np.bincount(o["node"][sel], weights=o["flops"][sel], minlength=4)

    ring, zig = per_node(small("ring", seq=1024)), per_node(small("zigzag", seq=1024))
    assert zig.sum() == ring.sum()
    assert zig.max() - zig.min() < (ring.max() - ring.min()) / 4


@pytest.mark.parametrize("scheme", ["mars", "full", "ring", "zigzag"])
def test_prefill_ends_owner_only(scheme):
    t = small(scheme)
    lay = layout_of(t.meta)
    mem = kv_memory(t)
    owner = [lay.owner_tokens(n) * 256 * 2 for n in range(4)]
    assert mem[-1].tolist() == owner


def test_full_replication_holds_everything_until_the_end():
    t = small("full")
    mem = kv_memory(t)
    total = SMALL["seq"] * 256 * 2
    assert mem[-2].tolist() == [total] * 4  # during the last chunk every node holds all KV
    assert t.schedule["r"] == [4] * 4


def test_pd_hands_all_kv_to_the_decode_pool_before_the_first_token():
    for mode in ("bulk", "stream"):
        t = small("pd", pd_mode=mode, first_token="decode")  # the prefill-side token: tests/test_baselines.py
        o = t.ops
        hand = np.flatnonzero((o["msg_op"] == MsgOp.kv_transfer) & (o["residency"] == Residency.owner) & (o["stage"] == Stage.prefill))
        assert (o["bytes"][hand].sum()) == SMALL["seq"] * 256 * 2
        assert set(t.src_idx[np.concatenate([np.arange(t.src_ptr[i], t.src_ptr[i + 1]) for i in hand])]) == {0, 1}
        dst = np.concatenate([t.dst(i) for i in hand])
        per = np.bincount(dst, weights=o["bytes"][hand], minlength=4)
        assert per[2] == per[3] == SMALL["seq"] * 256 * 2 / 2  # even 1/D shares
        (lm,) = np.flatnonzero(o["kind"] == Kind.lm_head)
        assert o["node"][lm] == 2 and t.meta["leader"] == 2
        anc = ancestors(t)
        assert all(anc[lm] >> int(i) & 1 for i in hand)
        deps_of = [set(map(int, t.deps(i))) for i in hand]
        qkv = set(np.flatnonzero(o["kind"] == Kind.qkv).tolist())
        # stream sends each block right after its qkv; bulk waits for the end of prefill
        assert all(d <= qkv for d in deps_of) == (mode == "stream")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_decode_is_kv_stationary(scheme):
    t = small(scheme, **({"first_token": "decode"} if scheme == "pd" else {}))  # the handoff ends prefill
    o = t.ops
    K, L = SMALL["decode_tokens"], t.meta["model"]["layers"]
    leader = t.meta["leader"]
    holders = t.schedule["decode"]["kv_nodes"]
    dec = o["stage"] == Stage.decode
    for kind in (Kind.decode_qkv, Kind.decode_mlp):
        assert ((o["kind"] == kind) & (o["node"] == leader)).sum() == K * L
    assert (o["kind"] == Kind.decode_lm_head).sum() == K
    red = np.flatnonzero(o["kind"] == Kind.reduce)
    assert len(red) == K * L
    for i in red:
        assert o["reduce_op"][i] == ReduceOp.merge and o["collective"][i] == Collective.reduce
        assert sorted(t.src(i)) == holders and list(t.dst(i)) == [leader]
    # no KV bulk moves in decode: only queries, states and one token's KV per layer
    moves = dec & (o["kind"] == Kind.send) & (o["msg_op"] == MsgOp.kv_transfer)
    assert (o["bytes"][moves] == 256).all()
    # attention covers the whole context: prompt + tokens so far (+ the new one)
    da = o["kind"] == Kind.decode_attn
    for tok in range(K):
        sel = da & (o["chunk"] == tok) & (o["layer"] == 0)
        kv = o["flops"][sel].sum() // (4 * t.meta["model"]["heads"] * t.meta["model"]["head_dim"])
        assert kv == SMALL["seq"] + tok + 1
    # the new token's KV goes to the smallest shard (ties: lowest id), once per layer
    shards = dict(zip(holders, t.schedule["decode"]["start_shards"]))
    for tok in range(K):
        x = min(holders, key=lambda h: (shards[h], h))
        shards[x] += 1
        sel = np.flatnonzero(moves & (o["chunk"] == tok))
        assert len(sel) == (0 if x == leader else L)
        assert all(list(t.dst(i)) == [x] and o["residency"][i] == Residency.owner for i in sel)
        assert t.schedule["decode"]["new_token_nodes"][tok] == x


def test_bad_parameters_are_config_errors():
    bad = [
        dict(scheme="mars", chunk=2),  # smaller than the node count
        dict(scheme="zigzag", chunk=6),  # zigzag needs 2N pieces
        dict(scheme="mars", seq=1026, chunk=256),  # last chunk of 2 tokens
        dict(scheme="mars", kv_budget="0.5x"),  # below owner-only
        dict(scheme="pd", prefill_nodes=4),
        dict(scheme="nope"),
        dict(scheme="mars", overrides=["model.layers=4", "hw.bogus=1"]),
        dict(scheme="mars", model="no-such-model"),
        dict(scheme="mars", topology="torus:3x3"),
    ]
    for kw in bad:
        with pytest.raises(ConfigError):
            generate(Params(**{**SMALL, **kw}))


@pytest.mark.parametrize("scheme, extra", [("mars", {}), ("mars", {"kv_budget": "1.2x"}),
                                           ("mars", {"kv_budget": "1.5x", "mars_lookahead": False}),
                                           ("full", {"kv_budget": "1.3x"})])
def test_mars_layers_stamped_from_layer_one_are_the_layers_built_op_by_op(scheme, extra, monkeypatch):
    """MARS builds layers 0 and 1 op by op and stamps layer 1 for the others: the trace (ops,
    their ids, dependencies, KV block ids, stats) is byte for byte the one built layer by layer,
    with drains and invalidates among the stamped ops."""
    from emu.workload import mars

    p = Params(scheme=scheme, seq=2048, nodes=6, chunk=256, decode_tokens=2, overrides=["model.layers=5"], **extra)
    stamped = generate(p)
    o = stamped.ops
    assert ((o["kind"] == Kind.drain) & (o["layer"] == 4)).any() and (o["layer"] == 4).sum() == (o["layer"] == 1).sum()
    monkeypatch.setattr(mars, "generate", functools.partial(mars.generate, stamp_layers=False))
    assert dumps(generate(p)) == dumps(stamped)


def test_layer_stamping_moves_dependencies_by_their_own_segments_layers_and_refuses_others():
    from emu.workload.builder import OpBuilder

    b = OpBuilder()
    x = b.compute(Kind.mlp, Stage.prefill, 0, 0, 0, -1, (1, 1))           # segment 0 (one op per layer): layer 0
    y = b.compute(Kind.mlp, Stage.prefill, 0, 0, 1, -1, (1, 1), [x])      # layer 1
    q0 = b.compute(Kind.qkv, Stage.prefill, 1, 1, 0, -1, (1, 1), [y], produces=(10, 5))  # segment 1: 2 ops per layer
    a0 = b.compute(Kind.attn, Stage.prefill, 1, 1, 0, 0, (1, 1), [q0])
    q1 = b.compute(Kind.qkv, Stage.prefill, 1, 1, 1, -1, (1, 1), [a0], produces=(11, 5))
    b.compute(Kind.attn, Stage.prefill, 1, 1, 1, 0, (1, 1), [q1, y])
    b.repeat_layers(4, 2, np.array([0, 2]), np.array([1, 2]))
    cols = b.columns()
    assert cols["layer"].tolist() == [0, 1, 0, 0, 1, 1, 2, 2, 3, 3]
    assert cols["kv_id"].tolist() == [-1, -1, 10, -1, 11, -1, 12, -1, 13, -1]
    deps = [cols["dep_idx"][cols["dep_ptr"][i]:cols["dep_ptr"][i + 1]].tolist() for i in range(10)]
    # layer 2's qkv follows layer 1's attention; its attention reads segment 0's layer 2 (op 1 + 1)
    assert deps[6:] == [[5], [6, 2], [7], [8, 3]]
    bad = OpBuilder()
    for layer in range(3):                                                 # segment 0: layers 0-2
        bad.compute(Kind.mlp, Stage.prefill, 0, 0, layer, -1, (1, 1))
    bad.compute(Kind.mlp, Stage.prefill, 0, 1, 0, -1, (1, 1), [1])         # segment 1, layer 0
    bad.compute(Kind.mlp, Stage.prefill, 0, 1, 1, -1, (1, 1), [2])         # layer 1 reads segment 0's layer 2
    with pytest.raises(AssertionError, match="outside their own or the previous layer"):
        bad.repeat_layers(4, 1, np.array([0, 3]), np.array([1, 1]))
