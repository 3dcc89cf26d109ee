"""The egress port: arbiter between a board's own frames and transit, drops by place,
switch latency, loss drawn at transmission start, link flaps, re-routing of started messages.

Expected values are computed here from the rules of docs/engine.md (serialization,
latencies, arbiter order), not read from the engine.
"""

import networkx as nx
import numpy as np
import pytest

from emu.errors import ConfigError
from emu.net import Network
from emu.net import kernel as K
from emu.net.framing import serialization_ps
from emu.net.timeline import Timeline, parse
from emu.sim import MS, NS, US, Simulator
from emu.topology import LinkDefaults, Routes, mesh2d, ring, star

GBPS = 10**9
FULL = 1514  # a full frame: 14 + 48 + 1452


def line3(rate=GBPS, lat=US):
    """Boards 0-1-2 in a line (a 1x3 mesh)."""
    return mesh2d(1, 3, link=LinkDefaults(rate_bps=rate, latency_ps=lat, mtu=1500))


def run_line(arbiter, n=2000, nic=500 * NS):
    """Boards 0 and 1 each send ``n`` full frames to board 2 at t=0."""
    G = line3()
    sim = Simulator()
    net = Network(sim, G, Routes(G).next_hop, nic_latency_ps=nic, arbiter=arbiter)
    log, done = [], {}
    net.log_sinks.append(log.append)
    for src in (0, 1):
        net.send(src, [2], n, FULL, on_event=lambda k, m, node, f, t: k == "done" and done.__setitem__(m.src, t))
    net.run()
    rows = np.concatenate(log)
    out = rows[rows[:, K.G_LINK] == net.link(1, 2)]
    out = out[np.argsort(out[:, K.G_START])]
    return net, out, done


