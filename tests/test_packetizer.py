"""The packetization buffer's capacity (docs/nic.md, "Packetizer"): a send enters while the
metadata FIFO has an entry free and the payload FIFO room for its bytes; an empty buffer
accepts any one send; room frees when a send has left the wire."""

from emu.net import Network
from emu.nic import NicConfig
from pycluster import Cluster
from emu.sim import US, Simulator
from emu.topology import LinkDefaults, Routes, ring

LINK = LinkDefaults(rate_bps=10**9, latency_ps=1 * US, mtu=1500)


def accepted_times(sizes, **cfg):
    G = ring(4, link=LINK)
    routes = Routes(G)
    c = Cluster(Network(Simulator(), G, routes.next_hop), routes, NicConfig(**cfg))
    accepted = {}
    sends = [c.send(0, [1], n, on_accept=lambda tr, t: accepted.__setitem__(tr.id, t)) for n in sizes]
    c.net.run()
    assert all(tr.complete for tr in sends)
    return [accepted.get(tr.id) for tr in sends], [tr.parts[-1].left_at for tr in sends]


def test_sends_enter_while_their_bytes_fit():
    """250,000 B of payload FIFO and entries to spare: two sends of 100,000 B are taken at
    once; the third (300,000 B in all) waits until the first has left the wire."""
    accepted, left = accepted_times([100_000] * 3, fifo_entries=256, fifo_bytes=250_000)
    assert accepted[:2] == [0, 0] and accepted[2] == left[0] > 0


def test_sends_enter_while_an_entry_is_free():
    accepted, left = accepted_times([1000] * 3, fifo_entries=2, fifo_bytes=1 << 30)
    assert accepted[:2] == [0, 0] and accepted[2] == left[0] > 0


def test_an_empty_buffer_takes_any_one_send():
    """A send larger than the whole payload FIFO is taken when the buffer is empty; the next,
    however small, waits until it has left."""
    accepted, left = accepted_times([1_000_000, 10], fifo_entries=256, fifo_bytes=250_000)
    assert accepted == [0, left[0]] and left[0] > 0


def test_the_nic_default_fifo_is_the_kr260_profiles_comm_buffer():
    # docs/nic.md: fifo_bytes defaults to the hardware profile's comm_buffer (16 MiB on the KR260)
    from emu.nic import NicConfig
    from emu.workload.profiles import load

    assert NicConfig().fifo_bytes == int(load("hw", "kr260")["comm_buffer"]) == 16 << 20
