"""The shipped 16K traces replay as their schemes promise, and their wire bytes equal an
independent count from the trace, the topology's routes and Ethernet framing.

The count is exact (tolerance zero): with no loss, every message crosses each link of
its route or multicast tree once, fragmented at the MTU, and each frame costs its bytes
plus 24 B of preamble, FCS and gap. Any difference would be a frame lost, duplicated or
sent the wrong way.
"""

from pathlib import Path

import numpy as np
import pytest

from pydag import Wiring
from emu.net.ethernet import WIRE_OVERHEAD
from emu.net.framing import frame_sizes
from emu.replay.summary import summarize
from emu.replay.run import Options, Replay
from emu.topology import multicast_tree
from emu.workload import analytic
from emu.workload.analysis import fan_out
from emu.workload.enums import Kind, MsgOp, Stage
from emu.workload.trace import load_trace

TRACES = Path(__file__).resolve().parent.parent / "traces"
KV_OPS = [MsgOp.kv_replica, MsgOp.kv_fetch_resp, MsgOp.kv_transfer]


@pytest.fixture(scope="module", params=["mars", "ring", "zigzag", "pd", "ulysses", "usp"])
def run(request):
    rp = Replay(load_trace(str(TRACES / f"{request.param}_16k.json")), Options()).run()
    return request.param, rp, summarize(rp)


def per_link_wire(nbytes: int, mtu: int) -> int:
    n, full, last = frame_sizes(int(nbytes), mtu)
    return (n - 1) * (full + WIRE_OVERHEAD) + max(last, 60) + WIRE_OVERHEAD


def expected_wire_bytes(rp) -> int:
    tr, G, routes, mtu = rp.trace, rp.G, rp.routes, int(rp.hw["mtu"])
    ops = tr.ops
    total = 0
    trees = {}
    for i in np.flatnonzero(np.isin(ops["kind"], [Kind.send, Kind.drain, Kind.invalidate])).tolist():
        src = int(tr.src(i)[0])
        dsts = tuple(int(d) for d in tr.dst(i) if d != src)
        if len(dsts) == 1:
            links = routes.hops(src, dsts[0])
        else:
            if (src, dsts) not in trees:
                trees[(src, dsts)] = sum(len(c) for c in multicast_tree(G, routes, src, dsts).values())
            links = trees[(src, dsts)]
        total += per_link_wire(ops["bytes"][i], mtu) * links
    for i in np.flatnonzero(ops["kind"] == Kind.all_to_all).tolist():  # one unicast per pair
        srcs, dsts = tr.src(i).tolist(), tr.dst(i).tolist()
        links = sum(routes.hops(a, b) for a in srcs for b in dsts if a != b)
        total += per_link_wire(ops["bytes"][i], mtu) * links
    for i in np.flatnonzero(ops["kind"] == Kind.reduce).tolist():
        root = int(tr.dst(i)[0])
        parent = rp.cluster.board_tree(root, [int(s) for s in tr.src(i)])
        total += per_link_wire(ops["bytes"][i], mtu) * sum(routes.hops(c, p) for c, p in parent.items())
    return total + per_link_wire(0, mtu) * sum(routes.hops(a, b) for a, b in signals(rp.trace))


def signals(tr) -> list[tuple[int, int]]:
    """(from, to) of every signal the trace needs (tests/pydag.py's wiring): a compute op's
    node to each other board with parts waiting for it; each destination of a communication
    op to each board waiting for it to be delivered everywhere."""
    w = Wiring(tr)
    out = []
    for x, groups in w.on_signal.items():
        at = sorted(w.dsts[x]) if w.is_comm[x] else [int(tr.ops["node"][x])]
        out += [(a, b) for a in at for b, _parts in groups]
    return out


def test_every_cross_board_release_is_one_signal_frame(run):
    """Signals are counted as control frames, one per (event, board): MARS and PD have them,
    the other schemes release nothing across boards."""
    scheme, rp, s = run
    n = len(signals(rp.trace))
    assert s["control_frames_by_op"]["signal"] == n
    assert (n > 0) == (scheme in ("mars", "pd"))


def test_every_op_completes_and_kv_arrives_once_per_destination(run):
    scheme, rp, s = run
    assert s["incomplete_ops"] == 0 and not s["directory_errors"]
    ops, tr = rp.trace.ops, rp.trace
    kv = np.isin(ops["msg_op"], KV_OPS)
    assert s["kv_bytes"] == int((ops["bytes"][kv] * fan_out(tr)[kv]).sum())
    c = rp.net.counters()
    assert (c.offered_frames == c.delivered_frames + c.dropped_frames).all() and s["dropped_frames"] == 0


def test_wire_bytes_match_the_count_from_routes_and_framing(run):
    scheme, rp, s = run
    assert s["wire_bytes"] == expected_wire_bytes(rp)


def test_layouts(run):
    scheme, rp, s = run
    replicas = rp.cluster.directory.history().replica_bytes.max()
    if scheme in ("ring", "zigzag"):
        assert replicas == 0
        # Prefill KV moved equals paper eq. 21 (h_ring = 1: the bytes, before hops).
        ops, tr = rp.trace.ops, rp.trace
        pre = np.isin(ops["msg_op"], KV_OPS) & (ops["stage"] == Stage.prefill)
        m = rp.trace.meta
        model = m["model"]
        m_token = 2 * model["kv_heads"] * model["head_dim"] * model["layers"] // 2  # INT4: half a byte
        assert int((ops["bytes"][pre] * np.diff(tr.dst_ptr)[pre]).sum()) == analytic.c_ring(
            m["seq"] // m["chunk"], m["nodes"], m["chunk"] * m_token)
    if scheme == "mars":
        assert replicas > 0
    if scheme == "pd":
        # the bulk handoff moved every block: the prefill boards hold nothing
        assert s["final_layout_owner_only"] and s["final_node_kv_bytes"][:8] == [0] * 8
    elif scheme in ("ulysses", "usp"):
        # head-sharded (docs/workloads.md): every attending board holds its group's tokens
        # of its KV heads; the sum is the KV of the prompt (and decoded tokens) x replication
        u = rp.trace.schedule["ulysses"]
        m = rp.trace.meta
        per_token = 2 * m["model"]["kv_heads"] * m["model"]["head_dim"] * m["model"]["layers"] // 2
        total = (m["seq"] + m["decode_tokens"]) * per_token * u["kv_replication"]
        assert s["final_layout_owner_only"] and sum(s["final_node_kv_bytes"]) == total
        assert {n for n, b in enumerate(s["final_node_kv_bytes"]) if b} == set(u["attention_boards"])
    else:
        # Owner-only at the end: each node holds its even share, nothing else.
        assert s["final_layout_owner_only"]
        assert s["final_node_kv_bytes"] == s["owner_only_node_kv_bytes"]
        assert len(set(s["final_node_kv_bytes"])) == 1
