"""Ulysses and USP. All-to-all bytes equal the closed form, every personalized
block arrives exactly once through the NIC's all-to-all engine (torus, ring, star), the
compute equals Ring's, the GQA limit and its KV replication are counted, and decode starts
from the head-sharded layout the scheme leaves."""

from collections import Counter

import numpy as np
import pytest

from emu.codec import Collective as WireCollective
from emu.errors import ConfigError
from emu.replay.run import Options, Replay
from emu.workload.analysis import delivered_bytes
from emu.workload.enums import Kind, MsgOp, Residency, Stage
from emu.workload.generate import Params, generate
from emu.workload.trace import load_trace, save_trace

# 12 query heads, 2 KV heads (Qwen2.5-1.5B), two layers to stay small; the NIC's all-to-all
# engine, and the uneven head splits no reference accepts (tests/test_baselines.py checks the
# concurrent mode and the refusal)
SMALL = dict(seq=1024, chunk=256, decode_tokens=2, overrides=["model.layers=2"], all_to_all="pairwise",
             uneven_heads=True)
D, HQ, HKV = 128, 12, 2


def small(scheme, nodes=4, **kw):
    return generate(Params(scheme=scheme, nodes=nodes, **{**SMALL, **kw}))


def a2a_ops(t, msg=None):
    o = t.ops
    sel = o["kind"] == Kind.all_to_all
    if msg is not None:
        sel &= o["msg_op"] == msg
    return np.flatnonzero(sel)


