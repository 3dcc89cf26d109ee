"""The compiled replay loop, the emulator's Python path and ``emu hw serve`` run one NIC protocol.

The compiled loop (emu.engine.directory, emu.engine.nic) references the very numba dispatchers
emu.nic.directory / emu.nic.protocol export, and ``Directory`` / ``BoardProtocol`` (which
serve and the Python Cluster drive) call those same objects; on a table of cases the rules
decide as the paper's directory (VALID -> DRAINING -> INVALID) and reduction trees do; and
the forwarding rows the compiled loop's kernel reads are the rows ``protocol.tree_rows`` /
``unicast_rows`` build.
"""

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher as Dispatcher

import emu
from emu.codec import Collective, Op
from emu.nic import directory as D
from emu.nic import protocol as P
from emu.engine import directory, nic
from emu.engine import layout as L
from emu.engine.tables import Tables
from emu.replay.run import Options, Replay
from emu.topology import multicast_tree

I, V, DR = int(D.State.INVALID), int(D.State.VALID), int(D.State.DRAINING)
RE, DRAIN, INV = int(Op.kv_replica), int(Op.drain), int(Op.invalidate)

# (state before, op) -> (state after, legal): written from the directory's rules, not from the code
TRANSITIONS = {
    (I, RE): (V, True), (V, RE): (V, True), (DR, RE): (DR, True),     # a second copy changes nothing
    (I, DRAIN): (I, False), (V, DRAIN): (DR, True), (DR, DRAIN): (DR, True),
    (I, INV): (I, False), (V, INV): (I, True), (DR, INV): (I, True),
    (V, int(Op.partial_state)): (V, False),                           # not a directory op
}


def test_the_compiled_loop_references_the_protocols_own_dispatchers():
    assert directory.replica_transition is D.replica_transition is P.replica_transition
    assert nic.reduction_complete is P.reduction_complete
    assert nic.reduction_next is P.reduction_next
    assert (nic.OP_KV_REPLICA, nic.OP_DRAIN, nic.OP_INVALIDATE) == (RE, DRAIN, INV)
    for f in (D.replica_transition, P.reduction_complete, P.reduction_next):
        assert isinstance(f, Dispatcher), f"{f} is not compiled: the loop could not call it"


@pytest.mark.parametrize("case", sorted(TRANSITIONS))
def test_replica_transition_decides_as_the_directory_rules_compiled_and_in_python(case):
    state, op = case
    assert D.replica_transition(state, op) == TRANSITIONS[case]
    assert D.replica_transition.py_func(state, op) == TRANSITIONS[case]


class _Recorder:
    """Wraps a dispatcher and records its calls (to show who calls it)."""

    def __init__(self, f):
        self.f, self.calls = f, []

    def __call__(self, *a):
        self.calls.append(a)
        return self.f(*a)


@pytest.mark.parametrize("case", sorted(k for k in TRANSITIONS if k[1] in (RE, DRAIN, INV)))
def test_directory_and_board_protocol_follow_replica_transition(case, monkeypatch):
    """BoardProtocol.delivered (serve's and the Python path's) goes through the one function and
    ends in the state the table gives, with an error exactly when the change is illegal."""
    state, op = case
    rec = _Recorder(D.replica_transition)
    monkeypatch.setattr(D, "replica_transition", rec)
    d = D.Directory(nodes=2)
    if state != I:
        d.add_replica(1, 7, 100, 0)
        if state == DR:
            d.drain(1, 7, 0)
    rec.calls.clear()
    p = P.BoardProtocol(1, 2, directory=d)
    (kind, kv, new, err), = p.delivered(op, 7, 100, 5)
    want, ok = TRANSITIONS[case]
    assert (kind, kv, int(new)) == (P.DIRECTORY, 7, want)
    assert (err is None) == ok
    assert rec.calls == [(state, op)]
    assert d.memory[1].replica == (100 if want != I else 0)


@pytest.mark.parametrize("got,expected,done", [(0, 1, False), (1, 1, True), (1, 3, False), (2, 3, False),
                                                (3, 3, True)])
def test_reduction_complete_is_own_plus_childrens(got, expected, done, monkeypatch):
    assert P.reduction_complete(got, expected) is done
    rec = _Recorder(P.reduction_complete)
    monkeypatch.setattr(P, "reduction_complete", rec)
    p = P.BoardProtocol(1, 4)
    members = [1, 2, 3][:expected]
    acts = [p.contribute("k", m, None, 8, expected=members, combine=None) for m in members[:got]]
    assert len(rec.calls) == got
    assert (bool(acts) and acts[-1][0][0] == P.REDUCED) is done


@pytest.mark.parametrize("node,root,parent,coll,want,where", [
    (1, 0, 0, Collective.reduce, (Op.partial_state, (0,)), P.RED_PARENT),
    (3, 0, 1, Collective.all_reduce, (Op.partial_state, (1,)), P.RED_PARENT),
    (0, 0, None, Collective.all_reduce, (Op.reduce_result, (1, 2, 3)), P.RED_GROUP),
    (0, 0, None, Collective.reduce, (None, ()), P.RED_HERE),
])
def test_reduction_next_is_where_the_result_goes(node, root, parent, coll, want, where, monkeypatch):
    op, w = P.reduction_next(node == root, int(coll))
    assert w == where and (op == -1 if want[0] is None else op == int(want[0]))
    rec = _Recorder(P.reduction_next)
    monkeypatch.setattr(P, "reduction_next", rec)
    assert P.reduction_result(node, root, parent, coll, range(4)) == want
    assert rec.calls == [(node == root, int(coll))]


