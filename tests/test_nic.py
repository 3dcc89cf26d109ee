"""The NIC model's semantics: exact attention after in-network merges, multicast, all-to-all,
reliability under loss and failure, and the replica directory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.codec import Dtype, Op, ReduceOp
from emu.net import Loss, Network
from emu.net.timeline import Timeline, parse
from emu.nic import NicConfig, State
from pycluster import Cluster
from emu.nic import reduce as R
from emu.sim import US, Simulator
from emu.topology import LinkDefaults, Routes, mesh2d, ring, star, torus2d

LINK = LinkDefaults(rate_bps=10**9, latency_ps=1 * US, mtu=1500)
TOPOLOGIES = {
    "ring": lambda n: ring(n, link=LINK),
    "mesh": lambda n: mesh2d(2, n // 2, link=LINK),
    "star": lambda n: star(n, link=LINK),
}


def cluster(G, *, reliable=True, lossless=True, seed=0, **cfg):
    sim = Simulator()
    routes = Routes(G)
    net = Network(sim, G, routes.next_hop, lossless=lossless, seed=seed, nic_latency_ps=200_000)
    return Cluster(net, routes, NicConfig(reliable=reliable, **cfg))


def attention(q, K, V):
    s = np.einsum("hd,thd->ht", q.astype(np.float64), K.astype(np.float64)) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("ht,thd->hd", p / p.sum(axis=1, keepdims=True), V.astype(np.float64))


def decode_step(c, rng, dtype, *, two_pass=False, heads=4, d=32, leader=0):
    """Leader multicasts a query; each node attends over its shard; NICs merge states to the leader."""
    n = c.boards
    shards = [(rng.standard_normal((t, heads, d)).astype(np.float32), rng.standard_normal((t, heads, d)).astype(np.float32))
              for t in rng.integers(1, 40, n)]
    q = rng.standard_normal((heads, d)).astype(np.float32)
    out = {}
    group = list(range(n))

    def merge_phase():
        red = c.reduction(group, leader, ReduceOp.merge, nbytes=R.state_len(heads, d, dtype), dtype=dtype,
                          heads=heads, head_dim=d, on_complete=lambda r, t: out.update(result=r.result, t=t))
        for node in group:
            st_ = R.partial_attention(R.unpack_values(got[node], dtype).reshape(heads, d), *shards[node])
            red.contribute(node, R.pack_state(*st_, dtype))

    def two_pass_phase():
        # Pass 1: all-reduce max of m (reduce to the leader, multicast back).
        states = {node: R.partial_attention(R.unpack_values(got[node], dtype).reshape(heads, d), *shards[node])
                  for node in group}

        def maxed(r, t):
            c.send(leader, group, len(r.result), data=r.result, op=Op.reduce_result, dtype=dtype,
                   on_complete=lambda tr, t2: sum_pass(R.unpack_values(r.result, dtype)))

        red = c.reduction(group, leader, ReduceOp.max, nbytes=heads * np.dtype(R.WIRE_DTYPES[dtype]).itemsize,
                          dtype=dtype, on_complete=maxed)
        for node in group:
            red.contribute(node, R.pack_values(states[node][0], dtype))

        def sum_pass(M):
            def summed(r, t):
                v = R.unpack_values(r.result, dtype)
                out.update(result=R.pack_state(M, v[:heads], v[heads:].reshape(heads, d), dtype), t=t)

            red2 = c.reduction(group, leader, ReduceOp.sum, nbytes=heads * (d + 1) * np.dtype(R.WIRE_DTYPES[dtype]).itemsize,
                               dtype=dtype, on_complete=summed)
            for node in group:
                m, l, o = states[node]
                scale = np.exp(m - M).astype(np.float32)
                red2.contribute(node, R.pack_values(np.concatenate([l * scale, (o * scale[:, None]).ravel()]), dtype))

    got = {}

    def query_arrived(tr, node, t):
        got[node] = tr.data
        if len(got) == n:
            (two_pass_phase if two_pass else merge_phase)()

    c.send(leader, group, data=R.pack_values(q, dtype), op=Op.query, dtype=dtype, on_delivered=query_arrived)
    c.net.run()
    K = np.concatenate([s[0] for s in shards])
    V = np.concatenate([s[1] for s in shards])
    qw = R.unpack_values(R.pack_values(q, dtype), dtype).reshape(heads, d)  # the query as the wire carried it
    result = R.finish(R.unpack_state(out["result"], heads, d, dtype))
    return result, attention(qw, K, V), out["t"]


@pytest.mark.parametrize("dtype,tol", [(Dtype.fp32, 1e-5), (Dtype.fp16, 2e-3)])
@pytest.mark.parametrize("two_pass", [False, True])
def test_distributed_decode_attention_is_exact(dtype, tol, two_pass):
    c = cluster(torus2d(2, 4, link=LINK))
    got, want, _ = decode_step(c, np.random.default_rng(7), dtype, two_pass=two_pass)
    assert np.max(np.abs(got - want)) < tol
    assert not c.incomplete() and not c.directory.errors


def test_functional_and_timing_modes_give_identical_timing():
    times = []
    for functional in (True, False):
        c = cluster(mesh2d(2, 4, link=LINK))
        done = {}
        red = c.reduction(range(8), 3, ReduceOp.merge, nbytes=R.state_len(4, 32, Dtype.fp32), heads=4, head_dim=32,
                          functional=functional, on_complete=lambda r, t: done.update(t=t))
        for node in range(8):
            st_ = R.identity(4, 32)
            c.sim.at(node * 1000, red.contribute, node, R.pack_state(*st_, Dtype.fp32) if functional else None)
        c.net.run()
        times.append(done["t"])
    assert times[0] == times[1]


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(list(range(6))), root=st.integers(0, 5), topo=st.sampled_from(sorted(TOPOLOGIES)),
       seed=st.integers(0, 1000))
def test_merge_result_does_not_depend_on_arrival_order_or_tree(order, root, topo, seed):
    rng = np.random.default_rng(seed)
    heads, d = 2, 8
    states = [R.partial_attention(rng.standard_normal((heads, d)), rng.standard_normal((5, heads, d)),
                                  rng.standard_normal((5, heads, d))) for _ in range(6)]
    c = cluster(TOPOLOGIES[topo](6))
    out = {}
    red = c.reduction(range(6), root, ReduceOp.merge, nbytes=R.state_len(heads, d, Dtype.fp32), heads=heads,
                      head_dim=d, on_complete=lambda r, t: out.update(r=r.result))
    for k, node in enumerate(order):
        c.sim.at(k * 50_000_000, red.contribute, node, R.pack_state(*states[node], Dtype.fp32))
    c.net.run()
    ref = states[0]
    for s in states[1:]:
        ref = R.merge(ref, s)
    np.testing.assert_allclose(R.finish(R.unpack_state(out["r"], heads, d, Dtype.fp32)), R.finish(ref), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("topo", sorted(TOPOLOGIES))
def test_multicast_reaches_each_member_exactly_once(topo):
    c = cluster(TOPOLOGIES[topo](8))
    rng = np.random.default_rng(1)
    seen = []
    sends = []
    buffers = []
    for k in range(12):
        src = int(rng.integers(8))
        members = sorted(set(int(x) for x in rng.choice(8, size=int(rng.integers(2, 8)), replace=False)) - {src})
        buf = bytearray(rng.bytes(int(rng.integers(1, 9000))))
        sends.append((src, members, bytes(buf)))  # an independent copy, made before the send
        c.send(src, members, data=buf, op=Op.kv_replica, kv_id=k,
               on_delivered=lambda tr, node, t: seen.append((tr.id, node, tr.data)))
        buffers.append(buf)
    for buf in buffers:
        buf[:] = bytes(len(buf))  # the compute engine reuses its buffers at once
    c.net.run()
    assert sorted((i, n) for i, n, _ in seen) == sorted((i, n) for i, (_, m, _) in enumerate(sends) for n in m)
    assert all(d == sends[i][2] and d is not sends[i][2] for i, _, d in seen)
    assert c.net.duplicates == 0


@pytest.mark.parametrize("make", [bytearray, lambda b: np.frombuffer(b, np.uint8).copy(), memoryview])
def test_a_send_carries_the_bytes_as_they_were_when_handed_over(make):
    c = cluster(ring(4, link=LINK))
    original = bytes(range(256)) * 40
    buf = make(bytearray(original))
    got = {}
    c.send(0, [1, 2], data=buf, on_delivered=lambda tr, node, t: got.__setitem__(node, tr.data))
    view = memoryview(buf).cast("B")
    view[:] = bytes(len(original))  # overwritten after the send, before any frame left
    c.net.run()
    assert got == {1: original, 2: original}


@pytest.mark.parametrize("topo", sorted(TOPOLOGIES))
def test_all_to_all_delivers_every_block_to_its_member(topo):
    c = cluster(TOPOLOGIES[topo](8))
    rng = np.random.default_rng(2)
    group = [0, 2, 3, 5, 6, 7]
    blocks = {(a, b): rng.bytes(int(rng.integers(100, 5000))) for a in group for b in group if a != b}
    got = {}
    done = {}
    c.all_to_all(group, None, data=blocks, on_delivered=lambda a, b, p, t: got.__setitem__((a, b), p),
                 on_complete=lambda x, t: done.update(t=t))
    c.net.run()
    assert got == blocks and "t" in done


def test_collectives_complete_under_loss_and_a_link_failure():
    G = torus2d(2, 4, link=LINK)
    c = cluster(G, lossless=False, seed=11)
    for link in range(len(c.net.links)):
        c.net.set_loss(link, Loss(p=0.01))
    tl = Timeline(parse("link 0-1 down at 400us"), detect_ps=50 * US)
    tl.on_reroute.append(c.reroute)
    tl.install(c.net, c.routes)
    rng = np.random.default_rng(3)
    deliveries = []
    payloads = {}
    for k in range(6):
        data = rng.bytes(60_000)
        payloads[k] = data
        c.send(k % 8, [m for m in range(8) if m != k % 8], data=data, op=Op.kv_replica, kv_id=k,
               on_delivered=lambda tr, node, t: deliveries.append((tr.meta["kv_id"], node, tr.data)))
    got, want, _ = decode_step(c, np.random.default_rng(4), Dtype.fp32)
    assert np.max(np.abs(got - want)) < 1e-5
    assert not c.incomplete(), c.incomplete()
    # Each member got each block exactly once, with the right bytes.
    assert sorted((k, n) for k, n, _ in deliveries) == sorted((k, n) for k in range(6) for n in range(8) if n != k % 8)
    assert all(payloads[k] == d for k, _, d in deliveries)
    counters = c.net.counters()
    assert counters.dropped_loss.sum() > 0 and counters.dropped_link_down.sum() > 0
    assert c.retransmitted_frames > 0
    assert (counters.offered_frames == counters.delivered_frames + counters.dropped_frames).all()


def test_without_reliability_a_lost_frame_leaves_the_send_incomplete():
    c = cluster(ring(4, link=LINK), reliable=False, lossless=False)
    c.net.set_loss(c.net.link(0, 1), Loss(drops=(2,)))
    c.send(0, [1], 10_000, op=Op.kv_transfer, kv_id=9)
    c.net.run()
    (msg,) = c.incomplete()
    assert "kv 9" in msg and "never reached [1]" in msg


def test_drain_and_invalidate_move_directory_states_and_memory_returns_to_owner_only():
    c = cluster(mesh2d(2, 2, link=LINK))
    d = c.directory
    for owner in range(4):
        d.add_owner(owner, owner, 4096, 0)
    c.send(0, [1, 2, 3], 4096, op=Op.kv_replica, kv_id=0)
    c.send(1, [3], 4096, op=Op.kv_replica, kv_id=1)
    c.net.run()
    assert d.state(2, 0) == State.VALID and d.memory[3].replica == 8192
    assert d.replica_factor() == pytest.approx((4 + 4) / 4)
    c.replica_control(0, [1, 2, 3], 0, Op.drain)
    c.net.run()
    assert d.state(2, 0) == State.DRAINING
    assert d.readable(2, 0, new_read=False) and not d.readable(2, 0, new_read=True)
    c.replica_control(0, [1, 2, 3], 0, Op.invalidate)
    c.replica_control(1, [3], 1, Op.invalidate)
    c.net.run()
    assert d.state(2, 0) == State.INVALID and not d.read(2, 0, c.sim.now)
    assert "read block 0 in state INVALID" in d.errors[-1]
    assert d.owner_only() and [m.total for m in d.memory] == [4096] * 4
    h = d.history()
    assert h.replica_factor.iloc[-1] == 1.0 and h.replica_bytes.max() == 8192


def test_a_full_packetizer_stalls_the_sender_until_room_frees():
    c = cluster(ring(4, link=LINK), fifo_entries=2, fifo_bytes=1 << 30)
    accepted = []
    for k in range(4):
        c.send(0, [1], 100_000, on_accept=lambda tr, t: accepted.append((tr.id, t)))
    c.net.run()
    assert [a for a, _ in accepted] == [0, 1, 2, 3]
    assert accepted[0][1] == accepted[1][1] == 0 and accepted[2][1] > 0 and accepted[3][1] > accepted[2][1]


def test_a_failed_send_of_several_messages_frees_its_packetizer_room_once():
    # Over MAX_FRAGS fragments a send is several messages; with no route (and no reliable
    # delivery to hold it) each one fails at once, and the send still leaves the packetizer
    # once: the next two sends of a one-entry packetizer still go one after the other.
    from emu.codec.fragment import MAX_FRAGS, max_payload
    c = cluster(ring(4, link=LINK), fifo_entries=1, fifo_bytes=1 << 40, reliable=False)
    Timeline(parse("node 1 down at 0s"), detect_ps=0).install(c.net, c.routes)
    sends, accepted = [], []

    def later():  # once the board is down and the routes know it
        sends.append(c.send(0, [1], 2 * max_payload(c.config.mtu) * MAX_FRAGS + 1))
        for _ in range(2):
            c.send(0, [3], 100_000, on_accept=lambda tr, t: accepted.append(t))
    c.sim.at(1 * US, later)
    c.net.run()
    assert len(sends[0].parts) == 3 and sends[0].failed
    assert len(accepted) == 2 and accepted[1] > accepted[0]


def test_a_board_outside_the_group_forwards_but_does_not_reduce():
    # On a 5-board ring, 2 reports to 0 through 1 (or 3, 4): none of them is in the group.
    c = cluster(ring(5, link=LINK))
    assert c.board_tree(0, [0, 2]) == {2: 0}
    out = {}
    red = c.reduction([0, 2], 0, ReduceOp.sum, nbytes=8, dtype=Dtype.fp32, on_complete=lambda r, t: out.update(r=r.result))
    red.contribute(0, R.pack_values(np.array([1, 2], np.float32), Dtype.fp32))
    red.contribute(2, R.pack_values(np.array([3, 4], np.float32), Dtype.fp32))
    c.net.run()
    assert list(R.unpack_values(out["r"], Dtype.fp32)) == [4, 6]


def test_all_to_all_members_start_when_ready_and_send_only_their_pairs():
    """autostart=False: a member sends nothing before start(member); a pair map limits the
    exchange to its pairs (here sources 0, 1, 2 to destinations 2, 3), one block each."""
    c = cluster(torus2d(2, 2, link=LINK))
    pairs = {(a, b): 3000 for a in (0, 1, 2) for b in (2, 3) if a != b}
    got, done = [], {}
    ex = c.all_to_all([0, 1, 2, 3], pairs, autostart=False, layer=5,
                      on_delivered=lambda a, b, p, t: got.append((a, b, t)), on_complete=lambda x, t: done.update(t=t))
    assert ex.expected == len(pairs) == 5
    c.sim.at(0, ex.start, 0)
    c.sim.at(0, ex.start, 1)
    late = 3_000_000_000  # 3 ms: member 2 is ready long after the others finished
    c.sim.at(late, ex.start, 2)
    c.net.run()
    assert sorted((a, b) for a, b, _ in got) == sorted(pairs)
    assert all(t < late for a, b, t in got if a != 2) and all(t > late for a, b, t in got if a == 2)
    assert done["t"] == max(t for *_, t in got)
    assert all(tr.meta["layer"] == 5 and tr.nbytes == 3000 for tr in c.transfers)


def test_the_default_payload_fifo_is_the_kr260_comm_buffer_the_docs_give():
    """NicConfig's payload FIFO defaults to the KR260 profile's comm_buffer,
    and docs/nic.md's parameter table says the same 16 MiB."""
    from pathlib import Path

    from emu.workload.profiles import load

    assert NicConfig().fifo_bytes == load("hw", "kr260")["comm_buffer"] == 16 << 20
    docs = (Path(__file__).parent.parent / "docs" / "nic.md").read_text()
    assert "| `fifo_bytes` | `NicConfig.fifo_bytes`, hw `comm_buffer` | 16 MiB |" in docs
