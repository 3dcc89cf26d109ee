"""One NIC protocol (emu.nic.protocol) for the emulator and the live board.

The emulator's Cluster and `emu hw serve`'s Device both hand their events to a
``BoardProtocol``. These tests record what each fed board K's protocol and what it
answered, and find the same decisions from the same events; they check that serve's
retransmission timer is the adaptive estimator of emu.nic.rto, that the forwarding rows
both use are the rows the network kernel installs, and that the table functions compile
with numba as they are and follow RFC 6298's rules worked by hand (literal numbers, not
their own Python form).
"""

import numpy as np
import pytest
from test_hw import FakeSock

from emu.codec import (
    Collective,
    Dtype,
    Flags,
    Op,
    ReduceOp,
    Stage,
    encode_frames,
    fragment,
)
from emu.hw import board as M
from emu.hw.serve import Device
from emu.net import Loss, Network
from emu.nic import NicConfig
from pycluster import Cluster
from emu.nic import protocol as P
from emu.nic import rto as T
from emu.nic.rto import RtoEstimator
from emu.sim import Simulator
from emu.topology import Routes, build, multicast_tree
from emu.workload.profiles import hw_defaults, load

NIC_PS = 500_000
TIMED = {"left", "resend_left", "ack_arrived", "nack_arrived", "timer_due", "probe_arrived", "delivered"}
EVENTS = TIMED | {"track", "message_complete", "contribute"}


def _plain(x):
    if isinstance(x, np.ndarray):
        return [int(v) for v in x]
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    return x


class Recorder:
    """Wraps one board's protocol: logs each event with its arguments and the actions it
    returned. ``times``: the event times to use instead of the driver's (by event, in order)."""

    def __init__(self, proto, times=None):
        self._p, self.log, self.times = proto, [], times

    def __getattr__(self, name):
        attr = getattr(self._p, name)
        if name not in EVENTS:
            return attr

        def event(*args, **kw):
            args = list(args)
            if name in TIMED:
                at = len(args) - 1  # the time is every timed event's last positional argument
                if self.times is not None:
                    args[at] = self.times[name].pop(0)
                when = args[at]
            else:
                when = None
            acts = attr(*args, **kw)
            args = args[:-1] if name in TIMED else args
            if name == "contribute":  # the key and the fold are the driver's names for the same thing
                args, kw = [args[1], args[3]], {"expected": sorted(kw["expected"]), "ack_req": kw.get("ack_req")}
                shown = [(a[0], *a[2:]) if a[0] in (P.REDUCED, P.WAITING) else a for a in acts]
            elif name == "probe_arrived":
                kw = {"complete": kw["complete"]} if kw["complete"] else dict(kw, missing=_plain(kw["missing"]))
                shown = acts
            elif name == "nack_arrived":
                kw, shown = {}, acts  # routed: the emulator's network may have no route; serve always sends
            else:
                shown = acts
            if name == "delivered":
                shown = [(a[0], a[1], a[2].name, a[3]) for a in acts]
            self.log.append((name, _plain(args), kw, _plain(shown), when))
            return acts

        return event

    def times_by_event(self):
        out = {}
        for name, _, _, _, when in self.log:
            if when is not None:
                out.setdefault(name, []).append(when)
        return out

    def decisions(self):
        """What was fed and answered, without the times (the drivers' clocks differ)."""
        return [(n, a, k, s) for n, a, k, s, _ in self.log]


def bring4_cluster(**cfg):
    G = build("bring:4")
    routes = Routes(G)
    net = Network(Simulator(), G, routes.next_hop, lossless=False, nic_latency_ps=NIC_PS)
    return Cluster(net, routes, NicConfig(**cfg))


def clock_device(board, times=None):
    now = {"t": 0}
    d = Device(board, FakeSock(), clock=lambda: now["t"])
    d.proto = Recorder(d.proto, times)
    return d, now


def feed(d, h, pay, eth_src):
    d.handle(*encode_frames(h, np.zeros(0, np.uint8) if pay is None else pay, eth_src=eth_src))


