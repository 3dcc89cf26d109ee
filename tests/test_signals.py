"""Signals: no dependency is released across boards for free (docs/nic.md, "Signals").

A compute op that finishes on board a releases its waiters on board b != a by a signal
frame from a to b; a communication op's waiters for "delivered everywhere" (never one of
its destinations) count one signal from each destination. A signal is a header-only
frame the NIC makes itself: no packetizer room, the ports' priority class, counted in
``control_frames_by_op["signal"]``.
"""

import numpy as np
import pytest

from emu.codec import Op
from emu.net import Network
from emu.nic import NicConfig
from emu.replay.run import Options, Replay
from emu.replay.summary import summarize
from emu.sim import US, Simulator
from emu.topology import LinkDefaults, Routes, mesh2d
from emu.workload.generate import Params, generate
from pycluster import Cluster
from pydag import Wiring

NIC_PS = 500_000


def cluster():
    G = mesh2d(2, 2, link=LinkDefaults(rate_bps=10**9, latency_ps=US, mtu=1500))
    routes = Routes(G)
    return Cluster(Network(Simulator(), G, routes.next_hop, nic_latency_ps=NIC_PS), routes, NicConfig(reliable=False))


def idle_signal_ps(a: int, b: int) -> int:
    """When a signal handed over at 0 on an idle 2x2 mesh arrives (the network alone)."""
    c = cluster()
    got = []
    c.signal(a, b, on_delivered=lambda tr, node, t: got.append(t))
    c.net.run()
    return got[0]


def test_a_signal_takes_no_packetizer_room_and_goes_ahead_of_queued_data():
    """Behind a full packetizer (entries and bytes) a signal still leaves at once, ahead of
    the data frames waiting on the port, and arrives as on an idle network plus at most the
    one data frame already on the wire."""
    c = cluster()
    big = [c.send(0, [1], 16 << 20) for _ in range(2)]  # fills the payload FIFO: the second waits
    assert big[1].accepted_at is None
    got = []
    sig = c.signal(0, 1, kv_id=7, on_delivered=lambda tr, node, t: got.append((node, t)))
    c.net.run()
    assert sig.accepted_at == 0 and sig.meta["op"] == Op.signal and sig.meta["kv_id"] == 7
    frame_ps = (1500 + 24) * 8 * 1000  # one full frame at 1 Gb/s, in ps
    assert got[0][0] == 1 and got[0][1] <= idle_signal_ps(0, 1) + frame_ps
    assert got[0][1] < min(big[0].delivered.values())
    assert c.control_frames_by_op["signal"] == 1
    assert c._fifo_entries[0] == 0 and c._fifo_bytes[0] == 0  # the signal never took room


@pytest.fixture(scope="module")
def mars():
    return generate(Params(scheme="mars", seq=1024, nodes=4, chunk=256, decode_tokens=0, overrides=["model.layers=2"]))


def flight_ps(trace, a: int, b: int) -> int:
    """A signal's flight from a to b on the replay's own network when it is idle."""
    rp = Replay(trace, Options(engine="python"))
    got = []
    rp.cluster.signal(a, b, on_delivered=lambda tr, node, t: got.append(t))
    rp.net.run()
    return got[0]


def test_the_wiring_sends_a_signal_for_every_cross_board_release(mars):
    """tests/pydag.py's rule: a part's wait counts one per same-board release and one per
    signal; every release whose event is on another board is a signal group there."""
    w = Wiring(mars)
    node = mars.ops["node"]
    assert w.on_signal
    for x, groups in w.on_signal.items():
        assert [b for b, _ in groups] == sorted({b for b, _ in groups})
        for b, parts in groups:
            assert all(w.part_node[p] == b for p in parts)
            if w.is_comm[x]:
                assert b not in w.dsts[x]
            else:
                assert b != node[x]
    for x, parts in w.on_done.items():  # what is left to "done": a compute op's own board
        assert not w.is_comm[x] and all(w.part_node[p] == node[x] for p in parts)


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_waiter_on_another_board_starts_no_earlier_than_its_signal_arrives(mars, engine):
    """Op y on board b after compute op x on board a != b: y starts at least one signal's
    flight (measured on the idle network) after x ends, and exactly then where nothing else
    held it. The same bound holds for a communication op's waiters: a signal
    from each destination after its delivery there."""
    rp = Replay(mars, Options(engine=engine)).run()
    assert rp.incomplete() == []
    s = summarize(rp)
    w = Wiring(mars)
    node, kind = mars.ops["node"], mars.ops["kind"]
    flight = {(a, b): flight_ps(mars, a, b) for a in range(4) for b in range(4) if a != b}
    dlv = {(int(op), int(n)): int(t) for op, n, t in rp.deliveries()}
    tight = 0
    sent = 0
    for x, groups in w.on_signal.items():
        for b, parts in groups:
            for p in parts:
                y = int(w.part_op[p])
                if w.part_ptr[y + 1] - w.part_ptr[y] > 1:
                    continue  # an op's start is its first part's: only one-part ops say when p started
                if w.is_comm[x]:
                    ready = max(dlv[(x, d)] + flight[(d, b)] for d in w.dsts[x])
                else:
                    ready = int(rp.end[x]) + flight[(int(node[x]), b)]
                assert rp.start[y] >= ready
                tight += rp.start[y] == ready
        sent += len(groups) * (len(w.dsts[x]) if w.is_comm[x] else 1)
    assert tight > 0
    assert s["control_frames_by_op"]["signal"] == sent  # one frame each, counted where it leaves


def test_free_signals_are_the_idealisation_named_in_the_summary(mars):
    """hw.signals=free releases every dependency at once, with no frame (what replays did
    before signals): both engines agree, no signal is sent, the summary says which ran, and
    the run is no slower than with signal frames."""
    free = {e: summarize(Replay(mars, Options(engine=e, overrides=("hw.signals=free",))).run())
            for e in ("compiled", "python")}
    frames = summarize(Replay(mars, Options()).run())
    assert free["compiled"]["ttft_s"] == free["python"]["ttft_s"] <= frames["ttft_s"]
    assert free["compiled"]["wire_bytes"] == free["python"]["wire_bytes"] < frames["wire_bytes"]
    assert free["compiled"]["control_frames_by_op"]["signal"] == 0 < frames["control_frames_by_op"]["signal"]
    assert free["compiled"]["signals"] == "free" and frames["signals"] == "frames"
