"""ns-3 peer of benchmarks/ring.py: the same ring scenario on ns-3's C++ core (PyPI `ns3`).

N nodes on a unidirectional ring (node i -> i+1 mod N) of point-to-point links, 1 Gbps,
1 us; internet stack, static routes that send everything to the next node, and one UDP
flow per node to the node --hops ahead, at line rate from t=0. Packet-hops are counted
on PhyTxEnd of every device. The topology is built from Python; the per-packet code
(sender, trace sink, receiver) is C++ compiled through cppyy, so the run measures
ns-3 and not Python callbacks. Timestamps are ns-3's (integer ns by default).

Needs the optional `ns3` package (pip install ns3); without it, says so and exits 3.

    python benchmarks/peers/ns3_ring.py --nodes 16 --mib 8 --hops 1 [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from importlib import metadata

PAYLOAD = 1400
# Our frame is 14 (Ethernet) + 48 (MCF) + payload captured, plus 24 B of FCS, preamble
# and inter-frame gap on the line: payload + 86 B of line time. ns-3's point-to-point
# frame is 2 (PPP) + 20 (IPv4) + 8 (UDP) + UDP payload, with no hidden overhead, so a
# UDP payload of payload + 56 B gives every frame exactly our line time.
PPP_IP_UDP = 2 + 20 + 8
UDP_PAD = 14 + 48 + 24 - PPP_IP_UDP

CPP = r"""
namespace ring {
using namespace ns3;
uint64_t hops = 0, delivered = 0;
Time end;

void CountHop(Ptr<const Packet>) { ++hops; }

void Receive(Ptr<Socket> s)
{
    while (s->Recv()) { ++delivered; end = Simulator::Now(); }
}

// Line rate: packet k is handed to the socket (and so to the egress queue) at k * gap.
void SendNext(Ptr<Socket> s, uint32_t left, uint32_t full, uint32_t last, Time gap)
{
    s->Send(Create<Packet>(left == 1 ? last : full));
    if (left > 1) Simulator::Schedule(gap, &SendNext, s, left - 1, full, last, gap);
}

void Start(Ptr<Node> src, Ptr<Node> dst, Ipv4Address dstAddr,
           uint32_t frames, uint32_t full, uint32_t last, Time gap)
{
    Ptr<Socket> sink = Socket::CreateSocket(dst, UdpSocketFactory::GetTypeId());
    sink->Bind(InetSocketAddress(Ipv4Address::GetAny(), 9));
    sink->SetRecvCallback(MakeCallback(&Receive));
    Ptr<Socket> s = Socket::CreateSocket(src, UdpSocketFactory::GetTypeId());
    s->Connect(InetSocketAddress(dstAddr, 9));
    Simulator::ScheduleWithContext(src->GetId(), Seconds(0), &SendNext, s, frames, full, last, gap);
}

void TraceHops()
{
    Config::ConnectWithoutContext(
        "/NodeList/*/DeviceList/*/$ns3::PointToPointNetDevice/PhyTxEnd", MakeCallback(&CountHop));
}
}
"""


def frames_per_flow(mib: float) -> tuple[int, int]:
    """(frame count, payload bytes of the last frame) for one flow of `mib` MiB."""
    nbytes = int(mib * 2**20)
    n = max(1, -(-nbytes // PAYLOAD))
    return n, nbytes - (n - 1) * PAYLOAD


def run(ns, nodes: int, mib: float, hops: int, tc_layer: bool = False) -> dict:
    if not 1 <= hops < nodes:
        raise SystemExit(f"ns3_ring: --hops must be in 1..{nodes - 1}")
    n, last = frames_per_flow(mib)
    ns.cppyy.cppdef(CPP)
    ring = ns.cppyy.gbl.ring

    if tc_layer:  # stock ns-3: pfifo_fast in front of the device queue, made unbounded too
        ns.Config.SetDefault("ns3::PfifoFastQueueDisc::MaxSize", ns.StringValue(f"{nodes * n + 1}p"))
    c = ns.NodeContainer()
    c.Create(nodes)
    stack = ns.InternetStackHelper()
    stack.SetRoutingHelper(ns.Ipv4StaticRoutingHelper())  # only static routes: no global lookup per packet
    stack.Install(c)
    p2p = ns.PointToPointHelper()
    p2p.SetDeviceAttribute("DataRate", ns.StringValue("1Gbps"))
    p2p.SetChannelAttribute("Delay", ns.StringValue("1us"))
    tc = ns.TrafficControlHelper()
    addr = ns.Ipv4AddressHelper()
    links = []  # (devices, interfaces) of link i: node i -> node i+1
    for i in range(nodes):
        devs = p2p.Install(c.Get(i), c.Get((i + 1) % nodes))
        for k in range(2):  # unbounded FIFO: no drop can happen, as in the other peers
            devs.Get(k).GetQueue().SetMaxSize(ns.QueueSize(f"{nodes * n + 1}p"))
        addr.SetBase(ns.Ipv4Address(f"10.{i >> 8}.{i & 255}.0"), ns.Ipv4Mask("255.255.255.0"))
        ifs = addr.Assign(devs)
        if not tc_layer:
            # Assign installs pfifo_fast in front of the device queue; drop it so each
            # link has one FIFO egress queue, as in the scenario (and ns-3 runs faster).
            tc.Uninstall(devs)
        links.append((devs, ifs))
    static = ns.Ipv4StaticRoutingHelper()
    for i in range(nodes):
        ipv4 = c.Get(i).GetObject[ns.Ipv4]()
        devs, ifs = links[i]
        static.GetStaticRouting(ipv4).SetDefaultRoute(ifs.GetAddress(1), ipv4.GetInterfaceForDevice(devs.Get(0)))
    full_ps = (PPP_IP_UDP + PAYLOAD + UDP_PAD) * 8000  # 1486 B at 8 ns/B
    for i in range(nodes):
        d = (i + hops) % nodes
        dst_addr = links[(d - 1) % nodes][1].GetAddress(1)  # d's address on its incoming link
        ring.Start(c.Get(i), c.Get(d), dst_addr, n, PAYLOAD + UDP_PAD, last + UDP_PAD, ns.PicoSeconds(full_ps))
    ring.TraceHops()

    t0, c0 = time.perf_counter(), time.process_time()
    ns.Simulator.Run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    packet_hops, delivered, end_s = int(ring.hops), int(ring.delivered), ring.end.GetSeconds()
    ns.Simulator.Destroy()
    assert delivered == n * nodes, (delivered, n * nodes)
    version = metadata.version("ns3")
    return {
        "engine": "ns3 " + ".".join(version.split(".")[:2]),
        "engine_version": version,
        "time_unit": "integer ns (ns-3 default resolution)",
        "tc_layer": tc_layer,
        "nodes": nodes, "mib": mib, "hops": hops, "frames_per_flow": n,
        "packet_hops": packet_hops,
        "wall_s": wall,
        "cpu_s": cpu,  # CPU seconds of the run: steadier than wall on a shared machine
        "sim_end_s": end_s,
        "packet_hops_per_s": packet_hops / wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--mib", type=float, default=8)
    ap.add_argument("--hops", type=int, default=1)
    ap.add_argument("--tc", action="store_true",
                    help="keep ns-3's default traffic-control layer (pfifo_fast) in front of each device queue")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        import ns3  # noqa: F401  the PyPI package; `ns` below is its loader
    except ImportError:
        print("ns3_ring: the optional ns-3 Python bindings are not installed (pip install ns3)", file=sys.stderr)
        return 3
    from ns import ns

    r = run(ns, args.nodes, args.mib, args.hops, args.tc)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"{r['engine']}{' (tc)' if args.tc else ''} ring nodes={args.nodes} mib={args.mib} hops={args.hops}: "
              f"{r['packet_hops']} packet-hops in {r['wall_s']:.3f} s wall, simulated end {r['sim_end_s']:.9f} s, "
              f"{r['packet_hops_per_s']:,.0f} packet-hops/s, peak RSS {r['peak_rss_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
