"""The SimPy reference (tests/simref.py) alone, against timings worked out by hand.

Each expected time is written as the arithmetic of the spec (the port model of docs/engine.md): a frame
that starts at s ends at s + ser and reaches the next node's forwarding step
propagation + that node's latency later.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from simref import (ARBITERS, Change, LinkSpec, LossModel, Resend, Rules, Scenario, Send, ser_ps,
                    simulate)

G = 10**9
US = 10**6                  # ps per microsecond
FULL = 1514                 # 14 + 48 + 1452: a full frame at MTU 1500
S = 1538 * 8 * 1000         # (1514 + 24) * 8 bits at 1 Gb/s, in ps: 12.304 us
P, L = 1 * US, 500_000      # propagation 1 us, board forwarding latency 500 ns


def duplex(pairs, rate=G, prop=P, mtu=1500, **kw):
    links = []
    for u, v in pairs:
        links.append(LinkSpec(u, v, rate, prop, mtu, **kw))
        links.append(LinkSpec(v, u, rate, prop, mtu, **kw))
    return links


def deliveries(net, msg, dst):
    return {k[2]: v for k, v in net.deliveries.items() if k[:2] == (msg, dst)}


def on_link(net, link):
    return [r for r in net.records if r.link == link]


def link_conserved(net):
    for c in net.link_counters():
        dropped = sum(c[k] for k in ("queue_full", "loss", "corrupt", "link_down", "mtu"))
        assert c["offered"] == c["delivered"] + dropped, c


def test_serialization_formula():
    assert ser_ps(FULL, G) == S
    assert ser_ps(20, G) == (60 + 24) * 8 * 1000            # padded to the 60-byte minimum
    rate = 10**9 + 7                                          # a rate that does not divide
    want = math.ceil(Fraction((1000 + 24) * 8 * 10**12, rate))
    assert ser_ps(1000, rate) == want and want * rate > (1000 + 24) * 8 * 10**12


def test_three_hop_store_and_forward():
    # boards 0-1-2-3; links 1 Gb/s, 100 Mb/s, 1 Gb/s with 1, 2, 3 us propagation.
    rates, props = (G, G // 10, G), (1 * US, 2 * US, 3 * US)
    links = []
    for i in range(3):
        links.append(LinkSpec(i, i + 1, rates[i], props[i], 1500))
    nh = [[-1, 1, 1, 1], [-1, -1, 2, 2], [-1, -1, -1, 3], [-1, -1, -1, -1]]
    sc = Scenario(["board"] * 4, [L] * 4, [0] * 4, links, nh, sends=[Send(0, (3,), 2, FULL, 300, at=0)])
    net = simulate(sc)
    s1, s2, s3 = S, 10 * S, S
    t1 = ser_ps(300, G), ser_ps(300, G // 10), ser_ps(300, G)   # the last fragment is 300 bytes
    # fragment 0: hop by hop
    a1 = s1 + props[0] + L
    a2 = a1 + s2 + props[1] + L
    a3 = a2 + s3 + props[2] + L
    # fragment 1 leaves at s1, waits at node 1 for fragment 0 to clear the slow link
    b0 = s1 + t1[0] + props[0] + L
    b1_start = max(b0, a1 + s2)
    b2 = b1_start + t1[1] + props[1] + L
    b3 = b2 + t1[2] + props[2] + L
    assert deliveries(net, 0, 3) == {0: [a3], 1: [b3]}
    assert [(r.link, r.frag, r.start, r.end) for r in on_link(net, 1)] == [
        (1, 0, a1, a1 + s2), (1, 1, b1_start, b1_start + t1[1])]
    assert net.done[(0, 3)] == b3


def test_datapath_fifo_serves_ingress_in_arrival_order():
    # boards 0, 1 -> switch 3 (datapath 2 Gb/s, latency 200 ns) -> board 2
    links = [LinkSpec(0, 3, G, P, 1500), LinkSpec(1, 3, G, P, 1500), LinkSpec(3, 2, G, P, 1500)]
    nh = [[-1, -1, 3], [-1, -1, 3], [-1, -1, -1], [-1, -1, 2]]
    lat = [L, L, L, 200_000]
    sc = Scenario(["board"] * 3 + ["switch"], lat, [0, 0, 0, 2 * G], links, nh,
                  sends=[Send(0, (2,), 1, FULL, FULL, 0), Send(1, (2,), 1, FULL, FULL, 0)])
    net = simulate(sc)
    dp = ser_ps(FULL, 2 * G)
    into_dp = S + P                                  # both frames reach the datapath FIFO together
    out0 = into_dp + dp + 200_000                    # link 0's frame first (ascending link id)
    out1 = into_dp + 2 * dp + 200_000
    assert out1 - out0 < S                           # so the second waits for the egress port
    assert deliveries(net, 0, 2) == {0: [out0 + S + P + L]}
    assert deliveries(net, 1, 2) == {0: [out0 + 2 * S + P + L]}
    assert [r.link for r in net.records].count(3) == 2       # the datapath "link" numbered last


def line_scenario(arbiter):
    """Line 0-1-2 of 1 Gb/s links; boards 0 and 1 send 2000 full frames to 2."""
    nh = [[-1, 1, 1], [0, -1, 2], [1, 1, -1]]
    sends = [Send(0, (2,), 2000, FULL, FULL, 0), Send(1, (2,), 2000, FULL, FULL, 0)]
    return Scenario(["board"] * 3, [L] * 3, [0] * 3, duplex([(0, 1), (1, 2)]), nh,
                    sends=sends, arbiter=arbiter)


def test_rr_even_share_on_line():
    net = simulate(line_scenario("rr"))
    # On 1->2: board 1's frames 0 and 1 go at 0 and S (board 0's first frame reaches
    # node 1 at S + P + L, during the second). From 2S on the two queues alternate,
    # transit first (local was granted last): local frame k >= 1 starts at (2k - 1) S and
    # board 0's frame j starts at 2 (j + 1) S while board 1 is backlogged.
    starts = {(r.msg, r.frag): r.start for r in on_link(net, 2)}
    assert starts[(1, 0)] == 0 and starts[(1, 1)] == S
    assert all(starts[(1, k)] == (2 * k - 1) * S for k in range(1, 2000))
    assert all(starts[(0, j)] == 2 * (j + 1) * S for j in range(1998))
    # after board 1's last frame (ending at 3998 S) board 0's last two go back to back
    assert starts[(0, 1998)] == 3998 * S and starts[(0, 1999)] == 3999 * S
    assert net.done[(1, 2)] == 3998 * S + P + L
    assert net.done[(0, 2)] == 4000 * S + P + L
    first = sorted(on_link(net, 2), key=lambda r: r.start)[:2000]
    assert sum(r.msg == 1 for r in first) == 1001     # even share while both are backlogged


def test_transit_first_starves_local():
    net = simulate(line_scenario("transit-first"))
    # From 2S a transit frame is always waiting at each grant (frame j reaches node 1 at
    # (j + 1) S + P + L), so board 1 sends only frames 0 and 1 until board 0 is done.
    starts = {(r.msg, r.frag): r.start for r in on_link(net, 2)}
    assert all(starts[(0, j)] == (j + 2) * S for j in range(2000))
    assert all(starts[(1, k)] == (2000 + k) * S for k in range(2, 2000))
    assert net.done[(0, 2)] == 2002 * S + P + L
    assert net.done[(1, 2)] == 4000 * S + P + L


def test_local_first_holds_transit():
    net = simulate(line_scenario("local-first"))
    assert net.done[(1, 2)] == 2000 * S + P + L
    assert net.done[(0, 2)] == 4000 * S + P + L


def test_arbiters_all_conserve():
    for a in ARBITERS:
        net = simulate(line_scenario(a))
        assert net.conserved() and net.delivered == 4000


def test_loss_window_applies_at_transmission_start():
    # 10 Mb/s link 0>1, loss 1.0 from 10 ms until 20 ms.
    rate = 10**7
    s = 1538 * 8 * 10**5                       # 1.2304 ms per full frame
    ms = 10**9
    changes = [Change(10 * ms, "loss", link=0, value=LossModel(p=1.0)),
               Change(20 * ms, "loss", link=0, value=LossModel())]
    sc = Scenario(["board"] * 2, [L] * 2, [0] * 2, duplex([(0, 1)], rate=rate), [[-1, 1], [0, -1]],
                  sends=[Send(0, (1,), 20, FULL, FULL, 0)], changes=changes)
    net = simulate(sc)
    lost = [r.frag for r in net.records if r.fate == "loss"]
    # frames start at k s; those starting in [10 ms, 20 ms) are k = 9 .. 16
    assert [k for k in range(20) if 10 * ms <= k * s < 20 * ms] == list(range(9, 17))
    assert lost == list(range(9, 17))
    assert sorted(deliveries(net, 0, 1)) == [k for k in range(20) if k not in lost]
    assert net.link_counters()[0]["loss"] == 8
    assert all(r.time == r.end + P + L for r in net.records)   # lost frames use the wire too
    assert net.conserved()


def test_link_flap_resumes_at_link_up():
    # Link 0>1 down at 30 us, up at 40 us, during a 10-frame message.
    changes = [Change(30 * US, "down", link=0), Change(40 * US, "up", link=0)]
    sc = Scenario(["board"] * 2, [L] * 2, [0] * 2, duplex([(0, 1)]), [[-1, 1], [0, -1]],
                  sends=[Send(0, (1,), 10, FULL, FULL, 0)], changes=changes)
    net = simulate(sc)
    recs = on_link(net, 0)
    # frames 0, 1 cross; frame 2 (2S = 24.6 us .. 36.9 us) is cut at 30 us
    assert [(r.frag, r.fate) for r in recs[:3]] == [(0, "ok"), (1, "ok"), (2, "link_down")]
    assert recs[2].time == 30 * US
    # the packetizer kept frames 3.. and sends them from the moment the link is up
    assert [r.start for r in recs[3:]] == [40 * US + k * S for k in range(7)]
    d = deliveries(net, 0, 1)
    assert 2 not in d and d[9] == [40 * US + 7 * S + P + L]
    c = net.link_counters()[0]
    assert c["link_down"] == 1 and c["transmitted"] == 10 and net.conserved()


def triangle(changes, sends, nh):
    return Scenario(["board"] * 3, [L] * 3, [0] * 3, duplex([(0, 1), (0, 2), (2, 1)]), nh,
                    sends=sends, changes=changes)


NH_DIRECT = [[-1, 1, 2], [0, -1, 2], [0, 1, -1]]
NH_VIA_2 = [[-1, 2, 2], [2, -1, 2], [0, 1, -1]]      # 0-1 avoided both ways


def test_reroute_rehomes_unsent_fragments():
    # 0->1 fails at 50 us; at 150 us the tables send 0->1 via 2.
    changes = [Change(50 * US, "down", link=0), Change(50 * US, "down", link=1),
               Change(150 * US, "reroute", value=(NH_VIA_2, {}))]
    net = simulate(triangle(changes, [Send(0, (1,), 20, FULL, FULL, 0)], NH_DIRECT))
    first = on_link(net, 0)
    # frame 3 (ends at 4S = 49.2 us, due at node 1 at 4S + P + L = 50.7 us) is still on the
    # link at 50 us and frame 4 is on the wire: both are cut; frames 5.. wait for new tables
    assert [(r.frag, r.fate) for r in first] == [(k, "ok") for k in range(3)] + [
        (3, "link_down"), (4, "link_down")]
    via = on_link(net, 2)                       # link 2 is 0->2
    assert [(r.frag, r.start) for r in via] == [(5 + k, 150 * US + k * S) for k in range(15)]
    hop2 = on_link(net, 4)                      # link 4 is 2->1
    assert [r.start for r in hop2] == [150 * US + (k + 1) * S + P + L for k in range(15)]
    d = deliveries(net, 0, 1)
    assert sorted(d) == [0, 1, 2] + list(range(5, 20))
    assert d[19] == [150 * US + 16 * S + 2 * (P + L)]
    assert net.conserved()


def test_reroute_multicast_resends_from_smallest_position_and_discards_duplicates():
    # Tree 0 -> {1, 2}; 0->1 fails at 50 us; at 150 us the tree becomes 0 -> 2 -> 1.
    star = ({0: [1, 2]}, (1, 2))
    chain = ({0: [2], 2: [1]}, (1, 2))
    changes = [Change(50 * US, "down", link=0), Change(50 * US, "down", link=1),
               Change(150 * US, "reroute", value=(NH_VIA_2, {0: chain}))]
    sc = triangle(changes, [Send(0, (1, 2), 30, FULL, FULL, 0, tree=0, track=True)], NH_DIRECT)
    sc.trees = [star]
    net = simulate(sc, Rules(in_flight_multicast="new-tables"))  # the spec's literal reading (docs/engine.md chooses the other)
    # 0->2 ran frames 0.. back to back: by 150 us it has started frames 0..12 (12 S = 147.6 us)
    assert [r.frag for r in on_link(net, 2) if r.start < 150 * US] == list(range(13))
    # 0->1 lost frames 3 and 4 at 50 us and had reached position 5; the new tree resends
    # from 5 on 0->2 at 150 us, where frame 12 is on the wire until 13 S
    later = [r for r in on_link(net, 2) if r.start >= 150 * US]
    assert [r.frag for r in later] == list(range(5, 30))
    assert later[0].start == 13 * S
    # frame 12 reaches node 2 at 13 S + P + L, after the re-route, so node 2 also forwards
    # it to 1 under the new tree (frame 11 arrived at 12 S + P + L < 150 us)
    assert 12 * S + P + L < 150 * US < 13 * S + P + L
    # node 2 already has 5..12 (8 duplicates); node 1 gets the resent 12 a second time
    assert net.node_drops[2]["duplicate"] == 8 and net.node_drops[1]["duplicate"] == 1
    assert sorted(deliveries(net, 0, 1)) == [0, 1, 2] + list(range(5, 30))
    assert sorted(deliveries(net, 0, 2)) == list(range(30))
    assert all(len(v) == 1 for v in net.deliveries.values())
    assert net.conserved()
    tot = net.totals()
    # offered: 13 on 0->2 and 5 on 0->1 before the re-route, 25 resent; replicated: every
    # resent copy at node 2 plus the original frame 12 there (delivered and forwarded)
    assert tot["offered"] == 13 + 5 + 25 and tot["replicated"] == 25 + 1
    nodes = net.node_counters()
    assert nodes[0]["offered"] == 43 and nodes[2]["replicated"] == 26
    assert nodes[1]["delivered"] == 28 and nodes[2]["delivered"] == 30


def test_unreachable_after_reroute_drops_at_source():
    nh_none = [[-1, -1, 2], [-1, -1, 2], [0, 1, -1]]
    changes = [Change(50 * US, "down", link=0), Change(50 * US, "down", link=1),
               Change(150 * US, "reroute", value=(nh_none, {}))]
    net = simulate(triangle(changes, [Send(0, (1,), 20, FULL, FULL, 0)], NH_DIRECT))
    assert net.node_drops[0]["no_route"] == 15         # frames 5..19 never left board 0
    assert net.link_counters()[0]["link_down"] == 2    # frames 3 and 4
    assert net.delivered == 3 and net.conserved()


def test_no_route_in_transit_is_counted_at_the_node():
    # Node 1 has no route onwards for board 2.
    nh = [[-1, 1, 1], [0, -1, -1], [1, 1, -1]]
    sc = Scenario(["board"] * 3, [L] * 3, [0] * 3, duplex([(0, 1), (1, 2)]), nh,
                  sends=[Send(0, (2,), 7, FULL, FULL, 0)])
    net = simulate(sc)
    assert net.node_drops[1]["no_route"] == 7 and net.delivered == 0 and net.conserved()


def test_drop_tail_keeps_exactly_capacity_minus_one_of_the_second_stream():
    # Boards 0 and 1 -> switch 3 -> board 2, equal rates: two frames reach the switch at
    # each step and one leaves. Link 0->3's frame is offered first (ascending link id), so
    # board 1's frames fill the transit queue first and then are the ones dropped: with a
    # capacity of c waiting frames, board 1 gets frames 0 .. c-2 through.
    for cap in (2, 3, 4):
        links = [LinkSpec(0, 3, G, P, 1500), LinkSpec(1, 3, G, P, 1500),
                 LinkSpec(3, 2, G, P, 1500, queue_frames=cap)]
        nh = [[-1, -1, 3], [-1, -1, 3], [-1, -1, -1], [-1, -1, 2]]
        sends = [Send(0, (2,), 10, FULL, FULL, 0), Send(1, (2,), 10, FULL, FULL, 0)]
        for limit in ({"queue_frames": cap}, {"queue_bytes": cap * FULL}):
            links[2] = LinkSpec(3, 2, G, P, 1500, **limit)
            sc = Scenario(["board"] * 3 + ["switch"], [L, L, L, 300_000], [0] * 4, links, nh,
                          sends=sends, lossless=False)
            net = simulate(sc)
            assert sorted(deliveries(net, 1, 2)) == list(range(cap - 1)), (cap, limit)
            assert sorted(deliveries(net, 0, 2)) == list(range(10))
            assert net.link_counters()[2]["queue_full"] == 10 - (cap - 1)
            assert net.conserved()
            link_conserved(net)
        # lossless ignores the capacity
        sc.lossless = True
        assert simulate(sc).delivered == 20


def test_conservation_under_every_kind_of_drop():
    links = duplex([(0, 1), (1, 2), (0, 2)], queue_frames=2)
    links[0].loss = LossModel(drops=(1, 4))         # 0->1 loses its 2nd and 5th transmissions
    links[2].mtu = 1000                             # 1->2 carries at most 1014-byte frames
    links[2].rate = G // 8                          # and is slow: transit backs up there
    nh = [[-1, 1, 1], [0, -1, 2], [1, 1, -1]]
    changes = [Change(40 * US, "down", link=0), Change(90 * US, "up", link=0),
               Change(60 * US, "rate", link=1, value=G // 4)]
    sends = [Send(0, (2,), 12, 900, 400, 0), Send(1, (2,), 6, 900, 900, 5 * US),
             Send(1, (2,), 3, FULL, FULL, 0), Send(2, (0,), 8, FULL, 200, 10 * US)]
    sc = Scenario(["board"] * 3, [L] * 3, [0] * 3, links, nh, sends=sends, changes=changes,
                  lossless=False)
    net = simulate(sc)
    tot = net.totals()
    assert tot["dropped"]["loss"] == 2
    assert net.node_drops[1]["mtu"] == 3            # board 1's own full frames
    assert tot["dropped"]["link_down"] > 0 and tot["dropped"]["queue_full"] > 0
    assert net.conserved()
    link_conserved(net)


def test_rate_change_keeps_the_frame_on_the_wire():
    changes = [Change(S // 2, "rate", link=0, value=G // 2)]
    sc = Scenario(["board"] * 2, [L] * 2, [0] * 2, duplex([(0, 1)]), [[-1, 1], [0, -1]],
                  sends=[Send(0, (1,), 3, FULL, FULL, 0)], changes=changes)
    net = simulate(sc)
    assert [(r.start, r.end) for r in on_link(net, 0)] == [(0, S), (S, 3 * S), (3 * S, 5 * S)]


def test_same_instant_order_reroute_before_arrival():
    # A re-route at exactly the time frame 0 reaches node 0's neighbour uses the new table.
    t_arr = S + P + L                                  # frame 0 from 1 reaches 0 at this time
    nh_a = [[-1, 1, 2], [0, -1, 0], [0, 1, -1]]        # 1 -> 2 via 0
    nh_b = [[-1, 2, -1], [0, -1, 0], [0, 1, -1]]       # node 0 loses its route to 2
    sc = triangle([Change(t_arr, "reroute", value=(nh_b, {}))],
                  [Send(1, (2,), 1, FULL, FULL, 0)], nh_a)
    net = simulate(sc)
    assert net.node_drops[0]["no_route"] == 1 and net.delivered == 0


@pytest.mark.parametrize("p", [0.5, 0.01])
def test_reference_refuses_random_loss(p):
    with pytest.raises(ValueError):
        LossModel(p=p)


def test_local_frame_over_mtu_takes_no_wire_time():
    # Board 0's first message has 1514-byte frames on a link of MTU 1000: each is dropped
    # when granted and the arbiter grants again at once, so the second message starts at 0.
    links = duplex([(0, 1)], mtu=1000)
    sends = [Send(0, (1,), 5, FULL, FULL, 0), Send(0, (1,), 2, 1000, 600, 0)]
    net = simulate(Scenario(["board"] * 2, [L] * 2, [0] * 2, links, [[-1, 1], [0, -1]], sends=sends))
    assert net.node_drops[0]["mtu"] == 5 and net.link_counters()[0]["mtu"] == 0
    s1000 = (1000 + 24) * 8 * 1000
    assert [(r.msg, r.frag, r.start) for r in net.records] == [(1, 0, 0), (1, 1, s1000)]
    assert net.conserved()


def test_drop_list_counts_every_transmission_on_the_link():
    # Local and transit frames share 1->2's transmission index: with rr the order there is
    # b0, b1, a0, b2, a1, b3, ... (a = board 0's transit, b = board 1's own), so indices
    # 2 and 3 are a0 and b2.
    links = duplex([(0, 1), (1, 2)])
    links[2].loss = LossModel(drops=(2, 3))
    nh = [[-1, 1, 1], [0, -1, 2], [1, 1, -1]]
    sends = [Send(0, (2,), 4, FULL, FULL, 0), Send(1, (2,), 4, FULL, FULL, 0)]
    net = simulate(Scenario(["board"] * 3, [L] * 3, [0] * 3, links, nh, sends=sends))
    order = [(r.msg, r.frag, r.fate) for r in on_link(net, 2)]
    assert [(m, k) for m, k, _ in order[:6]] == [(1, 0), (1, 1), (0, 0), (1, 2), (0, 1), (1, 3)]
    assert [(m, k) for m, k, f in order if f == "loss"] == [(0, 0), (1, 2)]
    assert net.conserved()


def test_resend_stream_carries_named_fragments_and_duplicates_are_discarded():
    # 0 -> 2 over 1; transmission 2 on 0->1 (fragment 2) is lost. At 100 us the sender
    # resends fragments 2 and 4: 2 fills the gap, 4 is a duplicate at the tracked receiver.
    links = duplex([(0, 1), (1, 2)])
    links[0].loss = LossModel(drops=(2,))
    nh = [[-1, 1, 1], [0, -1, 2], [1, 1, -1]]
    sc = Scenario(["board"] * 3, [L] * 3, [0] * 3, links, nh,
                  sends=[Send(0, (2,), 6, FULL, FULL, 0, track=True)],
                  resends=[Resend(0, 2, (2, 4), 100 * US)])
    net = simulate(sc)
    resent = [(r.link, r.frag, r.start, r.retx) for r in net.records if r.retx]
    assert resent == [(0, 2, 100 * US, True), (0, 4, 100 * US + S, True),
                      (2, 2, 100 * US + S + P + L, True), (2, 4, 100 * US + 2 * S + P + L, True)]
    d = deliveries(net, 0, 2)
    assert d[2] == [100 * US + 2 * (S + P + L)] and len(d[4]) == 1
    assert net.node_drops[2]["duplicate"] == 1
    assert net.done[(0, 2)] == d[2][0]
    assert net.conserved()


def test_link_change_comes_after_the_arrivals_of_its_instant():
    # 0->1 goes down exactly when frame 0 reaches node 1: that frame has arrived; frame 1,
    # on the wire since S, is cut.
    t = S + P + L
    sc = Scenario(["board"] * 2, [L] * 2, [0] * 2, duplex([(0, 1)]), [[-1, 1], [0, -1]],
                  sends=[Send(0, (1,), 3, FULL, FULL, 0)], changes=[Change(t, "down", link=0)])
    net = simulate(sc)
    assert [(r.frag, r.fate, r.time) for r in net.records] == [(0, "ok", t), (1, "link_down", t)]
    assert deliveries(net, 0, 1) == {0: [t]}


def test_live_send_comes_after_the_grants_of_its_instant():
    # Board 0's frame reaches node 1 at T = S + P + L, when 1->2 is idle. A send handed over
    # before the run with at=T competes in that instant's grant and, with rr starting on
    # local, goes first; the same send made live at T (by the application) finds the port
    # already granted to the transit frame.
    T = S + P + L
    nh = [[-1, 1, 1], [0, -1, 2], [1, 1, -1]]
    for live, first in ((False, 1), (True, 0)):
        sends = [Send(0, (2,), 1, FULL, FULL, 0), Send(1, (2,), 1, FULL, FULL, T, live=live)]
        net = simulate(Scenario(["board"] * 3, [L] * 3, [0] * 3, duplex([(0, 1), (1, 2)]), nh,
                                sends=sends))
        hop = sorted(on_link(net, 2), key=lambda r: r.start)
        assert [(r.msg, r.start) for r in hop] == [(first, T), (1 - first, T + S)]


def test_reroute_leaves_a_stream_whose_first_hop_is_unchanged():
    # Board 0 sends A (20 frames) to 2 over 0->2 and C (10 frames) to 1 over 0->1. 0->1
    # fails at 30 us (C's frame 2 is cut on the wire); at 60 us the tables send 0's
    # traffic for 1 via 2. A's first hop is unchanged, so A keeps its place and C's
    # frames 3..9 follow it on 0->2 from 20 S.
    changes = [Change(30 * US, "down", link=0), Change(30 * US, "down", link=1),
               Change(60 * US, "reroute", value=(NH_VIA_2, {}))]
    sends = [Send(0, (2,), 20, FULL, FULL, 0), Send(0, (1,), 10, FULL, FULL, 0)]
    net = simulate(triangle(changes, sends, NH_DIRECT))
    hop = on_link(net, 2)                       # 0->2
    assert [(r.msg, r.frag, r.start) for r in hop] == (
        [(0, k, k * S) for k in range(20)] + [(1, 3 + k, (20 + k) * S) for k in range(7)])
    assert [(r.frag, r.fate) for r in on_link(net, 0)] == [(0, "ok"), (1, "ok"), (2, "link_down")]
    assert sorted(deliveries(net, 1, 1)) == [0, 1] + list(range(3, 10))
    assert net.conserved()


def test_untracked_destination_keeps_duplicates():
    # As the multicast re-route above, untracked: the copies resent to node 2 are delivered
    # again (only a tracked destination discards duplicates).
    star = ({0: [1, 2]}, (1, 2))
    chain = ({0: [2], 2: [1]}, (1, 2))
    changes = [Change(50 * US, "down", link=0), Change(50 * US, "down", link=1),
               Change(150 * US, "reroute", value=(NH_VIA_2, {0: chain}))]
    sc = triangle(changes, [Send(0, (1, 2), 30, FULL, FULL, 0, tree=0, track=False)], NH_DIRECT)
    sc.trees = [star]
    net = simulate(sc, Rules(duplicates="tracked", in_flight_multicast="new-tables"))  # the spec's literal reading (docs/engine.md chooses the other)
    twice = sorted(k for k, v in deliveries(net, 0, 2).items() if len(v) == 2)
    assert twice == list(range(5, 13))
    assert net.node_drops[2]["duplicate"] == 0 and len(deliveries(net, 0, 1)[12]) == 2
    assert net.conserved()


def test_multicast_without_route_drops_its_remaining_fragments_once():
    # Tree 0 -> {1, 2}. 0->1 fails at 30 us (frame 2 cut: position 3), 0->2 at 55 us
    # (frame 4 cut: position 5). At 100 us no member is reachable: the fragments from the
    # smallest position, 3..9, are dropped at the source, once each.
    changes = [Change(30 * US, "down", link=0), Change(55 * US, "down", link=2),
               Change(100 * US, "reroute", value=([[-1, -1, -1], [-1, -1, 2], [-1, 1, -1]],
                                                  {0: ({}, (1, 2))}))]
    sc = triangle(changes, [Send(0, (1, 2), 10, FULL, FULL, 0, tree=0)], NH_DIRECT)
    sc.trees = [({0: [1, 2]}, (1, 2))]
    net = simulate(sc, Rules(unrouted_multicast="fragments"))  # the spec's literal reading (docs/engine.md chooses the other)
    assert [(r.frag, r.fate) for r in on_link(net, 0)][-1] == (2, "link_down")
    assert [(r.frag, r.fate) for r in on_link(net, 2)][-1] == (4, "link_down")
    assert net.node_drops[0]["no_route"] == 7
    assert net.node_counters()[0]["offered"] == 3 + 5 + 7
    assert net.conserved()


def multicast_reroute_scenario(track):
    star = ({0: [1, 2]}, (1, 2))
    chain = ({0: [2], 2: [1]}, (1, 2))
    changes = [Change(50 * US, "down", link=0), Change(50 * US, "down", link=1),
               Change(150 * US, "reroute", value=(NH_VIA_2, {0: chain}))]
    sc = triangle(changes, [Send(0, (1, 2), 30, FULL, FULL, 0, tree=0, track=track)], NH_DIRECT)
    sc.trees = [star]
    return sc


def test_rules_alternatives_are_the_engine_documented_ones():
    # Frames past their source keep their tree: the original frame 12 (at node 2 after the
    # re-route) is not forwarded to node 1, so node 1 sees no duplicate.
    net = simulate(multicast_reroute_scenario(True), Rules(in_flight_multicast="old-tree"))
    assert net.node_drops[1]["duplicate"] == 0 and net.node_drops[2]["duplicate"] == 8
    assert net.totals()["replicated"] == 25 and net.conserved()
    # Every destination discards duplicates, tracked or not.
    net = simulate(multicast_reroute_scenario(False), Rules(duplicates="every-destination"))
    assert net.node_drops[2]["duplicate"] == 8 and all(len(v) == 1 for v in net.deliveries.values())
    # A multicast with no route left drops each waiting stream's own unsent copies.
    changes = [Change(30 * US, "down", link=0), Change(55 * US, "down", link=2),
               Change(100 * US, "reroute", value=([[-1, -1, -1], [-1, -1, 2], [-1, 1, -1]],
                                                  {0: ({}, (1, 2))}))]
    sc = triangle(changes, [Send(0, (1, 2), 10, FULL, FULL, 0, tree=0)], NH_DIRECT)
    sc.trees = [({0: [1, 2]}, (1, 2))]
    net = simulate(sc, Rules(unrouted_multicast="stream-copies"))
    assert net.node_drops[0]["no_route"] == 7 + 5 and net.conserved()
    with pytest.raises(ValueError):
        Rules(duplicates="sometimes")