def test_round_robin_shares_the_port_evenly_between_own_and_transit_frames():
    n = 2000
    net, out, done = run_line("rr", n)
    ser = serialization_ps(FULL, GBPS)
    first_transit = ser + US + 500 * NS     # board 0's first frame reaches board 1
    alone = -(-first_transit // ser)         # grants at 0, ser, ... before it: uncontested
    own = int((out[:n, K.G_MSG] == 1).sum())
    assert own == alone + (n - alone) // 2   # then strictly alternating
    # Back to back on 1->2 the whole time; board 1's last frame is grant 2n - 3 (two alone,
    # then every other one), board 0's the last of all.
    assert np.array_equal(out[:, K.G_START], np.arange(2 * n) * ser)
    assert done[0] - done[1] == (2 * n - 1 - (2 * n - 3 + (alone - 2))) * ser
    assert done[1] > 2 * n * ser - 2 * ser


def test_transit_first_starves_the_board_and_local_first_the_transit():
    n = 2000
    ser = serialization_ps(FULL, GBPS)
    alone = -(-(ser + US + 500 * NS) // ser)
    net, out, done = run_line("transit-first", n)
    assert int((out[:n, K.G_MSG] == 1).sum()) == alone   # board 1 only before transit arrives
    assert done[0] < done[1] and done[0] < (n + alone + 1) * ser + 2 * US
    net, out, done = run_line("local-first", n)
    assert int((out[:n, K.G_MSG] == 1).sum()) == n
    assert done[1] == n * ser + US + 500 * NS and done[0] > done[1]


def test_unknown_arbiter_is_refused():
    G = line3()
    with pytest.raises(ConfigError, match="arbiter"):
        Network(Simulator(), G, Routes(G).next_hop, arbiter="fifo")


def test_sent_fires_when_the_last_frame_has_left_the_port():
    G = ring(2, bidirectional=False, link=LinkDefaults(rate_bps=GBPS, latency_ps=3 * US, mtu=1500))
    sim = Simulator()
    net = Network(sim, G, Routes(G).next_hop)
    ev = []
    net.send(0, [1], 10, FULL, on_event=lambda k, m, node, f, t: ev.append((k, node, f, t)))
    net.run()
    ser = serialization_ps(FULL, GBPS)
    assert ev == [("sent", 0, 0, 10 * ser), ("done", 1, -1, 10 * ser + 3 * US)]


def test_the_local_queue_is_in_ready_order_ties_in_hand_over_order():
    # Handed over in the order A (ready 10 us), B (20 us), C (10 us): the queue is A, C, B.
    # C ties with A and goes behind it; it goes ahead of B, so it is placed by walking the queue.
    G = ring(2, bidirectional=False, link=LinkDefaults(rate_bps=GBPS, latency_ps=3 * US, mtu=1500))
    sim = Simulator()
    net = Network(sim, G, Routes(G).next_hop)
    sent = {}
    for name, at in (("A", 10 * US), ("B", 20 * US), ("C", 10 * US)):
        net.send(0, [1], 10, FULL, at=at, on_event=lambda k, m, node, f, t, name=name:
                 k == "sent" and sent.__setitem__(name, t))
    net.run()
    ser = serialization_ps(FULL, GBPS)
    assert sent == {"A": 10 * US + 10 * ser, "C": 10 * US + 20 * ser, "B": 10 * US + 30 * ser}


def test_drops_inside_a_node_are_counted_by_cause_and_place():
    # Item 2: node 2 is down before routing knows; frames that reach board 1's datapath
    # for 2 find no route there once re-routed, and frames for 2 at the source are dropped.
    G = line3()
    sim = Simulator()
    routes = Routes(G)
    net = Network(sim, G, routes.next_hop, nic_rate_bps=16 * GBPS, nic_latency_ps=500 * NS)
    Timeline(parse("node 2 down at 30us"), detect_ps=20 * US).install(net, routes)
    net.send(0, [2], 200, FULL)
    net.send(1, [0], 50, FULL)
    sim.at(100 * US, lambda: net.send(0, [2], 5, FULL))
    net.run()
    nodes = net.node_counters().set_index("node")
    links = net.counters().set_index(["src", "dst"])
    by_cause = net.drops_by_cause()
    # The rest of the first message is dropped at its source at the re-route (50 us) and the
    # later send has no route at all: both are no_route drops at node 0.
    assert nodes.loc[0, "dropped_no_route"] > 5
    # Frames already in transit reached board 1, whose tables no longer lead to 2.
    assert nodes.loc[1, "dropped_no_route"] + links.loc[(1, 2), "dropped_link_down"] > 0
    assert by_cause["no_route"] == nodes.dropped_no_route.sum()
    assert sum(by_cause.values()) == nodes.dropped_frames.sum() + links.dropped_frames.sum()
    c = net.conservation()
    assert c["offered"] == 200 + 50 + 5 and c["balance"] == 0 and c["in_flight"] == 0
    assert c["delivered"] + c["dropped"] == 255 and c["delivered"] >= 50


def test_a_switch_has_its_own_forwarding_latency():
    # Item 3: a frame crosses board 0 -> switch -> board 1; the switch adds its latency,
    # the receiving board its NIC latency.
    G = star(2, link=LinkDefaults(rate_bps=GBPS, latency_ps=US, mtu=1500))
    sim = Simulator()
    net = Network(sim, G, Routes(G).next_hop, nic_latency_ps={0: 500 * NS, 1: 500 * NS, 2: 200 * NS})
    done = []
    net.send(0, [1], 1, FULL, on_event=lambda k, m, node, f, t: k == "done" and done.append(t))
    net.run()
    ser = serialization_ps(FULL, GBPS)
    assert done == [2 * ser + 2 * US + 200 * NS + 500 * NS]


def _logged_run(G, clause, detect_ps, sends, track=False, **net_kw):
    """Run full-frame ``sends`` (src, dsts, frames) under one scenario clause; the network and
    every transmission record."""
    sim = Simulator()
    routes = Routes(G)
    net = Network(sim, G, routes.next_hop, **net_kw)
    Timeline(parse(clause), **({} if detect_ps is None else {"detect_ps": detect_ps})).install(net, routes)
    log = []
    net.log_sinks.append(log.append)
    for src, dsts, n in sends:
        net.send(src, dsts, n, FULL, track=track)
    net.run()
    return net, np.concatenate(log)


def test_replay_gives_switches_the_profiles_switch_latency(tmp_path):
    from emu.cli import main
    from emu.replay.run import Options, Replay
    from emu.workload.trace import load_trace

    path = tmp_path / "t.json"
    assert main(["trace", "ring", "--seq", "512", "--nodes", "4", "--chunk", "256", "--decode-tokens", "1",
                 "--hw", "kr260-10g", "-o", str(path)]) == 0
    rp = Replay(load_trace(str(path)), Options(topology="star", overrides=("hw.switch_latency_ps=2us",)))
    sw = 4
    lk = rp.net.LK
    for i, (u, v) in enumerate(rp.net.links):
        if v == sw:
            assert lk[i, K.L_LAT] == 1 * US + 2 * US      # into the switch: link + switch
        else:
            assert v in rp.net.datapath                    # boards parse through their datapath
            assert lk[rp.net.datapath[v], K.L_LAT] == 500 * NS
    assert sw not in rp.net.datapath  # switch_rate 0: line rate on every port
    rp.run()
    assert rp.incomplete() == []


def test_a_loss_window_hits_the_frames_that_start_inside_it():
    # Item 4: link 0>1 loss 1.0 at 10ms until 20ms on a 10 Mb/s link.
    rate = 10**7
    G = ring(2, bidirectional=False, link=LinkDefaults(rate_bps=rate, latency_ps=0, mtu=1500))
    net, rows = _logged_run(G, "link 0>1 loss 1.0 at 10ms until 20ms", None, [(0, [1], 30)], lossless=False)
    ser = serialization_ps(FULL, rate)
    starts = np.arange(30) * ser
    inside = set(np.flatnonzero((starts >= 10 * MS) & (starts < 20 * MS)).tolist())
    assert len(inside) == 8
    assert set(rows[rows[:, K.G_FATE] == K.DROP_LOSS, K.G_FRAG].tolist()) == inside


def test_after_a_flap_the_port_resumes_at_once():
    # Item 5: link 0>1 down at 30us up at 40us; the packetizer's frames wait, then go at 40 us.
    G = ring(2, bidirectional=False, link=LinkDefaults(rate_bps=GBPS, latency_ps=US, mtu=1500))
    net, rows = _logged_run(G, "link 0>1 down at 30us up at 40us", 1 * MS, [(0, [1], 20)])
    ser = serialization_ps(FULL, GBPS)
    cut = 30 * US // ser                 # the frame on the wire at 30 us is lost
    assert (cut - 1) * ser + US < 30 * US  # the one before it had arrived
    ok = rows[rows[:, K.G_FATE] == 0]
    assert ok[:, K.G_FRAG].tolist() == [f for f in range(20) if f != cut]
    resumed = ok[ok[:, K.G_FRAG] == cut + 1, K.G_START]
    assert resumed.tolist() == [40 * US]
    assert ok[:, K.G_START].max() == 40 * US + (20 - cut - 2) * ser


def test_a_started_message_follows_the_new_routes():
    # Item 6: a 4-ring, 0-1 fails at 50 us, routing knows at 150 us: the fragments not yet
    # sent by then go 0-3-2-1, none is offered to the dead link after the failure.
    G = ring(4, bidirectional=True, link=LinkDefaults(rate_bps=GBPS, latency_ps=US, mtu=1500))
    net, rows = _logged_run(G, "link 0-1 down at 50us", 100 * US, [(0, [1], 200)], track=True)
    m = net.messages[0]
    ser = serialization_ps(FULL, GBPS)
    on_new = rows[rows[:, K.G_LINK] == net.link(0, 3)]
    # Everything from the frame cut at 50 us on waits in the packetizer and leaves at 150 us.
    first = 50 * US // ser + 1
    assert on_new[:, K.G_FRAG].tolist() == list(range(first, 200))
    assert on_new[0, K.G_START] == 150 * US
    c = net.counters().set_index(["src", "dst"])
    # at 50 us frame 4 is on the wire and frame 3 still propagating: both are lost
    assert 4 * ser < 50 * US < 4 * ser + US
    assert c.loc[(0, 1), "dropped_link_down"] == 2
    assert net.missing(m, 1).size == c.loc[(0, 1), "dropped_link_down"]
    # ttl: the hops each copy actually took, 0 on the first link.
    last = rows[rows[:, K.G_LINK] == net.link(2, 1)]
    assert set(last[:, K.G_HOPS].tolist()) == {2}


def test_replay_summary_shows_drops_inside_nodes(tmp_path):
    # Item 2 at the product level: with node 2 down, the drops in the boards' datapaths and
    # at the sources are in the summary, and every copy is accounted for.
    from emu.cli import main
    from emu.replay.summary import format_summary, summarize
    from emu.replay.run import Options, Replay
    from emu.workload.trace import load_trace

    path = tmp_path / "t.json"
    assert main(["trace", "mars", "--seq", "512", "--nodes", "4", "--chunk", "256", "--decode-tokens", "1",
                 "-o", str(path)]) == 0
    rp = Replay(load_trace(str(path)), Options(scenario=("node 2 down at 1ms",))).run()
    s = summarize(rp)
    nodes, links = rp.net.node_counters(), rp.net.counters()
    assert s["dropped_frames"] == int(nodes.dropped_frames.sum() + links.dropped_frames.sum())
    assert s["dropped_by_cause"]["no_route"] == int(nodes.dropped_no_route.sum()) > 0
    assert f"no_route {s['dropped_by_cause']['no_route']:,}" in format_summary(s)
    c = rp.net.conservation()
    assert c["balance"] == 0 and c["in_flight"] == 0
