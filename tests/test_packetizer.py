"""The packetization buffer's capacity (docs/nic.md, "Packetizer"): a send enters while the
metadata FIFO has an entry free and the payload FIFO room for its bytes; an empty buffer
accepts any one send; room frees when a send has left the wire, and with reliable delivery
when besides every receiver has acked it (the NIC resends from that buffer)."""

import pytest

from emu.net import Network
from emu.nic import NicConfig
from pycluster import Cluster
from emu.sim import US, Simulator
from emu.topology import LinkDefaults, Routes, ring

LINK = LinkDefaults(rate_bps=10**9, latency_ps=1 * US, mtu=1500)


def accepted_times(sizes, reliable, **cfg):
    """When each send was taken, and when its room was due free: its last frame's leaving
    the wire, or with reliable delivery its last ack (after that leaving)."""
    G = ring(4, link=LINK)
    routes = Routes(G)
    c = Cluster(Network(Simulator(), G, routes.next_hop), routes, NicConfig(reliable=reliable, **cfg))
    accepted = {}
    sends = [c.send(0, [1], n, on_accept=lambda tr, t: accepted.__setitem__(tr.id, t)) for n in sizes]
    c.net.run()
    assert all(tr.complete for tr in sends)
    sent = [max(p.sent_at for p in tr.parts) for tr in sends]
    if reliable:
        assert all(max(p.settled_at for p in tr.parts) > s for tr, s in zip(sends, sent))
        return [accepted.get(tr.id) for tr in sends], [max(p.settled_at for p in tr.parts) for tr in sends]
    return [accepted.get(tr.id) for tr in sends], sent


@pytest.mark.parametrize("reliable", [False, True])
def test_sends_enter_while_their_bytes_fit(reliable):
    """250,000 B of payload FIFO and entries to spare: two sends of 100,000 B are taken at
    once; the third (300,000 B in all) waits until the first has left the wire, and with
    reliable delivery until it is acked."""
    accepted, left = accepted_times([100_000] * 3, reliable, fifo_entries=256, fifo_bytes=250_000)
    assert accepted[:2] == [0, 0] and accepted[2] == left[0] > 0


@pytest.mark.parametrize("reliable", [False, True])
def test_sends_enter_while_an_entry_is_free(reliable):
    accepted, left = accepted_times([1000] * 3, reliable, fifo_entries=2, fifo_bytes=1 << 30)
    assert accepted[:2] == [0, 0] and accepted[2] == left[0] > 0


@pytest.mark.parametrize("reliable", [False, True])
def test_an_empty_buffer_takes_any_one_send(reliable):
    """A send larger than the whole payload FIFO is taken when the buffer is empty; the next,
    however small, waits until it has left (and is acked, with reliable delivery)."""
    accepted, left = accepted_times([1_000_000, 10], reliable, fifo_entries=256, fifo_bytes=250_000)
    assert accepted == [0, left[0]] and left[0] > 0


def test_with_reliable_delivery_unacked_bytes_hold_the_buffer():
    """The same three sends with and without reliable delivery: the third is taken later by
    exactly the first's ack round trip (its last frame's leaving to its ack's arrival)."""
    plain, sent = accepted_times([100_000] * 3, False, fifo_entries=256, fifo_bytes=250_000)
    rel, acked = accepted_times([100_000] * 3, True, fifo_entries=256, fifo_bytes=250_000)
    assert plain[2] == sent[0] and rel[2] == acked[0] and acked[0] - sent[0] > 2 * US


def test_the_nic_default_fifo_is_the_kr260_profiles_comm_buffer():
    # docs/nic.md: fifo_bytes defaults to the hardware profile's comm_buffer (16 MiB on the KR260)
    from emu.nic import NicConfig
    from emu.workload.profiles import load

    assert NicConfig().fifo_bytes == int(load("hw", "kr260")["comm_buffer"]) == 16 << 20
