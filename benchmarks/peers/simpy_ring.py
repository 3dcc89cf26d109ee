"""SimPy peer of benchmarks/ring.py: the same ring scenario, written as idiomatic SimPy.

N nodes on a unidirectional ring (node i -> i+1 mod N), 1 Gb/s, 1 us links; every node
streams --mib MiB to the node --hops ahead in frames with 1400-byte payloads, at line
rate from t=0. Each link is a process serving a simpy.Store (unbounded FIFO egress
queue) with a timeout for serialization; each frame then spends a timeout of
propagation latency on the wire and is stored and forwarded at the next node.
Time is integer picoseconds, so every timestamp is exact.

    python benchmarks/peers/simpy_ring.py --nodes 16 --mib 8 --hops 1 [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import simpy

PAYLOAD = 1400
FRAME_OVERHEAD = 14 + 48  # Ethernet header + MCF header, captured with the payload
WIRE_OVERHEAD = 4 + 8 + 12  # FCS + preamble/SFD + inter-frame gap: line time, not captured
PS_PER_BYTE = 8000  # 1 Gb/s
LATENCY_PS = 1_000_000  # 1 us


def frames_per_flow(mib: float) -> tuple[int, int]:
    """(frame count, payload bytes of the last frame) for one flow of `mib` MiB."""
    nbytes = int(mib * 2**20)
    n = max(1, -(-nbytes // PAYLOAD))
    return n, nbytes - (n - 1) * PAYLOAD


def ser_ps(payload: int) -> int:
    """Line time of a frame carrying `payload` bytes."""
    return (FRAME_OVERHEAD + payload + WIRE_OVERHEAD) * PS_PER_BYTE


def run(nodes: int, mib: float, hops: int) -> dict:
    if not 1 <= hops < nodes:
        raise SystemExit(f"simpy_ring: --hops must be in 1..{nodes - 1}")
    env = simpy.Environment()
    queues = [simpy.Store(env) for _ in range(nodes)]  # queues[i]: egress of link i -> i+1
    n, last = frames_per_flow(mib)
    full_ps, last_ps = ser_ps(PAYLOAD), ser_ps(last)
    stats = {"packet_hops": 0, "delivered": 0, "end_ps": 0}

    def arrive(node: int, frame: tuple[int, int]):
        # Store-and-forward: the frame is fully received latency after its last bit left.
        yield env.timeout(LATENCY_PS)
        if frame[0] == node:
            stats["delivered"] += 1
            stats["end_ps"] = env.now
        else:
            queues[node].put(frame)

    def link(i: int):
        q, nxt = queues[i], (i + 1) % nodes
        while True:
            frame = yield q.get()
            yield env.timeout(frame[1])  # serialization
            stats["packet_hops"] += 1
            env.process(arrive(nxt, frame))

    def source(i: int):
        # Line rate: frame k enters the node's own egress FIFO at k * full_ps, shared with transit.
        dst = (i + hops) % nodes
        for k in range(n):
            queues[i].put((dst, full_ps if k < n - 1 else last_ps))
            if k < n - 1:
                yield env.timeout(full_ps)

    for i in range(nodes):
        env.process(link(i))
        env.process(source(i))
    t0, c0 = time.perf_counter(), time.process_time()
    env.run()  # ends when no events are left: every frame delivered (queues are unbounded)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert stats["delivered"] == n * nodes, stats
    return {
        "engine": "simpy",
        "engine_version": simpy.__version__,
        "time_unit": "integer ps",
        "nodes": nodes, "mib": mib, "hops": hops, "frames_per_flow": n,
        "packet_hops": stats["packet_hops"],
        "wall_s": wall,
        "cpu_s": cpu,  # CPU seconds of the run: steadier than wall on a shared machine
        "sim_end_s": stats["end_ps"] / 1e12,
        "packet_hops_per_s": stats["packet_hops"] / wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--mib", type=float, default=8)
    ap.add_argument("--hops", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = run(args.nodes, args.mib, args.hops)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"{r['engine']} {r['engine_version']} ring nodes={args.nodes} mib={args.mib} hops={args.hops}: "
              f"{r['packet_hops']} packet-hops in {r['wall_s']:.3f} s wall, simulated end {r['sim_end_s']:.9f} s, "
              f"{r['packet_hops_per_s']:,.0f} packet-hops/s, peak RSS {r['peak_rss_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