def test_a_receiving_board_decides_the_same_in_the_emulator_and_in_serve():
    """Board 1 of bring:4 receives a 3-fragment kv_replica from board 0 whose last fragment is
    lost (a tail loss: no gap to nack): the probe is answered with a nack naming fragment 2,
    the resend completes the message, which is acked and makes the replica VALID. The
    emulator's Cluster and serve's frame path (the same frames: fragments 0 and 1, the
    probe, fragment 2 as RETX) feed board 1's protocol the same events and get the same actions."""
    data = bytes(range(256)) * 16  # 4096 B: 3 fragments
    c = bring4_cluster()
    c.proto[1] = Recorder(c.proto[1])
    c.net.set_loss(c.net.link(0, 1), Loss(drops=(2,)))
    tr = c.send(0, [1], data=data, op=Op.kv_replica, kv_id=9)
    c.net.run()
    assert tr.complete and c.retransmitted_frames == 1
    emulated = c.proto[1]
    assert [e[0] for e in emulated.log] == ["probe_arrived", "message_complete", "delivered"]

    d, _ = clock_device(M.Board(node=1))
    meta = dict(op=int(Op.kv_replica), stage=int(Stage.prefill), collective=int(Collective.unicast), kv_id=9,
                src_node=0, dst_set=1 << 1, flags=int(Flags.ACK_REQ), msg_id=0, seq=0)
    h, pay = fragment(meta, data=data)
    starts = np.concatenate([[0], np.cumsum(h["pay_len"].astype(np.int64))])
    part = lambda i: pay[starts[i] : starts[i + 1]]
    feed(d, h[[0, 1]], np.concatenate([part(0), part(1)]), 0)
    probe, _ = fragment(M.control_meta(0, 1, Op.ack, msg_id=0, seq=0, probe=True), data=b"")
    feed(d, probe, None, 0)
    retx = h[[2]].copy()
    retx["flags"] |= np.uint8(Flags.RETX)
    feed(d, retx, part(2), 0)
    assert d.proto.decisions() == emulated.decisions()
    assert d.directory.state(1, 9).name == "VALID"