@pytest.mark.parametrize("scheme,topology", [("mars", "ring"), ("pd", "torus:2x4"), ("ring", "star:8")])
def test_the_compiled_loops_forwarding_rows_are_tree_rows_and_unicast_rows(scheme, topology):
    """Every route a send of the compiled loop takes reads rows equal to the protocol's."""
    trace = emu.trace(scheme, seq=2048, nodes=8, chunk=256, decode_tokens=2)
    rp = Replay(trace, Options(engine="compiled", topology=topology))
    tables = Tables(rp)
    net, N, Vn = rp.net, rp.nodes, rp.net.nodes
    FW = tables.state.table("FW")  # the table the compiled loop reads
    assert np.array_equal(FW[: N * Vn], P.unicast_rows(rp.routes.next_hop, Vn, N, net.max_out, net._out_link))
    PT, OP, IDX = tables.state.table("PT"), tables.OP, tables.state.table("IDX")
    checked = set()
    for part in np.flatnonzero(PT[:, L.PT_ROUTE] >= 0).tolist():
        route, src = int(PT[part, L.PT_ROUTE]), int(PT[part, L.PT_NODE])
        op = int(PT[part, L.PT_OP])
        members = sorted(set(IDX[OP[op, L.OPS_DST]:OP[op + 1, L.OPS_DST]].tolist()) - {src})
        if (route, src) in checked or len(members) < 2:
            continue
        checked.add((route, src))
        rows = P.tree_rows(multicast_tree(rp.G, rp.routes, src, members), members, Vn, net.max_out, net._out_link)
        assert np.array_equal(FW[route * Vn : (route + 1) * Vn], rows)
    if scheme == "mars":
        assert checked, "the MARS trace multicasts its replicas"


# ---- reliable delivery ------------------------------------------------------------------------

SENDER = ("arm", "ack", "timeout", "nack_accepted", "left_wire", "resend_left", "resend_started",
          "nack_bitmap", "nack_named")


def test_the_compiled_loops_reliable_delivery_calls_the_protocols_dispatchers():
    """emu.engine.reliable decides with the very functions BoardProtocol calls (acks, timers,
    back-off, retries, nack acceptance, the nack bitmap), not copies of them."""
    from emu.nic import rto
    from emu.engine import reliable

    for name in SENDER:
        f = getattr(P, name)
        assert getattr(reliable, name) is f, name
        assert isinstance(f, Dispatcher), f"{name} is not compiled: the loop could not call it"
    for f in (rto.rto_sample, rto.rto_backoff):
        assert isinstance(f, Dispatcher)


def test_board_protocol_goes_through_the_same_sender_functions(monkeypatch):
    """BoardProtocol's events (which the Python Cluster and serve drive) call left_wire,
    resend_started, resend_left, timeout and nack_named: one code for all three drivers."""
    recs = {n: _Recorder(getattr(P, n)) for n in ("left_wire", "resend_left", "resend_started", "timeout",
                                                    "nack_named", "ack", "arm")}
    for n, r in recs.items():
        monkeypatch.setattr(P, n, r)
    p = P.BoardProtocol(0, 4)
    s = p.track(7, 100, 20, [1, 2])
    (_, _, due), = p.left(s, 1000)
    assert due == 1000 + P.ProtocolConfig.rto_initial_ps and recs["left_wire"].calls
    assert p.ack_arrived(s, 1, 5000) == [] and recs["ack"].calls
    acts = p.timer_due(s, due)
    assert [a[0] for a in acts] == [P.PROBE, P.ARM] and acts[0][2] == 2 and recs["timeout"].calls
    nack = P.nack_payload(20, [3, 17])
    (kind, _, node, frags), (_, _, stop) = p.nack_arrived(s, 2, nack, due + 10)
    assert (kind, node, frags.tolist(), stop) == (P.RESEND, 2, [3, 17], -1)
    assert recs["resend_started"].calls and recs["nack_named"].calls
    (_, _, again), = p.resend_left(s, due + 50)
    assert again > due + 50 and recs["resend_left"].calls


@pytest.mark.parametrize("seed", range(5))
def test_the_compiled_nack_bitmap_is_the_wire_payload(seed):
    """nack_bitmap (what the compiled loop's receivers write from the kernel's received bitmap)
    is byte for byte nack_payload of the missing fragments; nack_named reads back exactly them."""
    rng = np.random.default_rng(seed)
    nfrags = int(rng.integers(1, 200))
    got = rng.random(nfrags) < 0.7
    recv = np.packbits(np.r_[got, np.zeros(-nfrags % 8, bool)].astype(np.uint8), bitorder="little")
    out = np.zeros(len(recv) + 3, np.uint8)
    n = P.nack_bitmap(recv, 0, nfrags, out, 2)
    missing = np.flatnonzero(~got)
    assert bytes(out[2 : 2 + n]) == P.nack_payload(nfrags, missing)
    frags = np.zeros(nfrags, np.int64)
    k = P.nack_named(out, 2, n, nfrags, frags, 0)
    assert frags[:k].tolist() == missing.tolist() == P.nack_frags(P.nack_payload(nfrags, missing), nfrags).tolist()
