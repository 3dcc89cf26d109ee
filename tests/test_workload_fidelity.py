"""Ring schemes on the topology's ring embedding, transient copies
freed after their last reader, and a PD bulk handoff that moves every block it carries."""

import subprocess
import sys

import numpy as np
import pytest

from pydag import Wiring
from emu.replay.run import Options, Replay
from emu.topology import LinkDefaults, Routes, build
from emu.workload.enums import Kind, MsgOp, Residency
from emu.workload.generate import Params, generate
from emu.workload.trace import load_trace, save_trace

TORUS = dict(seq=512, nodes=16, chunk=256, decode_tokens=0, overrides=["model.layers=1"])


def hops_of_ring_sends(t):
    G = build("auto", t.meta["nodes"], LinkDefaults(), ports=int(t.meta["hw"]["ports"]))
    routes = Routes(G)
    o = t.ops
    sel = np.flatnonzero((o["kind"] == Kind.send) & (o["residency"] == Residency.transient)
                         & (o["msg_op"] == MsgOp.kv_transfer))
    assert len(sel) > 0
    return [routes.hops(int(t.src(i)[0]), int(t.dst(i)[0])) for i in sel]


@pytest.mark.parametrize("scheme", ["ring", "zigzag", "pd"])
def test_ring_steps_cross_one_link_on_the_torus(scheme):
    t = generate(Params(scheme=scheme, **TORUS))
    assert t.meta["scheme"]["topology"] == "torus4x4"
    assert set(hops_of_ring_sends(t)) == {1}
    ring = t.schedule["ring"]
    P = 8 if scheme == "pd" else 16
    assert sorted(ring["order"]) == list(range(P)) and ring["hops"] == [1] * P
    # board order keeps the old placement: 4 of 16 steps (3->4, 7->8, 11->12, 15->0) take 2 hops
    old = generate(Params(scheme=scheme, ring_order="boards", **TORUS))
    if scheme != "pd":
        assert old.schedule["ring"]["hops"].count(2) == 4
        assert np.mean(hops_of_ring_sends(old)) == 1.25


def test_ring_order_changes_who_sends_not_what_is_computed():
    new = generate(Params(scheme="ring", **TORUS))
    old = generate(Params(scheme="ring", ring_order="boards", **TORUS))
    for t in (new, old):
        assert t.n_ops == new.n_ops
    for kind in (Kind.qkv, Kind.attn, Kind.mlp):
        per_node = [np.bincount(t.ops["node"][t.ops["kind"] == kind], weights=t.ops["flops"][t.ops["kind"] == kind],
                                minlength=16) for t in (new, old)]
        assert (per_node[0] == per_node[1]).all()
    send = lambda t: t.ops["bytes"][t.ops["kind"] == Kind.send].sum()  # noqa: E731
    assert send(new) == send(old)


def test_trace_show_prints_the_embedding_hops(tmp_path):
    p = tmp_path / "ring.json"
    save_trace(generate(Params(scheme="ring", **TORUS)), p)
    r = subprocess.run([sys.executable, "-m", "emu", "trace", "show", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("ring "))
    assert "hops per step [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1] (mean 1.00)" in line


def test_bad_ring_order_is_a_config_error():
    from emu.errors import ConfigError

    with pytest.raises(ConfigError, match="--ring-order must be one of embedding, boards"):
        generate(Params(scheme="ring", ring_order="snake", **TORUS))


# ---- item 10: a transient copy lives until the last op that reads it ends ----------------

def test_transient_copies_are_freed_when_their_last_reader_ends(tmp_path):
    t = generate(Params(scheme="mars", seq=2048, nodes=8, chunk=256, decode_tokens=0, overrides=["model.layers=2"]))
    w = Wiring(t)
    o = t.ops
    # the case of the issue: replica multicasts that wait on an earlier push to their owner
    waits = [(y, x) for y, x in w.orders_only if o["residency"][x] == Residency.transient
             and o["msg_op"][y] == MsgOp.kv_replica]
    assert waits
    p = tmp_path / "mars.json"
    save_trace(t, p)
    rp = Replay(load_trace(p), Options()).run()
    assert rp.incomplete() == []
    # independent lifetime: from delivery at n to the end of the last compute op at n that
    # depends on the push (pushes are never forwarded)
    life = {}
    for y in range(t.n_ops):
        if o["kind"][y] > Kind.decode_lm_head:
            continue
        n = int(o["node"][y])
        for x in t.deps(y).tolist():
            if o["residency"][x] == Residency.transient and n in t.dst(x).tolist():
                life[(x, n)] = max(life.get((x, n), 0), int(rp.end[y]))
    events = []
    delivered = {(int(x), int(n)): int(tt) for x, n, tt in rp.deliveries()}
    for x in np.flatnonzero((o["residency"] == Residency.transient) & (o["kind"] == Kind.send)).tolist():
        for n in t.dst(x).tolist():
            born = delivered[(x, n)]
            dies = life.get((x, n), born)
            assert dies >= born
            events += [(born, n, int(o["bytes"][x])), (dies, n, -int(o["bytes"][x]))]
    # per node: peak transient bytes and the byte-time integral (exact, in B x ps)
    expected_peak, expected_area = np.zeros(8, np.int64), np.zeros(8, object)
    cur, last = np.zeros(8, np.int64), np.zeros(8, np.int64)
    for tt, n, b in sorted(events, key=lambda e: (e[0], e[2])):  # frees before arrivals at equal times
        expected_area[n] += int(cur[n]) * int(tt - last[n])
        cur[n] += b
        last[n] = tt
        expected_peak[n] = max(expected_peak[n], cur[n])
    hist = rp.cluster.directory.history()
    area = np.zeros(8, object)
    for n, h in hist.groupby("node"):
        tt, tb = h.t_ps.to_numpy(), h.transient_bytes.to_numpy()
        area[n] = sum(int(b) * int(dt) for b, dt in zip(tb[:-1], np.diff(tt)))
    measured = hist.groupby("node").transient_bytes.max().reindex(range(8), fill_value=0).to_numpy()
    assert measured.tolist() == expected_peak.tolist()
    assert area.tolist() == expected_area.tolist()
    assert (hist.groupby("node").transient_bytes.last() == 0).all()


# ---- item 11: PD bulk handoff -----------------------------------------------------------

@pytest.mark.parametrize("mode", ["bulk", "stream"])
def test_pd_handoff_moves_every_block_off_the_prefill_nodes(tmp_path, mode):
    t = generate(Params(scheme="pd", seq=2048, nodes=4, chunk=256, decode_tokens=0, pd_mode=mode,
                        overrides=["model.layers=2"]))
    o = t.ops
    hand = np.flatnonzero((o["residency"] == Residency.owner) & (o["kind"] == Kind.send))
    carried = sorted(k for i in hand for k in (t.blocks(i).tolist() or [int(o["kv_id"][i])]))
    produced = sorted(o["kv_id"][(o["kind"] == Kind.qkv)].tolist())
    assert carried == produced  # every block handed off exactly once
    p = tmp_path / "pd.json"
    save_trace(t, p)
    rp = Replay(load_trace(p), Options()).run()
    d = rp.cluster.directory
    assert [m.owner for m in d.memory[:2]] == [0, 0]
    share = 2048 * 256 * 2 // 2
    assert [m.owner for m in d.memory[2:]] == [share, share]
    assert {node for node, _ in d.owners.values()} == {2, 3}