def test_a_sending_board_decides_the_same_in_the_emulator_and_in_serve():
    """Board 1 of bring:4 (reduction root 0, child 2) folds its own fp32 vector and board 2's
    into a sum and sends it to board 0; its last fragment, 2, is lost on 1 -> 0. Its protocol then
    starts the timer when the result has left, probes at the (initial) RTO, resends what
    board 0's nack names, restarts the timer when the resend has left and stops it at the
    ack. Serve's device, fed the same frames at the emulator's event times, makes the same
    decisions: the same timer due times, the same probe, the same resend, the same sum."""
    rng = np.random.default_rng(4)
    vals = {n: rng.standard_normal(1000).astype("<f4").tobytes() for n in (1, 2)}  # 4000 B: 3 fragments
    board = M.protocol_config()  # the kr260 profile's timer, as serve's device below has it
    c = bring4_cluster(rto_min_ps=board.rto_min_ps, rto_initial_ps=board.rto_initial_ps)
    c.proto[1] = Recorder(c.proto[1])
    c.net.set_loss(c.net.link(1, 0), Loss(drops=(2,)))
    red = c.reduction([1, 2], 0, ReduceOp.sum, nbytes=4000, dtype=Dtype.fp32, functional=True,
                      stage=Stage.decode, kv_id=5)
    assert red.parent == {1: 0, 2: 1}
    red.contribute(1, vals[1])
    red.contribute(2, vals[2])
    red.contribute(0, bytes(4000))  # the root's own: zeros
    c.net.run()
    emulated = c.proto[1]
    names = [e[0] for e in emulated.log]
    assert names[:3] == ["contribute", "message_complete", "delivered"]
    assert "timer_due" in names and "nack_arrived" in names and names[-1] == "ack_arrived"
    want = (np.frombuffer(vals[2], "<f4") + np.frombuffer(vals[1], "<f4")) + np.float32(0)
    assert c.retransmitted_frames == 1 and red.result == want.astype("<f4").tobytes()

    # serve: board 1 of bring:4 with root 0 (its reduction group is every board; board 1
    # waits for itself and its child 2, as in the emulated group {1, 2})
    d, now = clock_device(M.Board(node=1, heads=1), times=emulated.times_by_event())
    meta = dict(op=int(Op.partial_state), stage=int(Stage.decode), collective=int(Collective.reduce),
                reduce_op=int(ReduceOp.sum), dtype=int(Dtype.fp32), kv_id=5, dst_set=1 << 1)
    h, pay = fragment(dict(meta, src_node=1), data=vals[1])
    feed(d, h, pay, 1)  # the compute engine's own contribution
    h, pay = fragment(dict(meta, src_node=2, flags=int(Flags.ACK_REQ), msg_id=0, seq=0), data=vals[2])
    feed(d, h, pay, 2)
    for name, args, _, acts, when in emulated.log[emulated.log.index(next(e for e in emulated.log
                                                                          if e[0] == "left")) + 1:]:
        now["t"] = when
        if name == "timer_due":
            d._run_timers()
        elif name == "nack_arrived":
            nack, _ = fragment(M.control_meta(0, 1, Op.nack, msg_id=0, seq=0), data=args[2])
            feed(d, nack, np.frombuffer(args[2], np.uint8), 0)
        elif name == "ack_arrived":
            ack, _ = fragment(M.control_meta(0, 1, Op.ack, msg_id=0, seq=0), data=b"")
            feed(d, ack, None, 0)
    # serve cannot tell a probe's answer from the completion ack (no header bit says which) and
    # takes an ack of a probed message as an answer; this one was resent: no sample either way
    same = lambda log: [(n, a, {} if n == "ack_arrived" else k, s) for n, a, k, s in log]  # noqa: E731
    assert same(d.proto.decisions()) == same(emulated.decisions())
    assert [k for n, a, k, s in emulated.decisions() if n == "ack_arrived"] == [{"answer": False}]
    assert not d.outgoing and d.count["retransmitted"] == 1 and d.count["probes_sent"] == 1