@pytest.mark.parametrize("nodes,kv_heads", [(4, 2), (4, 4), (2, 2)])
def test_all_to_all_bytes_are_the_closed_form(nodes, kv_heads):
    """Per node and layer, each all-to-all sends (u-1)/u of the node's shard: its slice's Q,
    K and V (with replicated KV heads counted: u x kvh of them per group) and its output."""
    t = small("ulysses", nodes, overrides=["model.layers=2", f"model.kv_heads={kv_heads}"])
    u = nodes
    kvh = max(1, kv_heads // u)  # KV heads per member (one when replicated)
    held = u * kvh  # KV heads held in the group (> kv_heads: replicated)
    assert t.schedule["ulysses"]["kv_replication"] == held / kv_heads
    o = t.ops
    C, L = 1024 // 256, 2
    sub = 256 // u  # tokens of a node's slice of one chunk
    q_shard = sub * HQ * D * 2  # fp16 activations
    kv_shard = sub * held * D * 2 // 2  # K and V, INT4
    for msg, shard in ((MsgOp.query, q_shard), (MsgOp.kv_transfer, kv_shard), (MsgOp.partial_state, q_shard)):
        ops = a2a_ops(t, msg)
        assert len(ops) == C * L
        for i in ops:
            sent_per_node = o["bytes"][i] * (len(t.dst(i)) - 1)
            assert sent_per_node * u == shard * (u - 1)
        assert delivered_bytes(t, msg, Stage.prefill) == C * L * u * shard * (u - 1) // u


@pytest.mark.parametrize("topology", ["torus", "ring", "star"])
@pytest.mark.parametrize("scheme,kw", [("usp", {"ulysses_degree": 4}), ("ulysses", {})])
def test_every_personalized_block_arrives_exactly_once(tmp_path, topology, scheme, kw):
    """USP 4 x 2 on 8 boards; Ulysses on 8 boards (12 heads: 4 boards with 2, 4 with 1, so
    one exchange per head count side by side)."""
    t = small(scheme, 8, topology=topology, **kw)
    p = tmp_path / "usp.json"
    save_trace(t, p)
    # The NIC's transfer and exchange objects are the Python path's (the compiled loop matches it:
    # tests/test_replay_compiled.py).
    rp = Replay(load_trace(p), Options(topology=topology, engine="python")).run()
    assert rp.incomplete() == [] and not rp.cluster.directory.errors
    o = t.ops
    expected = Counter()
    for i in a2a_ops(t):
        for a in t.src(i).tolist():
            for b in t.dst(i).tolist():
                if a != b:
                    expected[(a, b, int(o["msg_op"][i]), int(o["layer"][i]), int(o["bytes"][i]))] += 1
    seen = Counter()
    for tr in rp.cluster.transfers:
        if tr.meta["collective"] == WireCollective.all_to_all:
            assert len(tr.dsts) == 1 and list(tr.delivered) == list(tr.dsts)
            seen[(tr.src, tr.dsts[0], tr.meta["op"], tr.meta["layer"], tr.nbytes)] += 1
    assert seen == expected
    # pairwise: a member has at most one of an exchange's blocks in flight
    for ex in rp.exchanges.values():
        assert len(ex.received) == ex.expected


@pytest.mark.parametrize("scheme,kw", [("ulysses", {}), ("usp", {}), ("usp", {"ulysses_degree": 4}),
                                       ("ulysses", {"nodes": 16, "seq": 2048, "chunk": 512})])
def test_compute_equals_rings(scheme, kw):
    nodes = kw.pop("nodes", 8)
    t = small(scheme, nodes, **kw)
    ref = small("ring", nodes, **{k: v for k, v in kw.items() if k in ("seq", "chunk")})
    S, L = kw.get("seq", SMALL["seq"]), 2
    for kind in Kind:
        if kind <= Kind.decode_lm_head and kind != Kind.decode_attn:
            a = t.ops["flops"][t.ops["kind"] == kind].sum()
            assert a == ref.ops["flops"][ref.ops["kind"] == kind].sum(), kind.name
    attn = t.ops["flops"][t.ops["kind"] == Kind.attn].sum()
    assert attn == 4 * HQ * D * S * (S + 1) // 2 * L
    dec = lambda x: x.ops["flops"][x.ops["kind"] == Kind.decode_attn].sum()  # noqa: E731
    assert dec(t) == dec(ref)


def test_gqa_limit_and_replication_are_stated():
    t = small("ulysses", 16, seq=2048, chunk=512)
    u = t.schedule["ulysses"]
    assert u["gqa_limit"] == HKV and u["degree"] == 16 and u["ring_degree"] == 1
    # 12 query heads on 16 boards: 12 boards attend, one head each, each holding one KV head
    assert len(u["attention_boards"]) == 12 and u["kv_replication"] == 6
    assert [len(h) for h in u["heads"]] == [0] * 4 + [1] * 12
    # the memory is real: every attending board holds all 2048 tokens of one KV head
    final = t.schedule["node_kv_bytes"][-1]
    per_head = 2048 * 2 * D // 2 * 2  # tokens x K,V x d x INT4 x 2 layers
    assert sorted(final) == [0] * 4 + [per_head] * 12
    assert generate(Params(scheme="usp", nodes=16, **SMALL)).schedule["ulysses"]["degree"] == HKV
    with pytest.raises(ConfigError, match="does not divide the 16 nodes"):
        generate(Params(scheme="usp", nodes=16, ulysses_degree=5, **SMALL))
    with pytest.raises(ConfigError, match="multiples of 16"):
        generate(Params(scheme="ulysses", nodes=16, seq=1000, chunk=256, uneven_heads=True))


def test_usp_rings_sit_on_the_embedding():
    t = generate(Params(scheme="usp", nodes=16, seq=2048, chunk=512, overrides=["model.layers=1"], all_to_all="pairwise"))
    ring = t.schedule["ring"]
    assert len(ring["rings"]) == 2 and all(h == [1] * 8 for h in ring["rings_hops"])
    o = t.ops
    sends = np.flatnonzero((o["kind"] == Kind.send) & (o["residency"] == Residency.transient))
    from emu.workload.placement import Net
    net = Net(None, 16, t.meta["hw"])
    assert {int(net.hops[t.src(i)[0], t.dst(i)[0]]) for i in sends} == {1}
    # a board forwards its own set only once its own part exists (its qkv) and the others' arrived
    for i in sends:
        if o["step"][i] == 0:
            src = int(t.src(i)[0])
            kinds = {(int(o["kind"][d]), int(o["node"][d]) if o["kind"][d] == Kind.qkv else -1) for d in t.deps(i)}
            assert (int(Kind.qkv), src) in kinds and any(k == Kind.all_to_all for k, _ in kinds)
    groups = t.schedule["ulysses"]["groups"]
    assert all(net.hops[a, b] == 1 for a, b in groups)  # all-to-all partners are neighbours


def test_decode_starts_from_the_head_sharded_layout(tmp_path):
    """Ulysses leaves every attending board with all prompt tokens of its KV heads: decode
    attends there with its query heads, stores the new token's KV heads on every attending
    board, and merges H_q-head states on the leader."""
    t = small("ulysses", 4)
    sched, o = t.schedule["decode"], t.ops
    assert sched["layout"] == "head-sharded" and sched["groups"] == [sched["kv_nodes"]] == [[0, 1, 2, 3]]
    assert sched["start_shards"] == [1024]
    for step in range(2):
        sel = (o["kind"] == Kind.decode_attn) & (o["chunk"] == step) & (o["layer"] == 0)
        per = {int(n): int(f) for n, f in zip(o["node"][sel], o["flops"][sel])}
        leader = t.meta["leader"]
        for n, f in per.items():
            pairs = 1024 + step  # the prompt and the tokens decoded so far
            extra = 4 * HQ * D if n == leader else 0  # the leader also attends the new token, all heads
            assert f == 4 * (HQ // 4) * D * pairs + extra
        moves = np.flatnonzero((o["stage"] == Stage.decode) & (o["kind"] == Kind.send) & (o["msg_op"] == MsgOp.kv_transfer)
                               & (o["chunk"] == step) & (o["layer"] == 0))
        assert sorted(int(t.dst(i)[0]) for i in moves) == sorted(set(range(4)) - {leader})
        assert set(o["bytes"][moves].tolist()) == {2 * D // 2}  # one KV head of one token, INT4
    p = tmp_path / "u.json"
    save_trace(t, p)
    rp = Replay(load_trace(p), Options()).run()
    d = rp.cluster.directory
    assert rp.incomplete() == [] and not d.errors
    # the replay's memory is the layout: each board 1024 + 2 tokens of one KV head, 2 layers
    assert [m.owner for m in d.memory] == [(1024 + 2) * 2 * D // 2 * 2] * 4
