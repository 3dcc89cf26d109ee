"""Engine speed on a ring: every node streams to the node `hops` ahead at line rate.

16 boards on a unidirectional ring of 1 Gb/s, 1 us links; 1400-byte payloads.
It drives the same Network, link and frame code that replay uses, with the
per-link time series on. Prints wall seconds, simulated end, packet-hops and
packet-hops per wall second; with --peers it runs the SimPy and ns-3 versions
of the scenario (benchmarks/peers/) in the same run and prints the ratios.

    python benchmarks/ring.py --nodes 16 --mib 8 --hops 1 [--no-trains] [--json] [--peers] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from emu.net.framing import frame_sizes
from emu.net import Network, deadlock
from emu.net.flowcontrol import network_flags
from emu.net.linkstats import LinkStats
from emu.sim import MS, US, Simulator
from emu.topology import LinkDefaults, Routes, ring
from emu.workload.profiles import DEFAULTS, FLOW_CONTROLS  # drop: no transport here to recover

PAYLOAD = 1400


class Deadlock(Exception):
    pass


def run(nodes: int, mib: float, hops: int, trains: bool = True, flow_control: str = "pause") -> dict:
    """One run; ``flow_control`` as hw.flow_control, on the kr260 profile's port buffer
    (ideal: unbounded transit queues, the idealisation)."""
    buf = DEFAULTS["hw"]["port_buffer"]
    G = ring(nodes, bidirectional=False, link=LinkDefaults(rate_bps=10**9, latency_ps=1 * US, mtu=1500,
                                                           queue_bytes=buf))
    routes = Routes(G)
    sim = Simulator()
    net = Network(sim, G, routes.next_hop, trains=trains, **network_flags(flow_control))
    LinkStats.of(net, bin_ps=1 * MS)  # the per-link time series, binned in the frame loop as in replay
    nbytes = int(mib * 2**20)
    nfrags, full, last = frame_sizes(nbytes, mtu=PAYLOAD + 48)
    done = []
    for i in range(nodes):
        net.send(i, [(i + hops) % nodes], nfrags, full, last,
                 on_event=lambda kind, m, node, frag, t: kind == "done" and done.append(t))
    t0 = time.perf_counter()
    end = net.run()
    wall = time.perf_counter() - t0
    if len(done) != nodes:  # a one-way ring is a cycle of buffer dependencies: back-pressure can deadlock it
        stuck = deadlock.cycle(net)
        why = f"{deadlock.describe(stuck)} wait for each other in a cycle" if stuck else "no cycle found"
        raise Deadlock(f"{nodes - len(done)} of {nodes} flows never completed under flow control {flow_control} "
                       f"({why}; docs/engine.md, Deadlock); run --flow-control ideal to time the engine here")
    counters = net.counters()
    hops_total = int(counters.sent_frames.sum())
    return {
        "engine": "mcf-emu",
        "packet_hops": hops_total,
        "wall_s": wall,
        "sim_end_s": max(done) / 1e12,
        "packet_hops_per_s": hops_total / wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "sim_clock_end_s": end / 1e12,
        "trains": trains,
        "flow_control": flow_control,
        "dropped_frames": int(counters.dropped_frames.sum()),
        **net.run_counters(),
    }


def peer(name: str, args) -> dict | None:
    script = Path(__file__).parent / "peers" / f"{name}_ring.py"
    cmd = [sys.executable, str(script), "--nodes", str(args.nodes), "--mib", str(args.mib), "--hops", str(args.hops), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"peer {name}: not run ({(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['exit ' + str(proc.returncode)]})", file=sys.stderr)
        return None
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--mib", type=float, default=8)
    ap.add_argument("--hops", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    ap.add_argument("--peers", action="store_true", help="also run the SimPy and ns-3 peers")
    ap.add_argument("--no-trains", action="store_true", help="per-frame: every frame its own grant event")
    ap.add_argument("--flow-control", choices=[m for m in FLOW_CONTROLS if m != "drop"], default="pause",
                    help="as hw.flow_control, on the kr260 port buffer (default pause, the KR260's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        run(4, 0.01, 1, flow_control=args.flow_control)  # compile (or load the compiled cache) before timing
        runs = [run(args.nodes, args.mib, args.hops, not args.no_trains, args.flow_control) for _ in range(args.repeat)]
    except Deadlock as exc:
        print(f"ring: {exc}", file=sys.stderr)
        return 1
    result = dict(runs[0])
    result["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    result["packet_hops_per_s"] = result["packet_hops"] / result["wall_s"]
    result["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    if args.peers:
        for name in ("simpy", "ns3"):
            p = peer(name, args)
            if p is not None:
                result[f"{name}_packet_hops_per_s"] = p["packet_hops_per_s"]
                result[f"ratio_vs_{name}"] = result["packet_hops_per_s"] / p["packet_hops_per_s"]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"ring nodes={args.nodes} mib={args.mib} hops={args.hops} trains={'off' if args.no_trains else 'on'} "
              f"flow control={args.flow_control}: "
              f"{result['packet_hops']} packet-hops, {result['events']} events, {result['trains']} trains "
              f"({result['train_frames']} frames), "
              f"in {result['wall_s']:.3f} s wall (median of {args.repeat}), simulated end {result['sim_end_s']:.6f} s, "
              f"{result['packet_hops_per_s']:,.0f} packet-hops/s, peak RSS {result['peak_rss_mib']:.0f} MiB")
        for name in ("simpy", "ns3"):
            if f"ratio_vs_{name}" in result:
                print(f"  vs {name}: {result[f'{name}_packet_hops_per_s']:,.0f} packet-hops/s -> {result[f'ratio_vs_{name}']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