def test_serve_times_out_with_the_adaptive_rto_of_the_kr260_profile():
    """Serve's timer is emu.nic.rto's estimator with the emulator's parameters for the kr260
    profile (its pause fabric's floor, 8.39 ms; docs/nic.md, Adaptive timeout), no longer a
    fixed 2 ms: before any sample the first probe comes at max(rto_min, rto_initial) after the
    result left; an ack R later gives the sample (SRTT R, RTTVAR R/2); the next message is
    probed at max(rto_min, 3R) after it left, and each timeout doubles that."""
    cfg = M.protocol_config()
    kr260 = hw_defaults(load("hw", "kr260"))
    assert (cfg.rto_min_ps, cfg.rto_initial_ps, cfg.rto_max_ps) == (kr260["rto_min_ps"], kr260["rto_initial_ps"],
                                                                     NicConfig.rto_max_ps)
    assert cfg.rto_min_ps == 8_388_608_000
    d, now = clock_device(M.Board(node=2, heads=1))  # bring:4, root 0: board 2's parent is 1, no children

    def result(t, kv):
        now["t"] = t
        h, pay = fragment(dict(op=int(Op.partial_state), stage=int(Stage.decode), collective=int(Collective.reduce),
                               reduce_op=int(ReduceOp.max), dtype=int(Dtype.fp32), kv_id=kv, src_node=2,
                               dst_set=1 << 2, flags=int(Flags.ACK_REQ), msg_id=kv), data=np.ones(8, "<f4").tobytes())
        feed(d, h, pay, 2)
        (mid,) = d.outgoing
        return mid

    def probes_at(t):
        now["t"] = t
        before = d.count["probes_sent"]
        d._run_timers()
        return d.count["probes_sent"] - before

    m0 = result(1_000, kv=1)
    first = max(cfg.rto_min_ps, cfg.rto_initial_ps)
    assert probes_at(1_000 + first - 1) == 0 and probes_at(1_000 + first) == 1
    # Karn: the probed message gives no sample; its ack only stops the timer
    now["t"] = 1_000 + cfg.rto_initial_ps + 10
    feed(d, fragment(M.control_meta(1, 2, Op.ack, msg_id=m0), data=b"")[0], None, 1)
    assert not d.outgoing and d.proto.RT[1, T.RT_SRTT] == T.NO_SAMPLE
    assert d.proto.RT[1, T.RT_RTO] == 2 * first
    t1 = 5 * 10**9
    m1 = result(t1, kv=2)
    R = 30_000_000  # 30 us
    now["t"] = t1 + R
    feed(d, fragment(M.control_meta(1, 2, Op.ack, msg_id=m1), data=b"")[0], None, 1)
    ref = RtoEstimator(cfg.rto_min_ps, cfg.rto_initial_ps, cfg.rto_max_ps)
    ref.sample(R)
    assert (d.proto.RT[1, T.RT_SRTT], d.proto.RT[1, T.RT_RTTVAR], d.proto.RT[1, T.RT_RTO]) == (R, R // 2, ref.rto)
    assert ref.rto == max(cfg.rto_min_ps, 3 * R)
    t2 = 6 * 10**9
    result(t2, kv=3)
    assert probes_at(t2 + ref.rto - 1) == 0 and probes_at(t2 + ref.rto) == 1
    assert probes_at(t2 + ref.rto + 2 * ref.rto - 1) == 0 and probes_at(t2 + 3 * ref.rto) == 1


@pytest.mark.parametrize("spec", ["bring:4", "torus:4x4", "mesh:2x3", "star:4", "fattree:4"])
def test_forwarding_rows_are_the_network_kernels(spec):
    """Serve's forwarding decision reads the row emu.nic.protocol.tree_rows builds from the
    multicast tree; the emulator's network installs exactly those rows for the trees the
    Cluster adds, and for one destination its unicast row at every node of the route is the
    tree's row there."""
    G = build(spec)
    routes = Routes(G)
    net = Network(Simulator(), G, routes.next_hop)
    boards = int(G.graph["boards"])
    installed = {k: M.Board(node=k, topology=spec) for k in range(0, boards, max(1, boards // 4))}
    assert np.array_equal(P.unicast_rows(routes.next_hop, net.nodes, boards, net.max_out, net._out_link),
                          net.FW[: boards * net.nodes])
    rng = np.random.default_rng(1)
    for src in range(boards):
        for _ in range(3):
            dsts = sorted(int(x) for x in rng.choice([b for b in range(boards) if b != src],
                                                     size=min(boards - 1, int(rng.integers(1, boards))),
                                                     replace=False))
            tree = multicast_tree(G, routes, src, dsts)
            route = net.add_tree(tree, dsts)
            rows = P.tree_rows(tree, dsts, net.nodes, net.max_out, net._out_link)
            assert np.array_equal(rows, net.FW[route * net.nodes : (route + 1) * net.nodes])
            for k, board in installed.items():
                if k != src and len(board.role(src, tuple(dsts)).row) > 1:  # k is in the tree
                    assert list(board.role(src, tuple(dsts)).row) == rows[k].tolist()
        for d in range(boards):
            if d == src:
                continue
            rows = P.tree_rows(multicast_tree(G, routes, src, [d]), [d], net.nodes, net.max_out, net._out_link)
            for v in routes.path(src, d):
                assert rows[v].tolist() == net.FW[d * net.nodes + v].tolist()


def test_forward_copies_with_ttl_minus_one_and_never_at_ttl_one():
    row = np.array([1, 4, 7, -1], np.int32)
    assert P.forward(row, 16) == (True, [4, 7], 15)
    assert P.forward(row, 1) == (True, [], 0)
    assert P.forward(np.array([0, -1, -1, -1], np.int32), 16) == (False, [], 15)
    p = P.BoardProtocol(1, 4)
    assert p.frame_arrived(row, 16) == [(P.FORWARD, [4, 7], 15), (P.DELIVER,)]
    assert p.frame_arrived(row, 1) == [(P.TTL_EXPIRED,), (P.DELIVER,)]
    assert p.frame_arrived(row, 16, copy=False) == [(P.DELIVER,)]  # another board's copy on a shared segment
    assert p.frame_arrived((0,), 16) == []  # not in the tree, not a member


def test_nack_bitmaps_name_exactly_their_fragments_and_empty_means_all():
    for cnt, missing in ((1, [0]), (9, [0, 8]), (16, list(range(16))), (20, [3, 17])):
        pl = P.nack_payload(cnt, missing)
        assert len(pl) == -(-cnt // 8) and P.nack_frags(pl, cnt).tolist() == missing
    assert P.nack_payload(0, []) == b"" and P.nack_frags(b"", 5).tolist() == [0, 1, 2, 3, 4]
    assert P.nack_frags(P.nack_payload(9, []), 9).tolist() == []  # a bitmap naming nothing resends nothing


def test_a_probe_is_answered_at_most_once_per_gap_and_again_when_complete():
    p = P.BoardProtocol(1, 4, P.ProtocolConfig(answer_gap_ps=100))
    nack = p.probe_arrived(0, 7, 3, 1000, complete=False, frag_cnt=4, missing=[2])
    assert nack == [(P.NACK, 0, 7, 3, P.nack_payload(4, [2]))]
    assert p.probe_arrived(0, 7, 3, 1099, complete=False, frag_cnt=4, missing=[2]) == [(P.LIMITED, 0, 7)]
    assert p.probe_arrived(0, 7, 3, 1099, complete=True) == [(P.ACK, 0, 7, 3)]  # completed in between
    assert p.probe_arrived(0, 7, 3, 1100, complete=False, frag_cnt=4, missing=[2])[0][0] == P.NACK
    free = P.BoardProtocol(1, 4)  # gap 0 (the emulator's): every probe is answered
    assert all(free.probe_arrived(0, 7, 3, 5, complete=False, frag_cnt=4, missing=[2])[0][0] == P.NACK
               for _ in range(3))


def test_a_reduction_waits_for_its_own_and_its_childrens_contributions_only():
    p = P.BoardProtocol(1, 4)
    add = lambda a, b: bytes(x + y for x, y in zip(a, b))
    kw = dict(expected={1, 2, 3}, combine=add)
    assert p.contribute("k", 1, b"\x01\x02", 2, **kw) == [(P.WAITING, "k", 1, 3)]
    assert p.contribute("k", 0, b"\x01\x01", 2, **kw)[0][0] == P.REDUCE_ERROR   # not a child
    assert p.contribute("k", 1, b"\x01\x01", 2, **kw)[0][0] == P.REDUCE_ERROR   # a second one
    assert p.contribute("k", 2, b"\x01", 1, **kw)[0][0] == P.REDUCE_ERROR       # another length
    assert p.contribute("k", 3, b"\x10\x20", 2, **kw, ack_req=True) == [(P.WAITING, "k", 2, 3)]
    assert p.contribute("k", 2, b"\x01\x01", 2, **kw) == [(P.REDUCED, "k", b"\x12\x23", True, 2)]
    assert not p.reductions
    assert P.reduction_result(1, 0, 0, Collective.reduce, range(4)) == (Op.partial_state, (0,))
    assert P.reduction_result(0, 0, None, Collective.all_reduce, range(4)) == (Op.reduce_result, (1, 2, 3))
    assert P.reduction_result(0, 0, None, Collective.reduce, range(4)) == (None, ())


def _drive(left_wire, ack, timeout, nack_accepted, rto_sample, rto_backoff, seed):
    """A random sequence of sender events on fresh tables; returns every result and the tables."""
    rng = np.random.default_rng(seed)
    lo, init, hi, retries = 100, 1000, 50_000, 4
    RT = T.rto_table(6, lo, init, hi)
    OUT = np.zeros((8, P.OUT_NCOLS), np.int64)
    OD = np.zeros((32, P.OD_NCOLS), np.int64)
    for s in range(8):
        OUT[s] = (s, 10 * s, 3, 0, -1, -1, 0, 4 * s, 4 * s + 4, 1, 0, 0)
        OD[4 * s : 4 * s + 4, P.OD_NODE] = rng.choice(6, 4, replace=False)
    out, now = [], 0
    for _ in range(400):
        now += int(rng.integers(1, 300))
        s, node = int(rng.integers(8)), int(rng.integers(6))
        e = int(rng.integers(5))
        if e == 0:
            out.append(left_wire(OUT, OD, RT, s, now, retries, hi))  # (arm with the message's timeout)
        elif e == 1:
            out.append(ack(OUT, OD, RT, s, node, now, int(rng.integers(2)), lo, hi))
        elif e == 2:
            out.append(timeout(OUT, OD, RT, s, now, retries, hi))
        elif e == 3:
            out.append(int(nack_accepted(OUT, OD, s, node)))
        else:
            rto_sample(RT, node, int(rng.integers(0, 5000)), lo, hi)
            rto_backoff(RT, int(rng.integers(6)), hi)
    return out, OUT, OD, RT


def test_the_sender_table_functions_are_compiled_and_agree_with_their_python():
    """The next step is the compiled replay loop calling these functions: they take tables
    and scalars only and are numba-compiled (what the Cluster and serve call); their Python
    form (``py_func``) gives the same results and tables on random event sequences."""
    fns = (P.left_wire, P.ack, P.timeout, P.nack_accepted, T.rto_sample, T.rto_backoff)
    assert all(hasattr(f, "py_func") for f in fns)
    for seed in range(3):
        nb = _drive(*fns, seed)
        py = _drive(*(f.py_func for f in fns), seed)
        assert [int(x) for x in nb[0]] == [int(x) for x in py[0]]
        for a, b in zip(nb[1:], py[1:]):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("form", ["compiled", "python"])
def test_a_messages_timeout_is_its_own_and_later_samples_do_not_pull_it_back(form):
    """A message's timeout is taken when it leaves the wire and backs off with its
    own timeouts; another message's RTT sample lowers the pair's RTO (RFC 6298) but not the
    timeout of a message already waiting, so a stuck message is not probed at the floor."""
    pick = (lambda f: f) if form == "compiled" else (lambda f: f.py_func)
    arm, ack, timeout, left_wire = pick(P.arm), pick(P.ack), pick(P.timeout), pick(P.left_wire)
    lo, hi, retries = 100, 64_000, 20
    RT = T.rto_table(2, lo, 1000, hi)
    OUT = np.zeros((2, P.OUT_NCOLS), np.int64)
    OD = np.zeros((2, P.OD_NCOLS), np.int64)
    for s in (0, 1):
        OUT[s, [P.OUT_LEFT_AT, P.OUT_DUE, P.OUT_DPTR, P.OUT_DEND]] = (-1, -1, s, s + 1)
        OD[s, P.OD_NODE] = 1
    assert arm(OUT, OD, RT, 0, 0, retries) == -1                # not left yet: no timer
    assert left_wire(OUT, OD, RT, 0, 0, retries, hi) == 1000        # the initial RTO
    assert timeout(OUT, OD, RT, 0, 1000, retries, hi) == 1
    assert arm(OUT, OD, RT, 0, 1000, retries) == 3000           # its own back-off: 2000
    assert left_wire(OUT, OD, RT, 1, 1500, retries, hi) == 3500     # the pair backed off too
    assert ack(OUT, OD, RT, 1, 1, 1600, 0, lo, hi) == 0            # R = 100: RTO 300
    assert RT[1, T.RT_RTO] == 300
    assert timeout(OUT, OD, RT, 0, 3000, retries, hi) == 1
    assert arm(OUT, OD, RT, 0, 3000, retries) == 7000           # 4000, not the pair's 600
    assert RT[1, T.RT_RTO] == 600


@pytest.mark.parametrize("form", ["compiled", "python"])
def test_a_completion_ack_is_a_true_rtt_and_a_longer_rtt_learnt_while_waiting_rearms_without_a_probe(form):
    """docs/nic.md, Adaptive timeout: the completion ack of a probed message is a true round
    trip (a sample; only a probe's answer gives none); a message's timeout is at least twice
    its board's worst recent RTT (over all its peers); a timer that expires while the
    estimator has since learnt a longer timeout is re-armed from the message's departure
    (returns 2), nothing probed, nothing backed off. Floor 100, initial 1000, ceiling 64,000."""
    pick = (lambda f: f) if form == "compiled" else (lambda f: f.py_func)
    ack, timeout, left_wire, message_rto = pick(P.ack), pick(P.timeout), pick(P.left_wire), pick(P.message_rto)
    lo, hi, retries = 100, 64_000, 20
    RT = T.rto_table(3, lo, 1000, hi)
    OUT = np.zeros((4, P.OUT_NCOLS), np.int64)
    OD = np.zeros((4, P.OD_NCOLS), np.int64)
    for s in range(4):
        OUT[s, [P.OUT_LEFT_AT, P.OUT_DUE, P.OUT_DPTR, P.OUT_DEND]] = (-1, -1, s, s + 1)
        OD[s, P.OD_NODE] = 2 if s == 3 else 1
    assert left_wire(OUT, OD, RT, 0, 0, retries, hi) == 1000
    assert timeout(OUT, OD, RT, 0, 1000, retries, hi) == 1      # probed: retry 1, pair RTO 2000
    assert ack(OUT, OD, RT, 0, 1, 1500, 0, lo, hi) == 0          # its completion ack: R = 1500
    assert RT[1].tolist() == [1500, 750, 4500, 1500]             # 1500 + 4 * 750; worst 1500
    assert left_wire(OUT, OD, RT, 1, 2000, retries, hi) == 6500  # max(4500, 2 * 1500)
    assert left_wire(OUT, OD, RT, 2, 2100, retries, hi) == 6600
    assert ack(OUT, OD, RT, 1, 1, 6000, 0, lo, hi) == 0          # R = 4000
    # RTTVAR (3 * 750 + 2500) / 4 = 1187, SRTT (7 * 1500 + 4000) / 8 = 1812, RTO 6560; worst 4000
    assert RT[1].tolist() == [1812, 1187, 6560, 4000]
    assert message_rto(OUT, OD, RT, 2, hi) == 8000               # 2 * 4000 > 6560
    assert timeout(OUT, OD, RT, 2, 6600, retries, hi) == 2       # re-armed from 2100, no probe
    assert OUT[2, [P.OUT_DUE, P.OUT_RTO, P.OUT_RETRIES]].tolist() == [10_100, 8000, 0]
    assert RT[1, T.RT_RTO] == 6560                               # nothing backed off
    assert timeout(OUT, OD, RT, 2, 10_100, retries, hi) == 1     # nothing more learnt: probed
    assert ack(OUT, OD, RT, 2, 1, 10_500, 1, lo, hi) == 0         # the probe's answer: no sample
    assert RT[1, T.RT_SRTT] == 1812
    # board 2 has no sample (RTO 1000), but its board's worst RTT is 4000: timeout 8000
    assert left_wire(OUT, OD, RT, 3, 20_000, retries, hi) == 28_000


@pytest.mark.parametrize("form", ["compiled", "python"])
def test_the_sender_table_functions_follow_rfc6298_worked_by_hand(form):
    """The rules of docs/nic.md ("Adaptive timeout") worked by hand, as literal numbers, for
    the compiled functions and their Python form alike. Floor 100, initial 1000, ceiling
    5000 (ps), max_retries 2; messages to boards 1 and 2.
    first sample R:  SRTT = R, RTTVAR = R / 2;  later:  RTTVAR = (3 RTTVAR + |SRTT - R|) / 4,
    SRTT = (7 SRTT + R) / 8;  RTO = SRTT + 4 RTTVAR in [floor, ceiling]; a timeout doubles
    the silent receivers' RTO up to the ceiling; Karn: a probed message gives no sample."""
    pick = (lambda f: f) if form == "compiled" else (lambda f: f.py_func)
    arm, ack, timeout, left_wire = pick(P.arm), pick(P.ack), pick(P.timeout), pick(P.left_wire)
    sample, backoff = pick(T.rto_sample), pick(T.rto_backoff)
    lo, hi, retries = 100, 5000, 2
    RT = T.rto_table(3, lo, 1000, hi)
    OUT = np.zeros((2, P.OUT_NCOLS), np.int64)
    OD = np.zeros((4, P.OD_NCOLS), np.int64)
    for s in (0, 1):
        OUT[s, [P.OUT_LEFT_AT, P.OUT_DUE, P.OUT_DPTR, P.OUT_DEND]] = (-1, -1, 2 * s, 2 * s + 2)
        OD[2 * s : 2 * s + 2, P.OD_NODE] = (1, 2)
    rows = lambda: RT[1:].tolist()  # noqa: E731  [SRTT, RTTVAR, RTO, WORST] of boards 1 and 2

    # Message 0 leaves at 10,000: before any sample each RTO is the initial 1000.
    assert left_wire(OUT, OD, RT, 0, 10_000, retries, hi) == 11_000
    assert ack(OUT, OD, RT, 0, 1, 10_400, 0, lo, hi) == 1          # R = 400 from board 1
    assert rows() == [[400, 200, 1200, 400], [-1, 0, 1000, 0]]    # 400 + 4 * 200; worst 400
    assert timeout(OUT, OD, RT, 0, 11_000, retries, hi) == 1            # board 2 silent: probed
    assert rows() == [[400, 200, 1200, 400], [-1, 0, 2000, 0]]    # only the silent one backs off
    assert arm(OUT, OD, RT, 0, 11_000, retries) == 13_000
    assert ack(OUT, OD, RT, 0, 2, 11_500, 1, lo, hi) == 0          # the probe's answer: no sample
    assert rows() == [[400, 200, 1200, 400], [-1, 0, 2000, 0]] and OUT[0, P.OUT_DUE] == -1
    assert ack(OUT, OD, RT, 0, 2, 11_600, 0, lo, hi) == -1         # acked before: changes nothing

    # Message 1 leaves at 20,000: the timer waits for the largest RTO still silent.
    assert left_wire(OUT, OD, RT, 1, 20_000, retries, hi) == 22_000
    assert ack(OUT, OD, RT, 1, 1, 20_200, 0, lo, hi) == 1          # R = 200
    # RTTVAR (3 * 200 + |400 - 200|) / 4 = 200, SRTT (7 * 400 + 200) / 8 = 375, RTO 375 + 800
    assert rows()[0] == [375, 200, 1175, 400]
    assert arm(OUT, OD, RT, 1, 20_200, retries) == 22_200       # its own 2000, from leaving
    assert timeout(OUT, OD, RT, 1, 22_200, retries, hi) == 1 and RT[2, T.RT_RTO] == 4000
    assert timeout(OUT, OD, RT, 1, 26_200, retries, hi) == 1 and RT[2, T.RT_RTO] == 5000   # 8000: the ceiling
    assert timeout(OUT, OD, RT, 1, 31_200, retries, hi) == -1           # a third timeout: 2 retries used up
    assert arm(OUT, OD, RT, 1, 30_000, retries) == -1 and RT[2, T.RT_RTO] == 5000 and RT[1, T.RT_RTO] == 1175

    # The estimator alone: a first sample of 3000 gives 3000 + 4 * 1500, above the ceiling;
    # a later one of 10 RTTVAR (3 * 1500 + 2990) / 4 = 1872, SRTT (21000 + 10) / 8 = 2626,
    # still above; samples of 0 bring it down to the floor (the worst forgets 1/1024 a sample).
    sample(RT, 0, 3000, lo, hi)
    assert RT[0].tolist() == [3000, 1500, 5000, 3000]
    sample(RT, 0, 10, lo, hi)
    assert RT[0].tolist() == [2626, 1872, 5000, 2998]
    backoff(RT, 0, hi)
    assert RT[0, T.RT_RTO] == 5000
    for _ in range(60):
        sample(RT, 0, 0, lo, hi)
    assert RT[0].tolist() == [0, 0, 100, 2878]
